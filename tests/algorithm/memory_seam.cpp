// The memory seam: a transport whose memory the CPU may not touch (`own_memory`, a memory kind
// with host_accessible = false) gets every collective, and every byte its schedules move or
// reduce goes through the transport's own copy, combine and divide. That this file compiles is
// half the test: view<T, opaque_memory> has no element access, so a schedule that loaded or
// stored through a view would not build here. The other half: the results are right and the
// transport's hooks did the work.
#include <doctest/doctest.h>

#include <cstring>
#include <span>
#include <string_view>
#include <tutti/tutti.hpp>
#include <vector>

using namespace tutti;

namespace {
/// Memory the library must not touch (a stand-in for device memory; here it is host memory that
/// only the transport below reads and writes).
struct opaque_memory {
  static constexpr std::string_view name = "opaque";
  static constexpr bool host_accessible = false;
};

struct hook_counts {
  std::size_t copies = 0, combines = 0, divides = 0;
};

class opaque_transport {
 public:
  using memory_kind = opaque_memory;
  opaque_transport(inproc inner, hook_counts* counts) : inner_(std::move(inner)), counts_(counts) {}
  int rank() const { return inner_.rank(); }
  int size() const { return inner_.size(); }
  void send(int peer, const header& h, const std::byte* data, const wait_context& w) { inner_.send(peer, h, data, w); }
  void recv(int peer, const header& h, std::byte* data, const wait_context& w) { inner_.recv(peer, h, data, w); }
  void sendrecv(int to, const header& hs, const std::byte* sdata, int from, const header& hr, std::byte* rdata,
                const wait_context& w) {
    inner_.sendrecv(to, hs, sdata, from, hr, rdata, w);
  }
  opaque_transport sub(std::span<const int> members, std::uint64_t context) const {
    return {inner_.sub(members, context), counts_};
  }
  // The memory seam: what a device transport would run on its device.
  void copy(std::byte* dst, const std::byte* src, std::size_t n) {
    ++counts_->copies;
    std::memmove(dst, src, n);
  }
  template <class T, class Op>
  void combine(T* out, const T* a, const T* b, std::size_t n, const Op& op) {
    ++counts_->combines;
    for (std::size_t i = 0; i < n; ++i) out[i] = op(a[i], b[i]);
  }
  template <class T>
  void divide(T* data, std::size_t n, int divisor) {
    ++counts_->divides;
    for (std::size_t i = 0; i < n; ++i) data[i] /= static_cast<T>(divisor);
  }

