// tutti::nccl's run-time loading of NCCL (tutti/transport/device/nccl_library.hpp), on a machine
// with or without a GPU: no NCCL header is needed to build, the declarations match the nccl.h of
// the build machine where there is one, a missing library is a config_error that names what was
// tried and how to name another, and the library of the build machine loads (NCCL >= 2.18).
//
//   tutti_nccl_library_check missing   TUTTI_NCCL_LIBRARY names a file that is not there
//   tutti_nccl_library_check load      TUTTI_NCCL_LIBRARY names the NCCL of the build machine
//   tutti_nccl_library_check rules     how tutti drives NCCL, against a fake library: two ranks on
//                                      one GPU by version and NCCL_MULTI_RANK_GPU_ENABLE, the
//                                      teardown (finalize, destroy, abort), errors inside a group
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <tutti/transport/device/nccl_library.hpp>
#include <vector>

#if __has_include(<nccl.h>)
#include <nccl.h>
namespace abi = tutti::detail::nccl_abi;
// tutti's declarations are NCCL's (checked where nccl.h is at hand).
static_assert(abi::success == ncclSuccess && abi::unhandled_cuda_error == ncclUnhandledCudaError &&
              abi::system_error == ncclSystemError && abi::internal_error == ncclInternalError &&
              abi::invalid_argument == ncclInvalidArgument && abi::invalid_usage == ncclInvalidUsage &&
              abi::remote_error == ncclRemoteError && abi::in_progress == ncclInProgress);
static_assert(abi::int8 == ncclInt8 && abi::uint8 == ncclUint8 && abi::int32 == ncclInt32 && abi::uint32 == ncclUint32 &&
              abi::int64 == ncclInt64 && abi::uint64 == ncclUint64 && abi::float16 == ncclFloat16 &&
              abi::float32 == ncclFloat32 && abi::float64 == ncclFloat64 && abi::bfloat16 == ncclBfloat16);
static_assert(abi::sum == ncclSum && abi::prod == ncclProd && abi::max == ncclMax && abi::min == ncclMin &&
              abi::avg == ncclAvg && abi::split_nocolor == NCCL_SPLIT_NOCOLOR);
static_assert(sizeof(abi::unique_id) == sizeof(ncclUniqueId) && abi::undef_int == NCCL_CONFIG_UNDEF_INT);
static_assert(offsetof(abi::config, blocking) == offsetof(ncclConfig_t, blocking) &&
              offsetof(abi::config, cga_cluster_size) == offsetof(ncclConfig_t, cgaClusterSize) &&
              offsetof(abi::config, min_ctas) == offsetof(ncclConfig_t, minCTAs) &&
              offsetof(abi::config, max_ctas) == offsetof(ncclConfig_t, maxCTAs) &&
              offsetof(abi::config, net_name) == offsetof(ncclConfig_t, netName) &&
              offsetof(abi::config, split_share) == offsetof(ncclConfig_t, splitShare));
static_assert(abi::version_code(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH) == NCCL_VERSION_CODE);
constexpr bool checked_against_header = true;
#else
constexpr bool checked_against_header = false;
#endif

