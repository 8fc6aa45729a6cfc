/// \file
/// tutti's device kernels (compiled by nvcc, in the user's .cu file; every kernel a template, so
/// that several .cu files of one program may include them): the memory seam of the
/// device transports (copy, combine, divide: what tutti's schedules run on device memory), and
/// `tutti::cuda_ipc`'s collectives, each a plan's phase (plans.hpp): a reduction over up to
/// `max_ranks` sources or a list of copies, optionally between per-block barriers.
///
/// - Element loops move 16 bytes per thread per step where every pointer of the phase is
///   16-byte aligned and the element size divides 16 (the host decides, identically on every
///   rank: `vec`), else one element; grid-stride, so any grid covers any size.
/// - float16 and bfloat16 reduce in float (one rounding per output element), with the built-in
///   ops; a user op gets the element type itself and must be a `__device__` function object.
/// - The barriers (ranks sharing a CUDA context, or under MPS: kernels of all ranks resident at
///   once): block b of each rank publishes a generation number in its flag (release, system
///   scope) and waits until every peer's block b has published at least the same (acquire).
///   Generations only grow (4 per call), so flags are never reset and a waiter cannot mistake
///   an old value for a new one. Every wait is bounded, and a block leaves it without its peer
///   when `timeout_ns` (the global timer; shorter than the host's deadline, rules.hpp) passes,
///   when this rank's host sets its abort word, or when the peer it waits for has given up (its
///   gave-up word, after its flags). A block that leaves sets this rank's gave-up word (so its
///   peers stop waiting for it at once, not at their own deadline) and, the block's first thread
///   to leave only, writes why and for whom into its slot of a host-mapped report array; the
///   kernel then ends without error, and the host fails the request on the report (rules.hpp).
///   Never `__trap()`: that would break the whole context.
#pragma once

#if !defined(__CUDACC__)
#error "tutti/transport/device/kernels.cuh holds device code: compile this file with nvcc (a .cu file)"
#endif

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "tutti/core/float16.hpp"
#include "tutti/op/ops.hpp"
#include "tutti/transport/device/plans.hpp"
#include "tutti/transport/device/rules.hpp"

