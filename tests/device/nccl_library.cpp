// tutti::nccl's run-time loading of NCCL (tutti/transport/device/nccl_library.hpp), on a machine
// with or without a GPU: no NCCL header is needed to build, the declarations match the nccl.h of
// the build machine where there is one, a missing library is a config_error that names what was
// tried and how to name another, and the library of the build machine loads (NCCL >= 2.18).
//
//   tutti_nccl_library_check missing   TUTTI_NCCL_LIBRARY names a file that is not there
//   tutti_nccl_library_check load      TUTTI_NCCL_LIBRARY names the NCCL of the build machine
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <tutti/transport/device/nccl_library.hpp>

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
  std::fprintf(stderr, "usage: %s missing|load\n", argv[0]);
  return 2;
}
