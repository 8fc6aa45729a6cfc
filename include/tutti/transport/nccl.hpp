/// \file
/// `tutti::nccl`: NCCL driven by tutti, on device memory (`tutti::device_view`), enqueued on the
/// caller's stream. Compile with nvcc (a .cu file: tutti's kernels serve what NCCL lacks), and
/// include tutti/tutti.hpp for the communicator; CMake: `target_link_libraries(app tutti::nccl)`. NCCL itself is loaded at run time
/// (device/nccl_library.hpp: `TUTTI_NCCL_LIBRARY`), never linked.
///
///     auto comm = tutti::communicator<tutti::nccl>::from_env();      // under tuttirun
///     comm.all_reduce(tutti::device_view(d, n), tutti::op::sum{}, stream);
///
/// - Start-up: rank 0's `ncclGetUniqueId` goes to every rank over tutti's host side (the shm
///   rendezvous on one host; `tutti::nccl::over(tutti::tcp::from_env())` across hosts), and the
///   communicator is non-blocking (NCCL's `blocking = 0`): every NCCL call returns at once and
///   tutti polls it under the communicator's deadline, so a stuck start-up is a `timeout_error`
///   and `abort()` is always safe (NCCL forbids aborting while another thread is inside it; tutti
///   calls NCCL only from the thread driving the communicator).
/// - Collectives: NCCL's own where NCCL has the element type and the op (`algo::native`, which
///   automatic picks for this transport): all_reduce, reduce, reduce_scatter (sum, prod, min,
///   max, on int8/uint8/int32/uint32/int64/uint64/float16/bfloat16/float/double), broadcast,
///   all_gather (any type, as bytes), gather, scatter and all_to_all (NCCL's from 2.28, grouped
///   sends and receives before); the v-collectives as grouped sends and receives
///   (reduce_scatter_v: one ncclReduce per rank, grouped); everything else (user ops, types NCCL
///   lacks) runs tutti's ring over grouped `ncclSend`/`ncclRecv`, reducing with tutti's kernels.
/// - Before each native call the ranks agree on the call's fingerprint on the host (an
///   all-gather over the host side, as the MPI native path does), so a mismatch is a
///   `mismatch_error` naming both ranks, never an NCCL hang; a send and its receive compare theirs
///   there too.
/// - Groups: `ncclCommSplit` (every rank of the parent takes part; non-members with
///   NCCL_SPLIT_NOCOLOR).
/// - A request completes when the stream has done the work; at the deadline it fails with
///   `timeout_error`, and the communicator is then unusable: its next call raises the failure
///   and aborts the NCCL communicator. Calls may be captured into a CUDA graph (the agreement
///   happens at capture; a captured call's request is complete at once).
/// - NCCL refuses two ranks on one GPU ("Duplicate GPU detected"; 2.30 and later allow it with
///   NCCL_MULTI_RANK_GPU_ENABLE=1): tutti says so before NCCL's init, as a config_error
///   (tutti::cuda_ipc allows it).
#pragma once

#if !defined(__CUDACC__)
#error "tutti/transport/nccl.hpp holds device code (tutti's kernels for what NCCL lacks): compile this file with nvcc, as a .cu file (CMake: tutti::nccl)"
#endif

#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <vector>

#include "tutti/bootstrap/env.hpp"
#include "tutti/core/config.hpp"
#include "tutti/core/counts.hpp"
#include "tutti/core/error.hpp"
#include "tutti/core/fingerprint.hpp"
#include "tutti/core/float16.hpp"
#include "tutti/core/memory.hpp"
#include "tutti/op/ops.hpp"
#include "tutti/transport/capabilities.hpp"
#include "tutti/transport/device/control.hpp"
#include "tutti/transport/device/cuda_runtime.hpp"
#include "tutti/transport/device/kernels.cuh"
#include "tutti/transport/device/nccl_library.hpp"
#include "tutti/transport/device/stream_work.cuh"
#include "tutti/transport/shm.hpp"

