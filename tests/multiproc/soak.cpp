// Soak: N random, verified collectives (random_collectives.hpp: every kind, 4 element types,
// sum/max/min, a few bytes to 1 MiB, random roots) on one communicator, sampling this rank's
// memory and open descriptors (/proc/self/fd) 50 times. Memory in two figures: the heap in use
// (glibc's mallinfo2: allocated chunks, mmapped ones included) and anonymous RSS (statm's
// resident less shared: what the process dirtied itself, not the shm segment or the binary's
// pages, which a busy host may evict and read back).
//
// Warm-up: every kind once at the largest size, from every root and with every all_reduce
// algorithm (scratch buffers reach their high-water marks), then the first fifth of the run
// (allocator caches fill). From there to the end nothing may grow: the heap in use by more than
// 512 KiB (a leak of 6 bytes a collective over 100,000), RSS by more than 3 MiB, descriptors
// not at all. RSS gets the wider bound because glibc keeps free memory at the top of its heap,
// up to twice its mmap threshold (which freeing this program's 1 MiB buffers raises to 1 MiB),
// before returning any: with a flat heap, RSS moves by up to 2 MiB.
//
// Each rank prints one line and exits 1 if anything grew, 3 on a wrong result; `--trace` prints
// every sample. Under AddressSanitizer memory is not checked: ASan's quarantine keeps up to
// 256 MiB of freed memory mapped by design, and LeakSanitizer checks leaks there instead;
// descriptors are still checked.
//
//   tuttirun --nproc-per-node=4 tutti_soak [--ops N (default 100000)] [--seed S (default 1)] [--trace]
// (tutti_soak_tcp: the same over tcp).
#include <unistd.h>
#if defined(__GLIBC__) && (__GLIBC__ > 2 || __GLIBC_MINOR__ >= 33)  // mallinfo2
#define TUTTI_SOAK_MALLINFO 1
#include <malloc.h>
#endif

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "../support/sanitizers.hpp"
#include "random_collectives.hpp"

#ifdef TUTTI_FAULT_TCP
#include <tutti/transport/tcp.hpp>
using transport = tutti::tcp;
#else
using transport = tutti::shm;
#endif

namespace {

constexpr long long kMaxRssGrowth = 3ll << 20;
constexpr long long kMaxHeapGrowth = 512ll << 10;

constexpr bool kCheckMemory = !tutti::test::address_sanitizer;

struct memory {
  long long rss = 0;   // anonymous resident bytes
  long long heap = 0;  // heap in use (-1: unknown, not glibc)
  long long arena = 0, top = 0;  // the main heap's size, and the free memory at its top
};

memory sample() {
  memory m;
  std::ifstream f("/proc/self/statm");
  long long size = 0, resident = 0, shared = 0;
  f >> size >> resident >> shared;
  m.rss = (resident - shared) * ::sysconf(_SC_PAGESIZE);
#if defined(TUTTI_SOAK_MALLINFO)
  const struct mallinfo2 h = ::mallinfo2();
  m.heap = static_cast<long long>(h.uordblks + h.hblkhd);
  m.arena = static_cast<long long>(h.arena);
  m.top = static_cast<long long>(h.keepcost);
#else
  m.heap = -1;
#endif
  return m;
}

long long open_fds() {
  long long n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) ++n;
  return n - 1;  // the iterator's own descriptor
}

double mib(long long b) { return double(b) / (1 << 20); }

}  // namespace

