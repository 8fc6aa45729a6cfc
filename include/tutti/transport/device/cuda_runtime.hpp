/// \file
/// What the device transports need of the CUDA runtime, host side: errors as tutti errors, the
/// choice of device (and a clear `config_error` where there is none), streams and events that
/// clean up after themselves, the driver entry points found at run time (so that nothing links
/// against libcuda: a program built with these headers starts on a machine without a driver and
/// says so), where a device pointer's allocation starts, and a pool of completion events whose
/// polling completes a `tutti::request`.
///
/// Host code: compiles with g++ against the CUDA headers (cuda_runtime_api.h), and with nvcc.
#pragma once

#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tutti/bootstrap/env.hpp"
#include "tutti/core/error.hpp"
#include "tutti/detail/attributes.hpp"
#include "tutti/detail/operation.hpp"
#include "tutti/transport/capabilities.hpp"
#include "tutti/transport/device/rules.hpp"
#include "tutti/transport/toolkit/errors.hpp"

namespace tutti::detail::device {

/// "cudaErrorInvalidValue (invalid argument)".
TUTTI_COLD inline std::string cuda_text(cudaError_t e) {
  return std::string(cudaGetErrorName(e)) + " (" + cudaGetErrorString(e) + ")";
}

/// Raises `tutti::error` for a failed CUDA call: "<what>: cudaErrorX (text)". A CUDA error is a
/// failure of the device or of its use, not of the peers: errc::aborted, so that the
/// communicator stops, tells its peers and refuses further calls.
[[noreturn]] TUTTI_COLD inline void cuda_fail(cudaError_t e, std::string_view what) {
  throw error(errc::aborted, std::string(what) + ": " + cuda_text(e));
}
inline void cuda_check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) [[unlikely]] cuda_fail(e, what);
}

/// The number of devices, or `config_error` saying why there is none (no driver: the runtime
/// returns cudaErrorInsufficientDriver and leaves the count alone; no device:
/// cudaErrorNoDevice).
TUTTI_COLD inline int device_count(std::string_view who) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n <= 0) {
    cudaGetLastError();  // clear it: it is the answer, not a sticky failure
    throw config_error(std::string(who) + ": no CUDA device found (cudaGetDeviceCount: " +
                       (e == cudaSuccess ? std::string("0 devices") : cuda_text(e)) +
                       "); it needs a GPU and its driver: use tutti::shm, tutti::tcp or tutti::mpi on this machine");
  }
  return n;
}

/// The device a rank uses: `TUTTI_CUDA_DEVICE` when set (the same for every rank of the
/// process, as CUDA_VISIBLE_DEVICES would), else `local_rank % device count` (torchrun's habit:
/// one device per local rank).
TUTTI_COLD inline int pick_device(int local_rank, std::string_view who) {
  const int n = device_count(who);
  if (const auto d = tutti::detail::env_int("TUTTI_CUDA_DEVICE", 0, 1 << 20)) {
    if (*d >= n)
      throw config_error("TUTTI_CUDA_DEVICE=" + std::to_string(*d) + ": this process sees " + std::to_string(n) +
                         " CUDA device(s) (0.." + std::to_string(n - 1) + ")");
    return *d;
  }
  return local_rank % n;
}

