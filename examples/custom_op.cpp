// A user element type and a user reduce op: "which rank holds the largest value in each slot?"
//
// Any trivially copyable struct can be a collective's element type (it travels as bytes), and
// any function object callable as T(T, T) can be its reduce op. Algorithms reorder operands, so
// the op must be associative and commutative, as in MPI and torch.distributed.
//
//   build/examples/tutti_example_custom_op
#include <tutti/tutti.hpp>

#include <atomic>
#include <cstdio>
#include <vector>

// The element type: a value and the rank it came from (MPI's MAXLOC pair).
struct value_at {
  float value;
  int rank;
};

// The reduce op: the larger value; on a tie, the lower rank (so the result does not depend on
// the order in which an algorithm combines the operands).
struct argmax {
  value_at operator()(const value_at& a, const value_at& b) const {
    if (a.value != b.value) return a.value > b.value ? a : b;
    return a.rank < b.rank ? a : b;
  }
};

constexpr int ranks = 4;
constexpr std::size_t slots = 10;

// What rank r contributes to slot i: small integers with plenty of ties (slot 0: all zero;
// slot 2: ranks 1 and 3 tie at 2), so the tie-break gets exercised.
float contribution(int r, std::size_t i) { return static_cast<float>(r * static_cast<int>(i) % 4); }

int main() {
  std::atomic<int> wrong{0};

  // The answer every rank must get, computed without any communication.
  std::vector<value_at> expected(slots);
  for (std::size_t i = 0; i < slots; ++i) {
    expected[i] = {contribution(0, i), 0};
    for (int r = 1; r < ranks; ++r) expected[i] = argmax{}(expected[i], {contribution(r, i), r});
  }

  // Runs one all_reduce with algorithm `a` on every rank and checks the result.
  auto run_with = [&](const char* label, auto a) {
    tutti::inproc::run(ranks, [&](auto& comm) {
      std::vector<value_at> v(slots);
      for (std::size_t i = 0; i < slots; ++i) v[i] = {contribution(comm.rank(), i), comm.rank()};

      comm.all_reduce(tutti::view(v), argmax{}, a);  // the algorithm is the trailing argument

      for (std::size_t i = 0; i < slots; ++i)
        if (v[i].value != expected[i].value || v[i].rank != expected[i].rank) ++wrong;
      if (comm.rank() == 0) {
        std::printf("%-26s", label);
        for (const auto& x : v) std::printf(" %g@%d", static_cast<double>(x.value), x.rank);
        std::printf("\n");
      }
    });
  };

  try {
    std::printf("all_reduce(argmax) over %d ranks, %zu slots, printed as value@rank:\n", ranks, slots);
    run_with("ring", tutti::algo::ring{});
    // Algorithms are small aggregates with knobs: a 16-byte pipelining unit makes the ring move
    // every block in pieces of two value_at elements.
    run_with("ring (16-byte pieces)", tutti::algo::ring{.chunk_bytes = 16});
    run_with("tree", tutti::algo::tree{});
    run_with("recursive_doubling", tutti::algo::recursive_doubling{});
    run_with("direct", tutti::algo::direct{});
    run_with("automatic", tutti::algo::automatic{});  // what a communicator uses by default
  } catch (const tutti::error& e) {  // every tutti failure derives from tutti::error
    std::fprintf(stderr, "tutti error: %s\n", e.what());
    return 1;
  }

  if (wrong != 0) {
    std::fprintf(stderr, "FAILED: %d wrong elements\n", wrong.load());
    return 1;
  }
  std::printf("all results correct\n");
  return 0;
}
