// tutti-bench over the device transports: all_reduce on device buffers, out of place, enqueued on
// one stream per rank and timed by CUDA events (as nccl-tests does), for tutti::cuda_ipc (threads
// or processes) and tutti::nccl, in one run beside:
// - raw NCCL (with --transport nccl): ncclAllReduce on a communicator of its own over the same
//   ranks and devices, the same loop;
// - the floor of the device's memory: each rank's S bytes read twice and written twice (what a
//   two-shot all_reduce with plain buffers must move), for every rank sharing the device, at the
//   copy rate cudaMemcpyAsync reaches in the same run (a copy of S reads S and writes S).
// Rank 0 prints one row per size: time and busbw (2(n-1)/n x S / time), raw NCCL's, their
// ratio, and the floor with tutti's fraction of it (floor time / tutti's time). Every result is
// checked after the timed loop (-c 1).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <tutti/transport/cuda_ipc.hpp>
#include <tutti/tutti.hpp>
#include <tutti/transport/nccl.hpp>
#include <vector>

#include "bench.hpp"

namespace tutti_bench {

namespace {

void cuda_ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

/// Milliseconds the stream takes for `f()` (enqueued `iters` times), by CUDA events.
template <class F>
double timed_ms(cudaStream_t s, int iters, F&& f) {
  cudaEvent_t a, b;
  cuda_ok(cudaEventCreate(&a), "cudaEventCreate");
  cuda_ok(cudaEventCreate(&b), "cudaEventCreate");
  cuda_ok(cudaEventRecord(a, s), "cudaEventRecord");
  for (int i = 0; i < iters; ++i) f();
  cuda_ok(cudaEventRecord(b, s), "cudaEventRecord");
  cuda_ok(cudaEventSynchronize(b), "cudaEventSynchronize");
  float ms = 0;
  cudaEventElapsedTime(&ms, a, b);
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return ms;
}

/// The device's copy rate for `bytes` (bytes copied per second; best of 5).
double copy_rate(void* dst, const void* src, std::size_t bytes, cudaStream_t s) {
  double best = 1e30;
  for (int k = 0; k < 5; ++k) {
    const int reps = bytes < (1 << 20) ? 50 : 5;
    const double ms = timed_ms(s, reps, [&] { cuda_ok(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s), "cudaMemcpyAsync"); });
    best = std::min(best, ms / reps);
  }
  return static_cast<double>(bytes) / (best * 1e-3);
}

template <class T>
__global__ void fill(T* p, std::size_t n, float v) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    p[i] = tutti::detail::device::accumulate<T, tutti::op::sum>::store(static_cast<typename tutti::detail::device::accumulate<T, tutti::op::sum>::type>(v));
}
template <class T>
__global__ void count_wrong(const T* p, std::size_t n, float want, unsigned long long* wrong) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    if (static_cast<float>(tutti::detail::device::accumulate<T, tutti::op::sum>::load(p[i])) != want) atomicAdd(wrong, 1ull);
}

/// One rank's measurements of one size.
struct row {
  std::size_t bytes = 0;
  double tutti_us = 0, nccl_us = 0, floor_us = 0;
  long long wrong = 0;
};

/// A raw NCCL communicator over the same ranks (its id through the tutti communicator's host
/// side), for the comparison; null where NCCL cannot be had (the row then says n/a).
template <class Comm>
tutti::detail::nccl_abi::comm_t raw_nccl(Comm& comm) {
  namespace dv = tutti::detail::device;
  const auto& lib = dv::nccl_library::get();
  tutti::detail::nccl_abi::unique_id id{};
  if (comm.rank() == 0) lib.get_unique_id(&id);
  std::vector<tutti::detail::nccl_abi::unique_id> all(static_cast<std::size_t>(comm.size()));
  tutti::fingerprint fp;
  fp.coll = tutti::collective::group;
  fp.seq = 0x726177;  // "raw"
  comm.transport().exchange(fp, reinterpret_cast<const std::byte*>(&id), reinterpret_cast<std::byte*>(all.data()), sizeof id,
                            tutti::wait_context{std::chrono::seconds(60), "bench", nullptr});
  tutti::detail::nccl_abi::comm_t c = nullptr;
  tutti::detail::nccl_abi::config cfg;  // blocking, as a plain NCCL program
  cuda_ok(cudaSetDevice(comm.transport().device()), "cudaSetDevice");
  if (lib.comm_init_rank_config(&c, comm.size(), all[0], comm.rank(), &cfg) != 0) return nullptr;
  return c;
}

