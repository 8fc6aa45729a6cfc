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
#include <tutti/testing/calls.hpp>
#include <tutti/testing/collectives.hpp>
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

/// Every collective of the table that A has on the opaque transport, from its row (the generic
/// calls of the conformance suite, on opaque views), and avg for the division.
template <class A>
void run_every_collective(int p) {
  std::vector<hook_counts> counts(static_cast<std::size_t>(p));
  inproc::run_wrapped<A>(
      p, [&](inproc t) { return opaque_transport(t, &counts[static_cast<std::size_t>(t.rank())]); },
      [&](auto& comm) {
        const int me = comm.rank();
        const std::size_t n = 1000;
        testing::report rep;
        auto input = [](int r, std::size_t i) { return static_cast<float>((r * 7 + static_cast<int>(i) * 3) % 11); };
        for_each_collective([&](auto k) {
          constexpr collective C = decltype(k)::value;
          if constexpr (algorithm_for<A, C, opaque_transport>) {
            const auto s = testing::call_shape::any(C, p, info(C).counts == counts_kind::per_rank ? 7 : n, p - 1);
            for (auto pl : {testing::placement::apart, testing::placement::in_place}) {
              if (pl == testing::placement::apart ? !testing::has_apart<C> : !testing::has_in_place<C>) continue;
              auto b = testing::make_buffers<C, float>(s, me, pl, input, -1.0f);
              const auto before = testing::result_of<C>(s, me, b, pl);
              comm.template call<C>(testing::describe<C, opaque_memory>(s, me, b, pl, op::sum{}));
              testing::expect_equal(rep, me, testing::result_of<C>(s, me, b, pl),
                                    testing::expected<C, float>(s, me, before, input, op::sum{}),
                                    std::string(collective_name(C)) + (pl == testing::placement::in_place ? " in place" : ""));
            }
          }
        });
        // avg: the one division goes through the seam too
        std::vector<float> in(n, float(me + 1)), out(n);
        comm.all_reduce(opaque(std::as_const(in)), opaque(out), op::avg{});
        const float sum = static_cast<float>(p * (p + 1) / 2);
        CHECK(out == std::vector<float>(n, sum / float(p)));
        CHECK_MESSAGE(rep.ok(), rep.text());
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
