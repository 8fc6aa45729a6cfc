/// \file
/// How `tutti::cuda_ipc`'s ranks reach each other's buffers. Decided per peer, by pid: a peer of
/// this process (a thread) is reached by the pointer itself; a peer in another process through
/// CUDA IPC: this rank exports the allocation a buffer lies in (`cudaIpcGetMemHandle` on its
/// start, found with the driver's pointer attributes) and sends the handle with the buffer's
/// offset, and the peer opens it once (`cudaIpcOpenMemHandle`) and keeps it open while the
/// allocation lives. Each side keys by the allocation's buffer id, which the driver makes unique
/// per allocation in a process, so memory freed and allocated again at the same address is
/// exported and opened anew, never read through a stale mapping.
///
/// Freed allocations: before each call's records this rank sweeps what it exported (one driver
/// query per allocation: is its buffer id still at its start?) and names the ones gone in its
/// next records (`retired`, a few per record); its peers close their mappings of them there. So
/// the mappings stay as many as the allocations alive, not every one ever used. CUDA calls
/// freeing an exported allocation before every importer closed it undefined; a program that frees
/// a buffer right after a call leaves its peers' mappings open until the next call (or teardown):
/// the window this narrows to one call. The device of a buffer is checked once, when its
/// allocation is first met.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "tutti/core/error.hpp"
#include "tutti/transport/device/cuda_runtime.hpp"
#include "tutti/transport/device/rules.hpp"

namespace tutti::detail::device {

/// A rank's buffer as its peers reach it.
struct buffer_token {
  std::uint64_t raw = 0;        ///< its address in its owner's process (0: no buffer)
  std::uint64_t offset = 0;     ///< from the start of its allocation (processes)
  std::uint64_t buffer_id = 0;  ///< its allocation's id in its owner's process (processes)
  cudaIpcMemHandle_t handle{};  ///< its allocation, exported (processes)
};

/// The allocations a rank found freed since its last record (see the file comment).
using retired_ids = export_registry<cudaIpcMemHandle_t>::retired;

class ipc_buffers {
 public:
  /// `local[q]`: whether rank q runs in this process (rules.hpp: same_process_peers).
  ipc_buffers(int device, std::vector<char> local)
      : device_(device), local_(std::move(local)), any_remote_(!all_local(local_)) {}
  ipc_buffers(const ipc_buffers&) = delete;
  ipc_buffers& operator=(const ipc_buffers&) = delete;
  ~ipc_buffers() { close_all(); }

  /// Closes every mapping of a peer's allocation (teardown; also the destructor's).
  void close_all() noexcept {
    imported_.close_all([](void* base) { cudaIpcCloseMemHandle(base); });
    cudaGetLastError();
  }

  /// The token of `p` (`bytes` long) for the peers; `what` names the buffer in errors.
  buffer_token export_buffer(const void* p, std::size_t bytes, const std::string& what) {
    buffer_token t;
    if (p == nullptr || bytes == 0) return t;
    t.raw = reinterpret_cast<std::uintptr_t>(p);
    const auto a = reinterpret_cast<std::uintptr_t>(p);
    if (!any_remote_) {
      // Every peer reads the pointer. The device is checked once per allocation; afterwards a
      // range lookup suffices.
      for (const auto& k : known_)
        if (k.first <= a && a + bytes <= k.second) return t;
      const allocation_info info = checked(p, bytes, what);
      known_.emplace_back(info.base, info.base + info.size);
      return t;
    }
    // A peer in another process: the buffer id tells whether this is still the allocation
    // exported before.
    const allocation_info info = checked(p, bytes, what);
    t.offset = a - info.base;
    t.buffer_id = info.buffer_id;
    if (const auto* e = exported_.find(info.buffer_id)) {
      t.handle = e->handle;
      return t;
    }
    if (!info.ipc_capable)
      throw usage_error(what + ": between processes, tutti::cuda_ipc reads a peer's buffer through CUDA IPC, which "
                               "needs memory from cudaMalloc (or torch's caching allocator); this buffer's memory is not "
                               "(a pool of cudaMallocAsync, or a cuMem/VMM allocation): allocate it with cudaMalloc, or "
                               "use tutti::nccl");
    export_registry<cudaIpcMemHandle_t>::entry e{info.base, info.size, info.buffer_id, {}};
    cuda_check(cudaIpcGetMemHandle(&e.handle, reinterpret_cast<void*>(info.base)), "cudaIpcGetMemHandle");
    exported_.add(e);
    t.handle = e.handle;
    return t;
  }

