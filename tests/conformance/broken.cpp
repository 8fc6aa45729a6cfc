// The conformance suite must fail a transport that breaks the contract: this one wraps inproc
// and skips the header check, in effect, by sending and expecting a fingerprint with the count,
// element type, op and root masked out. Ranks that disagree then either pass each other garbage
// (float against int32: the same bytes) or fail without naming what differs; the suite must say
// so, and name the cases.
#include <doctest/doctest.h>

#include <span>
#include <string>
#include <tutti/testing/conformance.hpp>
#include <tutti/tutti.hpp>

using namespace tutti;

namespace {
class masking_transport {
 public:
  explicit masking_transport(inproc inner) : inner_(std::move(inner)) {}
  int rank() const { return inner_.rank(); }
  int size() const { return inner_.size(); }
  void send(int peer, const header& h, const std::byte* data, const wait_context& w) { inner_.send(peer, mask(h), data, w); }
  void recv(int peer, const header& h, std::byte* data, const wait_context& w) { inner_.recv(peer, mask(h), data, w); }
  void sendrecv(int to, const header& hs, const std::byte* sdata, int from, const header& hr, std::byte* rdata,
                const wait_context& w) {
    inner_.sendrecv(to, mask(hs), sdata, from, mask(hr), rdata, w);
  }
  masking_transport sub(std::span<const int> members, std::uint64_t context) const {
    return masking_transport(inner_.sub(members, context));
  }

 private:
  static header mask(header h) {
    h.fp.count = h.fp.shape = 0;
    h.fp.dtype = h.fp.op = 0;
    h.fp.elem_size = 0;
    h.fp.root = -1;
    return h;
  }
  inproc inner_;
};
static_assert(transport<masking_transport>);

constexpr auto launch = [](int n, auto&& body) {
  inproc::run_wrapped<algo::automatic>(n, [](inproc t) { return masking_transport(std::move(t)); }, body);
};
}  // namespace

TEST_SUITE_BEGIN("multirank");

TEST_CASE("conformance: the suite fails a transport that does not check what its peers send") {
  testing::report rep;
  auto run = testing::make_thread_runner<masking_transport>(3, launch, std::chrono::seconds(2));
  using algorithms = std::tuple<algo::ring, algo::direct>;
  testing::check_mismatches<algorithms>(run, rep, collective::all_reduce);
  testing::check_mismatches<algorithms>(run, rep, collective::gather);
  INFO(rep.text());
  CHECK_FALSE(rep.ok());
  bool dtype = false, count = false;
  for (const auto& f : rep.findings()) {
    dtype = dtype || testing::contains(f.check, "float against int32");
    count = count || testing::contains(f.check, "count 10 against 12");
  }
  CHECK_MESSAGE(dtype, "the suite did not flag the element types that went unchecked");
  CHECK_MESSAGE(count, "the suite did not flag the counts it could not name");
  // The same transport still moves data correctly: the results part passes.
  testing::report results;
  auto body = [&](auto& comm, testing::report& r) { testing::check_collectives<algo::ring, float>(comm, r, 7, op::sum{}); };
  run.each(body, results, "results over the masking transport");
  CHECK_MESSAGE(results.ok(), results.text());
}

TEST_SUITE_END();
