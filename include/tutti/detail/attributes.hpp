/// \file
/// Attributes. `TUTTI_COLD`: marks code that runs once (start-up, parsing the environment) or only when
/// something went wrong (error text, diagnosis, the flight recorder's printing). GCC and Clang
/// then optimize it for size and inline it into no caller where that would grow the caller
/// (calls to it are unlikely), so its callers stay small and hot; and every user translation
/// unit spends less time optimizing it (measured: about a second of the 4.4 s a one-all_reduce
/// program took to compile at -O2). Not `noinline` as well: GCC warns of `noinline` on a
/// declaration that is `inline` and has no body, which every function split into a
/// declaration and a `.ipp` definition (`TUTTI_DECL`) has in header-only mode.
#pragma once

/// `TUTTI_HOST_DEVICE`: callable from host and device code where nvcc compiles the file (the
/// built-in reduce ops, which the device transports' kernels call); nothing elsewhere.
#if defined(__CUDACC__)
#define TUTTI_HOST_DEVICE __host__ __device__
#else
#define TUTTI_HOST_DEVICE
#endif

#if defined(__GNUC__) || defined(__clang__)
#define TUTTI_COLD [[gnu::cold]]
#else
#define TUTTI_COLD
#endif

/// `TUTTI_DECL`: a function of tutti's that is not a template, declared in its header and defined
/// in the `.ipp` file beside it. Header-only (the default), every header includes its `.ipp` and
/// the functions are `inline`, compiled in every translation unit that uses them. With
/// `TUTTI_SEPARATE_COMPILATION` (which linking CMake's `tutti::compiled` defines), the headers only
/// declare them and the library `tutti::compiled` defines them, once, with the common template
/// instances (tutti/compiled.hpp); its sources define `TUTTI_BUILDING_COMPILED` as well.
/// `TUTTI_DEFINITIONS` is defined where the `.ipp` files are to be included.
#if defined(TUTTI_SEPARATE_COMPILATION)
#define TUTTI_DECL
#if defined(TUTTI_BUILDING_COMPILED)
#define TUTTI_DEFINITIONS 1
#endif
#else
#define TUTTI_DECL inline
#define TUTTI_DEFINITIONS 1
#endif