  /// Before a record every peer reads: finds the exported allocations freed since (one driver
  /// query each) and returns the next few of them to name in it (zeros: none).
  retired_ids retire_freed() {
    if (!any_remote_) return {};
    sweep();
    return exported_.take_retired();
  }
  /// The same before a message only `peer` reads (a send's offer).
  retired_ids retire_freed_for(int peer) {
    if (!any_remote_ || local_[static_cast<std::size_t>(peer)]) return {};
    sweep();
    return exported_.take_retired_for(peer);
  }

  /// `peer`'s record named these allocations freed: their mappings here close.
  void peer_freed(int peer, const retired_ids& ids) {
    if (local_[static_cast<std::size_t>(peer)]) return;
    imported_.retire(peer, ids, [](void* base) { cudaIpcCloseMemHandle(base); });
    cudaGetLastError();
  }

  /// Where `peer`'s buffer `t` is in this process (null for no buffer).
  std::byte* import_buffer(int peer, const buffer_token& t) {
    if (t.raw == 0) return nullptr;
    if (local_[static_cast<std::size_t>(peer)]) return reinterpret_cast<std::byte*>(t.raw);
    void* base = imported_.find_or_open(peer, t.buffer_id, t.handle, [&](const cudaIpcMemHandle_t& h) {
      void* b = nullptr;
      cuda_check(cudaIpcOpenMemHandle(&b, h, cudaIpcMemLazyEnablePeerAccess),
                 ("cudaIpcOpenMemHandle (a buffer of rank " + std::to_string(peer) + ")").c_str());
      return b;
    });
    return static_cast<std::byte*>(base) + t.offset;
  }

  /// How many peers' allocations are mapped here (tests: it stays as many as are alive).
  std::size_t mapped() const noexcept { return imported_.size(); }
  /// How many of this rank's allocations its peers may have mapped.
  std::size_t exported() const noexcept { return exported_.size(); }

 private:
  void sweep() {
    std::uint64_t remote = 0;  // the peers that may have mapped this rank's allocations
    for (std::size_t q = 0; q < local_.size(); ++q)
      if (!local_[q]) remote |= std::uint64_t{1} << q;
    exported_.sweep([](std::uintptr_t base, std::uint64_t id) { return buffer_id_at(base) == id; }, remote);
  }

  allocation_info checked(const void* p, std::size_t bytes, const std::string& what) const {
    const allocation_info info = allocation_of(p, what);
    if (info.device != device_)
      throw usage_error(what + " lies on CUDA device " + std::to_string(info.device) + ", but this rank uses device " +
                        std::to_string(device_));
    const auto a = reinterpret_cast<std::uintptr_t>(p);
    if (a + bytes > info.base + info.size)
      throw usage_error(what + ": " + std::to_string(bytes) + " bytes from its start run past the end of its allocation (" +
                        std::to_string(info.base + info.size - a) + " bytes left)");
    return info;
  }

  int device_;
  std::vector<char> local_;
  bool any_remote_;
  std::vector<std::pair<std::uintptr_t, std::uintptr_t>> known_;  ///< checked allocations (all peers local)
  export_registry<cudaIpcMemHandle_t> exported_;
  import_cache<cudaIpcMemHandle_t> imported_;
};

}  // namespace tutti::detail::device
