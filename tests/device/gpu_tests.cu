// The device transports on a GPU (ctest label `gpu`; tools/gpu-check.sh runs them on the GPU
// machine), and what they say on a machine without one. One program, one mode per run:
//
//   probe                   the device, or exit 77 without one
//   no-device               both transports' from_env() raise config_error "no CUDA device" (exit 77
//                           where there is a device: that is not this check's machine)
//   ipc-threads N           every collective x dtype x op against a host reference, cuda_ipc over N
//                           threads (in-kernel barriers), with and without a stream
//   ipc-process             the same as processes under tuttirun (events through the host); the
//                           peers' allocations mapped stay as few as are alive (freed ones close)
//   ipc-mixed               under tuttirun, 2 processes of 2 threads each (4 ranks over shm): a
//                           peer of this process by pointer, the others by CUDA IPC
//   lazy-threads N          with CUDA_MODULE_LOADING=LAZY, the first call of a new element type
//                           and op (reduce: the root's kernel and the others' differ) completes
//   nccl-threads            the same over NCCL, one rank (NCCL < 2.30 allows one rank per GPU)
//   nccl-process            under tuttirun: every collective where NCCL allows the ranks (one GPU
//                           each); on one GPU with NCCL < 2.30, tutti's config_error saying why
//   mismatch-threads N      rank 1 calls broadcast, the others all_reduce: mismatch_error everywhere
//   late-kernel-threads     rank 1's stream is held by a long kernel: rank 0's request fails by the
//                           kernels' deadline (before the host's) with timeout_error naming rank 1;
//                           rank 1's at its host deadline; rank 1's kernel, once it runs, sees that
//                           rank 0 gave up and ends at once
//   fail-threads            rank 1's host fails while rank 0's kernel waits at a barrier for it:
//                           rank 0's request fails at once (rank 1's gave-up word), naming rank 1
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
#include <tutti/tutti.hpp>
#include <tutti/transport/nccl.hpp>
#include <type_traits>
#include <vector>

#include "gpu_checks.hpp"

namespace tutti_gpu_tests {
std::atomic<int> failures{0}, passes{0};
void check_everything(tutti::communicator<tutti::cuda_ipc>& comm);
void check_everything(tutti::communicator<tutti::nccl>& comm);
}  // namespace tutti_gpu_tests

