/// \file
/// NCCL, loaded at run time (`dlopen`): tutti declares the part of NCCL's C API it calls, so
/// neither nccl.h nor libnccl is needed to build, and a program starts without them and says
/// which library it looked for when it needs one. `TUTTI_NCCL_LIBRARY` names a library (a path,
/// or a name the loader finds: PyTorch's `site-packages/nvidia/nccl/lib/libnccl.so.2`); else
/// `libnccl.so.2`, then `libnccl.so`.
///
/// The declarations follow NCCL's stable ABI (nccl.h of 2.18 to 2.30): the result, data type and
/// op enumerations, the 128-byte unique id passed by value, and `ncclConfig_t` as NCCL 2.18 laid
/// it out (NCCL copies `size` bytes of a caller's config and keeps its defaults for the rest, so
/// an older layout works with every later library). tests/device/nccl_abi.cpp checks them
/// against the nccl.h of the build machine.
///
/// Host code: compiles without nvcc (it needs cuda_runtime_api.h for cudaStream_t only).
#pragma once

#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <chrono>
#include <climits>
#include <cstddef>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "tutti/bootstrap/env.hpp"
#include "tutti/core/error.hpp"
#include "tutti/detail/attributes.hpp"

namespace tutti::detail::nccl_abi {

using result_t = int;
inline constexpr result_t success = 0, unhandled_cuda_error = 1, system_error = 2, internal_error = 3,
                          invalid_argument = 4, invalid_usage = 5, remote_error = 6, in_progress = 7;
struct comm;
using comm_t = comm*;
struct unique_id {
  char internal[128];
};
using data_type = int;
inline constexpr data_type int8 = 0, uint8 = 1, int32 = 2, uint32 = 3, int64 = 4, uint64 = 5, float16 = 6, float32 = 7,
                           float64 = 8, bfloat16 = 9;
using red_op = int;
inline constexpr red_op sum = 0, prod = 1, max = 2, min = 3, avg = 4;
inline constexpr int split_nocolor = -1;
inline constexpr int undef_int = INT_MIN;

/// ncclConfig_t as of NCCL 2.18 (ncclConfig_v21700 with splitShare), and the padding NCCL 2.26
/// reads as trafficClass set to "undefined".
struct config {
  std::size_t size = sizeof(config);
  unsigned int magic = 0xcafebeefu;
  unsigned int version = 21800;  // NCCL_VERSION(2, 18, 0)
  int blocking = undef_int;
  int cga_cluster_size = undef_int;
  int min_ctas = undef_int;
  int max_ctas = undef_int;
  const char* net_name = nullptr;
  int split_share = undef_int;
  int traffic_class = undef_int;
};
static_assert(sizeof(config) == 48 && offsetof(config, net_name) == 32 && offsetof(config, split_share) == 40);

/// NCCL's version number for X.Y.Z (NCCL_VERSION).
constexpr int version_code(int x, int y, int z) { return x <= 2 && y <= 8 ? x * 1000 + y * 100 + z : x * 10000 + y * 100 + z; }

}  // namespace tutti::detail::nccl_abi

namespace tutti::detail::device {

/// The loaded library and the entry points tutti calls.
struct nccl_library {
  using result_t = nccl_abi::result_t;
  using comm_t = nccl_abi::comm_t;
  result_t (*get_version)(int*) = nullptr;
  result_t (*get_unique_id)(nccl_abi::unique_id*) = nullptr;
  result_t (*comm_init_rank_config)(comm_t*, int, nccl_abi::unique_id, int, nccl_abi::config*) = nullptr;
  result_t (*comm_finalize)(comm_t) = nullptr;
  result_t (*comm_destroy)(comm_t) = nullptr;
  result_t (*comm_abort)(comm_t) = nullptr;
  result_t (*comm_get_async_error)(comm_t, result_t*) = nullptr;
  result_t (*comm_split)(comm_t, int, int, comm_t*, nccl_abi::config*) = nullptr;
  const char* (*get_error_string)(result_t) = nullptr;
  const char* (*get_last_error)(comm_t) = nullptr;
  result_t (*all_reduce)(const void*, void*, std::size_t, int, int, comm_t, cudaStream_t) = nullptr;
  result_t (*broadcast)(const void*, void*, std::size_t, int, int, comm_t, cudaStream_t) = nullptr;
  result_t (*reduce)(const void*, void*, std::size_t, int, int, int, comm_t, cudaStream_t) = nullptr;
  result_t (*all_gather)(const void*, void*, std::size_t, int, comm_t, cudaStream_t) = nullptr;
  result_t (*reduce_scatter)(const void*, void*, std::size_t, int, int, comm_t, cudaStream_t) = nullptr;
  result_t (*send)(const void*, std::size_t, int, int, comm_t, cudaStream_t) = nullptr;
  result_t (*recv)(void*, std::size_t, int, int, comm_t, cudaStream_t) = nullptr;
  result_t (*group_start)() = nullptr;
  result_t (*group_end)() = nullptr;
  // NCCL 2.28 and later (null before: tutti groups sends and receives instead)
  result_t (*all_to_all)(const void*, void*, std::size_t, int, comm_t, cudaStream_t) = nullptr;
  result_t (*gather)(const void*, void*, std::size_t, int, int, comm_t, cudaStream_t) = nullptr;
  result_t (*scatter)(const void*, void*, std::size_t, int, int, comm_t, cudaStream_t) = nullptr;

