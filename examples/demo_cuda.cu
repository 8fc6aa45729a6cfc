// The demo of every collective on GPU buffers, as the reference document runs it with its data on
// cuda:{rank} under the nccl backend: every rank logs its input and output of each call. Over
// tutti::cuda_ipc (tutti's own kernels) or tutti::nccl (NCCL driven by tutti):
//
//   tuttirun --nproc-per-node=2 build/examples/tutti_demo_cuda            # cuda_ipc
//   tuttirun --nproc-per-node=1 build/examples/tutti_demo_cuda nccl       # nccl (one rank per GPU
//                                                                        #  before NCCL 2.30)
//
// Each rank uses device LOCAL_RANK % device count (several ranks may share one over cuda_ipc).
// Data is made like the document's create_data(): arange(dim) + rank * dim, copied to the device;
// calls go on a stream of the program's and return a request (waited before the output is read).
#include <cuda_runtime.h>

#include <cstdio>
#include <string>
#include <tutti/transport/cuda_ipc.hpp>
#include <tutti/tutti.hpp>
#include <tutti/transport/nccl.hpp>
#include <vector>

namespace {

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

/// A buffer on this rank's device.
struct device_buffer {
  float* p = nullptr;
  std::size_t n = 0;
  explicit device_buffer(std::size_t count) : n(count) {
    if (cudaMalloc(&p, (n ? n : 1) * sizeof(float)) != cudaSuccess) throw std::runtime_error("cudaMalloc failed");
  }
  explicit device_buffer(const std::vector<float>& h) : device_buffer(h.size()) {
    if (n) cudaMemcpy(p, h.data(), n * sizeof(float), cudaMemcpyHostToDevice);
  }
  device_buffer(const device_buffer&) = delete;
  ~device_buffer() { cudaFree(p); }
  tutti::device_view<float> view() const { return {p, n}; }
  std::vector<float> host() const {
    std::vector<float> h(n);
    if (n) cudaMemcpy(h.data(), p, n * sizeof(float), cudaMemcpyDeviceToHost);
    return h;
  }
};

template <class Comm>
struct demo {
  Comm& comm;
  cudaStream_t stream;
  device_buffer token{1};

  /// Prints one line per rank, in rank order: each rank waits for its predecessor's token (a
  /// one-element send on the device).
  void log_in_order(const std::string& line) {
    if (comm.rank() > 0) comm.recv(token.view(), comm.rank() - 1, 99);
    std::printf("[rank %d] %s\n", comm.rank(), line.c_str());
    std::fflush(stdout);
    if (comm.rank() + 1 < comm.size()) comm.send(token.view(), comm.rank() + 1, 99);
    comm.barrier();
  }
  void log(const char* what, const std::vector<float>& in, const device_buffer& out) {
    log_in_order(std::string(what) + ": input " + show(in) + " -> output " + show(out.host()));
  }

  void run() {
    const int rank = comm.rank(), world = comm.size();
    const int dim = 4;
    {  // broadcast from rank 0, on the stream: a request, waited before reading
      auto in = create_data(rank);
      device_buffer data(in);
      auto r = comm.broadcast(data.view(), /*root=*/0, stream);
      r.wait();
      log("broadcast(src=0)", in, data);
    }
    {  // reduce to rank 0
      auto in = create_data(rank);
      device_buffer data(in);
      comm.reduce(data.view(), /*root=*/0, tutti::op::sum{}, stream).wait();
      log("reduce(dst=0, SUM)", in, data);
    }
    {  // all_reduce: everyone gets the sum (no stream: the call blocks until it is in place)
      auto in = create_data(rank);
      device_buffer data(in);
      comm.all_reduce(data.view(), tutti::op::sum{});
      log("all_reduce(SUM)", in, data);
    }
    {  // gather to rank 0
      auto in = create_data(rank);
      device_buffer data(in), out(rank == 0 ? static_cast<std::size_t>(world * dim) : 0);
      comm.gather(tutti::device_view<const float>(data.view()), out.view(), /*root=*/0);
      log("gather(dst=0)", in, out);
    }
    {  // all_gather
      auto in = create_data(rank);
      device_buffer data(in), out(static_cast<std::size_t>(world * dim));
      comm.all_gather(tutti::device_view<const float>(data.view()), out.view(), stream).wait();
      log("all_gather", in, out);
    }
    {  // scatter from rank 0: rank i gets create_data(i)
      std::vector<float> in;
      if (rank == 0)
        for (int i = 0; i < world; ++i) {
          auto d = create_data(i, dim);
          in.insert(in.end(), d.begin(), d.end());
        }
      device_buffer data(in), out(dim);
      comm.scatter(tutti::device_view<const float>(data.view()), out.view(), /*root=*/0);
      log("scatter(src=0)", in, out);
    }
    {  // all_to_all: block i of my input goes to rank i
      std::vector<float> in;
      for (int i = 0; i < world; ++i) {
        auto d = create_data(rank, dim);
        for (auto& x : d) x += static_cast<float>(i) / static_cast<float>(world);
        in.insert(in.end(), d.begin(), d.end());
      }
      device_buffer data(in), out(in.size());
      comm.all_to_all(tutti::device_view<const float>(data.view()), out.view(), stream).wait();
      log("all_to_all", in, out);
    }
    {  // reduce_scatter: rank i gets block i of the sum
      auto in = create_data(rank, world);
      device_buffer data(in), out(1);
      comm.reduce_scatter(tutti::device_view<const float>(data.view()), out.view(), tutti::op::sum{});
      log("reduce_scatter(SUM)", in, out);
    }
    comm.barrier(stream).wait();
    log_in_order("barrier: passed");
    {  // a reduce inside the group of even ranks; odd ranks are not members
      std::vector<int> evens;
      for (int r = 0; r < world; r += 2) evens.push_back(r);
      auto group = comm.new_group(evens);
      auto in = create_data(rank);
      device_buffer data(in);
      if (group) group->reduce(data.view(), /*root=*/0, tutti::op::sum{});
      log(group ? "reduce in new_group(even ranks)" : "reduce in new_group(even ranks) [not a member]", in, data);
    }
    if (world >= 2) {  // point to point: rank 0 sends to rank 1, on the stream
      auto in = create_data(rank);
      device_buffer data(in);
      if (rank == 0) comm.send(data.view(), 1, /*tag=*/0, stream).wait();
      if (rank == 1) comm.recv(data.view(), 0, /*tag=*/0, stream).wait();
      log(rank == 0 ? "send(dst=1)" : rank == 1 ? "recv(src=0)" : "send/recv [not involved]", in, data);
    }
  }
};

template <class Transport>
int run(const char* what) {
  auto comm = tutti::communicator<Transport>::from_env();
  cudaStream_t stream;
  cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  if (comm.rank() == 0)
    std::printf("tutti demo: %d ranks over %s, each on device LOCAL_RANK %% device count\n", comm.size(), what);
  demo<decltype(comm)>{comm, stream}.run();
  cudaStreamDestroy(stream);
  return 0;
}

}  // namespace

int main(int argc, char** argv) try {
  const std::string transport = argc > 1 ? argv[1] : "cuda_ipc";
  if (transport == "nccl") return run<tutti::nccl>("tutti::nccl");
  if (transport == "cuda_ipc") return run<tutti::cuda_ipc>("tutti::cuda_ipc");
  std::fprintf(stderr, "usage: %s [cuda_ipc|nccl]\n", argv[0]);
  return 2;
} catch (const std::exception& e) {
  std::fprintf(stderr, "demo_cuda: %s\n", e.what());
  return 1;
}