template <class T, class Comm>
std::vector<row> measure(Comm& comm, const options& o, bool with_nccl, int ranks_on_device) {
  namespace dv = tutti::detail::device;
  const int p = comm.size();
  const auto sizes = sweep_sizes(o);
  const std::size_t most = std::max<std::size_t>(sizes.back(), sizeof(T));
  cuda_ok(cudaSetDevice(comm.transport().device()), "cudaSetDevice");
  T *in = nullptr, *out = nullptr;
  unsigned long long* wrong = nullptr;
  cuda_ok(cudaMalloc(&in, most), "cudaMalloc");
  cuda_ok(cudaMalloc(&out, most), "cudaMalloc");
  cuda_ok(cudaMalloc(&wrong, sizeof *wrong), "cudaMalloc");
  cudaStream_t s;
  cuda_ok(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
  tutti::detail::nccl_abi::comm_t raw = with_nccl ? raw_nccl(comm) : nullptr;
  const auto* lib = with_nccl ? &dv::nccl_library::get() : nullptr;
  std::vector<row> rows;
  std::vector<tutti::request> pending;
  for (std::size_t bytes : sizes) {
    const std::size_t n = std::max<std::size_t>(1, bytes / sizeof(T));
    row r;
    r.bytes = n * sizeof(T);
    fill<T><<<256, 256, 0, s>>>(in, n, static_cast<float>(comm.rank() % 4 + 1));
    tutti::device_view<const T> vin(in, n);
    tutti::device_view<T> vout(out, n);
    const int iters = o.iters > 0 ? o.iters : 20;
    auto run = [&] { pending.push_back(comm.all_reduce(vin, vout, tutti::op::sum{}, s)); };
    for (int i = 0; i < o.warmup; ++i) run();
    tutti::wait_all(pending);
    pending.clear();
    const double ms = timed_ms(s, iters, run);
    tutti::wait_all(pending);  // every request: a failure would surface here
    pending.clear();
    r.tutti_us = ms * 1e3 / iters;
    if (o.check) {
      float want = 0;
      for (int q = 0; q < p; ++q) want += static_cast<float>(q % 4 + 1);
      cuda_ok(cudaMemsetAsync(wrong, 0, sizeof *wrong, s), "cudaMemsetAsync");
      count_wrong<T><<<256, 256, 0, s>>>(out, n, want, wrong);
      unsigned long long w = 0;
      cuda_ok(cudaMemcpyAsync(&w, wrong, sizeof w, cudaMemcpyDeviceToHost, s), "cudaMemcpyAsync");
      cuda_ok(cudaStreamSynchronize(s), "cudaStreamSynchronize");
      r.wrong = static_cast<long long>(w);
    }
    if (raw) {
      auto call = [&] { lib->all_reduce(in, out, n, dv::nccl_type<T>(), tutti::detail::nccl_abi::sum, raw, s); };
      for (int i = 0; i < o.warmup; ++i) call();
      r.nccl_us = timed_ms(s, iters, call) * 1e3 / iters;
    }
    if (p > 1) r.floor_us = ranks_on_device * 2.0 * static_cast<double>(r.bytes) / copy_rate(out, in, r.bytes, s) * 1e6;
    comm.barrier();
    rows.push_back(r);
  }
  if (raw) lib->comm_destroy(raw);
  cudaStreamDestroy(s);
  cudaFree(in);
  cudaFree(out);
  cudaFree(wrong);
  return rows;
}

/// The slowest rank's figure per size (max over ranks), gathered on the host side.
template <class Comm>
std::vector<row> slowest(Comm& comm, const std::vector<row>& mine) {
  std::vector<std::uint64_t> words;
  for (const row& r : mine) {
    std::uint64_t a, b;
    std::memcpy(&a, &r.tutti_us, 8);
    std::memcpy(&b, &r.nccl_us, 8);
    words.push_back(a);
    words.push_back(b);
    words.push_back(static_cast<std::uint64_t>(r.wrong));
  }
  std::vector<std::uint64_t> all(words.size() * static_cast<std::size_t>(comm.size()));
  tutti::fingerprint fp;
  fp.coll = tutti::collective::group;
  fp.seq = 0x736c6f77;  // "slow"
  comm.transport().exchange(fp, reinterpret_cast<const std::byte*>(words.data()), reinterpret_cast<std::byte*>(all.data()),
                            words.size() * 8, tutti::wait_context{std::chrono::seconds(60), "bench", nullptr});
  std::vector<row> out = mine;
  for (std::size_t i = 0; i < out.size(); ++i) {
    out[i].wrong = 0;
    for (int q = 0; q < comm.size(); ++q) {
      const std::uint64_t* w = all.data() + static_cast<std::size_t>(q) * words.size() + 3 * i;
      double t, n;
      std::memcpy(&t, w, 8);
      std::memcpy(&n, w + 1, 8);
      out[i].tutti_us = std::max(out[i].tutti_us, t);
      out[i].nccl_us = std::max(out[i].nccl_us, n);
      out[i].wrong += static_cast<long long>(w[2]);
    }
  }
  return out;
}

void print(const options& o, const char* what, int p, int ranks_on_device, const std::vector<row>& rows) {
  cudaDeviceProp prop{};
  int dev = 0;
  cudaGetDevice(&dev);
  cudaGetDeviceProperties(&prop, dev);
  std::printf("# tutti-bench: all_reduce, %s, %d ranks (%d on this device: %s), %s sum, out of place\n", what, p,
              ranks_on_device, prop.name, dtype_name(o.dtype));
  std::printf("# warmup %d, iters %d, one stream per rank, times by CUDA events; floor: %d x 2 x S at the device's copy rate\n",
              o.warmup, o.iters > 0 ? o.iters : 20, ranks_on_device);
  std::printf("#%13s %12s %11s %12s %11s %10s %12s %11s %7s\n", "size(B)", "tutti(us)", "busbw(GB/s)", "NCCL(us)",
              "busbw(GB/s)", "NCCL/tutti", "floor(us)", "floor/tutti", "#wrong");
  const double f = p > 1 ? 2.0 * (p - 1) / p : 1.0;
  long long wrong = 0;
  for (const row& r : rows) {
    const double bw = static_cast<double>(r.bytes) / (r.tutti_us * 1e-6) / 1e9 * f;
    char nccl[64] = "n/a", nbw[32] = "n/a", ratio[32] = "n/a", floor_s[32] = "n/a", frac[32] = "n/a";
    if (r.nccl_us > 0) {
      std::snprintf(nccl, sizeof nccl, "%.2f", r.nccl_us);
      std::snprintf(nbw, sizeof nbw, "%.2f", static_cast<double>(r.bytes) / (r.nccl_us * 1e-6) / 1e9 * f);
      std::snprintf(ratio, sizeof ratio, "%.3f", r.nccl_us / r.tutti_us);
    }
    if (r.floor_us > 0) {
      std::snprintf(floor_s, sizeof floor_s, "%.2f", r.floor_us);
      std::snprintf(frac, sizeof frac, "%.3f", r.floor_us / r.tutti_us);
    }
    std::printf("%14zu %12.2f %11.2f %12s %11s %10s %12s %11s %7lld\n", r.bytes, r.tutti_us, bw, nccl, nbw, ratio, floor_s,
                frac, r.wrong);
    wrong += r.wrong;
  }
  std::printf("# wrong results: %lld\n", wrong);
  std::fflush(stdout);
}

template <class T, class Comm>
long long bench_on(Comm& comm, const options& o, const char* what, bool with_nccl) {
  // Ranks that share this rank's device (the floor counts their traffic together).
  const int dev = comm.transport().device();
  cudaDeviceProp prop{};
  cuda_ok(cudaGetDeviceProperties(&prop, dev), "cudaGetDeviceProperties");
  std::vector<std::uint64_t> mine(2), all(2 * static_cast<std::size_t>(comm.size()));
  std::memcpy(mine.data(), &prop.uuid, 16);
  tutti::fingerprint fp;
  fp.coll = tutti::collective::group;
  fp.seq = 0x75756964;  // "uuid"
  comm.transport().exchange(fp, reinterpret_cast<const std::byte*>(mine.data()), reinterpret_cast<std::byte*>(all.data()), 16,
                            tutti::wait_context{std::chrono::seconds(60), "bench", nullptr});
  int sharing = 0;
  for (int q = 0; q < comm.size(); ++q)
    sharing += all[2 * static_cast<std::size_t>(q)] == mine[0] && all[2 * static_cast<std::size_t>(q) + 1] == mine[1];
  const auto rows = slowest(comm, measure<T>(comm, o, with_nccl, sharing));
  long long wrong = 0;
  for (const auto& r : rows) wrong += r.wrong;
  if (comm.rank() == 0) print(o, what, comm.size(), sharing, rows);
  return wrong;
}

template <class Comm>
long long bench_dtype(Comm& comm, const options& o, const char* what, bool with_nccl) {
  switch (o.dtype) {
    case dtype_kind::f32: return bench_on<float>(comm, o, what, with_nccl);
    case dtype_kind::f16: return bench_on<tutti::float16>(comm, o, what, with_nccl);
    case dtype_kind::bf16: return bench_on<tutti::bfloat16>(comm, o, what, with_nccl);
    default: throw std::runtime_error("the device transports' benchmark takes -d float, half or bfloat16");
  }
}

void check_device_options(const options& o) {
  if (o.op != op_kind::sum) throw std::runtime_error("the device transports' benchmark measures sums (-o sum)");
}

int run_cuda_ipc_threads(const options& o) {
  check_device_options(o);
  long long wrong = 0;
  tutti::cuda_ipc::run(std::max(o.np, 1), [&](auto& comm) {
    const long long w = bench_dtype(comm, o, "tutti::cuda_ipc, threads of one process", false);
    if (comm.rank() == 0) wrong = w;
  });
  return wrong == 0 ? 0 : 1;
}

int run_cuda_ipc(const options& o) {
  check_device_options(o);
  auto comm = tutti::communicator<tutti::cuda_ipc>::from_env();
  return bench_dtype(comm, o, "tutti::cuda_ipc, one process per rank", false) == 0 ? 0 : 1;
}

int run_nccl(const options& o) {
  check_device_options(o);
  auto comm = tutti::communicator<tutti::nccl>::from_env();
  const std::string what = "tutti::nccl (NCCL " + comm.transport().library_version() + "), one process per rank";
  return bench_dtype(comm, o, what.c_str(), true) == 0 ? 0 : 1;
}

using ranks_are = transport_entry::ranks_are;
const transport_entry cuda_ipc_entry{"cuda_ipc", "", "device buffers, processes of one host (all_reduce beside raw NCCL)",
                                     ranks_are::processes, true, "", &run_cuda_ipc, nullptr};
const transport_entry cuda_ipc_threads_entry{"cuda_ipc_threads", "", "device buffers, threads of one process",
                                             ranks_are::threads, true, "", &run_cuda_ipc_threads, nullptr};
const transport_entry nccl_entry{"nccl", "", "NCCL on device buffers, beside raw NCCL", ranks_are::processes, true, "",
                                 &run_nccl, nullptr};
const registrar regs[] = {registrar{cuda_ipc_entry}, registrar{cuda_ipc_threads_entry}, registrar{nccl_entry}};

}  // namespace

}  // namespace tutti_bench