namespace tutti {

namespace detail::device {

/// NCCL's data type for T (integers by size and signedness, the floating types NCCL has), or -1.
template <class T>
constexpr int nccl_type() {
  namespace a = nccl_abi;
  if constexpr (std::is_same_v<T, float>) return a::float32;
  else if constexpr (std::is_same_v<T, double>) return a::float64;
  else if constexpr (std::is_same_v<T, tutti::float16>) return a::float16;
  else if constexpr (std::is_same_v<T, tutti::bfloat16>) return a::bfloat16;
  else if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    if constexpr (sizeof(T) == 1) return std::is_signed_v<T> ? a::int8 : a::uint8;
    else if constexpr (sizeof(T) == 4) return std::is_signed_v<T> ? a::int32 : a::uint32;
    else if constexpr (sizeof(T) == 8) return std::is_signed_v<T> ? a::int64 : a::uint64;
    else return -1;
  } else return -1;
}
/// NCCL's op for Op (avg reduces as a sum; the communicator divides once), or -1.
template <class Op>
constexpr int nccl_op() {
  namespace a = nccl_abi;
  if constexpr (std::is_same_v<Op, op::sum> || std::is_same_v<Op, op::avg>) return a::sum;
  else if constexpr (std::is_same_v<Op, op::prod>) return a::prod;
  else if constexpr (std::is_same_v<Op, op::min>) return a::min;
  else if constexpr (std::is_same_v<Op, op::max>) return a::max;
  else return -1;
}

/// One NCCL group's state on one rank, shared by the transport's copies.
struct nccl_world {
  const nccl_library* lib = nullptr;
  control ctl;
  int rank = 0, size = 1;
  std::shared_ptr<device_state> dev;
  nccl_abi::comm_t comm = nullptr;
  bool broken = false;
  std::unique_ptr<stream_work> work;  ///< the streams, the scratch, the memory seam
  std::chrono::milliseconds timeout{300000};
  std::string call_name = "tutti::nccl";
  std::optional<device_check> checked;  ///< the allocations met so far, on this rank's device

  nccl_world() = default;
  nccl_world(const nccl_world&) = delete;
  nccl_world& operator=(const nccl_world&) = delete;
  /// Finalises (or, broken, aborts) the NCCL communicator, bounded (end_comm), then waits,
  /// bounded too, for tutti's own work on its streams before freeing its scratch; work that does
  /// not end (a kernel behind a dead peer) keeps its memory rather than hang the destructor.
  ~nccl_world() {
    if (dev) cudaSetDevice(dev->device);
    if (comm) end_comm(*lib, comm, broken, teardown_bound(timeout));
    comm = nullptr;
    if (work && !wait_bounded([&] { return work->quiet(); }, teardown_bound(timeout))) {
      (void)work.release();
      cudaGetLastError();
      return;
    }
    work.reset();
    cudaGetLastError();
  }

  cudaStream_t stream() const noexcept { return work->stream(); }
  void activate() const { cuda_check(cudaSetDevice(dev->device), "cudaSetDevice"); }

  /// The NCCL failure `r` of `what`: `peer_lost` for NCCL's remote error (a peer's process or
  /// the network), else `error` (errc::aborted). The NCCL communicator is aborted.
  [[noreturn]] TUTTI_COLD void fail(nccl_abi::result_t r, const std::string& what) {
    std::string text = call_name + ": " + what + ": " + lib->text(r);
    abort_comm();
    if (r == nccl_abi::remote_error) throw peer_lost(text);
    throw error(errc::aborted, text);
  }
  void abort_comm() noexcept {
    broken = true;
    if (comm) {
      lib->comm_abort(comm);
      comm = nullptr;
    }
  }

  /// Waits until NCCL has taken the call that returned `r` (a non-blocking communicator returns
  /// in_progress while its thread enqueues): polls its state under the deadline and the abort
  /// flag. No other NCCL call, and no other work on the stream, may come before.
  void settle(nccl_abi::comm_t c, nccl_abi::result_t r, const char* what, const wait_context& w) {
    if (r == nccl_abi::success) return;
    if (r != nccl_abi::in_progress) fail(r, what);
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0;; ++i) {
      nccl_abi::result_t st = nccl_abi::success;
      const auto q = lib->comm_get_async_error(c, &st);
      if (q != nccl_abi::success) fail(q, std::string(what) + " (ncclCommGetAsyncError)");
      if (st == nccl_abi::success) return;
      if (st != nccl_abi::in_progress) fail(st, what);
      if (w.aborted && w.aborted->load(std::memory_order_acquire)) {
        abort_comm();
        throw error(errc::aborted, call_name + ": aborted (communicator::abort) while NCCL took " + what);
      }
      if (std::chrono::steady_clock::now() - start > w.timeout) {
        abort_comm();
        throw timeout_error(call_name + ": NCCL did not take " + what + " within " + toolkit::seconds_text(w.timeout) +
                            " (a peer that never made the same call?)");
      }
      if (i > 1000) std::this_thread::sleep_for(std::chrono::microseconds(50));
      else if (i > 100) std::this_thread::yield();
    }
  }
};

