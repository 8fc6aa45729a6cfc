// Every collective of tutti on a few ranks, the C++ counterpart of the classic PyTorch
// torch.distributed demo: each rank starts from create_data(rank) = arange(4) + 4 * rank and
// logs "[rank r] <collective>: input [...] -> output [...]".
//
// Ranks are threads here (tutti::inproc::run); with another transport the same function would
// run once per process. To keep the log readable, each rank writes its lines into its own slot
// and main() prints them after the run, collective by collective, in rank order.
//
//   build/examples/tutti_example_collectives_demo [world_size]   (default 4)
#include <tutti/tutti.hpp>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

using data = std::vector<float>;
constexpr int dim = 4;

// arange(dim) + rank * dim: rank 0 has [0 1 2 3], rank 1 [4 5 6 7], ...
data create_data(int rank) {
  data v(dim);
  std::iota(v.begin(), v.end(), static_cast<float>(rank * dim));
  return v;
}

std::string show(const data& v) {
  std::ostringstream s;
  s << '[';
  for (std::size_t i = 0; i < v.size(); ++i) s << (i ? ", " : "") << v[i];
  return s.str() + ']';
}

int main(int argc, char** argv) {
  const int world = argc > 1 ? std::atoi(argv[1]) : 4;
  if (world < 1) {
    std::fprintf(stderr, "usage: %s [world_size >= 1]\n", argv[0]);
    return 2;
  }

  // lines[rank] = (collective, line) pairs; every rank logs one line per collective, in the same
  // order, so step k of every rank is the same collective.
  std::vector<std::vector<std::pair<std::string, std::string>>> lines(static_cast<std::size_t>(world));
  std::atomic<int> wrong{0};

  try {
    tutti::inproc::run(world, [&](auto& comm) {
      const int rank = comm.rank(), n = comm.size();
      auto say = [&](const std::string& coll, const std::string& text) {
        const std::string line = "[rank " + std::to_string(rank) + "] " + coll + ": " + text;
        lines[static_cast<std::size_t>(rank)].emplace_back(coll, line);
      };
      auto record = [&](const std::string& coll, const data& in, const data& out) {
        say(coll, "input " + show(in) + " -> output " + show(out));
      };
      auto check = [&](bool ok) { wrong += !ok; };
      // sum over every rank of create_data(k)[i] = 4 * sum(k) + n * i
      auto total = [&](int i) { return static_cast<float>(dim * n * (n - 1) / 2 + n * i); };

      // broadcast: rank 0's data lands everywhere.
      {
        data in = create_data(rank), buf = in;
        comm.broadcast(tutti::view(buf), /*root=*/0);
        record("broadcast(src=0)", in, buf);
        check(buf == create_data(0));
      }
      // reduce: the sum lands on rank 0; the other ranks' buffers are left as they were.
      {
        data in = create_data(rank), buf = in;
        comm.reduce(tutti::view(buf), /*root=*/0, tutti::op::sum{});
        record("reduce(dst=0, sum)", in, buf);
        check(rank != 0 || buf == data{total(0), total(1), total(2), total(3)});
      }
      // all_reduce: the sum lands everywhere.
      {
        data in = create_data(rank), buf = in;
        comm.all_reduce(tutti::view(buf), tutti::op::sum{});
        record("all_reduce(sum)", in, buf);
        check(buf == data{total(0), total(1), total(2), total(3)});
      }
      // gather: rank 0 gets everybody's data, in rank order; out is ignored elsewhere.
      {
        data in = create_data(rank), out(rank == 0 ? static_cast<std::size_t>(n * dim) : 0);
        comm.gather(tutti::view(in), tutti::view(out), /*root=*/0);
        record("gather(dst=0)", in, out);
        for (std::size_t i = 0; i < out.size(); ++i) check(out[i] == static_cast<float>(i));
      }
      // all_gather: everybody gets everybody's data.
      {
        data in = create_data(rank), out(static_cast<std::size_t>(n * dim));
        comm.all_gather(tutti::view(in), tutti::view(out));
        record("all_gather", in, out);
        for (std::size_t i = 0; i < out.size(); ++i) check(out[i] == static_cast<float>(i));
      }
      // scatter: rank 0 holds create_data(0) ++ create_data(1) ++ ...; rank i gets block i.
      {
        data in;
        if (rank == 0)
          for (int i = 0; i < n; ++i) {
            const data d = create_data(i);
            in.insert(in.end(), d.begin(), d.end());
          }
        data out(dim);
        comm.scatter(tutti::view(in), tutti::view(out), /*src=*/0);
        record("scatter(src=0)", in, out);
        check(out == create_data(rank));
      }
      // all_to_all: block i of my input (create_data(rank) + i/n) goes to rank i, and block j of
      // my output comes from rank j.
      data blocks;  // reused by reduce_scatter
      for (int i = 0; i < n; ++i)
        for (float x : create_data(rank)) blocks.push_back(x + static_cast<float>(i) / static_cast<float>(n));
      {
        data out(blocks.size());
        comm.all_to_all(tutti::view(blocks), tutti::view(out));
        record("all_to_all", blocks, out);
        for (int j = 0; j < n; ++j) {
          const data from_j(out.begin() + j * dim, out.begin() + (j + 1) * dim);
          data want = create_data(j);
          for (float& x : want) x += static_cast<float>(rank) / static_cast<float>(n);
          check(from_j == want);
        }
      }
      // reduce_scatter: the same input; rank i gets the sum of everybody's block i.
      {
        data out(dim);
        comm.reduce_scatter(tutti::view(blocks), tutti::view(out), tutti::op::sum{});
        record("reduce_scatter(sum)", blocks, out);
        // (n ranks each add rank/n: exact for n = 4, within rounding for n = 3)
        for (int k = 0; k < dim; ++k)
          check(std::abs(out[static_cast<std::size_t>(k)] - (total(k) + static_cast<float>(rank))) < 1e-3f);
      }
      // barrier: nobody leaves before everybody has arrived.
      comm.barrier();
      say("barrier", "passed");

      // new_group: every rank calls it with the same list; non-members get an empty optional.
      // Group ranks are positions in the list, so world rank 2 is rank 1 of the group.
      {
        std::vector<int> evens;
        for (int i = 0; i < n; i += 2) evens.push_back(i);
        auto group = comm.new_group(evens);
        data in = create_data(rank), buf = in;
        if (group) {
          group->reduce(tutti::view(buf), /*root=*/0, tutti::op::sum{});
          record("reduce in group of even ranks (dst=0)", in, buf);
          float want = 0;
          for (int i : evens) want += create_data(i)[0];
          check(group->rank() != 0 || buf[0] == want);
        } else {
          say("reduce in group of even ranks (dst=0)", "not in the group");
        }
      }
      // send/recv: rank 0 sends its data to rank 1 with tag 7.
      {
        data buf = rank == 0 ? create_data(0) : data(dim, 0.0f);
        const data in = buf;
        if (n >= 2 && rank == 0) comm.send(tutti::view(buf), /*peer=*/1, /*tag=*/7);
        if (n >= 2 && rank == 1) comm.recv(tutti::view(buf), /*peer=*/0, /*tag=*/7);
        if (n >= 2 && rank <= 1) record("send/recv(0 -> 1, tag=7)", in, buf);
        else say("send/recv(0 -> 1, tag=7)", "not involved");
        check(rank != 1 || buf == create_data(0));
      }
    });
  } catch (const tutti::error& e) {  // any rank's failure, rethrown here after every rank stopped
    std::fprintf(stderr, "tutti error: %s\n", e.what());
    return 1;
  }

  // One section per collective, rank by rank.
  for (std::size_t step = 0; step < lines[0].size(); ++step) {
    std::printf("== %s\n", lines[0][step].first.c_str());
    for (const auto& of_rank : lines) std::printf("%s\n", of_rank[step].second.c_str());
  }
  if (wrong != 0) {
    std::fprintf(stderr, "FAILED: %d wrong results\n", wrong.load());
    return 1;
  }
  return 0;
}
