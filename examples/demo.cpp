// The demo of every collective, as processes over shared memory, in the manner of the PyTorch
// Distributed demo it mirrors: every rank logs its input and output of each call.
//
//   tuttirun --nproc-per-node=4 build/examples/tutti_demo
//
// Data is made like the document's create_data(): arange(dim) + rank * dim.
#include <cstdio>
#include <string>
#include <tutti/tutti.hpp>
#ifdef TUTTI_DEMO_TCP
#include <tutti/transport/tcp.hpp>
#endif
#include <vector>

namespace {

// Built a second time as tutti_demo_tcp, over tutti::tcp, for jobs across hosts:
//   tuttirun --nnodes=2 --node-rank=K --nproc-per-node=2 --master-addr=A --master-port=P tutti_demo_tcp
#ifdef TUTTI_DEMO_TCP
using comm_t = tutti::communicator<tutti::tcp>;
#else
using comm_t = tutti::communicator<tutti::shm>;
#endif

std::vector<float> create_data(int worker_id, int dim = 4) {
  std::vector<float> v(static_cast<std::size_t>(dim));
  for (int i = 0; i < dim; ++i) v[static_cast<std::size_t>(i)] = static_cast<float>(i + worker_id * dim);
  return v;
}

std::string show(const std::vector<float>& v) {
  std::string s = "[";
  for (std::size_t i = 0; i < v.size(); ++i) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%s%g", i ? ", " : "", static_cast<double>(v[i]));
    s += buf;
  }
  return s + "]";
}

/// Prints one line per rank, in rank order: each rank waits for its predecessor's token.
void log_in_order(comm_t& comm, const std::string& line) {
  char token = 0;
  if (comm.rank() > 0) comm.recv(tutti::view(&token, 1), comm.rank() - 1, 99);
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
  if (comm.rank() + 1 < comm.size()) comm.send(tutti::view(&token, 1), comm.rank() + 1, 99);
  comm.barrier();
}

void log(comm_t& comm, const char* what, const std::vector<float>& in, const std::vector<float>& out) {
  log_in_order(comm, std::string(what) + ": input " + show(in) + " -> output " + show(out));
}

}  // namespace

int main() try {
  auto comm = comm_t::from_env();
  const int rank = comm.rank(), world = comm.size();
  const int dim = 4;
  if (rank == 0) std::printf("tutti demo: %d ranks over shared memory\n", world);

  {  // broadcast from rank 0: everyone ends with rank 0's data
    auto data = create_data(rank), in = data;
    comm.broadcast(tutti::view(data), /*root=*/0);
    log(comm, "broadcast(src=0)", in, data);
  }
  {  // reduce to rank 0: only rank 0's buffer changes
    auto data = create_data(rank), in = data;
    comm.reduce(tutti::view(data), /*root=*/0, tutti::op::sum{});
    log(comm, "reduce(dst=0, SUM)", in, data);
  }
  {  // all_reduce: everyone gets the sum
    auto data = create_data(rank), in = data;
    comm.all_reduce(tutti::view(data), tutti::op::sum{});
    log(comm, "all_reduce(SUM)", in, data);
  }
  {  // gather to rank 0
    auto data = create_data(rank);
    std::vector<float> out(rank == 0 ? static_cast<std::size_t>(world * dim) : 0);
    comm.gather(tutti::view(data), tutti::view(out), /*root=*/0);
    log(comm, "gather(dst=0)", data, out);
  }
  {  // all_gather
    auto data = create_data(rank);
    std::vector<float> out(static_cast<std::size_t>(world * dim));
    comm.all_gather(tutti::view(data), tutti::view(out));
    log(comm, "all_gather", data, out);
  }
  {  // scatter from rank 0: rank i gets create_data(i)
    std::vector<float> in;
    if (rank == 0)
      for (int i = 0; i < world; ++i) {
        auto d = create_data(i, dim);
        in.insert(in.end(), d.begin(), d.end());
      }
    std::vector<float> out(dim);
    comm.scatter(tutti::view(in), tutti::view(out), /*root=*/0);
    log(comm, "scatter(src=0)", in, out);
  }
  {  // all_to_all: block i of my input goes to rank i
    std::vector<float> in;
    for (int i = 0; i < world; ++i) {
      auto d = create_data(rank, dim);
      for (auto& x : d) x += static_cast<float>(i) / static_cast<float>(world);
      in.insert(in.end(), d.begin(), d.end());
    }
    std::vector<float> out(in.size());
    comm.all_to_all(tutti::view(in), tutti::view(out));
    log(comm, "all_to_all", in, out);
  }
  {  // reduce_scatter: rank i gets block i of the sum
    auto in = create_data(rank, world);  // one element per rank
    std::vector<float> out(1);
    comm.reduce_scatter(tutti::view(in), tutti::view(out), tutti::op::sum{});
    log(comm, "reduce_scatter(SUM)", in, out);
  }
  {  // scan: rank r gets the sum over ranks 0..r
    auto in = create_data(rank);
    std::vector<float> out(in.size());
    comm.scan(tutti::view(in), tutti::view(out), tutti::op::sum{});
    log(comm, "scan(SUM)", in, out);
  }
  {  // exscan: rank r gets the sum over ranks 0..r-1 (rank 0's out is left as it was: zeros)
    auto in = create_data(rank);
    std::vector<float> out(in.size());
    comm.exscan(tutti::view(in), tutti::view(out), tutti::op::sum{});
    log(comm, "exscan(SUM)", in, out);
  }
  comm.barrier();
  log_in_order(comm, "barrier: passed");
  {  // a reduce inside the group of even ranks; odd ranks are not members
    std::vector<int> evens;
    for (int r = 0; r < world; r += 2) evens.push_back(r);
    auto group = comm.new_group(evens);
    auto data = create_data(rank), in = data;
    if (group) group->reduce(tutti::view(data), /*root=*/0, tutti::op::sum{});
    log(comm, group ? "reduce in new_group(even ranks)" : "reduce in new_group(even ranks) [not a member]", in, data);
  }
  if (world >= 2) {  // point to point: rank 0 sends to rank 1
    auto data = create_data(rank), in = data;
    if (rank == 0) comm.send(tutti::view(data), 1, /*tag=*/0);
    if (rank == 1) comm.recv(tutti::view(data), 0, /*tag=*/0);
    log(comm, rank == 0 ? "send(dst=1)" : rank == 1 ? "recv(src=0)" : "send/recv [not involved]", in, data);
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "demo: %s\n", e.what());
  return 1;
}
