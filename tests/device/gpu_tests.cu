// The device transports on a GPU (ctest label `gpu`; tools/gpu-check.sh runs them on the GPU
// machine), and what they say on a machine without one. One program, one mode per run:
//
//   probe                   the device, or exit 77 without one
//   no-device               both transports' from_env() raise config_error "no CUDA device" (exit 77
//                           where there is a device: that is not this check's machine)
//   ipc-threads N           every collective x dtype x op against a host reference, cuda_ipc over N
//                           threads (in-kernel barriers), with and without a stream
//   ipc-process             the same as processes under tuttirun (events through the host)
//   nccl-threads            the same over NCCL, one rank (NCCL < 2.30 allows one rank per GPU)
//   nccl-process            under tuttirun: every collective where NCCL allows the ranks (one GPU
//                           each); on one GPU with NCCL < 2.30, tutti's config_error saying why
//   mismatch-threads N      rank 1 calls broadcast, the others all_reduce: mismatch_error everywhere
//   late-kernel-threads     rank 1's stream is held by a long kernel: rank 0's request fails at its
//                           deadline with timeout_error naming rank 1 (the in-kernel barrier)
//   kill-process            under tuttirun: rank 1 exits mid-way; rank 0 raises within the deadline
//
// Every GPU mode exits 77 (ctest: skipped) with "no CUDA device found" where there is none.
// Each prints "PASS"/"FAIL" lines and a summary; exit 0 only if every check passed.
#include <cuda_runtime.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <tutti/transport/cuda_ipc.hpp>
#include <tutti/transport/nccl.hpp>
#include <type_traits>
#include <vector>

#include "gpu_checks.hpp"

namespace tutti_gpu_tests {
int failures = 0, passes = 0;
void check_everything(tutti::communicator<tutti::cuda_ipc>& comm);
void check_everything(tutti::communicator<tutti::nccl>& comm);
}  // namespace tutti_gpu_tests

