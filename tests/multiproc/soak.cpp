// Soak: N random, verified collectives (random_collectives.hpp: every kind, 4 element types,
// sum/max/min, a few bytes to 1 MiB, random roots) on one communicator, sampling this rank's RSS
// (/proc/self/statm) and open descriptors (/proc/self/fd) 50 times. After a warm-up (the first
// tenth of the run) neither may grow: RSS by more than 8 MiB, descriptors not at all. Each rank
// prints one line and exits 1 if it grew, 3 on a wrong result. Under AddressSanitizer the RSS
// bound is not checked: ASan's quarantine keeps up to 256 MiB of freed memory mapped by design,
// and LeakSanitizer checks leaks there instead; descriptors are still checked.
//
//   tuttirun --nproc-per-node=4 tutti_soak [--ops N (default 100000)] [--seed S (default 1)]
// (tutti_soak_tcp: the same over tcp).
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "random_collectives.hpp"

#ifdef TUTTI_FAULT_TCP
#include <tutti/transport/tcp.hpp>
using transport = tutti::tcp;
#else
using transport = tutti::shm;
#endif

namespace {

constexpr long long kMaxRssGrowth = 8ll << 20;

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kCheckRss = false;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kCheckRss = false;
#else
constexpr bool kCheckRss = true;
#endif
#else
constexpr bool kCheckRss = true;
#endif

long long rss_bytes() {
  std::ifstream f("/proc/self/statm");
  long long size = 0, resident = 0;
  f >> size >> resident;
  return resident * ::sysconf(_SC_PAGESIZE);
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
  for (int a = 1; a + 1 < argc; a += 2) {
    const std::string flag = argv[a];
    if (flag == "--ops") ops = std::strtoull(argv[a + 1], nullptr, 0);
    else if (flag == "--seed") seed = std::strtoull(argv[a + 1], nullptr, 0);
    else {
      std::fprintf(stderr, "usage: %s [--ops N] [--seed S]\n", argv[0]);
      return 2;
    }
  }
  auto comm = tutti::communicator<transport>::from_env();
  const std::uint64_t every = std::max<std::uint64_t>(1, ops / 50), warm = std::max<std::uint64_t>(1, ops / 10);
  const long long rss0 = rss_bytes(), fds0 = open_fds();
  long long rss_warm = 0, fds_warm = 0, rss_max = 0, fds_max = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (std::uint64_t i = 0; i < ops; ++i) {
    const auto s = tutti::fault_test::make_step(seed, i, comm.size());
    if (auto o = tutti::fault_test::run_step(comm, s, i); !o.wrong.empty()) {
      std::printf("WRONG RESULT rank %d collective %llu (%s): %s\n", comm.rank(), static_cast<unsigned long long>(i),
                  s.describe().c_str(), o.wrong.c_str());
      return 3;
    }
    if (i + 1 == warm) rss_warm = rss_max = rss_bytes(), fds_warm = fds_max = open_fds();
    else if (i + 1 > warm && ((i + 1) % every == 0 || i + 1 == ops))
      rss_max = std::max(rss_max, rss_bytes()), fds_max = std::max(fds_max, open_fds());
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const long long rss_end = rss_bytes(), fds_end = open_fds();
  const bool rss_ok = !kCheckRss || rss_max - rss_warm <= kMaxRssGrowth;
  const bool ok = rss_ok && fds_max == fds_warm;
  std::printf("soak rank %d: %llu collectives in %.1f s; RSS start %.1f MiB, after warm-up %.1f, max %.1f, end %.1f "
              "(growth %.2f MiB, bound %.0f%s); fds start %lld, after warm-up %lld, max %lld, end %lld: %s\n",
              comm.rank(), static_cast<unsigned long long>(ops), s, mib(rss0), mib(rss_warm), mib(rss_max),
              mib(rss_end), mib(rss_max - rss_warm), mib(kMaxRssGrowth),
              kCheckRss ? "" : ", not checked under ASan", fds0, fds_warm, fds_max, fds_end,
              ok ? "PASS" : "FAIL (grew)");
  return ok ? 0 : 1;
}
