// The checks of tests/device/gpu_tests.cu: every collective, dtype and op on device buffers
// against a host reference. Instantiated once per transport (gpu_checks_ipc.cu,
// gpu_checks_nccl.cu), so that nvcc compiles them in parallel.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <tutti/core/counts.hpp>
#include <tutti/core/float16.hpp>
#include <tutti/core/view.hpp>
#include <tutti/op/ops.hpp>
#include <type_traits>
#include <vector>

namespace tutti_gpu_tests {

extern std::atomic<int> failures, passes;  // ranks as threads check at once

inline void check(bool ok, const std::string& what) {
  if (ok) ++passes;
  else {
    ++failures;
    std::printf("FAIL %s\n", what.c_str());
    std::fflush(stdout);
  }
}

inline bool have_device() {
  int n = 0;
  const bool ok = cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
  cudaGetLastError();
  return ok;
}

/// A device buffer of n elements, filled from and read back to the host.
template <class T>
struct dbuf {
  T* p = nullptr;
  std::size_t n = 0;
  explicit dbuf(std::size_t count) : n(count) {
    if (cudaMalloc(&p, std::max<std::size_t>(n, 1) * sizeof(T)) != cudaSuccess) throw std::runtime_error("cudaMalloc");
  }
  dbuf(const dbuf&) = delete;
  ~dbuf() { cudaFree(p); }
  void put(const std::vector<T>& h) {
    if (!h.empty()) cudaMemcpy(p, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice);
  }
  std::vector<T> get() const {
    std::vector<T> h(n);
    if (n) cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost);
    return h;
  }
  tutti::device_view<T> view() { return {p, n}; }
};

/// A user op on float, as a __device__ function object: the larger magnitude.
struct max_abs {
  __host__ __device__ float operator()(float a, float b) const {
    const float x = a < 0 ? -a : a, y = b < 0 ? -b : b;
    return x != y ? (x < y ? b : a) : (a < b ? b : a);
  }
};

/// Small integers, exact in every type after reducing over a few ranks.
template <class T>
T value(int rank, std::size_t i) {
  const int v = static_cast<int>((static_cast<std::size_t>(rank) * 7 + i * 13) % 11) - 5;
  if constexpr (std::is_unsigned_v<T>) return static_cast<T>(v + 5);
  else return static_cast<T>(static_cast<float>(v));
}
template <class T>
bool same(const T& a, const T& b) {
  if constexpr (std::is_same_v<T, tutti::float16> || std::is_same_v<T, tutti::bfloat16>) return float(a) == float(b);
  else return a == b;
}
template <class T>
std::vector<T> inputs(int rank, std::size_t n, std::size_t shift = 0) {
  std::vector<T> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = value<T>(rank, i + shift);
  return v;
}
template <class T, class Op>
T reduced(int p, std::size_t i, const Op& op) {
  using A = std::conditional_t<std::is_same_v<T, tutti::float16> || std::is_same_v<T, tutti::bfloat16>, float, T>;
  A acc = static_cast<A>(value<T>(0, i));
  for (int q = 1; q < p; ++q) acc = op(acc, static_cast<A>(value<T>(q, i)));
  if constexpr (std::is_same_v<Op, tutti::op::avg>) acc = static_cast<A>(acc / static_cast<A>(p));
  return static_cast<T>(acc);
}
template <class T>
std::string first_difference(const std::vector<T>& got, const std::vector<T>& want) {
  if (got.size() != want.size()) return "size " + std::to_string(got.size()) + " != " + std::to_string(want.size());
  for (std::size_t i = 0; i < got.size(); ++i)
    if (!same(got[i], want[i]))
      return "element " + std::to_string(i) + ": got " + std::to_string(static_cast<double>(float(got[i]))) + ", want " +
             std::to_string(static_cast<double>(float(want[i])));
  return {};
}
template <class T>
void expect(int rank, const std::vector<T>& got, const std::vector<T>& want, const std::string& what) {
  const std::string d = first_difference(got, want);
  check(d.empty(), "rank " + std::to_string(rank) + ": " + what + ": " + d);
}

/// The counts every reducing collective runs at: 0, 1, odd, past the one-shot's 256 KiB, past
/// 1M; with TUTTI_GPU_TESTS_QUICK (compute-sanitizer) the small ones only.
inline std::vector<std::size_t> sizes() {
  if (std::getenv("TUTTI_GPU_TESTS_QUICK")) return {0, 1, 7, 1000};
  return {0, 1, 7, 1000, 70001, (std::size_t{1} << 20) + 5};
}

