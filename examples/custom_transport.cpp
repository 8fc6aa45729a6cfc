// A user-written transport: it wraps tutti::inproc and counts the payload bytes each rank sends.
// Plugged under tutti::algo::ring, it shows the ring all_reduce moving 2(p-1)/p of the buffer
// per rank, the bandwidth optimum.
//
// A transport is a copyable value with rank(), size(), blocking send / recv / sendrecv of a
// header plus payload, and sub() for sub-groups: the tutti::transport concept, in
// tutti/transport/capabilities.hpp with the optional capabilities. This one offers
// failure_notices (fail) but not zero_copy_recv (recv_with / sendrecv_with), so reductions
// receive into a staging buffer first.
//
// With --conformance it runs tutti's transport conformance suite (tutti/testing/conformance.hpp)
// on this transport instead, as the author of a transport would: every collective against a
// reference at 1..9 ranks, every way ranks can disagree, a silent peer, a lost peer, abort().
//
//   build/examples/tutti_example_custom_transport [ranks]
//   build/examples/tutti_example_custom_transport --conformance
#include <tutti/testing/conformance.hpp>
#include <tutti/tutti.hpp>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

class counting_transport {
 public:
  // `sent` is this rank's counter; the transport only ever touches its own rank's counter.
  counting_transport(tutti::inproc inner, std::uint64_t* sent) : inner_(std::move(inner)), sent_(sent) {}

  int rank() const { return inner_.rank(); }
  int size() const { return inner_.size(); }

  void send(int peer, const tutti::header& h, const std::byte* data, const tutti::wait_context& w) {
    *sent_ += h.bytes;  // h.bytes is the payload size; the header travels separately
    inner_.send(peer, h, data, w);
  }
  void recv(int peer, const tutti::header& h, std::byte* data, const tutti::wait_context& w) {
    inner_.recv(peer, h, data, w);
  }
  void sendrecv(int to, const tutti::header& hs, const std::byte* sdata, int from,
                const tutti::header& hr, std::byte* rdata, const tutti::wait_context& w) {
    *sent_ += hs.bytes;
    inner_.sendrecv(to, hs, sdata, from, hr, rdata, w);
  }
  // Optional capabilities are members too; forwarding inproc's costs nothing. With `fail` (the
  // failure_notices capability) a rank that fails tells its peers why, so every rank waiting
  // on it, directly or through others, names it in its peer_lost; without it, a peer learns
  // only that the rank it waited for has gone.
  void fail(std::string_view why) noexcept { inner_.fail(why); }
  // A sub-group shares the links, and here the counter too.
  counting_transport sub(std::span<const int> members, std::uint64_t context) const {
    return {inner_.sub(members, context), sent_};
  }

 private:
  tutti::inproc inner_;
  std::uint64_t* sent_;
};

static_assert(tutti::transport<counting_transport> && tutti::failure_notices<counting_transport>);
static_assert(!tutti::zero_copy_recv<counting_transport>);  // channel stages reductions instead

// The conformance suite over counting_transport: each run of a case wraps inproc's ranks in it.
int conformance() {
  auto launch = [](int n, auto&& body) {
    auto sent = std::make_shared<std::vector<std::uint64_t>>(static_cast<std::size_t>(n), 0);
    tutti::inproc::run_wrapped<tutti::algo::automatic>(
        n, [sent](tutti::inproc t) { return counting_transport(t, &(*sent)[static_cast<std::size_t>(t.rank())]); },
        body);
  };
  // World sizes 1-5 and 7 (the default, 1-9, runs in tutti's own inproc suite: the sizes past
  // the cores only take longer here); the failure cases at 2 and 3 ranks.
  const auto report = tutti::testing::conformance_over_threads<counting_transport>(launch, {}, {1, 2, 3, 4, 5, 7}, {2, 3});
  std::printf("conformance of counting_transport: %s\n", report.text().c_str());
  return report.ok() ? 0 : 1;
}

int main(int argc, char** argv) {
  if (argc > 1 && std::string_view(argv[1]) == "--conformance") return conformance();
  const int p = argc > 1 ? std::atoi(argv[1]) : 4;
  if (p < 2) {
    std::fprintf(stderr, "usage: %s [ranks >= 2]\n", argv[0]);
    return 2;
  }
  const std::size_t n = 1'000'000;  // floats per rank: 4 MB

  // inproc::run_wrapped runs one thread per rank, like inproc::run, but first wraps each rank's
  // inproc transport in ours: the communicators are communicator<counting_transport, ring>.
  std::vector<std::uint64_t> sent(static_cast<std::size_t>(p), 0);
  std::vector<int> correct(static_cast<std::size_t>(p), 0);
  try {
    tutti::inproc::run_wrapped<tutti::algo::ring>(
        p, [&](tutti::inproc t) { return counting_transport(t, &sent[static_cast<std::size_t>(t.rank())]); },
        [&](auto& comm) {
          const int r = comm.rank();
          std::vector<float> v(n, static_cast<float>(r + 1));
          comm.all_reduce(tutti::view(v));  // sum; 1 + 2 + ... + p everywhere
          const float want = static_cast<float>(p * (p + 1) / 2);
          bool ok = true;
          for (float x : v) ok = ok && x == want;
          correct[static_cast<std::size_t>(r)] = ok;
        });
  } catch (const std::exception& e) {
    std::fprintf(stderr, "failed: %s\n", e.what());
    return 1;
  }

  // The ring's reduce-scatter and all-gather each send p-1 blocks of n/p elements per rank.
  const double theory = 2.0 * (p - 1) / p * static_cast<double>(n * sizeof(float));
  std::printf("ring all_reduce of %zu floats (%zu bytes) on %d ranks\n", n, n * sizeof(float), p);
  std::printf("theory: 2(p-1)/p * N * 4 = %.0f bytes sent per rank\n", theory);
  bool ok = true;
  for (int r = 0; r < p; ++r) {
    const auto got = sent[static_cast<std::size_t>(r)];
    // Exact when p divides n; otherwise blocks differ by one element, so allow 2(p-1) elements.
    const bool near = static_cast<double>(got) >= theory - 2.0 * (p - 1) * sizeof(float) &&
                      static_cast<double>(got) <= theory + 2.0 * (p - 1) * sizeof(float);
    std::printf("rank %d: sent %llu bytes (%.4f x theory), result %s\n", r,
                static_cast<unsigned long long>(got), static_cast<double>(got) / theory,
                correct[static_cast<std::size_t>(r)] ? "correct" : "WRONG");
    ok = ok && near && correct[static_cast<std::size_t>(r)];
  }
  return ok ? 0 : 1;
}
