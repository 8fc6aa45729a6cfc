/// \file
/// Attributes. `TUTTI_COLD`: marks code that runs once (start-up, parsing the environment) or only when
/// something went wrong (error text, diagnosis, the flight recorder's printing). GCC and Clang
/// then optimize it for size, inline nothing large into it and keep it out of its callers, which
/// stay small and hot; and every user translation unit spends less time optimizing it (measured:
/// about a second of the 4.4 s a one-all_reduce program took to compile at -O2).
#pragma once

/// `TUTTI_HOST_DEVICE`: callable from host and device code where nvcc compiles the file (the
/// built-in reduce ops, which the device transports' kernels call); nothing elsewhere.
#if defined(__CUDACC__)
#define TUTTI_HOST_DEVICE __host__ __device__
#else
#define TUTTI_HOST_DEVICE
#endif

#if defined(__GNUC__) || defined(__clang__)
#define TUTTI_COLD [[gnu::cold, gnu::noinline]]
#else
#define TUTTI_COLD
#endif
