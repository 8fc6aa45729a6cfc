// The conformance suite must fail a transport that breaks the contract: this one wraps inproc
// and skips the header check, in effect, by sending and expecting a fingerprint with the count,
// element type, op and root masked out. Ranks that disagree then either pass each other garbage
// (float against int32: the same bytes) or fail without naming what differs; the suite must say
// so, and name the cases.
#include <doctest/doctest.h>

#include <cstddef>
#include <cstdint>
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

TEST_SUITE_BEGIN("unit");

// The suite's large buffers come from testing::block_pool: a freed block is reused (already paged
// in), and under AddressSanitizer the bytes past a buffer's end and a kept block are poisoned, so
// a schedule that writes past a buffer or into a freed one is still caught. 37 MiB + 4 bytes: a
// block size (38 MiB) no other test's buffers use.
TEST_CASE("conformance: the suite's large buffers reuse freed blocks, poisoned past their end and while kept") {
  const std::size_t n = (std::size_t{37} << 20) / sizeof(float) + 1;
  const float* first = nullptr;
  {
    testing::suite_buffer<float> a;
    a.resize_for_overwrite(n);
    first = a.data();
    a[0] = 1.0f;
    a[n - 1] = 2.0f;
    CHECK(reinterpret_cast<std::uintptr_t>(first) % alignof(std::max_align_t) == 0);
#if defined(TUTTI_TESTING_ASAN)
    CHECK_FALSE(__asan_address_is_poisoned(a.data() + n - 1));
    CHECK(__asan_address_is_poisoned(a.data() + n));
#endif
  }
#if defined(TUTTI_TESTING_ASAN)
  CHECK(__asan_address_is_poisoned(first));  // kept by the pool
#endif
  testing::suite_buffer<float> b;
  b.resize_for_overwrite(n - 2);
  CHECK(b.data() == first);
  b[n - 3] = 3.0f;
#if defined(TUTTI_TESTING_ASAN)
  CHECK(__asan_address_is_poisoned(b.data() + (n - 2)));
#endif
  // A copy is a buffer of its own; a small buffer is not pooled.
  const testing::suite_buffer<float> c(b);
  CHECK(c.data() != b.data());
  CHECK(c[n - 3] == 3.0f);
  testing::suite_buffer<float> small;
  small.resize_for_overwrite(16);
  CHECK(small.size() == 16);
}

TEST_SUITE_END();