/// A stream of its own (non-blocking with respect to the legacy default stream).
class stream_handle {
 public:
  stream_handle() = default;
  static stream_handle create() {
    stream_handle s;
    cuda_check(cudaStreamCreateWithFlags(&s.s_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    return s;
  }
  stream_handle(stream_handle&& o) noexcept : s_(std::exchange(o.s_, nullptr)) {}
  stream_handle& operator=(stream_handle&& o) noexcept {
    std::swap(s_, o.s_);
    return *this;
  }
  ~stream_handle() {
    if (s_) cudaStreamDestroy(s_);
  }
  cudaStream_t get() const noexcept { return s_; }

 private:
  cudaStream_t s_ = nullptr;
};

/// An event; `interprocess` ones can be exported to other processes (cudaIpcGetEventHandle).
class event_handle {
 public:
  event_handle() = default;
  static event_handle create(bool interprocess) {
    event_handle e;
    const unsigned flags = cudaEventDisableTiming | (interprocess ? cudaEventInterprocess : 0u);
    cuda_check(cudaEventCreateWithFlags(&e.e_, flags), "cudaEventCreateWithFlags");
    return e;
  }
  /// An event another process exported (owned: closed with cudaEventDestroy).
  static event_handle open(const cudaIpcEventHandle_t& h) {
    event_handle e;
    cuda_check(cudaIpcOpenEventHandle(&e.e_, h), "cudaIpcOpenEventHandle");
    return e;
  }
  /// Another thread's event of this process (not owned).
  static event_handle borrow(cudaEvent_t ev) {
    event_handle e;
    e.e_ = ev;
    e.owned_ = false;
    return e;
  }
  event_handle(event_handle&& o) noexcept : e_(std::exchange(o.e_, nullptr)), owned_(o.owned_) {}
  event_handle& operator=(event_handle&& o) noexcept {
    std::swap(e_, o.e_);
    std::swap(owned_, o.owned_);
    return *this;
  }
  ~event_handle() {
    if (e_ && owned_) cudaEventDestroy(e_);
  }
  cudaEvent_t get() const noexcept { return e_; }

 private:
  cudaEvent_t e_ = nullptr;
  bool owned_ = true;
};

/// The driver entry points tutti uses, found through the runtime at run time
/// (cudaGetDriverEntryPointByVersion), never linked.
struct driver_api {
  using pointer_get_attributes_fn = int (*)(unsigned int, int*, void**, unsigned long long);
  pointer_get_attributes_fn pointer_get_attributes = nullptr;

  static const driver_api& get() {
    static const driver_api d = [] {
      driver_api a;
      void* fn = nullptr;
      cudaDriverEntryPointQueryResult status{};
      if (cudaGetDriverEntryPointByVersion("cuPointerGetAttributes", &fn, 12000, cudaEnableDefault, &status) ==
              cudaSuccess &&
          status == cudaDriverEntryPointSuccess)
        a.pointer_get_attributes = reinterpret_cast<pointer_get_attributes_fn>(fn);
      cudaGetLastError();
      return a;
    }();
    return d;
  }
};

/// What the driver says of a device pointer's allocation.
struct allocation_info {
  std::uintptr_t base = 0;       ///< where the allocation starts
  std::size_t size = 0;          ///< its size
  std::uint64_t buffer_id = 0;   ///< unique per allocation in this process
  int device = -1;               ///< the device it lies on
  bool ipc_capable = false;      ///< cudaIpcGetMemHandle works on it (cudaMalloc, not pools or VMM)
};

/// The allocation `p` lies in, or `usage_error` where it is not device memory of this process.
TUTTI_COLD inline allocation_info allocation_of(const void* p, std::string_view who) {
  const auto& d = driver_api::get();
  if (!d.pointer_get_attributes)
    throw config_error(std::string(who) + ": the CUDA driver has no cuPointerGetAttributes");
  // CU_POINTER_ATTRIBUTE_BUFFER_ID = 7, DEVICE_ORDINAL = 9, IS_LEGACY_CUDA_IPC_CAPABLE = 10,
  // RANGE_START_ADDR = 11, RANGE_SIZE = 12, MEMORY_TYPE = 2 (CU_MEMORYTYPE_DEVICE = 2)
  int attrs[6] = {2, 7, 9, 10, 11, 12};
  unsigned int memtype = 0;
  unsigned long long id = 0, base = 0;
  int ordinal = -1;
  int ipc = 0;  // a bool in the driver's docs; written as one byte
  std::size_t size = 0;
  void* data[6] = {&memtype, &id, &ordinal, &ipc, &base, &size};
  const int rc = d.pointer_get_attributes(6, attrs, data, reinterpret_cast<unsigned long long>(p));
  if (rc != 0 || memtype != 2 || base == 0)
    throw usage_error(std::string(who) + ": the buffer at " + std::to_string(reinterpret_cast<std::uintptr_t>(p)) +
                      " is not CUDA device memory (cuPointerGetAttributes: " +
                      (rc != 0 ? "error " + std::to_string(rc) : "memory type " + std::to_string(memtype)) +
                      "); pass tutti::device_view over memory from cudaMalloc");
  allocation_info a;
  a.base = static_cast<std::uintptr_t>(base);
  a.size = size;
  a.buffer_id = id;
  a.device = ordinal;
  a.ipc_capable = (ipc & 0xff) != 0;
  return a;
}

/// The driver's buffer id of the allocation at `base` (0 where there is none any more: freed).
/// cuPointerGetAttributes reports no error for an address it does not know; it leaves the id 0.
inline std::uint64_t buffer_id_at(std::uintptr_t base) {
  const auto& d = driver_api::get();
  if (!d.pointer_get_attributes) return 0;
  int attrs[1] = {7};  // CU_POINTER_ATTRIBUTE_BUFFER_ID
  unsigned long long id = 0;
  void* data[1] = {&id};
  if (d.pointer_get_attributes(1, attrs, data, static_cast<unsigned long long>(base)) != 0) return 0;
  return id;
}

/// The allocations already found to lie on a rank's device: a buffer is checked when its
/// allocation is first met (one driver call), afterwards by a range lookup.
class device_check {
 public:
  explicit device_check(int device) : device_(device) {}
  /// `usage_error` unless [p, p + bytes) is device memory of this rank's device, in one allocation.
  void operator()(const void* p, std::size_t bytes, const char* who, const char* what) {
    if (p == nullptr || bytes == 0) return;
    const auto a = reinterpret_cast<std::uintptr_t>(p);
    for (const auto& k : known_)
      if (k.first <= a && a + bytes <= k.second) return;
    const std::string name = std::string(who) + ": " + what;
    const allocation_info info = allocation_of(p, name);
    if (info.device != device_)
      throw usage_error(name + " lies on CUDA device " + std::to_string(info.device) + ", but this rank uses device " +
                        std::to_string(device_));
    if (a + bytes > info.base + info.size)
      throw usage_error(name + ": " + std::to_string(bytes) + " bytes from its start run past the end of its allocation (" +
                        std::to_string(info.base + info.size - a) + " bytes left)");
    known_.emplace_back(info.base, info.base + info.size);
  }

 private:
  int device_;
  std::vector<std::pair<std::uintptr_t, std::uintptr_t>> known_;
};

/// Completion events, reused: a request for the work enqueued on a stream so far records one,
/// and returns it when the request completes.
class event_pool {
 public:
  cudaEvent_t take() {
    {
      std::lock_guard lk(mu_);
      if (!free_.empty()) {
        cudaEvent_t e = free_.back();
        free_.pop_back();
        return e;
      }
    }
    cudaEvent_t e = nullptr;
    cuda_check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreateWithFlags");
    return e;
  }
  void give(cudaEvent_t e) {
    std::lock_guard lk(mu_);
    free_.push_back(e);
  }
  ~event_pool() {
    for (cudaEvent_t e : free_) cudaEventDestroy(e);
  }

 private:
  std::mutex mu_;
  std::vector<cudaEvent_t> free_;
};

/// What a device transport keeps that outlives any one call and is shared by its copies and by
/// the requests it returned: the device, the failure that broke it (an asynchronous one, found
/// by a request), the completion events.
struct device_state {
  int device = 0;
  event_pool events;
  std::mutex mu;
  std::string failure;  ///< set once: what broke the transport (asynchronously)

  void set_failure(const std::string& what) {
    std::lock_guard lk(mu);
    if (failure.empty()) failure = what;
  }
  std::string failed() {
    std::lock_guard lk(mu);
    return failure;
  }
};

/// Why a request's device work failed although its event may say otherwise: a report of a
/// barrier its kernels left without a peer (naming the peer), or none.
using late_reason = std::function<std::optional<device_failure>()>;

/// The state of a request for what was enqueued on `stream` so far: polled (by whoever waits),
/// as `decide_poll` (rules.hpp) rules: it completes when the event recorded now has and `why`
/// reports nothing (a report fails it, done or not: a block that gave up ends its kernel
/// cleanly), fails with the CUDA error a kernel left, or at the deadline `w.timeout` from now
/// with `timeout_error`, or when `w.aborted` is set. `name`: the call, for messages. A failure
/// is kept in `st`, so the transport refuses further calls.
inline std::shared_ptr<operation_state> stream_completion(const std::shared_ptr<device_state>& st, cudaStream_t stream,
                                                          const wait_context& w, std::string name, late_reason why) {
  auto op = std::make_shared<operation_state>();
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  cuda_check(cudaStreamIsCapturing(stream, &capture), "cudaStreamIsCapturing");
  if (capture != cudaStreamCaptureStatusNone) {  // the work is in a graph, run when it is launched
    complete(*op, nullptr);
    return op;
  }
  cudaEvent_t ev = st->events.take();
  if (const cudaError_t e = cudaEventRecord(ev, stream); e != cudaSuccess) {
    st->events.give(ev);
    cuda_fail(e, name + ": cudaEventRecord");
  }
  const auto deadline = std::chrono::steady_clock::now() + w.timeout;
  op->poll = [st, ev, deadline, timeout = w.timeout, aborted = w.aborted, name = std::move(name),
              why = std::move(why)](operation_state& s) mutable {
    if (s.done.load(std::memory_order_acquire)) return;
    const cudaError_t e = cudaEventQuery(ev);
    const work_state state = e == cudaSuccess ? work_state::done : e == cudaErrorNotReady ? work_state::pending
                                                                                          : work_state::failed;
    if (state == work_state::pending) cudaGetLastError();  // not an error: clear it
    const bool late = std::chrono::steady_clock::now() > deadline;
    const bool stop = aborted && aborted->load(std::memory_order_acquire);
    const poll_decision d = decide_poll(state, state == work_state::failed ? cuda_text(e) : std::string(), late, stop,
                                        why ? why() : std::nullopt, name, timeout);
    if (d.k == poll_decision::kind::pending) return;
    // An event still pending stays recorded on a stream that may never reach it: not reused.
    if (state != work_state::pending) st->events.give(ev);
    std::exception_ptr err;
    if (d.k == poll_decision::kind::failure) {
      st->set_failure(d.failure.text);
      err = to_exception(d.failure);
    }
    complete(s, err);  // later polls see it done and return at once
  };
  return op;
}

}  // namespace tutti::detail::device
