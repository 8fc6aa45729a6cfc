// User-written algorithms: the schedules of a collective, written against tutti::channel.
//
// An algorithm is a small copyable struct with a `name` and, for each collective it offers, a
// const member function template taking the call's channel and the user's views (signatures in
// tutti/algorithm/algorithm.hpp). The channel sends, receives and reduces typed views; it stamps
// every message with the call's fingerprint, so mismatched calls fail instead of hanging. The
// communicator validates arguments and handles one-rank groups before an algorithm is called,
// so a schedule may assume ch.size() >= 2.
//
//   build/examples/tutti_example_custom_algorithm
#include <tutti/tutti.hpp>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <string_view>
#include <vector>

// A star: rank `root` talks to everybody, one after the other. Slow for many ranks, but short.
struct star {
  static constexpr std::string_view name = "star";  // goes (hashed) into every fingerprint

  template <class Ch, class T, class Op>
  void reduce(Ch& ch, tutti::view<T> buf, int root, const Op& op) const {
    if (ch.rank() != root) return ch.send(root, buf);
    // buf = op(buf, what rank i sent), reduced as it arrives (no copy on inproc).
    for (int i = 0; i < ch.size(); ++i)
      if (i != root) ch.recv_reduce(i, tutti::view<const T>(buf), buf, op);
  }

  template <class Ch, class T>
  void broadcast(Ch& ch, tutti::view<T> buf, int root) const {
    if (ch.rank() != root) return ch.recv(root, buf);
    for (int i = 0; i < ch.size(); ++i)
      if (i != root) ch.send(i, buf);
  }

  template <class Ch, class T, class Op>
  void all_reduce(Ch& ch, tutti::view<T> buf, const Op& op) const {
    reduce(ch, buf, 0, op);
    broadcast(ch, buf, 0);
  }

  template <class Ch>
  void barrier(Ch& ch) const {
    // Empty messages still carry the fingerprint: everybody checks in with 0, 0 lets them go.
    tutti::view<char> none;
    reduce(ch, none, 0, tutti::op::sum{});
    broadcast(ch, none, 0);
  }
};

// All pairs: every rank sends its whole buffer to every other rank in p-1 pairwise steps
// (step s: to rank+s, from rank-s), folding what arrives into its own buffer. Only all_reduce.
struct all_pairs {
  static constexpr std::string_view name = "all_pairs";

  template <class Ch, class T, class Op>
  void all_reduce(Ch& ch, tutti::view<T> buf, const Op& op) const {
    const int p = ch.size(), r = ch.rank();
    // buf accumulates, so keep this rank's own contribution in library-owned scratch (slots 0-2
    // are the algorithm's; `template` because Ch is a template parameter).
    tutti::view<T> mine = ch.template scratch<T>(0, buf.size());
    std::copy(buf.begin(), buf.end(), mine.begin());
    for (int s = 1; s < p; ++s) {
      const int to = (r + s) % p, from = (r - s + p) % p;
      // Full duplex: send `mine` to `to` while folding from's contribution into buf.
      ch.sendrecv_reduce(to, tutti::view<const T>(mine), from, tutti::view<const T>(buf), buf, op);
    }
    // Each rank combined the operands in its own order: exact for integers, but floats could
    // differ in the last bit between ranks (tutti's own algorithms avoid that).
  }
};

// The communicator checks at compile time that an algorithm has the schedule a call needs.
static_assert(tutti::algorithm<star> && tutti::algorithm<all_pairs>);
static_assert(tutti::algorithm_for<star, tutti::collective::all_reduce>);
static_assert(tutti::algorithm_for<star, tutti::collective::broadcast>);
static_assert(tutti::algorithm_for<all_pairs, tutti::collective::all_reduce>);
static_assert(!tutti::algorithm_for<all_pairs, tutti::collective::broadcast>);  // would not compile

constexpr int p = 5;             // ranks
constexpr std::size_t n = 1000;  // elements per rank

template <class T>
bool all_equal(const std::vector<T>& v, T x) {
  return std::all_of(v.begin(), v.end(), [x](T y) { return y == x; });
}

int main() {
  std::atomic<int> wrong{0};
  auto expect = [&](bool ok, const char* what, int rank) {
    if (!ok) {
      ++wrong;
      std::fprintf(stderr, "rank %d: wrong %s\n", rank, what);
    }
  };

  try {
    // `star` as the communicator's algorithm: every collective without a per-call algorithm
    // runs its schedules.
    tutti::inproc::run<star>(p, [&](auto& comm) {
      const int r = comm.rank();
      const int sum_of_ranks = p * (p - 1) / 2;
      std::vector<int> v(n);
      for (std::size_t i = 0; i < n; ++i) v[i] = r * 1000 + static_cast<int>(i);

      comm.all_reduce(tutti::view(v));  // star, sum
      bool ok = true;
      for (std::size_t i = 0; i < n; ++i) ok = ok && v[i] == sum_of_ranks * 1000 + p * static_cast<int>(i);
      expect(ok, "star all_reduce", r);

      std::vector<int> b(n, r == 3 ? 42 : 0);
      comm.broadcast(tutti::view(b), 3);  // star, root 3
      expect(all_equal(b, 42), "star broadcast", r);

      comm.barrier();  // star

      // Per call: a user algorithm the communicator does not know about, or one of tutti's.
      std::vector<int> w(n, r + 1);
      comm.all_reduce(tutti::view(w), tutti::op::sum{}, all_pairs{});
      expect(all_equal(w, p * (p + 1) / 2), "all_pairs all_reduce", r);

      std::vector<int> u(n, 1);
      comm.all_reduce(tutti::view(u), tutti::op::sum{}, tutti::algo::ring{});
      expect(all_equal(u, p), "ring all_reduce", r);

      if (r == 0) std::printf("%d ranks, %zu ints: star and all_pairs done\n", p, n);
    });

    // And the other way round: tutti's automatic algorithm by default, a user algorithm per call,
    // given as a template argument this time.
    tutti::inproc::run(p, [&](auto& comm) {
      std::vector<long long> v(n, comm.rank());
      comm.template all_reduce<star>(tutti::view(v));
      expect(all_equal(v, static_cast<long long>(p * (p - 1) / 2)), "per-call star all_reduce", comm.rank());
    });
  } catch (const tutti::error& e) {
    std::fprintf(stderr, "tutti error: %s\n", e.what());
    return 1;
  }
  if (wrong != 0) return 1;
  std::printf("all results correct\n");
  return 0;
}