/// The reducing collectives of T with Op, blocking and on a stream.
template <class T, class Op, class Comm>
void reducing(Comm& comm, const Op& op, const char* name) {
  const int p = comm.size(), r = comm.rank();
  const auto P = static_cast<std::size_t>(p);
  cudaStream_t s;
  cudaStreamCreate(&s);
  for (std::size_t n : sizes()) {
    const std::string tag = std::string(name) + " n=" + std::to_string(n);
    std::vector<T> want(n);
    for (std::size_t i = 0; i < n; ++i) want[i] = reduced<T>(p, i, op);
    {  // all_reduce in place, blocking
      dbuf<T> b(n);
      b.put(inputs<T>(r, n));
      comm.all_reduce(b.view(), op);
      expect(r, b.get(), want, "all_reduce in place " + tag);
    }
    {  // out of place, on a stream (a request)
      dbuf<T> in(n), out(n);
      in.put(inputs<T>(r, n));
      auto req = comm.all_reduce(tutti::device_view<const T>(in.view()), out.view(), op, s);
      req.wait();
      expect(r, out.get(), want, "all_reduce on a stream " + tag);
    }
    for (int root : {0, p - 1}) {  // reduce
      dbuf<T> b(n);
      b.put(inputs<T>(r, n));
      comm.reduce(b.view(), root, op);
      expect(r, b.get(), r == root ? want : inputs<T>(r, n), "reduce root " + std::to_string(root) + " " + tag);
    }
    if (n <= 70001) {  // reduce_scatter: blocks of n
      dbuf<T> in(n * P), out(n);
      in.put(inputs<T>(r, n * P));
      comm.reduce_scatter(tutti::device_view<const T>(in.view()), out.view(), op);
      std::vector<T> w(n);
      for (std::size_t i = 0; i < n; ++i) w[i] = reduced<T>(p, static_cast<std::size_t>(r) * n + i, op);
      expect(r, out.get(), w, "reduce_scatter " + tag);
    }
  }
  {  // reduce_scatter_v: rank q's block q + 2
    std::vector<std::size_t> counts(P);
    for (std::size_t q = 0; q < P; ++q) counts[q] = q + 2;
    const auto off = tutti::displacements(counts);
    const std::size_t total = off.back() + counts.back();
    dbuf<T> in(total), out(counts[static_cast<std::size_t>(r)]);
    in.put(inputs<T>(r, total));
    comm.reduce_scatter_v(tutti::device_view<const T>(in.view()), out.view(), counts, op);
    std::vector<T> w(counts[static_cast<std::size_t>(r)]);
    for (std::size_t i = 0; i < w.size(); ++i) w[i] = reduced<T>(p, off[static_cast<std::size_t>(r)] + i, op);
    expect(r, out.get(), w, std::string("reduce_scatter_v ") + name);
  }
  cudaStreamDestroy(s);
}

