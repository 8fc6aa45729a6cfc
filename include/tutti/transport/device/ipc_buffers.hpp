/// \file
/// How `tutti::cuda_ipc`'s ranks reach each other's buffers. Ranks that share a process (threads)
/// use the pointers themselves; ranks in different processes export the allocation a buffer lies
/// in (`cudaIpcGetMemHandle` on its start, found with the driver's pointer attributes) and send
/// the handle with the buffer's offset; the peer opens it once
/// (`cudaIpcOpenMemHandle`) and keeps it open. Each side caches by the allocation's buffer id,
/// which the driver makes unique per allocation in a process, so memory freed and allocated again
/// at the same address is exported and opened anew, never read through a stale mapping. The
/// device of a buffer is checked once, when its allocation is first met.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "tutti/core/error.hpp"
#include "tutti/transport/device/cuda_runtime.hpp"

namespace tutti::detail::device {

/// A rank's buffer as its peers reach it.
struct buffer_token {
  std::uint64_t raw = 0;        ///< its address in its owner's process (0: no buffer)
  std::uint64_t offset = 0;     ///< from the start of its allocation (processes)
  std::uint64_t buffer_id = 0;  ///< its allocation's id in its owner's process (processes)
  cudaIpcMemHandle_t handle{};  ///< its allocation, exported (processes)
};

class ipc_buffers {
 public:
  ipc_buffers(int device, bool same_process) : device_(device), same_process_(same_process) {}
  ipc_buffers(const ipc_buffers&) = delete;
  ipc_buffers& operator=(const ipc_buffers&) = delete;
  ~ipc_buffers() {
    for (auto& i : imported_) cudaIpcCloseMemHandle(i.base);
  }

  /// The token of `p` (`bytes` long) for the peers; `what` names the buffer in errors.
  buffer_token export_buffer(const void* p, std::size_t bytes, const std::string& what) {
    buffer_token t;
    if (p == nullptr || bytes == 0) return t;
    t.raw = reinterpret_cast<std::uintptr_t>(p);
    const auto a = reinterpret_cast<std::uintptr_t>(p);
    if (same_process_) {
      // The device is checked once per allocation; afterwards a range lookup suffices.
      for (const auto& k : known_)
        if (k.base <= a && a + bytes <= k.base + k.size) return t;
      const allocation_info info = checked(p, bytes, what);
      known_.push_back({info.base, info.size, info.buffer_id, {}});
      return t;
    }
    // Processes: the buffer id tells whether this is still the allocation exported before.
    const allocation_info info = checked(p, bytes, what);
    t.offset = a - info.base;
    t.buffer_id = info.buffer_id;
    for (const auto& k : known_)
      if (k.id == info.buffer_id) {
        t.handle = k.handle;
        return t;
      }
    if (!info.ipc_capable)
      throw usage_error(what + ": between processes, tutti::cuda_ipc reads a peer's buffer through CUDA IPC, which "
                               "needs memory from cudaMalloc (or torch's caching allocator); this buffer's memory is not "
                               "(a pool of cudaMallocAsync, or a cuMem/VMM allocation): allocate it with cudaMalloc, or "
                               "use tutti::nccl");
    exported e{info.base, info.size, info.buffer_id, {}};
    cuda_check(cudaIpcGetMemHandle(&e.handle, reinterpret_cast<void*>(info.base)), "cudaIpcGetMemHandle");
    known_.push_back(e);
    t.handle = e.handle;
    return t;
  }

  /// Where `peer`'s buffer `t` is in this process (null for no buffer).
  std::byte* import_buffer(int peer, const buffer_token& t) {
    if (t.raw == 0) return nullptr;
    if (same_process_) return reinterpret_cast<std::byte*>(t.raw);
    for (auto& i : imported_)
      if (i.peer == peer && i.id == t.buffer_id && std::memcmp(&i.handle, &t.handle, sizeof t.handle) == 0)
        return static_cast<std::byte*>(i.base) + t.offset;
    void* base = nullptr;
    cuda_check(cudaIpcOpenMemHandle(&base, t.handle, cudaIpcMemLazyEnablePeerAccess),
               ("cudaIpcOpenMemHandle (a buffer of rank " + std::to_string(peer) + ")").c_str());
    imported_.push_back({peer, t.buffer_id, t.handle, base});
    return static_cast<std::byte*>(base) + t.offset;
  }

 private:
  struct exported {
    std::uintptr_t base;
    std::size_t size;
    std::uint64_t id;
    cudaIpcMemHandle_t handle;
  };
  struct imported {
    int peer;
    std::uint64_t id;
    cudaIpcMemHandle_t handle;
    void* base;
  };

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
  bool same_process_;
  std::vector<exported> known_;
  std::vector<imported> imported_;
};

}  // namespace tutti::detail::device