namespace {

using namespace tutti_gpu_tests;

int summary(const char* mode) {
  std::printf("%s: %d passed, %d failed\n", mode, passes.load(), failures.load());
  return failures ? 1 : 0;
}

double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

/// Ends the process with a FAIL line if `secs` pass first (a hang would otherwise take the
/// whole step's time).
void watchdog(double secs, const char* what) {
  std::thread([secs, what] {
    std::this_thread::sleep_for(std::chrono::duration<double>(secs));
    std::printf("FAIL %s: still running after %.0f s (a deadlock?)\n", what, secs);
    std::fflush(stdout);
    std::_Exit(1);
  }).detach();
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
  if (mode == "lazy-threads") ::setenv("CUDA_MODULE_LOADING", "LAZY", 1);  // before CUDA starts
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
      // Every check freed its buffers: a few calls more name them to the peers, which close them.
      for (int i = 0; i < 8; ++i) comm.barrier();
      const std::size_t mapped = comm.transport().mapped_allocations();
      std::printf("rank %d: %zu peer allocations mapped after the checks\n", comm.rank(), mapped);
      check(mapped <= static_cast<std::size_t>(comm.size()),
            "rank " + std::to_string(comm.rank()) + ": the peers' freed buffers were unmapped (" + std::to_string(mapped) +
                " mappings left; only the peers' flags stay)");
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
      ::setenv("TUTTI_TIMEOUT", "3", 1);  // the kernels' deadline: 2.25 s (rules.hpp)
      tutti::cuda_ipc::run(2, [](auto& comm) {
        cudaStream_t s;
        cudaStreamCreate(&s);
        dbuf<float> b(1024);
        if (comm.rank() == 1) hold<<<1, 1, 0, s>>>(8'000'000'000ull);  // 8 s: past the 3 s deadline
        const auto t0 = std::chrono::steady_clock::now();
        auto req = comm.all_reduce(b.view(), tutti::op::sum{}, s);
        try {
          req.wait();
          check(false, "rank " + std::to_string(comm.rank()) + ": an all_reduce whose peer never came completed");
        } catch (const tutti::timeout_error& e) {
          const double secs = since(t0);
          const std::string w = e.what();
          std::printf("rank %d after %.1f s: %s\n", comm.rank(), secs, e.what());
          if (comm.rank() == 0) {  // its kernel waited for rank 1's, and reported it
            check(w.find("waited at a device barrier for rank 1") != std::string::npos,
                  "rank 0: the timeout names rank 1, the peer its barrier waited for: " + w);
            check(secs < 2.9, "rank 0: it came by the kernels' deadline (2.25 s), before the host's (3 s)");
          } else {  // its own kernel never started: its stream was held
            check(w.find("did not finish within 3 s") != std::string::npos,
                  "rank 1: the timeout says its work did not finish: " + w);
            check(secs < 7, "rank 1: it came by the host's deadline, not after the held kernel");
          }
        }
        cudaStreamSynchronize(s);
        if (comm.rank() == 1)  // its kernel ran at 8 s and left its first wait at once: rank 0 gave up
          check(since(t0) < 9.5, "rank 1: its kernel ended soon after the held one (" + std::to_string(since(t0)) +
                                     " s), not at its own deadline: it saw that rank 0 gave up");
      });
    } else if (mode == "fail-threads") {
      ::setenv("TUTTI_TIMEOUT", "20", 1);  // the kernels' deadline: 18 s
      tutti::cuda_ipc::run(2, [](auto& comm) {
        cudaStream_t s;
        cudaStreamCreate(&s);
        dbuf<float> b(1024);
        comm.all_reduce(b.view());  // the kernels are loaded, the group works
        if (comm.rank() == 1) hold<<<1, 1, 0, s>>>(4'000'000'000ull);  // rank 1's kernel waits behind this
        const auto t0 = std::chrono::steady_clock::now();
        auto req = comm.all_reduce(b.view(), tutti::op::sum{}, s);
        if (comm.rank() == 1) {
          std::this_thread::sleep_for(std::chrono::milliseconds(500));
          comm.transport().fail("rank 1 gives up (the test)");  // as the communicator does on a failure
        }
        try {
          req.wait();
          check(false, "rank " + std::to_string(comm.rank()) + ": an all_reduce with a failed peer completed");
        } catch (const tutti::error& e) {
          const double secs = since(t0);
          std::printf("rank %d after %.1f s: %s\n", comm.rank(), secs, e.what());
          if (comm.rank() == 0) {
            check(std::string(e.what()).find("because rank 1 gave up") != std::string::npos,
                  "rank 0: the error names rank 1, which gave up: " + std::string(e.what()));
            check(secs < 3, "rank 0: released when rank 1 failed, not at the kernels' deadline (18 s)");
          } else {
            check(secs < 6, "rank 1: its kernel left its barrier when it ran (its host had aborted)");
          }
        }
        cudaStreamSynchronize(s);
      });
    } else if (mode == "lazy-threads") {
      watchdog(60, "lazy-threads");
      tutti::cuda_ipc::run(n, [](auto& comm) {
        // Element types and ops no earlier call of this process used: every kernel's first launch.
        for (int root = 0; root < comm.size(); ++root) {
          dbuf<std::int64_t> b(4096);
          b.put(inputs<std::int64_t>(comm.rank(), 4096));
          comm.reduce(b.view(), root, tutti::op::min{});
          std::vector<std::int64_t> want(4096);
          for (std::size_t i = 0; i < want.size(); ++i) want[i] = reduced<std::int64_t>(comm.size(), i, tutti::op::min{});
          expect(comm.rank(), b.get(), comm.rank() == root ? want : inputs<std::int64_t>(comm.rank(), 4096),
                 "reduce int64 min, root " + std::to_string(root) + ", lazily loaded");
        }
        dbuf<std::uint32_t> c(1 << 20);  // the two-shot kernel's first launch
        c.put(inputs<std::uint32_t>(comm.rank(), 1 << 20));
        comm.all_reduce(c.view(), tutti::op::max{});
        std::vector<std::uint32_t> want(1 << 20);
        for (std::size_t i = 0; i < want.size(); ++i) want[i] = reduced<std::uint32_t>(comm.size(), i, tutti::op::max{});
        expect(comm.rank(), c.get(), want, "all_reduce uint32 max (two-shot), lazily loaded");
      });
    } else if (mode == "ipc-mixed") {
      // 2 processes (tuttirun) of 2 threads each: ranks 2p and 2p+1 in process p, one shm job.
      const tutti::job_env job = tutti::job_env::from_env();
      const auto cfg = tutti::config::from_env();
      const int world = 2 * job.world_size;
      std::vector<std::thread> threads;
      for (int t = 0; t < 2; ++t)
        threads.emplace_back([&, t] {
          const int rank = 2 * job.rank + t;
          try {
            auto host = tutti::shm::create(rank, world, job.job_id + ".mixed", tutti::shm_options::from_env(world), cfg.timeout);
            tutti::communicator<tutti::cuda_ipc> comm(tutti::cuda_ipc::over(std::move(host), -1, cfg.timeout));
            if (rank == 0)
              std::printf("cuda_ipc: %d ranks in %d processes, %s\n", comm.size(), job.world_size,
                          comm.transport().in_kernel_barriers() ? "in-kernel barriers" : "events");
            check_everything(comm);
          } catch (const std::exception& e) {
            check(false, "rank " + std::to_string(rank) + ": " + e.what());
          }
        });
      for (auto& t : threads) t.join();
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
      std::fprintf(stderr, "usage: %s no-device | ipc-threads N | ipc-process | ipc-mixed | lazy-threads N | nccl-threads | "
                           "nccl-process | mismatch-threads N | late-kernel-threads | fail-threads | kill-process\n", argv[0]);
      return 2;
    }
  } catch (const std::exception& e) {
    check(false, std::string("uncaught: ") + e.what());
  }
  return summary(mode.c_str());
}