/// The collectives that move without reducing, and send/recv, for T.
template <class T, class Comm>
void moving(Comm& comm, const char* name) {
  const int p = comm.size(), r = comm.rank();
  const auto P = static_cast<std::size_t>(p);
  for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{13}, std::size_t{100003}}) {
    const std::string tag = std::string(name) + " n=" + std::to_string(n);
    for (int root : {0, p - 1}) {
      {
        dbuf<T> b(n);
        b.put(inputs<T>(r, n));
        comm.broadcast(b.view(), root);
        expect(r, b.get(), inputs<T>(root, n), "broadcast root " + std::to_string(root) + " " + tag);
      }
      {
        dbuf<T> in(n), out(n * P);
        in.put(inputs<T>(r, n));
        comm.gather(tutti::device_view<const T>(in.view()), out.view(), root);
        if (r == root) {
          std::vector<T> w;
          for (int q = 0; q < p; ++q) for (auto x : inputs<T>(q, n)) w.push_back(x);
          expect(r, out.get(), w, "gather " + tag);
        }
      }
      {
        dbuf<T> in(n * P), out(n);
        in.put(inputs<T>(r, n * P));
        comm.scatter(tutti::device_view<const T>(in.view()), out.view(), root);
        expect(r, out.get(), inputs<T>(root, n, static_cast<std::size_t>(r) * n), "scatter " + tag);
      }
    }
    {
      dbuf<T> in(n), out(n * P);
      in.put(inputs<T>(r, n));
      comm.all_gather(tutti::device_view<const T>(in.view()), out.view());
      std::vector<T> w;
      for (int q = 0; q < p; ++q) for (auto x : inputs<T>(q, n)) w.push_back(x);
      expect(r, out.get(), w, "all_gather " + tag);
    }
    {
      dbuf<T> in(n * P), out(n * P);
      in.put(inputs<T>(r, n * P));
      comm.all_to_all(tutti::device_view<const T>(in.view()), out.view());
      std::vector<T> w;
      for (int q = 0; q < p; ++q) for (auto x : inputs<T>(q, n, static_cast<std::size_t>(r) * n)) w.push_back(x);
      expect(r, out.get(), w, "all_to_all " + tag);
    }
  }
  // v-collectives: rank q holds (q * 5) % 7 elements (zeros included)
  std::vector<std::size_t> counts(P);
  for (std::size_t q = 0; q < P; ++q) counts[q] = (q * 5 + 1) % 7;
  const auto off = tutti::displacements(counts);
  const std::size_t total = off.back() + counts.back();
  const auto R = static_cast<std::size_t>(r);
  std::vector<T> every;
  for (int q = 0; q < p; ++q) for (auto x : inputs<T>(q, counts[static_cast<std::size_t>(q)])) every.push_back(x);
  {
    dbuf<T> in(counts[R]), out(total);
    in.put(inputs<T>(r, counts[R]));
    comm.all_gather_v(tutti::device_view<const T>(in.view()), out.view(), counts);
    expect(r, out.get(), every, std::string("all_gather_v ") + name);
    dbuf<T> g(total);
    comm.gather_v(tutti::device_view<const T>(in.view()), g.view(), counts, p - 1);
    if (r == p - 1) expect(r, g.get(), every, std::string("gather_v ") + name);
    dbuf<T> from(total), mine(counts[R]);
    from.put(inputs<T>(r, total));
    comm.scatter_v(tutti::device_view<const T>(from.view()), counts, mine.view(), 0);
    expect(r, mine.get(), inputs<T>(0, counts[R], off[R]), std::string("scatter_v ") + name);
  }
  {  // all_to_all_v: rank i sends (i + j) % 3 + 1 elements to rank j
    std::vector<std::size_t> send(P), recv(P);
    for (std::size_t j = 0; j < P; ++j) {
      send[j] = (R + j) % 3 + 1;
      recv[j] = (j + R) % 3 + 1;
    }
    const auto soff = tutti::displacements(send), roff = tutti::displacements(recv);
    dbuf<T> in(soff.back() + send.back()), out(roff.back() + recv.back());
    in.put(inputs<T>(r, in.n));
    comm.all_to_all_v(tutti::device_view<const T>(in.view()), send, out.view(), recv);
    std::vector<T> w;
    for (std::size_t q = 0; q < P; ++q) {
      std::size_t at = 0;  // rank q's offset of its block for rank r
      for (std::size_t j = 0; j < R; ++j) at += (q + j) % 3 + 1;
      for (auto x : inputs<T>(static_cast<int>(q), recv[q], at)) w.push_back(x);
    }
    expect(r, out.get(), w, std::string("all_to_all_v ") + name);
  }
  comm.barrier();
  if (p > 1) {  // send/recv around the ring, posted together (fused: no deadlock)
    dbuf<T> out(1000), in(1000);
    out.put(inputs<T>(r, 1000));
    {
      auto batch = comm.fuse();
      auto a = comm.isend(out.view(), (r + 1) % p, 3);
      auto b = comm.irecv(in.view(), (r + p - 1) % p, 3);
      batch.post();
      a.wait();
      b.wait();
    }
    expect(r, in.get(), inputs<T>((r + p - 1) % p, 1000), std::string("send/recv ") + name);
  }
}

template <class Comm>
void everything(Comm& comm) {
  namespace op = tutti::op;
  reducing<float>(comm, op::sum{}, "float sum");
  reducing<float>(comm, op::max{}, "float max");
  reducing<float>(comm, op::avg{}, "float avg");
  reducing<float>(comm, max_abs{}, "float user op");
  reducing<double>(comm, op::sum{}, "double sum");
  reducing<std::int32_t>(comm, op::band{}, "int32 band");
  reducing<tutti::float16>(comm, op::sum{}, "float16 sum");
  reducing<tutti::bfloat16>(comm, op::max{}, "bfloat16 max");
  moving<float>(comm, "float");
  moving<std::uint8_t>(comm, "uint8");
  // groups: the even ranks
  std::vector<int> evens;
  for (int q = 0; q < comm.size(); q += 2) evens.push_back(q);
  auto g = comm.new_group(evens);
  if (g) {
    dbuf<float> b(100);
    b.put(inputs<float>(g->rank(), 100));
    g->all_reduce(b.view());
    std::vector<float> w(100);
    for (std::size_t i = 0; i < 100; ++i) {
      float acc = 0;
      for (int q = 0; q < g->size(); ++q) acc += value<float>(q, i);
      w[i] = acc;
    }
    expect(comm.rank(), b.get(), w, "all_reduce on the even ranks' group");
  }
}

}  // namespace tutti_gpu_tests