 private:
  inproc inner_;
  hook_counts* counts_;
};

static_assert(transport<opaque_transport> && own_memory<opaque_transport>);
static_assert(std::is_same_v<transport_traits<opaque_transport>::memory, opaque_memory>);
// No element access through a view of memory the CPU may not touch; full access on the host.
template <class V>
concept indexable = requires(V v) { v[0]; };
template <class V>
concept iterable = requires(V v) { v.begin(); };
static_assert(!indexable<view<float, opaque_memory>> && !iterable<view<float, opaque_memory>>);
static_assert(indexable<view<float>> && iterable<view<float>>);

template <class T>
view<T, opaque_memory> opaque(std::vector<T>& v) {
  return {v.data(), v.size()};
}
template <class T>
view<const T, opaque_memory> opaque(const std::vector<T>& v) {
  return {v.data(), v.size()};
}

template <class A>
void run_every_collective(int p) {
  std::vector<hook_counts> counts(static_cast<std::size_t>(p));
  inproc::run_wrapped<A>(
      p, [&](inproc t) { return opaque_transport(t, &counts[static_cast<std::size_t>(t.rank())]); },
      [&](auto& comm) {
        const int me = comm.rank();
        const auto P = static_cast<std::size_t>(p), ME = static_cast<std::size_t>(me);
        const float sum = static_cast<float>(p * (p + 1) / 2);
        const std::size_t n = 1000;
        std::vector<float> v(n, float(me + 1));
        comm.all_reduce(opaque(v));
        CHECK(v == std::vector<float>(n, sum));
        std::vector<float> in(n, float(me + 1)), out(n);
        comm.all_reduce(opaque(std::as_const(in)), opaque(out), op::avg{});
        CHECK(out == std::vector<float>(n, sum / float(p)));
        if constexpr (algorithm_for<A, collective::broadcast, opaque_transport>) {
          comm.broadcast(opaque(in), p - 1);
          CHECK(in == std::vector<float>(n, float(p)));
        }
        if constexpr (algorithm_for<A, collective::all_gather, opaque_transport>) {
          std::vector<float> block(7, float(me)), all(7 * P);
          comm.all_gather(opaque(std::as_const(block)), opaque(all));
          for (std::size_t r = 0; r < P; ++r) CHECK(all[r * 7 + 6] == float(r));
        }
        if constexpr (algorithm_for<A, collective::reduce_scatter, opaque_transport>) {
          std::vector<float> whole(5 * P, 1.0f), mine(5);
          comm.reduce_scatter(opaque(std::as_const(whole)), opaque(mine));
          CHECK(mine == std::vector<float>(5, float(p)));
        }
        if constexpr (algorithm_for<A, collective::all_gather_v, opaque_transport>) {
          std::vector<std::size_t> c(P);
          for (std::size_t r = 0; r < P; ++r) c[r] = r % 2 ? 0 : r + 3;
          std::size_t total = 0;
          for (auto x : c) total += x;
          std::vector<float> block(c[ME], float(me)), all(total);
          comm.all_gather_v(opaque(std::as_const(block)), opaque(all), c);
          CHECK(all.back() == float(p % 2 ? p - 1 : p - 2));
        }
        if constexpr (algorithm_for<A, collective::reduce_scatter_v, opaque_transport>) {
          std::vector<std::size_t> c(P, 3);
          c[0] = 0;
          std::vector<float> whole(3 * (P - 1), 2.0f), mine(c[ME]);
          comm.reduce_scatter_v(opaque(std::as_const(whole)), opaque(mine), c);
          CHECK(mine == std::vector<float>(c[ME], 2.0f * float(p)));
        }
        if constexpr (algorithm_for<A, collective::all_to_all_v, opaque_transport>) {
          std::vector<std::size_t> send(P), recv(P);
          for (std::size_t j = 0; j < P; ++j) send[j] = j + 1;
          for (std::size_t i = 0; i < P; ++i) recv[i] = ME + 1;
          std::size_t stotal = 0;
          for (auto x : send) stotal += x;
          std::vector<float> from_me(stotal, float(me)), to_me((ME + 1) * P);
          comm.all_to_all_v(opaque(std::as_const(from_me)), send, opaque(to_me), recv);
          for (std::size_t i = 0; i < P; ++i) CHECK(to_me[i * (ME + 1)] == float(i));
        }
        if constexpr (algorithm_for<A, collective::gather_v, opaque_transport> &&
                      algorithm_for<A, collective::scatter_v, opaque_transport>) {
          std::vector<std::size_t> c(P, 2);
          std::vector<float> mine(2, float(me)), all(me == 0 ? 2 * P : 0), back(2);
          comm.gather_v(opaque(std::as_const(mine)), opaque(all), c, 0);
          comm.scatter_v(opaque(std::as_const(all)), c, opaque(back), 0);
          CHECK(back == mine);
        }
      });
  std::size_t combines = 0;
  for (int r = 0; r < p; ++r) {
    const auto& c = counts[static_cast<std::size_t>(r)];
    CAPTURE(r);
    // Every rank copied through the seam (its own blocks, staging, results) and divided once per
    // avg; the reductions ran through it (a leaf of a tree or a rank that recursive doubling
    // folds in only sends and receives, so count them over the group).
    CHECK(c.copies > 0);
    CHECK(c.divides >= 1);
    combines += c.combines;
  }
  if (p > 1) CHECK(combines > 0);
}
}  // namespace

TEST_SUITE_BEGIN("unit");

TEST_CASE_TEMPLATE("memory seam: every schedule runs on memory only the transport touches", A, algo::ring, algo::tree,
                   algo::recursive_doubling, algo::direct, algo::automatic) {
  for (int p : {1, 2, 3, 5}) {
    CAPTURE(p);
    run_every_collective<A>(p);
  }
}

TEST_SUITE_END();