namespace tutti::detail::device {

inline constexpr int kernel_threads = 512;

/// The barriers of one kernel: every rank's flags (one 64-bit word per block, then its gave-up
/// word: rules.hpp; peers' mapped here), this rank, the generation of the first barrier, the
/// deadline and where to report.
struct barrier_args {
  unsigned long long* flags[max_ranks];
  int rank = 0, ranks = 1;
  unsigned long long gen = 0;
  unsigned long long timeout_ns = 0;
  barrier_report* report = nullptr;     ///< host-mapped, one per block
  const volatile unsigned int* abort = nullptr;  ///< host-mapped: non-zero when the host aborts
};

__device__ inline unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
__device__ inline void store_release_sys(unsigned long long* p, unsigned long long v) {
  asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
__device__ inline unsigned long long load_acquire_sys(const unsigned long long* p) {
  unsigned long long v;
  asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}

/// Leaves a barrier without `peer`: this rank's gave-up word is set (its peers stop waiting for
/// it), and the block's first thread to leave (`claimed`, in shared memory) reports why.
__device__ inline void give_up(const barrier_args& b, report_reason why, int peer, unsigned long long gen,
                               unsigned long long seen, int* claimed) {
  store_release_sys(b.flags[b.rank] + gave_up_word, 1);
  if (b.report && atomicCAS(claimed, 0, 1) == 0) {
    volatile barrier_report& r = b.report[blockIdx.x];
    r.reason = static_cast<unsigned int>(why);
    r.rank = b.rank;
    r.peer = peer;
    r.block = static_cast<int>(blockIdx.x);
    r.gen = gen;
    r.seen = seen;
    __threadfence_system();
    r.stamp = gen;  // last: the host takes the slot as this call's only with it
    __threadfence_system();
  }
}

/// Block-wide barrier with the same block of every peer, at generation `gen`. False if it left
/// without a peer (reported), and then the kernel ends without touching more memory.
__device__ inline bool block_barrier(const barrier_args& b, unsigned long long gen) {
  __shared__ int claimed;
  if (threadIdx.x == 0) claimed = 0;
  __syncthreads();  // this block's writes so far come before its flag
  if (threadIdx.x == 0) {
    __threadfence_system();
    store_release_sys(b.flags[b.rank] + blockIdx.x, gen);
  }
  bool ok = true;
  const int t = static_cast<int>(threadIdx.x);
  if (t < b.ranks && t != b.rank) {
    const unsigned long long* f = b.flags[t] + blockIdx.x;
    const unsigned long long* peer_gave_up = b.flags[t] + gave_up_word;
    const unsigned long long start = global_ns();
    unsigned long long seen = load_acquire_sys(f);
    for (unsigned int i = 1; seen < gen; ++i) {
      if ((i & 255u) == 0) {
        report_reason why = report_reason::none;
        if (b.abort && *b.abort) why = report_reason::aborted;
        else if (load_acquire_sys(peer_gave_up) != 0) why = report_reason::peer_gave_up;
        else if (global_ns() - start > b.timeout_ns) why = report_reason::timed_out;
        if (why != report_reason::none) {
          give_up(b, why, t, gen, seen, &claimed);
          ok = false;
          break;
        }
      }
      seen = load_acquire_sys(f);
    }
  }
  return __syncthreads_and(ok) != 0;
}

// ---- element types: what a reduction accumulates in ---------------------------------------

template <class T, class Op>
struct accumulate {
  using type = T;
  __device__ static T load(const T& x) { return x; }
  __device__ static T store(const T& x) { return x; }
};
template <class Op>
  requires(op_traits<Op>::builtin)
struct accumulate<tutti::float16, Op> {
  using type = float;
  __device__ static float load(const tutti::float16& x) { return __half2float(__ushort_as_half(x.bits)); }
  __device__ static tutti::float16 store(float f) {
    tutti::float16 r;
    r.bits = __half_as_ushort(__float2half_rn(f));
    return r;
  }
};
template <class Op>
  requires(op_traits<Op>::builtin)
struct accumulate<tutti::bfloat16, Op> {
  using type = float;
  __device__ static float load(const tutti::bfloat16& x) { return __bfloat162float(__ushort_as_bfloat16(x.bits)); }
  __device__ static tutti::bfloat16 store(float f) {
    tutti::bfloat16 r;
    r.bits = __bfloat16_as_ushort(__float2bfloat16_rn(f));
    return r;
  }
};

/// Elements of T per 16-byte vector (1: no vectors for this type).
template <class T>
inline constexpr std::size_t per_vector = sizeof(T) <= 16 && 16 % sizeof(T) == 0 ? 16 / sizeof(T) : 1;

/// 16 bytes as elements of T (by memcpy: T may have a default member initialiser).
template <class T>
struct vector16 {
  uint4 raw;
  __device__ T get(std::size_t j) const {
    T t;
    memcpy(&t, reinterpret_cast<const char*>(&raw) + j * sizeof(T), sizeof(T));
    return t;
  }
  __device__ void set(std::size_t j, const T& t) { memcpy(reinterpret_cast<char*>(&raw) + j * sizeof(T), &t, sizeof(T)); }
};

// ---- the memory seam: copy, combine, divide -------------------------------------------------

/// out[i] = op(a[i], b[i]).
template <class T, class Op>
__global__ void combine_kernel(T* out, const T* a, const T* b, std::size_t n, Op op) {
  using A = accumulate<T, Op>;
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    out[i] = A::store(op(A::load(a[i]), A::load(b[i])));
}

/// data[i] /= divisor (op::avg's division; integer division for integers, as on the host).
template <class T>
__global__ void divide_kernel(T* data, std::size_t n, int divisor) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    if constexpr (std::is_same_v<T, tutti::float16>) {
      data[i] = accumulate<T, op::sum>::store(accumulate<T, op::sum>::load(data[i]) / static_cast<float>(divisor));
    } else if constexpr (std::is_same_v<T, tutti::bfloat16>) {
      data[i] = accumulate<T, op::sum>::store(accumulate<T, op::sum>::load(data[i]) / static_cast<float>(divisor));
    } else if constexpr (std::is_arithmetic_v<T>) {
      data[i] = static_cast<T>(data[i] / static_cast<T>(divisor));
    } else {
      data[i] = static_cast<T>(data[i] / divisor);
    }
  }
}

// ---- cuda_ipc's phases ----------------------------------------------------------------------

/// The sources of one reduction (a plan step's).
template <class T>
struct sources {
  const T* p[max_ranks];
  int n;
};