namespace {

namespace abi = tutti::detail::nccl_abi;
namespace dv = tutti::detail::device;

int failures = 0;
void check(bool ok, const std::string& what) {
  std::printf("%s %s\n", ok ? "PASS" : "FAIL", what.c_str());
  if (!ok) ++failures;
}

/// A fake NCCL: what it was called with, in order, and what it answers.
std::vector<std::string> calls;
abi::result_t finalize_result = abi::success, send_result = abi::success;
int async_in_progress = 0;  ///< how many polls of ncclCommGetAsyncError answer in_progress (-1: forever)
dv::nccl_library fake() {
  dv::nccl_library lib;
  lib.comm_finalize = [](abi::comm_t) { calls.push_back("finalize"); return finalize_result; };
  lib.comm_destroy = [](abi::comm_t) { calls.push_back("destroy"); return abi::success; };
  lib.comm_abort = [](abi::comm_t) { calls.push_back("abort"); return abi::success; };
  lib.comm_get_async_error = [](abi::comm_t, abi::result_t* st) {
    *st = async_in_progress != 0 ? abi::in_progress : abi::success;
    if (async_in_progress > 0) --async_in_progress;
    return abi::success;
  };
  lib.group_start = [] { calls.push_back("group_start"); return abi::success; };
  lib.group_end = [] { calls.push_back("group_end"); return abi::in_progress; };
  lib.send = [](const void*, std::size_t, int, int, abi::comm_t, cudaStream_t) { calls.push_back("send"); return send_result; };
  return lib;
}
std::string sequence() {
  std::string s;
  for (const auto& c : calls) s += (s.empty() ? "" : " ") + c;
  calls.clear();
  return s;
}

int rules() {
  const int v2289 = abi::version_code(2, 28, 9), v2307 = abi::version_code(2, 30, 7);
  // Two ranks on one GPU: before 2.30 never; from 2.30 only with NCCL_MULTI_RANK_GPU_ENABLE non-zero.
  check(!dv::nccl_allows_shared_gpu(v2289, "1"), "NCCL 2.28 refuses two ranks on one GPU, whatever the variable");
  check(!dv::nccl_allows_shared_gpu(v2307, nullptr), "NCCL 2.30 refuses it without NCCL_MULTI_RANK_GPU_ENABLE");
  check(!dv::nccl_allows_shared_gpu(v2307, "0"), "NCCL 2.30 refuses it with NCCL_MULTI_RANK_GPU_ENABLE=0");
  check(!dv::nccl_allows_shared_gpu(v2307, ""), "an empty NCCL_MULTI_RANK_GPU_ENABLE is unset");
  check(dv::nccl_allows_shared_gpu(v2307, "1"), "NCCL 2.30 allows it with NCCL_MULTI_RANK_GPU_ENABLE=1");
  check(dv::nccl_allows_shared_gpu(v2307, "0x1"), "NCCL reads the variable as an integer (strtoll, base 0)");
  const std::string t30 = dv::shared_gpu_refusal(v2307, "2.30.7", nullptr, 0, 1, 0);
  std::printf("  %s\n", t30.c_str());
  check(t30.find("rank 0 and rank 1") != std::string::npos && t30.find("NCCL_MULTI_RANK_GPU_ENABLE=1") != std::string::npos &&
            t30.find("unset") != std::string::npos,
        "NCCL 2.30 without the variable: a config_error naming both ranks and the variable, not NCCL's abort");
  const std::string t28 = dv::shared_gpu_refusal(v2289, "2.28.9", "1", 1, 0, 0);
  check(t28.find("Duplicate GPU detected") != std::string::npos && t28.find("NCCL 2.28.9") != std::string::npos,
        "NCCL 2.28: says NCCL refuses it, and which NCCL allows it");
  check(dv::shared_gpu_refusal(v2307, "2.30.7", "1", 0, 1, 0).empty(), "NCCL 2.30 with the variable: no refusal");

  const auto lib = fake();
  auto* comm = reinterpret_cast<abi::comm_t>(&calls);
  // Teardown: a finalize that is done at once (ncclSuccess) is a clean end.
  finalize_result = abi::success;
  async_in_progress = 0;
  check(dv::end_comm(lib, comm, false, std::chrono::milliseconds(1000)) == dv::teardown_outcome::destroyed &&
            sequence() == "finalize destroy",
        "ncclCommFinalize returning ncclSuccess at once: destroyed, not aborted");
  finalize_result = abi::in_progress;
  async_in_progress = 5;
  check(dv::end_comm(lib, comm, false, std::chrono::milliseconds(1000)) == dv::teardown_outcome::destroyed &&
            sequence() == "finalize destroy",
        "ncclCommFinalize in progress, then done: destroyed");
  async_in_progress = -1;
  const auto t0 = std::chrono::steady_clock::now();
  check(dv::end_comm(lib, comm, false, std::chrono::milliseconds(100)) == dv::teardown_outcome::aborted &&
            sequence() == "finalize abort" && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5),
        "a finalize that never ends (a peer gone): aborted after the bound");
  async_in_progress = 0;
  finalize_result = abi::remote_error;
  check(dv::end_comm(lib, comm, false, std::chrono::milliseconds(100)) == dv::teardown_outcome::aborted &&
            sequence() == "finalize abort",
        "a finalize that fails: aborted");
  check(dv::end_comm(lib, comm, true, std::chrono::milliseconds(100)) == dv::teardown_outcome::aborted && sequence() == "abort",
        "a broken communicator: aborted, not finalised");