/// The configuration tutti gives NCCL: non-blocking.
inline nccl_abi::config nccl_config() {
  nccl_abi::config c;
  c.blocking = 0;
  c.split_share = 0;
  return c;
}

/// A group's NCCL communicator: the unique id from the group's rank 0 over `ctl`, then a
/// non-blocking init, polled under `timeout`.
TUTTI_COLD inline std::shared_ptr<nccl_world> make_nccl_world(control ctl, int device, std::uint64_t context,
                                                            std::chrono::milliseconds timeout) {
  auto w = std::make_shared<nccl_world>();
  w->lib = &nccl_library::get();
  w->ctl = std::move(ctl);
  w->rank = w->ctl.rank();
  w->size = w->ctl.size();
  w->timeout = timeout;
  w->dev = std::make_shared<device_state>();
  w->dev->device = device;
  w->activate();
  w->call_name = "tutti::nccl (NCCL " + w->lib->version_text() + ") on rank " + std::to_string(w->rank);
  const wait_context wc{timeout, "start-up", nullptr};
  fingerprint fp;
  fp.context = context;
  fp.coll = collective::group;
  fp.seq = 0x6e63636c5f6964ull;  // "nccl_id"
  // Which device each rank uses: NCCL refuses two ranks on one (2.30 and later allow it with
  // NCCL_MULTI_RANK_GPU_ENABLE=1); said here, before an init that would fail asynchronously.
  cudaDeviceProp prop{};
  cuda_check(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
  std::vector<std::array<char, 16>> uuids(static_cast<std::size_t>(w->size));
  std::array<char, 16> mine{};
  std::memcpy(mine.data(), &prop.uuid, 16);
  w->ctl.all_gather(fp, reinterpret_cast<const std::byte*>(mine.data()), reinterpret_cast<std::byte*>(uuids.data()), 16, wc);
  const char* multi_rank = std::getenv("NCCL_MULTI_RANK_GPU_ENABLE");
  for (int q = 0; q < w->size; ++q)
    if (q != w->rank && uuids[static_cast<std::size_t>(q)] == mine)
      if (std::string t = shared_gpu_refusal(w->lib->version, w->lib->version_text(), multi_rank, w->rank, q, device);
          !t.empty())
        throw config_error(t);
  nccl_abi::unique_id id{};
  if (w->rank == 0) {
    const auto r = w->lib->get_unique_id(&id);
    if (r != nccl_abi::success)
      throw config_error("tutti::nccl: ncclGetUniqueId: " + w->lib->text(r) + " (NCCL needs a network interface)");
  }
  w->ctl.broadcast(fp, reinterpret_cast<std::byte*>(&id), sizeof id, 0, wc);
  nccl_abi::config cfg = nccl_config();
  nccl_abi::comm_t c = nullptr;
  const auto r = w->lib->comm_init_rank_config(&c, w->size, id, w->rank, &cfg);
  if (r != nccl_abi::success && r != nccl_abi::in_progress) {
    if (c) w->lib->comm_abort(c);
    throw config_error("tutti::nccl: ncclCommInitRankConfig on rank " + std::to_string(w->rank) + " (device " +
                       std::to_string(device) + "): " + w->lib->text(r));
  }
  w->comm = c;
  w->settle(c, r, "ncclCommInitRankConfig", wc);
  w->work = std::make_unique<stream_work>("tutti::nccl", prop.multiProcessorCount * 2);
  w->checked.emplace(device);
  return w;
}

}  // namespace detail::device

/// The NCCL transport (see the file comment). Value type; copies share the group's state.
class nccl {
 public:
  using memory_kind = device_memory;
  using stream_type = cudaStream_t;
  /// automatic runs NCCL's collectives (algo::native) wherever it can.
  static constexpr bool native_first = true;
  /// Whether NCCL reduces T with Op itself (else tutti's ring runs, with tutti's kernels).
  template <class T, class Op>
  static constexpr bool native_reduces = detail::device::nccl_type<T>() >= 0 && detail::device::nccl_op<Op>() >= 0;