int main(int argc, char** argv) {
  std::uint64_t ops = 100000, seed = 1;
  bool trace = false;
  for (int a = 1; a < argc; ++a) {
    const std::string flag = argv[a];
    if (flag == "--trace") trace = true;
    else if (flag == "--ops" && a + 1 < argc) ops = std::strtoull(argv[++a], nullptr, 0);
    else if (flag == "--seed" && a + 1 < argc) seed = std::strtoull(argv[++a], nullptr, 0);
    else {
      std::fprintf(stderr, "usage: %s [--ops N] [--seed S] [--trace]\n", argv[0]);
      return 2;
    }
  }
  auto comm = tutti::communicator<transport>::from_env();
  const std::uint64_t every = std::max<std::uint64_t>(1, ops / 50), warm = std::max<std::uint64_t>(1, ops / 5);
  const memory m0 = sample();
  const long long fds0 = open_fds();
  // The scratch buffers reach their high-water marks here, not at whichever collective of the
  // run happens to be the first that large (in a short run, after the warm-up).
  for (int k = 0; k < 9; ++k)
    for (int root = 0; root < comm.size(); ++root)
      for (int algorithm = 0; algorithm < 5; ++algorithm) {
        const auto kd = static_cast<tutti::fault_test::kind>(k);
        const bool rooted = kd == tutti::fault_test::kind::broadcast || kd == tutti::fault_test::kind::reduce ||
                            kd == tutti::fault_test::kind::gather || kd == tutti::fault_test::kind::scatter;
        if ((root > 0 && !rooted) || (algorithm > 0 && kd != tutti::fault_test::kind::all_reduce)) continue;
        const tutti::fault_test::step s{kd, 2, 0, algorithm, root, std::size_t{1} << 20};
        if (auto o = tutti::fault_test::run_step(comm, s, 0); !o.wrong.empty()) {
          std::printf("WRONG RESULT rank %d in the warm-up (%s): %s\n", comm.rank(), s.describe().c_str(), o.wrong.c_str());
          return 3;
        }
      }
  memory m_warm, m_max;
  long long fds_warm = 0, fds_max = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (std::uint64_t i = 0; i < ops; ++i) {
    const auto s = tutti::fault_test::make_step(seed, i, comm.size());
    if (auto o = tutti::fault_test::run_step(comm, s, i); !o.wrong.empty()) {
      std::printf("WRONG RESULT rank %d collective %llu (%s): %s\n", comm.rank(), static_cast<unsigned long long>(i),
                  s.describe().c_str(), o.wrong.c_str());
      return 3;
    }
    const std::uint64_t n = i + 1;
    if (n != warm && n < ops && n % every != 0) continue;
    const memory m = sample();
    const long long fds = open_fds();
    if (trace)
      std::printf("soak rank %d: after %llu: RSS %.3f MiB, heap in use %.3f MiB (heap %.3f MiB, free at its top %.3f), "
                  "fds %lld\n", comm.rank(), static_cast<unsigned long long>(n), mib(m.rss), mib(m.heap), mib(m.arena),
                  mib(m.top), fds);
    if (n == warm) m_warm = m_max = m, fds_warm = fds_max = fds;
    else if (n > warm)
      m_max.rss = std::max(m_max.rss, m.rss), m_max.heap = std::max(m_max.heap, m.heap), fds_max = std::max(fds_max, fds);
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const memory m_end = sample();
  const long long fds_end = open_fds();
  const bool rss_ok = !kCheckMemory || m_max.rss - m_warm.rss <= kMaxRssGrowth;
  const bool heap_ok = !kCheckMemory || m_warm.heap < 0 || m_max.heap - m_warm.heap <= kMaxHeapGrowth;
  const bool ok = rss_ok && heap_ok && fds_max == fds_warm;
  const char* unchecked = kCheckMemory ? "" : ", not checked under ASan";
  std::printf("soak rank %d: %llu collectives in %.1f s; RSS start %.1f MiB, after warm-up %.1f, max %.1f, end %.1f "
              "(growth %.2f MiB, bound %.0f%s); heap in use start %.2f MiB, after warm-up %.2f, max %.2f, end %.2f "
              "(growth %.3f MiB, bound %.1f%s); fds start %lld, after warm-up %lld, max %lld, end %lld: %s\n",
              comm.rank(), static_cast<unsigned long long>(ops), s, mib(m0.rss), mib(m_warm.rss), mib(m_max.rss),
              mib(m_end.rss), mib(m_max.rss - m_warm.rss), mib(kMaxRssGrowth), unchecked, mib(m0.heap),
              mib(m_warm.heap), mib(m_max.heap), mib(m_end.heap), mib(m_max.heap - m_warm.heap), mib(kMaxHeapGrowth),
              m_warm.heap < 0 ? ", unknown here" : unchecked, fds0, fds_warm, fds_max, fds_end,
              ok ? "PASS" : "FAIL (grew)");
  return ok ? 0 : 1;
}