  // A call that fails inside a group: the group ends first; nothing aborted inside it.
  send_result = abi::invalid_argument;
  const auto g = dv::run_group(lib, [&](auto&& ok) {
    ok(lib.send(nullptr, 0, 0, 1, comm, nullptr), "ncclSend");
    ok(lib.send(nullptr, 0, 0, 2, comm, nullptr), "ncclSend (second)");
  });
  check(g.error == abi::invalid_argument && g.failed == "ncclSend" && g.end == abi::in_progress &&
            sequence() == "group_start send send group_end",
        "an error inside a group: kept (the first), the group ended, no abort before ncclGroupEnd");
  send_result = abi::in_progress;
  const auto fine = dv::run_group(lib, [&](auto&& ok) { ok(lib.send(nullptr, 0, 0, 1, comm, nullptr), "ncclSend"); });
  check(fine.error == abi::success && sequence() == "group_start send group_end", "in progress inside a group is no error");
  try {
    dv::run_group(lib, [&](auto&&) { throw std::runtime_error("usage"); });
    check(false, "an exception inside a group goes on");
  } catch (const std::runtime_error&) {
    check(sequence() == "group_start group_end", "an exception inside a group ends the group, then goes on");
  }
  std::printf("rules: %d failed\n", failures);
  return failures ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  const char* named = std::getenv("TUTTI_NCCL_LIBRARY");
  std::printf("declarations checked against nccl.h: %s\n", checked_against_header ? "yes" : "no (no nccl.h here)");
  if (mode == "missing") {
    try {
      tutti::detail::device::nccl_library::get();
      std::printf("FAIL: a library that is not there loaded\n");
      return 1;
    } catch (const tutti::config_error& e) {
      const std::string what = e.what();
      std::printf("config_error: %s\n", e.what());
      // A second call says the same (the outcome is kept).
      try {
        tutti::detail::device::nccl_library::get();
      } catch (const tutti::config_error& again) {
        if (what != again.what()) return std::printf("FAIL: the second error differs\n"), 1;
      }
      const bool ok = named && what.find(named) != std::string::npos && what.find("TUTTI_NCCL_LIBRARY") != std::string::npos;
      std::printf("%s\n", ok ? "PASS: names the library it tried and how to name another" : "FAIL: the message");
      return ok ? 0 : 1;
    }
  }
  if (mode == "load") {
    try {
      const auto& lib = tutti::detail::device::nccl_library::get();
      std::printf("loaded %s: NCCL %s (%d)\n", lib.path.c_str(), lib.version_text().c_str(), lib.version);
      std::printf("ncclAlltoAll/ncclGather/ncclScatter: %s\n", lib.all_to_all && lib.gather && lib.scatter ? "present" : "absent (grouped sends instead)");
#if __has_include(<nccl.h>)
      if (lib.version != NCCL_VERSION_CODE)
        std::printf("note: the library (%d) is not the nccl.h's version (%d)\n", lib.version, NCCL_VERSION_CODE);
#endif
      // Without a GPU NCCL still makes an id (it needs a network interface, not a device).
      tutti::detail::nccl_abi::unique_id id{};
      const int r = lib.get_unique_id(&id);
      std::printf("ncclGetUniqueId: %s\n", r == 0 ? "ok" : lib.text(r).c_str());
      const std::string t = lib.text(tutti::detail::nccl_abi::in_progress);
      std::printf("text of in_progress: %s\n", t.c_str());
      std::printf("PASS\n");
      return lib.version >= tutti::detail::nccl_abi::version_code(2, 18, 0) ? 0 : 1;
    } catch (const std::exception& e) {
      std::printf("FAIL: %s\n", e.what());
      return 1;
    }
  }
  if (mode == "rules") return rules();
  std::fprintf(stderr, "usage: %s missing|load|rules\n", argv[0]);
  return 2;
}