  /// Joins the job the environment describes, every rank on this host (the host side over
  /// `tutti::shm`), on device `LOCAL_RANK % device count` (or `TUTTI_CUDA_DEVICE`). Across
  /// hosts: `over(tutti::tcp::from_env())`. `config_error` without a device or without NCCL.
  static nccl from_env() {
    const config cfg = config::from_env();
    job_env job = job_env::from_env();
    if (job.local_world_size != job.world_size)
      throw config_error("tutti::nccl::from_env: the job spans hosts (" + std::to_string(job.local_world_size) + " of " +
                         std::to_string(job.world_size) + " ranks here); make its host side a tutti::tcp: "
                         "tutti::nccl::over(tutti::tcp::from_env())");
    const int device = detail::device::pick_device(job.local_rank, "tutti::nccl");
    detail::device::nccl_library::get();  // a missing library is said before the host side starts
    job.job_id += ".nccl";  // its own rendezvous: the program may run a tutti::shm job beside it
    return over(shm::create(job, cfg), device, cfg.timeout);
  }

  /// Over a host transport of the same ranks (shm, tcp; inproc for a 1-rank job), on `device`
  /// (-1: the host transport's rank % device count).
  template <transport Host>
  static nccl over(Host host, int device = -1, std::chrono::milliseconds timeout = config::from_env().timeout) {
    static_assert(std::is_same_v<typename transport_traits<Host>::memory, host_memory>,
                  "tutti::nccl::over: the host side needs a transport of host memory");
    if (device < 0) device = detail::device::pick_device(host.rank(), "tutti::nccl");
    else detail::device::device_count("tutti::nccl");
    nccl t;
    t.w_ = detail::device::make_nccl_world(detail::device::control(std::move(host)), device, 0, timeout);
    return t;
  }

  int rank() const noexcept { return w_->rank; }
  int size() const noexcept { return w_->size; }
  int device() const noexcept { return w_->dev->device; }
  /// The NCCL library's version ("2.28.9") and where it was loaded from.
  std::string library_version() const { return w_->lib->version_text(); }
  const std::string& library_path() const { return w_->lib->path; }

  // ---- streams --------------------------------------------------------------------------

  void bind_stream(const cudaStream_t* s) {
    auto& w = *w_;
    if (const std::string f = w.dev->failed(); !f.empty()) {
      w.abort_comm();
      throw error(errc::aborted, w.call_name + ": unusable after an earlier failure of its device work: " + f);
    }
    if (w.broken || !w.comm) throw error(errc::aborted, w.call_name + ": the NCCL communicator was aborted");
    w.activate();
    w.work->bind(s);
  }

  std::shared_ptr<detail::operation_state> completion(const wait_context& wc) {
    auto& w = *w_;
    w.work->ended();
    return detail::device::stream_completion(w.dev, w.stream(), wc, w.call_name, nullptr);
  }

  // ---- the memory seam ------------------------------------------------------------------

  void copy(std::byte* dst, const std::byte* src, std::size_t n) { w_->work->copy(dst, src, n); }
  template <class T, class Op>
  void combine(T* out, const T* a, const T* b, std::size_t n, const Op& op) {
    w_->work->combine(out, a, b, n, op);
  }
  template <class T>
  void divide(T* data, std::size_t n, int divisor) {
    w_->work->divide(data, n, divisor);
  }
  std::byte* scratch(int slot, std::size_t bytes) { return w_->work->scratch(slot, bytes); }

  // ---- messages: ncclSend / ncclRecv on the stream ----------------------------------------

  void send(int peer, const header& h, const std::byte* data, const wait_context& wc) {
    (*w_->checked)(data, h.bytes, "tutti::nccl send", "the data sent");
    if (h.fp.coll == collective::send_recv) w_->ctl.send(peer, header{h.fp, 0}, nullptr, wc);  // the pair agrees
    auto& w = *w_;
    w.settle(w.comm, w.lib->send(data, h.bytes, detail::nccl_abi::uint8, peer, w.comm, w.stream()), "ncclSend", wc);
  }
  void recv(int peer, const header& h, std::byte* data, const wait_context& wc) {
    (*w_->checked)(data, h.bytes, "tutti::nccl recv", "the data received");
    if (h.fp.coll == collective::send_recv) w_->ctl.recv(peer, header{h.fp, 0}, nullptr, wc);
    auto& w = *w_;
    w.settle(w.comm, w.lib->recv(data, h.bytes, detail::nccl_abi::uint8, peer, w.comm, w.stream()), "ncclRecv", wc);
  }
  void sendrecv(int to, const header& hs, const std::byte* sdata, int from, const header& hr, std::byte* rdata,
                const wait_context& wc) {
    (*w_->checked)(sdata, hs.bytes, "tutti::nccl send", "the data sent");
    (*w_->checked)(rdata, hr.bytes, "tutti::nccl recv", "the data received");
    if (hs.fp.coll == collective::send_recv)
      w_->ctl.sendrecv(to, header{hs.fp, 0}, nullptr, from, header{hr.fp, 0}, nullptr, wc);
    auto& w = *w_;
    grouped(wc, "ncclSend/ncclRecv", [&](auto&& check) {
      check(w.lib->send(sdata, hs.bytes, detail::nccl_abi::uint8, to, w.comm, w.stream()), "ncclSend");
      check(w.lib->recv(rdata, hr.bytes, detail::nccl_abi::uint8, from, w.comm, w.stream()), "ncclRecv");
    });
  }