/// dst[i] = op over the sources, in their order, for element units [0, count) of this grid.
template <class T, class Op>
__device__ inline void reduce_range(T* dst, const sources<T>& s, std::size_t count, const Op& op, bool vec) {
  using A = accumulate<T, Op>;
  constexpr std::size_t V = per_vector<T>;
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  const std::size_t first = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  std::size_t tail = 0;
  if (V > 1 && vec) {
    const std::size_t units = count / V;
    for (std::size_t u = first; u < units; u += stride) {
      vector16<T> x;
      x.raw = reinterpret_cast<const uint4*>(s.p[0])[u];
      typename A::type acc[V];
#pragma unroll
      for (std::size_t j = 0; j < V; ++j) acc[j] = A::load(x.get(j));
      for (int q = 1; q < s.n; ++q) {
        vector16<T> y;
        y.raw = reinterpret_cast<const uint4*>(s.p[q])[u];
#pragma unroll
        for (std::size_t j = 0; j < V; ++j) acc[j] = op(acc[j], A::load(y.get(j)));
      }
#pragma unroll
      for (std::size_t j = 0; j < V; ++j) x.set(j, A::store(acc[j]));
      reinterpret_cast<uint4*>(dst)[u] = x.raw;
    }
    tail = units * V;
  }
  for (std::size_t i = tail + first; i < count; i += stride) {
    typename A::type acc = A::load(s.p[0][i]);
    for (int q = 1; q < s.n; ++q) acc = op(acc, A::load(s.p[q][i]));
    dst[i] = A::store(acc);
  }
}

/// The copies of one phase (a plan step's), at most `max_copies` of them per launch (a plan has
/// at most one per rank; a kernel's parameters stay under the classic 4 KiB).
inline constexpr int max_copies = max_ranks;
struct copy_list {
  segment seg[max_copies];
  int n;
};

__device__ inline void copy_range(std::byte* dst, const std::byte* src, std::size_t bytes) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  const std::size_t first = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const auto a = reinterpret_cast<std::uintptr_t>(dst) | reinterpret_cast<std::uintptr_t>(src);
  std::size_t done = 0;
  if ((a & 15u) == 0) {
    const std::size_t units = bytes / 16;
    for (std::size_t u = first; u < units; u += stride)
      reinterpret_cast<uint4*>(dst)[u] = reinterpret_cast<const uint4*>(src)[u];
    done = units * 16;
  } else if ((a & 3u) == 0) {
    const std::size_t units = bytes / 4;
    for (std::size_t u = first; u < units; u += stride)
      reinterpret_cast<std::uint32_t*>(dst)[u] = reinterpret_cast<const std::uint32_t*>(src)[u];
    done = units * 4;
  }
  for (std::size_t i = done + first; i < bytes; i += stride) dst[i] = src[i];
}

/// One reduction phase; with barriers (`Barriers`): at generation b.gen before, b.gen + 1 after.
template <class T, class Op, bool Barriers>
__global__ void __launch_bounds__(kernel_threads) reduce_phase_kernel(T* dst, sources<T> s, std::size_t count, Op op,
                                                                      bool vec, barrier_args b) {
  if constexpr (Barriers)
    if (!block_barrier(b, b.gen)) return;
  reduce_range(dst, s, count, op, vec);
  if constexpr (Barriers) block_barrier(b, b.gen + 1);
}

/// One copy phase; with barriers, as above.
template <bool Barriers>
__global__ void __launch_bounds__(kernel_threads) copy_phase_kernel(copy_list c, barrier_args b) {
  if constexpr (Barriers)
    if (!block_barrier(b, b.gen)) return;
  for (int i = 0; i < c.n; ++i) copy_range(c.seg[i].dst, c.seg[i].src, c.seg[i].bytes);
  if constexpr (Barriers) block_barrier(b, b.gen + 1);
}

/// The two-shot all_reduce in one kernel (with barriers): reduce this rank's block, barrier,
/// copy every other rank's block from its owner. Block b reads, in the second phase, exactly the
/// units the peers' block b wrote in the first (the same grid and the same unit order within a
/// rank's block), so a per-block barrier orders them.
template <class T, class Op>
__global__ void __launch_bounds__(kernel_threads) two_shot_kernel(T* dst, sources<T> s, std::size_t count, Op op,
                                                                  bool vec, copy_list c, barrier_args b) {
  if (!block_barrier(b, b.gen)) return;
  reduce_range(dst, s, count, op, vec);
  if (!block_barrier(b, b.gen + 1)) return;
  for (int i = 0; i < c.n; ++i) {  // a copy is a reduction of one source: the same units, the same blocks
    sources<T> one;
    one.p[0] = reinterpret_cast<const T*>(c.seg[i].src);
    one.n = 1;
    reduce_range(reinterpret_cast<T*>(c.seg[i].dst), one, c.seg[i].bytes / sizeof(T), op, vec);
  }
  block_barrier(b, b.gen + 2);
}


}  // namespace tutti::detail::device