  int version = 0;   ///< ncclGetVersion's code (22809 for 2.28.9)
  std::string path;  ///< what was loaded

  /// "2.28.9".
  std::string version_text() const {
    const int major = version >= 10000 ? version / 10000 : version / 1000;
    const int minor = version >= 10000 ? version / 100 % 100 : version / 100 % 10;
    return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(version % 100);
  }

  /// The library, loaded once per process; `config_error` naming what was tried otherwise (the
  /// same error on every later call).
  static const nccl_library& get() {
    static const auto loaded = load();
    if (!loaded.error.empty()) throw config_error(loaded.error);
    return *loaded.lib;
  }

  /// NCCL's text for a result, and the last error it recorded.
  std::string text(result_t r) const {
    std::string t = get_error_string ? get_error_string(r) : "NCCL error " + std::to_string(r);
    if (get_last_error)
      if (const char* last = get_last_error(nullptr); last && *last) t += ": " + std::string(last);
    return t;
  }

 private:
  struct outcome {
    std::shared_ptr<nccl_library> lib;
    std::string error;
  };

  TUTTI_COLD static outcome load() {
    std::vector<std::string> names;
    if (const char* n = tutti::detail::getenv_nonempty("TUTTI_NCCL_LIBRARY")) names.push_back(n);
    else names = {"libnccl.so.2", "libnccl.so"};
    std::string tried;
    void* h = nullptr;
    std::string loaded;
    for (const auto& n : names) {
      h = ::dlopen(n.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (h) {
        loaded = n;
        break;
      }
      const char* e = ::dlerror();
      tried += (tried.empty() ? "" : "; ") + n + " (" + (e ? e : "not found") + ")";
    }
    if (!h)
      return {nullptr, "tutti::nccl: cannot load the NCCL library: tried " + tried +
                           ". Set TUTTI_NCCL_LIBRARY to its path (PyTorch's: python -c \"import nvidia.nccl, os; "
                           "print(os.path.join(nvidia.nccl.__path__[0], 'lib', 'libnccl.so.2'))\"), or add its folder to "
                           "LD_LIBRARY_PATH"};
    auto lib = std::make_shared<nccl_library>();
    lib->path = loaded;
    std::string missing;
    auto sym = [&](auto& fn, const char* name, bool required) {
      void* p = ::dlsym(h, name);
      if (!p && required) missing += (missing.empty() ? "" : ", ") + std::string(name);
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(p);
    };
    sym(lib->get_version, "ncclGetVersion", true);
    sym(lib->get_unique_id, "ncclGetUniqueId", true);
    sym(lib->comm_init_rank_config, "ncclCommInitRankConfig", true);
    sym(lib->comm_finalize, "ncclCommFinalize", true);
    sym(lib->comm_destroy, "ncclCommDestroy", true);
    sym(lib->comm_abort, "ncclCommAbort", true);
    sym(lib->comm_get_async_error, "ncclCommGetAsyncError", true);
    sym(lib->comm_split, "ncclCommSplit", true);
    sym(lib->get_error_string, "ncclGetErrorString", true);
    sym(lib->get_last_error, "ncclGetLastError", true);
    sym(lib->all_reduce, "ncclAllReduce", true);
    sym(lib->broadcast, "ncclBroadcast", true);
    sym(lib->reduce, "ncclReduce", true);
    sym(lib->all_gather, "ncclAllGather", true);
    sym(lib->reduce_scatter, "ncclReduceScatter", true);
    sym(lib->send, "ncclSend", true);
    sym(lib->recv, "ncclRecv", true);
    sym(lib->group_start, "ncclGroupStart", true);
    sym(lib->group_end, "ncclGroupEnd", true);
    sym(lib->all_to_all, "ncclAlltoAll", false);
    sym(lib->gather, "ncclGather", false);
    sym(lib->scatter, "ncclScatter", false);
    if (!missing.empty())
      return {nullptr, "tutti::nccl: " + loaded + " lacks " + missing + " (tutti needs NCCL 2.18 or later)"};
    if (lib->get_version(&lib->version) != nccl_abi::success || lib->version < nccl_abi::version_code(2, 18, 0))
      return {nullptr, "tutti::nccl: " + loaded + " is NCCL " + lib->version_text() + "; tutti needs 2.18 or later"};
    return {lib, {}};
  }
};

// ---- the rules of driving NCCL, as functions of the library (tested with a fake one) ---------

/// Whether NCCL `version` lets several ranks of a communicator use one GPU: never before 2.30;
/// from 2.30 only with NCCL_MULTI_RANK_GPU_ENABLE set (`multi_rank_env`: its value, or null),
/// which NCCL reads as an integer (strtoll, base 0: non-zero enables it). NCCL may also take it
/// from an nccl.conf file, which tutti does not read: there set the variable instead.
inline bool nccl_allows_shared_gpu(int version, const char* multi_rank_env) {
  if (version < nccl_abi::version_code(2, 30, 0)) return false;
  return multi_rank_env && *multi_rank_env && std::strtoll(multi_rank_env, nullptr, 0) != 0;
}

/// The `config_error` text for ranks `rank` and `other` on one GPU (`device`) under NCCL
/// `version` (`version_text`), said before NCCL's init (which would fail asynchronously, as an
/// abort); empty where NCCL allows it.
inline std::string shared_gpu_refusal(int version, const std::string& version_text, const char* multi_rank_env, int rank,
                                      int other, int device) {
  if (nccl_allows_shared_gpu(version, multi_rank_env)) return {};
  std::string t = "tutti::nccl: rank " + std::to_string(rank) + " and rank " + std::to_string(other) +
                  " use the same GPU (device " + std::to_string(device) + "), which NCCL " + version_text + " refuses";
  if (version < nccl_abi::version_code(2, 30, 0))
    t += " (\"Duplicate GPU detected\"; NCCL 2.30 and later allow it with NCCL_MULTI_RANK_GPU_ENABLE=1)";
  else
    t += std::string(" unless NCCL_MULTI_RANK_GPU_ENABLE=1 (it is ") +
         (multi_rank_env && *multi_rank_env ? "'" + std::string(multi_rank_env) + "'" : std::string("unset")) + ")";
  return t + ": give each rank its own GPU, or use tutti::cuda_ipc";
}

/// How a communicator ended.
enum class teardown_outcome { destroyed, aborted };

/// Ends `comm`: a communicator that is not `broken` is finalised (ncclCommFinalize flushes what
/// is enqueued; it returns ncclSuccess when it finished at once, ncclInProgress while it works),
/// its state polled until it is ncclSuccess for at most `bound` (a peer may be gone), then
/// destroyed; otherwise, or when finalising fails or takes longer, aborted.
inline teardown_outcome end_comm(const nccl_library& lib, nccl_abi::comm_t comm, bool broken, std::chrono::milliseconds bound) {
  bool clean = !broken;
  if (clean) {
    const nccl_abi::result_t r = lib.comm_finalize(comm);
    clean = r == nccl_abi::success || r == nccl_abi::in_progress;
  }
  const auto deadline = std::chrono::steady_clock::now() + bound;
  while (clean) {
    nccl_abi::result_t st = nccl_abi::success;
    if (lib.comm_get_async_error(comm, &st) != nccl_abi::success) clean = false;
    else if (st == nccl_abi::success) break;
    else if (st != nccl_abi::in_progress || std::chrono::steady_clock::now() > deadline) clean = false;
    else std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  if (clean) {
    lib.comm_destroy(comm);
    return teardown_outcome::destroyed;
  }
  lib.comm_abort(comm);
  return teardown_outcome::aborted;
}

/// What a group of NCCL calls gave: the first call that failed inside it (`failed`, with its
/// result `error`), and what ncclGroupEnd returned (`end`: ncclInProgress while a non-blocking
/// communicator takes it).
struct group_outcome {
  nccl_abi::result_t error = nccl_abi::success;
  std::string failed;
  nccl_abi::result_t end = nccl_abi::success;
};

/// Runs `calls(check)` between ncclGroupStart and ncclGroupEnd; `check(result, what)` notes the
/// first call that failed. Nothing is aborted inside the group: NCCL's group must end (its
/// state is per thread) before its communicator may be aborted, so the caller acts on the
/// outcome after ncclGroupEnd. An exception from `calls` ends the group and goes on.
template <class Calls>
group_outcome run_group(const nccl_library& lib, Calls&& calls) {
  group_outcome g;
  if (const nccl_abi::result_t r = lib.group_start(); r != nccl_abi::success && r != nccl_abi::in_progress) {
    g.error = r;
    g.failed = "ncclGroupStart";
    return g;
  }
  auto check = [&g](nccl_abi::result_t r, const char* what) {
    if (r != nccl_abi::success && r != nccl_abi::in_progress && g.error == nccl_abi::success) {
      g.error = r;
      g.failed = what;
    }
  };
  try {
    calls(check);
  } catch (...) {
    lib.group_end();
    throw;
  }
  g.end = lib.group_end();
  return g;
}

}  // namespace tutti::detail::device