  /// A sub-group made by its members alone (a fresh NCCL communicator among them); the
  /// communicator uses `split_sub` instead.
  nccl sub(std::span<const int> members, std::uint64_t context) const {
    nccl t;
    t.w_ = detail::device::make_nccl_world(w_->ctl.sub(members, context), w_->dev->device, context, w_->timeout);
    return t;
  }
  /// A sub-group by `ncclCommSplit`, every rank of this group taking part.
  std::optional<nccl> split_sub(std::span<const int> members, bool member, std::uint64_t context) const {
    auto& w = *w_;
    w.activate();
    int key = 0;
    for (std::size_t i = 0; i < members.size(); ++i)
      if (members[i] == w.rank) key = static_cast<int>(i);
    const int color = member ? static_cast<int>(context & 0x7fffffffu) : detail::nccl_abi::split_nocolor;
    detail::nccl_abi::config cfg = detail::device::nccl_config();
    detail::nccl_abi::comm_t child = nullptr;  // written by NCCL's thread until the split settles
    const wait_context wc{w.timeout, "ncclCommSplit", nullptr};
    w.settle(w.comm, w.lib->comm_split(w.comm, color, key, &child, &cfg), "ncclCommSplit", wc);
    if (!member) return std::nullopt;
    if (!child) throw error(errc::aborted, w.call_name + ": ncclCommSplit gave no communicator to a member");
    auto g = std::make_shared<detail::device::nccl_world>();
    g->lib = w.lib;
    g->ctl = w.ctl.sub(members, context);
    g->rank = g->ctl.rank();
    g->size = g->ctl.size();
    g->timeout = w.timeout;
    g->dev = std::make_shared<detail::device::device_state>();
    g->dev->device = w.dev->device;
    g->call_name = "tutti::nccl (NCCL " + w.lib->version_text() + ") on rank " + std::to_string(g->rank) + " of a group";
    g->comm = child;
    g->settle(child, detail::nccl_abi::in_progress, "ncclCommSplit (the new communicator)", wc);
    g->work = std::make_unique<detail::device::stream_work>("tutti::nccl", w.work->max_blocks());
    g->checked.emplace(g->dev->device);
    nccl t;
    t.w_ = std::move(g);
    return t;
  }

  void note(std::string_view what) noexcept { w_->ctl.note(what); }
  void fail(std::string_view what) noexcept {
    w_->ctl.fail(what);
    w_->abort_comm();
  }
  void exchange(const fingerprint& fp, const std::byte* mine, std::byte* all, std::size_t bytes, const wait_context& wc) {
    w_->ctl.all_gather(fp, mine, all, bytes, wc);
  }

  // ---- NCCL's collectives (algo::native) ------------------------------------------------------

  /// Every rank's fingerprint, compared on the host: `mismatch_error` before NCCL sees a call
  /// that disagrees.
  bool native_agree(const fingerprint& fp, const wait_context& wc, bool, bool = false) {
    w_->ctl.all_gather(fp, nullptr, nullptr, 0, wc);
    return false;
  }