namespace {

using namespace tutti_gpu_tests;

int summary(const char* mode) {
  std::printf("%s: %d passed, %d failed\n", mode, passes, failures);
  return failures ? 1 : 0;
}

/// Keeps a stream busy for `ns` nanoseconds.
__global__ void hold(unsigned long long ns) {
  unsigned long long t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do {
    __nanosleep(100000);
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  } while (t - t0 < ns);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  const int n = argc > 2 ? std::atoi(argv[2]) : 2;
  if (mode == "probe") {  // exit 77 without a device (the tests under tuttirun ask first)
    if (!have_device()) return std::printf("no CUDA device found\n"), 77;
    int d = 0, count = 0, driver = 0, runtime = 0;
    cudaGetDeviceCount(&count);
    cudaDriverGetVersion(&driver);
    cudaRuntimeGetVersion(&runtime);
    cudaDeviceProp prop{};
    cudaGetDeviceProperties(&prop, d);
    std::printf("%d CUDA device(s); device 0: %s, %d multiprocessors, %.0f GiB; driver %d, runtime %d\n", count, prop.name,
                prop.multiProcessorCount, static_cast<double>(prop.totalGlobalMem) / (1 << 30), driver, runtime);
    return 0;
  }
  if (mode == "no-device") {
    if (have_device()) {
      std::printf("a CUDA device is present: this check is for machines without one (skipped)\n");
      return 77;
    }
    ::setenv("RANK", "0", 0);
    ::setenv("WORLD_SIZE", "1", 0);
    for (int which = 0; which < 2; ++which) {
      try {
        if (which == 0) tutti::communicator<tutti::cuda_ipc>::from_env();
        else tutti::communicator<tutti::nccl>::from_env();
        check(false, "from_env() without a device returned a communicator");
      } catch (const tutti::config_error& e) {
        const std::string w = e.what();
        std::printf("%s: %s\n", which == 0 ? "cuda_ipc" : "nccl", e.what());
        check(w.find("no CUDA device found") != std::string::npos, "the config_error says there is no CUDA device");
      }
    }
    return summary(mode.c_str());
  }
  if (!have_device()) {
    std::printf("no CUDA device found: skipped\n");
    return 77;
  }
  try {
    if (mode == "ipc-threads") {
      tutti::cuda_ipc::run(n, [](auto& comm) {
        if (comm.rank() == 0)
          std::printf("cuda_ipc: %d threads, device %d, %s\n", comm.size(), comm.transport().device(),
                      comm.transport().in_kernel_barriers() ? "in-kernel barriers" : "events");
        check_everything(comm);
      });
    } else if (mode == "ipc-process") {
      auto comm = tutti::communicator<tutti::cuda_ipc>::from_env();
      if (comm.rank() == 0)
        std::printf("cuda_ipc: %d processes, %s\n", comm.size(), comm.transport().in_kernel_barriers() ? "in-kernel barriers" : "events");
      check_everything(comm);
    } else if (mode == "nccl-threads") {
      tutti::inproc::run_wrapped<tutti::algo::automatic>(
          1, [](tutti::inproc t) { return tutti::nccl::over(std::move(t)); },
          [](auto& comm) {
            std::printf("nccl: NCCL %s from %s\n", comm.transport().library_version().c_str(),
                        comm.transport().library_path().c_str());
            check_everything(comm);
          });
    } else if (mode == "nccl-process") {
      try {
        auto comm = tutti::communicator<tutti::nccl>::from_env();
        check_everything(comm);
      } catch (const tutti::config_error& e) {
        const std::string w = e.what();
        std::printf("config_error: %s\n", e.what());
        check(w.find("same GPU") != std::string::npos, "only NCCL's one-rank-per-GPU rule may stop it, and it says so");
      }
    } else if (mode == "mismatch-threads") {
      tutti::cuda_ipc::run(n, [](auto& comm) {
        dbuf<float> b(64);
        try {
          if (comm.rank() == 1) comm.broadcast(b.view(), 0);
          else comm.all_reduce(b.view());
          check(false, "rank " + std::to_string(comm.rank()) + ": the mismatch went unnoticed");
        } catch (const tutti::mismatch_error& e) {
          const std::string w = e.what();
          check(w.find("broadcast") != std::string::npos && w.find("all_reduce") != std::string::npos,
                "rank " + std::to_string(comm.rank()) + ": mismatch_error names both calls: " + w);
        } catch (const tutti::peer_lost& e) {
          check(std::string(e.what()).find("mismatch") != std::string::npos || std::string(e.what()).find("broadcast") != std::string::npos,
                "rank " + std::to_string(comm.rank()) + ": released by a peer's mismatch: " + e.what());
        }
      });
    } else if (mode == "late-kernel-threads") {
      ::setenv("TUTTI_TIMEOUT", "3", 1);
      tutti::cuda_ipc::run(2, [](auto& comm) {
        cudaStream_t s;
        cudaStreamCreate(&s);
        dbuf<float> b(1024);
        if (comm.rank() == 1) hold<<<1, 1, 0, s>>>(8'000'000'000ull);  // 8 s: past the 3 s deadline
        const auto t0 = std::chrono::steady_clock::now();
        auto req = comm.all_reduce(b.view(), tutti::op::sum{}, s);
        try {
          req.wait();
          check(comm.rank() == 1, "rank 0: a barrier whose peer never came passed");
        } catch (const tutti::timeout_error& e) {
          const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
          std::printf("rank %d after %.1f s: %s\n", comm.rank(), secs, e.what());
          check(std::string(e.what()).find(comm.rank() == 0 ? "rank 1" : "rank 0") != std::string::npos,
                "the timeout names the peer it waited for");
          check(secs < 8, "it came by the deadline, not after the other kernel");
        }
        cudaStreamSynchronize(s);
      });
    } else if (mode == "kill-process") {
      ::setenv("TUTTI_TIMEOUT", "10", 1);
      auto comm = tutti::communicator<tutti::cuda_ipc>::from_env();
      dbuf<float> b(1 << 16);
      comm.all_reduce(b.view());
      if (comm.rank() == 1) _exit(9);
      const auto t0 = std::chrono::steady_clock::now();
      try {
        comm.all_reduce(b.view());
        check(false, "rank 0: an all_reduce with a dead peer completed");
      } catch (const tutti::error& e) {
        const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        std::printf("rank 0 after %.1f s: %s\n", secs, e.what());
        check(std::string(e.what()).find("rank 1") != std::string::npos, "the error names rank 1");
        check(secs < 15, "within the deadline");
      }
    } else {
      std::fprintf(stderr, "usage: %s no-device | ipc-threads N | ipc-process | nccl-threads | nccl-process | "
                           "mismatch-threads N | late-kernel-threads | kill-process\n", argv[0]);
      return 2;
    }
  } catch (const std::exception& e) {
    check(false, std::string("uncaught: ") + e.what());
  }
  return summary(mode.c_str());
}