  template <class T>
  void native_broadcast(T* buf, std::size_t n, int root, const fingerprint& fp, const wait_context& wc, bool) {
    named(fp);
    on_device(buf, n * sizeof(T), nullptr, 0);
    auto& w = *w_;
    w.settle(w.comm, w.lib->broadcast(buf, buf, n * sizeof(T), detail::nccl_abi::uint8, root, w.comm, w.stream()),
             "ncclBroadcast", wc);
  }
  template <class T, class Op>
    requires(native_reduces<T, Op>)
  void native_reduce(const T* in, T* out, std::size_t n, int root, const Op&, const fingerprint& fp, const wait_context& wc,
                     bool) {
    named(fp);
    on_device(in, n * sizeof(T), out, rank() == root ? n * sizeof(T) : 0);
    auto& w = *w_;
    w.settle(w.comm, w.lib->reduce(in, out, n, type<T>(), detail::device::nccl_op<Op>(), root, w.comm, w.stream()),
             "ncclReduce", wc);
  }
  template <class T, class Op>
    requires(native_reduces<T, Op>)
  void native_all_reduce(const T* in, T* out, std::size_t n, const Op&, const fingerprint& fp, const wait_context& wc,
                         bool) {
    named(fp);
    on_device(in, n * sizeof(T), out, n * sizeof(T));
    auto& w = *w_;
    w.settle(w.comm, w.lib->all_reduce(in, out, n, type<T>(), detail::device::nccl_op<Op>(), w.comm, w.stream()),
             "ncclAllReduce", wc);
  }
  template <class T>
  void native_gather(const T* in, T* out, std::size_t n, int root, const fingerprint& fp, const wait_context& wc, bool) {
    named(fp);
    on_device(in, n * sizeof(T), out, rank() == root ? n * sizeof(T) * static_cast<std::size_t>(size()) : 0);
    auto& w = *w_;
    const std::size_t bytes = n * sizeof(T);
    if (w.lib->gather) {
      w.settle(w.comm, w.lib->gather(in, out, bytes, detail::nccl_abi::uint8, root, w.comm, w.stream()), "ncclGather", wc);
      return;
    }
    const bool at_root = rank() == root;
    if (at_root) copy(byte_ptr(out) + bytes * static_cast<std::size_t>(root), byte_ptr(in), bytes);
    grouped(wc, "gather (ncclSend/ncclRecv)", [&](auto&& check) {
      if (!at_root) return check(w.lib->send(in, bytes, detail::nccl_abi::uint8, root, w.comm, w.stream()), "ncclSend");
      for (int q = 0; q < size(); ++q)
        if (q != root)
          check(w.lib->recv(byte_ptr(out) + bytes * static_cast<std::size_t>(q), bytes, detail::nccl_abi::uint8, q, w.comm,
                            w.stream()),
                "ncclRecv");
    });
  }
  template <class T>
  void native_all_gather(const T* in, T* out, std::size_t n, const fingerprint& fp, const wait_context& wc, bool) {
    named(fp);
    on_device(in, n * sizeof(T), out, n * sizeof(T) * static_cast<std::size_t>(size()));
    auto& w = *w_;
    w.settle(w.comm, w.lib->all_gather(in, out, n * sizeof(T), detail::nccl_abi::uint8, w.comm, w.stream()),
             "ncclAllGather", wc);
  }
  template <class T>
  void native_scatter(const T* in, T* out, std::size_t n, int root, const fingerprint& fp, const wait_context& wc, bool) {
    named(fp);
    on_device(rank() == root ? in : nullptr, n * sizeof(T) * static_cast<std::size_t>(size()), out, n * sizeof(T));
    auto& w = *w_;
    const std::size_t bytes = n * sizeof(T);
    if (w.lib->scatter) {
      w.settle(w.comm, w.lib->scatter(in, out, bytes, detail::nccl_abi::uint8, root, w.comm, w.stream()), "ncclScatter", wc);
      return;
    }
    const bool at_root = rank() == root;
    if (at_root) copy(byte_ptr(out), byte_ptr(in) + bytes * static_cast<std::size_t>(root), bytes);
    grouped(wc, "scatter (ncclSend/ncclRecv)", [&](auto&& check) {
      if (!at_root) return check(w.lib->recv(out, bytes, detail::nccl_abi::uint8, root, w.comm, w.stream()), "ncclRecv");
      for (int q = 0; q < size(); ++q)
        if (q != root)
          check(w.lib->send(byte_ptr(in) + bytes * static_cast<std::size_t>(q), bytes, detail::nccl_abi::uint8, q, w.comm,
                            w.stream()),
                "ncclSend");
    });
  }
  template <class T>
  void native_all_to_all(const T* in, T* out, std::size_t block, const fingerprint& fp, const wait_context& wc, bool) {
    named(fp);
    on_device(in, block * sizeof(T) * static_cast<std::size_t>(size()), out, block * sizeof(T) * static_cast<std::size_t>(size()));
    auto& w = *w_;
    const std::size_t bytes = block * sizeof(T);
    if (w.lib->all_to_all) {
      w.settle(w.comm, w.lib->all_to_all(in, out, bytes, detail::nccl_abi::uint8, w.comm, w.stream()), "ncclAlltoAll", wc);
      return;
    }
    const auto me = static_cast<std::size_t>(rank());
    copy(byte_ptr(out) + bytes * me, byte_ptr(in) + bytes * me, bytes);
    grouped(wc, "all_to_all (ncclSend/ncclRecv)", [&](auto&& check) {
      for (int q = 0; q < size(); ++q) {
        if (q == rank()) continue;
        const auto Q = static_cast<std::size_t>(q);
        check(w.lib->send(byte_ptr(in) + bytes * Q, bytes, detail::nccl_abi::uint8, q, w.comm, w.stream()), "ncclSend");
        check(w.lib->recv(byte_ptr(out) + bytes * Q, bytes, detail::nccl_abi::uint8, q, w.comm, w.stream()), "ncclRecv");
      }
    });
  }
  template <class T, class Op>
    requires(native_reduces<T, Op>)
  void native_reduce_scatter(const T* in, T* out, std::size_t n, const Op&, const fingerprint& fp, const wait_context& wc,
                             bool) {
    named(fp);
    on_device(in, n * sizeof(T) * static_cast<std::size_t>(size()), out, n * sizeof(T));
    auto& w = *w_;
    w.settle(w.comm, w.lib->reduce_scatter(in, out, n, type<T>(), detail::device::nccl_op<Op>(), w.comm, w.stream()),
             "ncclReduceScatter", wc);
  }
  void native_barrier(const fingerprint& fp, const wait_context& wc, bool) {
    named(fp);
    auto& w = *w_;
    std::byte* one = scratch(3, sizeof(int));  // an all_reduce of one int: every rank's stream has reached it
    w.settle(w.comm, w.lib->all_reduce(one, one, 1, detail::nccl_abi::int32, detail::nccl_abi::sum, w.comm, w.stream()),
             "ncclAllReduce (barrier)", wc);
  }
  template <class T>
  void native_all_gather_v(const T* in, T* out, const block_counts& b, const fingerprint& fp, const wait_context& wc, bool) {
    named(fp);
    on_device(in, b.count(rank()) * sizeof(T), out, b.total * sizeof(T));
    auto& w = *w_;
    const auto me = rank();
    copy(byte_ptr(out) + b.offset(me) * sizeof(T), byte_ptr(in), b.count(me) * sizeof(T));
    grouped(wc, "all_gather_v (ncclSend/ncclRecv)", [&](auto&& check) {
      for (int q = 0; q < size(); ++q) {
        if (q == me) continue;
        check(w.lib->send(in, b.count(me) * sizeof(T), detail::nccl_abi::uint8, q, w.comm, w.stream()), "ncclSend");
        check(w.lib->recv(byte_ptr(out) + b.offset(q) * sizeof(T), b.count(q) * sizeof(T), detail::nccl_abi::uint8, q,
                          w.comm, w.stream()),
              "ncclRecv");
      }
    });
  }
  template <class T>
  void native_gather_v(const T* in, std::size_t in_count, T* out, const block_counts& b, int root, const fingerprint& fp,
                       const wait_context& wc, bool) {
    named(fp);
    on_device(in, in_count * sizeof(T), out, rank() == root ? b.total * sizeof(T) : 0);
    auto& w = *w_;
    const bool at_root = rank() == root;
    if (at_root) copy(byte_ptr(out) + b.offset(root) * sizeof(T), byte_ptr(in), in_count * sizeof(T));
    grouped(wc, "gather_v (ncclSend/ncclRecv)", [&](auto&& check) {
      if (!at_root) return check(w.lib->send(in, in_count * sizeof(T), detail::nccl_abi::uint8, root, w.comm, w.stream()), "ncclSend");
      for (int q = 0; q < size(); ++q)
        if (q != root)
          check(w.lib->recv(byte_ptr(out) + b.offset(q) * sizeof(T), b.count(q) * sizeof(T), detail::nccl_abi::uint8, q,
                            w.comm, w.stream()),
                "ncclRecv");
    });
  }
  template <class T>
  void native_scatter_v(const T* in, const block_counts& b, T* out, std::size_t out_count, int root, const fingerprint& fp,
                        const wait_context& wc, bool) {
    named(fp);
    on_device(rank() == root ? in : nullptr, b.total * sizeof(T), out, out_count * sizeof(T));
    auto& w = *w_;
    const bool at_root = rank() == root;
    if (at_root) copy(byte_ptr(out), byte_ptr(in) + b.offset(root) * sizeof(T), out_count * sizeof(T));
    grouped(wc, "scatter_v (ncclSend/ncclRecv)", [&](auto&& check) {
      if (!at_root) return check(w.lib->recv(out, out_count * sizeof(T), detail::nccl_abi::uint8, root, w.comm, w.stream()), "ncclRecv");
      for (int q = 0; q < size(); ++q)
        if (q != root)
          check(w.lib->send(byte_ptr(in) + b.offset(q) * sizeof(T), b.count(q) * sizeof(T), detail::nccl_abi::uint8, q,
                            w.comm, w.stream()),
                "ncclSend");
    });
  }
  template <class T>
  void native_all_to_all_v(const T* in, const block_counts& send, T* out, const block_counts& recv, const fingerprint& fp,
                           const wait_context& wc, bool) {
    named(fp);
    on_device(in, send.total * sizeof(T), out, recv.total * sizeof(T));
    auto& w = *w_;
    const auto me = rank();
    copy(byte_ptr(out) + recv.offset(me) * sizeof(T), byte_ptr(in) + send.offset(me) * sizeof(T), recv.count(me) * sizeof(T));
    grouped(wc, "all_to_all_v (ncclSend/ncclRecv)", [&](auto&& check) {
      for (int q = 0; q < size(); ++q) {
        if (q == me) continue;
        check(w.lib->send(byte_ptr(in) + send.offset(q) * sizeof(T), send.count(q) * sizeof(T), detail::nccl_abi::uint8, q,
                          w.comm, w.stream()),
              "ncclSend");
        check(w.lib->recv(byte_ptr(out) + recv.offset(q) * sizeof(T), recv.count(q) * sizeof(T), detail::nccl_abi::uint8, q,
                          w.comm, w.stream()),
              "ncclRecv");
      }
    });
  }
  /// One ncclReduce per rank (its block, to it), grouped: NCCL has no reduce_scatter of uneven
  /// blocks.
  template <class T, class Op>
    requires(native_reduces<T, Op>)
  void native_reduce_scatter_v(const T* in, T* out, const block_counts& b, const Op&, const fingerprint& fp,
                               const wait_context& wc, bool) {
    named(fp);
    on_device(in, b.total * sizeof(T), out, b.count(rank()) * sizeof(T));
    auto& w = *w_;
    grouped(wc, "reduce_scatter_v (ncclReduce)", [&](auto&& check) {
      for (int q = 0; q < size(); ++q)
        check(w.lib->reduce(byte_ptr(in) + b.offset(q) * sizeof(T), q == rank() ? static_cast<void*>(out) : nullptr, b.count(q),
                            type<T>(), detail::device::nccl_op<Op>(), q, w.comm, w.stream()),
              "ncclReduce");
    });
  }

 private:
  template <class T>
  static constexpr int type() {
    return detail::device::nccl_type<T>();
  }
  static std::byte* byte_ptr(const void* p) { return static_cast<std::byte*>(const_cast<void*>(p)); }
  void named(const fingerprint& fp) {
    w_->call_name = std::string(collective_name(fp.coll)) + "(native) on rank " + std::to_string(w_->rank) +
                    " of tutti::nccl (NCCL " + w_->lib->version_text() + ")";
  }
  /// The call's buffers lie on this rank's device (checked once per allocation): NCCL would
  /// fault or hang on another's.
  void on_device(const void* in, std::size_t in_bytes, const void* out, std::size_t out_bytes) {
    (*w_->checked)(in, in_bytes, w_->call_name.c_str(), "in");
    (*w_->checked)(out, out_bytes, w_->call_name.c_str(), "out");
  }
  /// `f(check)`'s NCCL calls as one group, settled: a call that fails inside it is acted on
  /// (the communicator aborted, the error raised) only after ncclGroupEnd (run_group).
  template <class F>
  void grouped(const wait_context& wc, const char* what, F&& f) {
    auto& w = *w_;
    const detail::device::group_outcome g = detail::device::run_group(*w.lib, std::forward<F>(f));
    if (g.error != detail::nccl_abi::success) w.fail(g.error, g.failed);
    w.settle(w.comm, g.end, what, wc);
  }

  std::shared_ptr<detail::device::nccl_world> w_;
};

static_assert(transport<nccl> && own_memory<nccl> && native_collectives<nccl> && stream_ordered<nccl> &&
              host_exchange<nccl> && collective_sub<nccl> && failure_notices<nccl>);
static_assert(nccl::native_reduces<float, op::sum> && !nccl::native_reduces<float, op::band>);

}  // namespace tutti
