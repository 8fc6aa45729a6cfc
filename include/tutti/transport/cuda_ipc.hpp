/// \file
/// `tutti::cuda_ipc`: ranks of one host, each with its CUDA device (several ranks may share
/// one), processes or threads, running every collective with tutti's own kernels on device
/// memory (`tutti::device_view`), enqueued on the caller's stream. Compile with nvcc (a .cu
/// file) and include tutti/tutti.hpp too (the communicator and the threads launcher: a
/// transport header brings neither); CMake: `target_link_libraries(app tutti::cuda)`.
///
///     auto comm = tutti::communicator<tutti::cuda_ipc>::from_env();   // under tuttirun
///     comm.all_reduce(tutti::device_view(d, n), tutti::op::sum{}, stream);  // returns a request
///     tutti::cuda_ipc::run(4, [](auto& comm) { ... });                  // 4 threads instead
///
/// How a call runs (see device/plans.hpp for each collective's plan):
/// 1. The host side agrees first: one all-gather over the host transport (`tutti::shm` between
///    processes, `tutti::inproc` between threads) of each rank's record: where its buffers lie
///    (a pointer, or a CUDA IPC handle of the allocation and an offset) and, for the
///    v-collectives, the offsets and counts only it knows. The message carries the call's
///    fingerprint, so ranks that disagree get `mismatch_error` naming both ranks and both values
///    before any kernel runs; counts that disagree between ranks are found here too.
/// 2. Each rank builds its plan (pull only: it writes its own output, reading its peers' memory)
///    and enqueues it on the stream:
///    - ranks that share a CUDA context (threads), or every rank under MPS
///      (`TUTTI_CUDA_IPC_SYNC=flags`), run it as one kernel whose blocks meet the same block of
///      every peer at a barrier of flags in device memory before, between and after the phases:
///      nothing more on the host. Grids are small enough for every rank's kernel to be resident
///      at once, and every wait is bounded (kernels.cuh);
///    - processes (without MPS their kernels never run at once, so no kernel may wait for
///      another's) synchronise in stream order: each records an IPC event when its input is
///      ready, the host all-gather above tells every rank that every peer has recorded it, and
///      each stream waits for its peers' events before its kernel; after the kernel (and between
///      the two-shot's phases) the same again, so that no rank overwrites a buffer a peer still
///      reads.
/// 3. The call returns a request that completes when the stream has done the work (or, without
///    a stream, waits for it), with the communicator's deadline, naming the peer a late barrier
///    waited for.
///
/// all_reduce is one-shot (every rank reduces every rank's input: one kernel, least latency)
/// up to `TUTTI_CUDA_IPC_ONE_SHOT` bytes (256 KiB), two-shot above (each rank reduces its block,
/// then copies the others' blocks: each byte read twice and written twice in total). Reductions
/// run in rank order on every rank, so results are bitwise identical on every rank. float16 and
/// bfloat16 accumulate in float. User ops on user types work when they are `__device__`
/// function objects.
///
/// Between processes, a buffer must come from cudaMalloc (CUDA IPC exports nothing else; a
/// `usage_error` says so otherwise). Send and receive meet on the host (the sender offers its
/// buffer, the receiver's stream waits for the sender's event and copies, then tells the sender,
/// whose stream waits for the copy): so a send blocks its host thread until the receiver posts
/// its receive; sends and receives posted in a batch (`comm.fuse()`) go pairwise without
/// deadlock.
#pragma once

#if !defined(__CUDACC__)
#error "tutti/transport/cuda_ipc.hpp holds device code (tutti's kernels): compile this file with nvcc, as a .cu file (CMake: tutti::cuda)"
#endif

#include <cuda_runtime.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tutti/bootstrap/env.hpp"
#include "tutti/core/config.hpp"
#include "tutti/core/counts.hpp"
#include "tutti/core/error.hpp"
#include "tutti/core/fingerprint.hpp"
#include "tutti/core/memory.hpp"
#include "tutti/transport/capabilities.hpp"
#include "tutti/transport/device/control.hpp"
#include "tutti/transport/device/cuda_runtime.hpp"
#include "tutti/transport/device/ipc_buffers.hpp"
#include "tutti/transport/device/kernels.cuh"
#include "tutti/transport/device/plans.hpp"
#include "tutti/transport/device/stream_work.cuh"
#include "tutti/transport/inproc.hpp"
#include "tutti/transport/shm.hpp"
#include "tutti/transport/toolkit/errors.hpp"

namespace tutti {

namespace detail::device {

/// What one rank publishes in a call's agreement: its buffers, the allocations it found freed
/// since its last record (its peers close their mappings of them), and for the v-collectives
/// three words per peer (an offset, a count, a count expected), read by `ipc_world::words`.
struct call_record {
  buffer_token in, out;
  retired_ids retired{};
};

/// A cuda_ipc group's state on one rank, shared by the transport's copies.
struct ipc_world {
  control ctl;
  int rank = 0, size = 1;
  std::shared_ptr<device_state> dev;
  std::chrono::milliseconds timeout{300000};
  std::vector<char> local;       ///< per rank: whether it runs in this process (by pid)
  bool all_local = false;        ///< every rank in this process (threads)
  bool shares_process = false;   ///< another rank runs in this process (shares its CUDA context)
  bool flags = false;            ///< barriers in kernels (else events and the host)
  int flag_blocks = 1;           ///< the grid of every kernel with barriers (agreed)
  std::size_t one_shot_bytes = std::size_t{256} << 10;
  std::size_t stage_bytes = 0;
  std::unique_ptr<stream_work> work;  ///< the streams, the scratch, the memory seam
  std::byte* sync_mem = nullptr;                  ///< flags, then the staging buffer (cudaMalloc)
  std::vector<unsigned long long*> flags_of;      ///< every rank's flags, as reached here
  std::vector<const std::byte*> stage_of;         ///< every rank's staging buffer
  barrier_report* report = nullptr;               ///< host-mapped, one per block
  barrier_report* report_dev = nullptr;
  unsigned int* abort_word = nullptr;             ///< host-mapped: this rank's kernels leave their barriers
  unsigned int* abort_dev = nullptr;
  stream_handle abort_stream;                     ///< sets this rank's gave-up word when its host fails
  bool gave_up = false;
  // Events mode: mine, and my peers' (opened here). p2p: per peer, mine and theirs.
  event_handle ready, mid, done;
  std::vector<event_handle> peer_ready, peer_mid, peer_done;
  std::vector<event_handle> send_ready, recv_done;            ///< mine, per peer
  std::vector<event_handle> peer_send_ready, peer_recv_done;  ///< theirs for me, per peer
  std::unique_ptr<ipc_buffers> bufs;
  std::uint64_t calls = 0;
  std::uint64_t reported_to = 0;                  ///< the calls whose reports a request already reads
  std::vector<const void*> loaded;                ///< barrier kernels loaded before any launch (agreed)
  std::string call_name = "cuda_ipc";

  ipc_world() = default;
  ipc_world(const ipc_world&) = delete;
  ipc_world& operator=(const ipc_world&) = delete;
  /// Waits, bounded, for this group's device work before its memory goes: a kernel may wait on a
  /// dead peer's event forever (between processes), so past the bound this rank's kernels are
  /// told to leave their barriers, and if the work still does not end its memory is left
  /// allocated (freeing it would wait, or pull memory from under a kernel) rather than hang.
  ~ipc_world() {
    if (dev) cudaSetDevice(dev->device);
    auto idle = [&] {
      if (work && !work->quiet()) return false;
      if (abort_stream.get() && cudaStreamQuery(abort_stream.get()) == cudaErrorNotReady) return false;
      cudaGetLastError();
      return true;
    };
    bool quiet = wait_bounded(idle, teardown_bound(timeout));
    if (!quiet && abort_word) {
      *reinterpret_cast<volatile unsigned int*>(abort_word) = 1;
      quiet = wait_bounded(idle, std::chrono::milliseconds(2000));
    }
    // Threads: a peer's kernel may still read this rank's flags; its barriers are bounded, and
    // nothing in one process waits on another's events.
    if (quiet && all_local) cudaDeviceSynchronize();
    if (!quiet) {
      (void)work.release();
      (void)bufs.release();
      cudaGetLastError();
      return;
    }
    work.reset();
    bufs.reset();
    if (sync_mem) cudaFree(sync_mem);
    if (report) cudaFreeHost(report);
    if (abort_word) cudaFreeHost(abort_word);
    cudaGetLastError();
  }

  /// This rank gives up: its kernels leave their barriers, and its gave-up word (in its flags,
  /// which its peers' kernels read) is set by a copy on a stream of its own, so that peers'
  /// kernels stop waiting for it now rather than at their deadline. Never throws.
  void give_up() noexcept {
    if (abort_word) *reinterpret_cast<volatile unsigned int*>(abort_word) = 1;
    if (gave_up || !sync_mem || !abort_stream.get() || !dev) return;
    gave_up = true;
    cudaSetDevice(dev->device);
    cudaMemcpyAsync(sync_mem + gave_up_word * sizeof(unsigned long long), abort_word, sizeof(unsigned int),
                    cudaMemcpyHostToDevice, abort_stream.get());
    if (work) work->ended_on_failure();
    cudaGetLastError();
  }

  cudaStream_t stream() const noexcept { return work->stream(); }
  void activate() const { cuda_check(cudaSetDevice(dev->device), "cudaSetDevice"); }
};

/// Start-up of a group: what every rank has (pid, device, its multiprocessors, its UUID), the
/// synchronisation mode, the flags and staging buffer, the events, all exchanged over `ctl`.
TUTTI_COLD inline std::shared_ptr<ipc_world> make_ipc_world(control ctl, int device, std::uint64_t context,
                                                          std::chrono::milliseconds timeout) {
  auto w = std::make_shared<ipc_world>();
  w->ctl = std::move(ctl);
  w->rank = w->ctl.rank();
  w->size = w->ctl.size();
  w->timeout = timeout;
  if (w->size > max_ranks)
    throw config_error("tutti::cuda_ipc: " + std::to_string(w->size) + " ranks; at most " + std::to_string(max_ranks) +
                       " share a host's devices this way (use tutti::nccl)");
  w->dev = std::make_shared<device_state>();
  w->dev->device = device;
  w->activate();
  const wait_context wc{timeout, "start-up", nullptr};
  fingerprint fp;
  fp.context = context;
  fp.coll = collective::group;
  fp.seq = 0x637564615f697063ull;  // "cuda_ipc"

  // 1. Who is where.
  cudaDeviceProp prop{};
  cuda_check(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
  struct info {
    std::int64_t pid;
    std::int32_t device, sms;
    char uuid[16];
    std::int32_t mode;  // 0 auto, 1 events, 2 flags
    std::int32_t pad;
  };
  info mine{};
  mine.pid = ::getpid();
  mine.device = device;
  mine.sms = prop.multiProcessorCount;
  std::memcpy(mine.uuid, &prop.uuid, sizeof mine.uuid);
  if (const char* m = tutti::detail::getenv_nonempty("TUTTI_CUDA_IPC_SYNC")) {
    const std::string_view v(m);
    if (v == "events") mine.mode = 1;
    else if (v == "flags") mine.mode = 2;
    else if (v != "auto") throw config_error("TUTTI_CUDA_IPC_SYNC='" + std::string(v) + "': use auto, events or flags");
  }
  std::vector<info> all(static_cast<std::size_t>(w->size));
  w->ctl.all_gather(fp, reinterpret_cast<const std::byte*>(&mine), reinterpret_cast<std::byte*>(all.data()), sizeof(info), wc);
  std::vector<std::int64_t> pids;
  for (const info& i : all) pids.push_back(i.pid);
  w->local = same_process_peers(pids, w->rank);
  w->all_local = tutti::detail::device::all_local(w->local);
  w->shares_process = std::count(w->local.begin(), w->local.end(), char{1}) > 1;
  for (int q = 0; q < w->size; ++q)
    if (all[static_cast<std::size_t>(q)].mode != mine.mode)
      throw config_error("tutti::cuda_ipc: TUTTI_CUDA_IPC_SYNC differs between rank " + std::to_string(w->rank) +
                         " and rank " + std::to_string(q) + " (every rank must use the same)");
  w->flags = mine.mode == 2 || (mine.mode == 0 && w->all_local);
  int min_per_rank_sms = 1 << 30, min_sms = 1 << 30;
  for (const info& i : all) {
    int sharing = 0;
    for (const info& j : all) sharing += std::memcmp(i.uuid, j.uuid, sizeof i.uuid) == 0;
    min_per_rank_sms = std::min(min_per_rank_sms, std::max(1, i.sms / std::max(1, sharing)));
    min_sms = std::min(min_sms, i.sms);
  }
  // Kernels with barriers: every rank's whole grid resident at once (one block per
  // multiprocessor, shared among the ranks of a device), and at most 64 blocks (the flags).
  w->flag_blocks = std::clamp(min_per_rank_sms, 1, flag_blocks_max);
  // Threads of this process on other devices: read each other's memory directly.
  for (int q = 0; q < w->size; ++q) {
    const info& i = all[static_cast<std::size_t>(q)];
    if (w->local[static_cast<std::size_t>(q)] && i.device != device) {
      int can = 0;
      cuda_check(cudaDeviceCanAccessPeer(&can, device, i.device), "cudaDeviceCanAccessPeer");
      if (!can)
        throw config_error("tutti::cuda_ipc: device " + std::to_string(device) + " cannot access device " +
                           std::to_string(i.device) + " directly (no peer access between them): use tutti::nccl");
      const cudaError_t e = cudaDeviceEnablePeerAccess(i.device, 0);
      if (e != cudaSuccess && e != cudaErrorPeerAccessAlreadyEnabled) cuda_fail(e, "cudaDeviceEnablePeerAccess");
      cudaGetLastError();
    }
  }
  if (const auto b = tutti::detail::env_int("TUTTI_CUDA_IPC_ONE_SHOT", 0, 1L << 30))
    w->one_shot_bytes = static_cast<std::size_t>(*b);
  w->stage_bytes = w->one_shot_bytes;

  // 2. Flags (with the gave-up word) and staging buffer, host-mapped reports, the own streams.
  cuda_check(cudaMalloc(&w->sync_mem, flag_bytes + w->stage_bytes + 16), "cudaMalloc (cuda_ipc's flags and staging)");
  cuda_check(cudaMemset(w->sync_mem, 0, flag_bytes), "cudaMemset");
  cuda_check(cudaHostAlloc(reinterpret_cast<void**>(&w->report), report_slots * sizeof(barrier_report), cudaHostAllocMapped),
             "cudaHostAlloc (cuda_ipc's reports)");
  std::memset(w->report, 0, report_slots * sizeof(barrier_report));
  cuda_check(cudaHostGetDevicePointer(reinterpret_cast<void**>(&w->report_dev), w->report, 0), "cudaHostGetDevicePointer");
  cuda_check(cudaHostAlloc(reinterpret_cast<void**>(&w->abort_word), sizeof(unsigned int), cudaHostAllocMapped),
             "cudaHostAlloc (cuda_ipc's abort word)");
  *w->abort_word = 0;
  cuda_check(cudaHostGetDevicePointer(reinterpret_cast<void**>(&w->abort_dev), w->abort_word, 0), "cudaHostGetDevicePointer");
  w->work = std::make_unique<stream_work>("tutti::cuda_ipc", prop.multiProcessorCount * 2);
  w->abort_stream = stream_handle::create();
  w->bufs = std::make_unique<ipc_buffers>(device, w->local);
  cuda_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");

  buffer_token sync_token = w->bufs->export_buffer(w->sync_mem, flag_bytes + w->stage_bytes, "cuda_ipc's flags");
  std::vector<buffer_token> tokens(static_cast<std::size_t>(w->size));
  w->ctl.all_gather(fp, reinterpret_cast<const std::byte*>(&sync_token), reinterpret_cast<std::byte*>(tokens.data()),
                    sizeof(buffer_token), wc);
  for (int q = 0; q < w->size; ++q) {
    std::byte* base = q == w->rank ? w->sync_mem : w->bufs->import_buffer(q, tokens[static_cast<std::size_t>(q)]);
    w->flags_of.push_back(reinterpret_cast<unsigned long long*>(base));
    w->stage_of.push_back(base + flag_bytes);
  }

  // 3. Events: ready, mid, done (events mode), and per peer for send and receive (always).
  // Interprocess where a peer runs in another process; a peer of this process takes the event
  // itself (a process cannot open its own IPC handles).
  const bool ipc = !w->all_local;
  const auto P = static_cast<std::size_t>(w->size);
  w->ready = event_handle::create(ipc);
  w->mid = event_handle::create(ipc);
  w->done = event_handle::create(ipc);
  for (std::size_t q = 0; q < P; ++q) {
    w->send_ready.push_back(event_handle::create(ipc));
    w->recv_done.push_back(event_handle::create(ipc));
  }
  // What each rank publishes: 3 + 2p event handles (or pointers, between threads).
  struct event_name {
    cudaIpcEventHandle_t h;
    std::uint64_t raw;
  };
  auto name_of = [&](const event_handle& e) {
    event_name n{};
    n.raw = reinterpret_cast<std::uintptr_t>(e.get());
    if (ipc) cuda_check(cudaIpcGetEventHandle(&n.h, e.get()), "cudaIpcGetEventHandle");
    return n;
  };
  const std::size_t per_rank = 3 + 2 * P;
  std::vector<event_name> my_names;
  my_names.push_back(name_of(w->ready));
  my_names.push_back(name_of(w->mid));
  my_names.push_back(name_of(w->done));
  for (std::size_t q = 0; q < P; ++q) my_names.push_back(name_of(w->send_ready[q]));
  for (std::size_t q = 0; q < P; ++q) my_names.push_back(name_of(w->recv_done[q]));
  std::vector<event_name> names(per_rank * P);
  w->ctl.all_gather(fp, reinterpret_cast<const std::byte*>(my_names.data()), reinterpret_cast<std::byte*>(names.data()),
                    per_rank * sizeof(event_name), wc);
  auto open = [&](std::size_t q, std::size_t i) {
    const event_name& n = names[q * per_rank + i];
    return w->local[q] ? event_handle::borrow(reinterpret_cast<cudaEvent_t>(n.raw)) : event_handle::open(n.h);
  };
  const auto me = static_cast<std::size_t>(w->rank);
  for (std::size_t q = 0; q < P; ++q) {
    if (q == me) {
      w->peer_ready.emplace_back();
      w->peer_mid.emplace_back();
      w->peer_done.emplace_back();
      w->peer_send_ready.emplace_back();
      w->peer_recv_done.emplace_back();
      continue;
    }
    w->peer_ready.push_back(open(q, 0));
    w->peer_mid.push_back(open(q, 1));
    w->peer_done.push_back(open(q, 2));
    w->peer_send_ready.push_back(open(q, 3 + me));      // q's data for me is ready
    w->peer_recv_done.push_back(open(q, 3 + P + me));   // q is done reading what I sent
  }
  return w;
}

}  // namespace detail::device

/// The CUDA IPC transport (see the file comment). Value type; copies share the group's state.
class cuda_ipc {
 public:
  using memory_kind = device_memory;
  using stream_type = cudaStream_t;
  /// automatic runs tutti's kernels (algo::native) for every collective.
  static constexpr bool native_first = true;

  /// Joins the job the environment describes (tuttirun, torchrun): every rank on this host,
  /// the host side over `tutti::shm`, device `LOCAL_RANK % device count` (or
  /// `TUTTI_CUDA_DEVICE`). `config_error` without a device.
  static cuda_ipc from_env() {
    const config cfg = config::from_env();
    job_env job = job_env::from_env();
    const int device = detail::device::pick_device(job.local_rank, "tutti::cuda_ipc");
    job.job_id += ".cuda_ipc";  // its own rendezvous: the program may run a tutti::shm job beside it
    return over(shm::create(job, cfg), device, cfg.timeout);
  }

  /// Over a host transport of the same ranks (`tutti::inproc` for threads, `tutti::shm` for the
  /// processes of a host), on `device` (-1: the host transport's rank % device count).
  template <transport Host>
  static cuda_ipc over(Host host, int device = -1, std::chrono::milliseconds timeout = config::from_env().timeout) {
    static_assert(std::is_same_v<typename transport_traits<Host>::memory, host_memory>,
                  "tutti::cuda_ipc::over: the host side needs a transport of host memory");
    if (device < 0) device = detail::device::pick_device(host.rank(), "tutti::cuda_ipc");
    else detail::device::device_count("tutti::cuda_ipc");
    cuda_ipc t;
    t.w_ = detail::device::make_ipc_world(detail::device::control(std::move(host)), device, 0, timeout);
    return t;
  }

  /// Runs `f(comm)` on `n` threads of this process, `comm` a `communicator<cuda_ipc,
  /// Algorithm>&` of rank 0..n-1 on device rank % device count (`TUTTI_CUDA_DEVICE`: all on
  /// that one), as `tutti::inproc::run` (whose communicators tutti/group/threads.hpp makes:
  /// include tutti/tutti.hpp).
  template <class Algorithm = default_algorithm, class F>
  static void run(int n, F&& f) {
    const auto timeout = config::from_env().timeout;
    inproc::run_wrapped<Algorithm>(
        n, [timeout](inproc t) { return cuda_ipc::over(std::move(t), -1, timeout); }, std::forward<F>(f));
  }

  int rank() const noexcept { return w_->rank; }
  int size() const noexcept { return w_->size; }
  /// The device this rank uses.
  int device() const noexcept { return w_->dev->device; }
  /// Whether the ranks synchronise inside kernels (threads, MPS) or by events through the host.
  bool in_kernel_barriers() const noexcept { return w_->flags; }

  // ---- streams --------------------------------------------------------------------------

  void bind_stream(const cudaStream_t* s) {
    auto& w = *w_;
    if (const std::string f = w.dev->failed(); !f.empty())
      throw error(errc::aborted, "tutti::cuda_ipc on rank " + std::to_string(w.rank) +
                                     ": unusable after an earlier failure of its device work: " + f);
    w.activate();
    if (s && w.flags && w.shares_process && (*s == nullptr || *s == cudaStreamLegacy))
      throw usage_error("tutti::cuda_ipc with ranks as threads: each rank needs a stream of its own; the legacy "
                        "default stream, which every thread shares, would run the ranks' kernels one after another "
                        "while each waits for the others (pass a stream from cudaStreamCreate, cudaStreamPerThread, "
                        "or none)");
    if (s) {
      cudaStreamCaptureStatus c = cudaStreamCaptureStatusNone;
      detail::device::cuda_check(cudaStreamIsCapturing(*s, &c), "cudaStreamIsCapturing");
      if (c != cudaStreamCaptureStatusNone)
        throw usage_error("tutti::cuda_ipc: a call cannot be captured into a CUDA graph (its ranks agree on the host "
                          "before every call, which a graph's replay would skip); use tutti::nccl in graphs");
    }
    w.work->bind(s);
  }

  /// A request for the work enqueued since the last one: with in-kernel barriers, it reads the
  /// reports of its calls' barriers (by their generations), done or not.
  std::shared_ptr<detail::operation_state> completion(const wait_context& wc) {
    auto& w = *w_;
    w.work->ended();
    const std::uint64_t first = w.reported_to + 1, last = w.calls;
    w.reported_to = w.calls;
    detail::device::late_reason why;
    if (w.flags && first <= last) {
      const auto kernel_timeout = std::chrono::milliseconds(detail::device::kernel_timeout_ns(wc.timeout) / 1000000);
      why = [world = w_, first, last, kernel_timeout] {
        return detail::device::read_reports(world->report, detail::device::report_slots, first, last, kernel_timeout);
      };
    }
    return detail::device::stream_completion(w.dev, w.stream(), wc, w.call_name, std::move(why));
  }

  /// How many of its peers' allocations this rank has mapped (CUDA IPC), and how many of its own
  /// it exported: as many as are alive, since a freed one is closed by its peers at the next call.
  std::size_t mapped_allocations() const noexcept { return w_->bufs->mapped(); }
  std::size_t exported_allocations() const noexcept { return w_->bufs->exported(); }

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
  /// Device scratch for tutti's schedules (slots 0-3), kept between calls.
  std::byte* scratch(int slot, std::size_t bytes) { return w_->work->scratch(slot, bytes); }

  // ---- messages (send, recv, and tutti's schedules over them) -----------------------------

  void send(int peer, const header& h, const std::byte* data, const wait_context& wc) {
    p2p(peer, &h, data, -1, nullptr, nullptr, wc);
  }
  void recv(int peer, const header& h, std::byte* data, const wait_context& wc) {
    p2p(-1, nullptr, nullptr, peer, &h, data, wc);
  }
  void sendrecv(int to, const header& hs, const std::byte* sdata, int from, const header& hr, std::byte* rdata,
                const wait_context& wc) {
    p2p(to, &hs, sdata, from, &hr, rdata, wc);
  }

  cuda_ipc sub(std::span<const int> members, std::uint64_t context) const {
    cuda_ipc t;
    auto ctl = w_->ctl.sub(members, context);
    t.w_ = detail::device::make_ipc_world(std::move(ctl), w_->dev->device, context, config::from_env().timeout);
    return t;
  }

  /// Last words (a usage error on this rank) its peers quote if it stays away.
  void note(std::string_view what) noexcept { w_->ctl.note(what); }

  /// This rank failed: its kernels and its peers' leave their barriers now (its gave-up word),
  /// and its peers' host calls quote `what`.
  void fail(std::string_view what) noexcept {
    w_->give_up();
    w_->ctl.fail(what);
  }

  /// The host-side all-gather (groups, v-collective counts).
  void exchange(const fingerprint& fp, const std::byte* mine, std::byte* all, std::size_t bytes, const wait_context& wc) {
    w_->ctl.all_gather(fp, mine, all, bytes, wc);
  }

  // ---- tutti's kernels for every collective (algo::native) ------------------------------------

  /// The agreement is part of every call (its records): nothing to do before.
  bool native_agree(const fingerprint&, const wait_context&, bool, bool = false) { return false; }

  template <class T>
  void native_broadcast(T* buf, std::size_t n, int root, const fingerprint& fp, const wait_context& wc, bool) {
    collective<T>(fp, wc, {buf, n * sizeof(T), buf, n * sizeof(T)}, op::sum{}, nullptr, false,
                  [&](const detail::device::call_view& v) { return detail::device::plans::broadcast(v, n * sizeof(T), root); });
  }
  template <class T, class Op>
  void native_reduce(const T* in, T* out, std::size_t n, int root, const Op& op, const fingerprint& fp,
                     const wait_context& wc, bool) {
    collective<T>(fp, wc, {in, n * sizeof(T), out, n * sizeof(T)}, op, nullptr, false,
                  [&](const detail::device::call_view& v) { return detail::device::plans::reduce(v, n, root); });
  }
  template <class T, class Op>
  void native_all_reduce(const T* in, T* out, std::size_t n, const Op& op, const fingerprint& fp, const wait_context& wc,
                         bool) {
    const bool one_shot = n * sizeof(T) <= w_->one_shot_bytes;
    const bool in_place = static_cast<const void*>(in) == static_cast<const void*>(out);
    collective<T>(fp, wc, {in, n * sizeof(T), out, n * sizeof(T)}, op, nullptr, one_shot && in_place,
                  [&](const detail::device::call_view& v) {
                    return detail::device::plans::all_reduce(v, n, one_shot, in_place);
                  });
  }
  template <class T>
  void native_gather(const T* in, T* out, std::size_t n, int root, const fingerprint& fp, const wait_context& wc, bool) {
    const bool at_root = rank() == root;
    collective<T>(fp, wc, {in, n * sizeof(T), at_root ? out : nullptr, at_root ? n * sizeof(T) * size_t_size() : 0},
                  op::sum{}, nullptr, false,
                  [&](const detail::device::call_view& v) { return detail::device::plans::gather(v, n * sizeof(T), root); });
  }
  template <class T>
  void native_all_gather(const T* in, T* out, std::size_t n, const fingerprint& fp, const wait_context& wc, bool) {
    collective<T>(fp, wc, {in, n * sizeof(T), out, n * sizeof(T) * size_t_size()}, op::sum{}, nullptr, false,
                  [&](const detail::device::call_view& v) { return detail::device::plans::all_gather(v, n * sizeof(T)); });
  }
  template <class T>
  void native_scatter(const T* in, T* out, std::size_t n, int root, const fingerprint& fp, const wait_context& wc, bool) {
    const bool at_root = rank() == root;
    collective<T>(fp, wc, {at_root ? in : nullptr, at_root ? n * sizeof(T) * size_t_size() : 0, out, n * sizeof(T)},
                  op::sum{}, nullptr, false,
                  [&](const detail::device::call_view& v) { return detail::device::plans::scatter(v, n * sizeof(T), root); });
  }
  template <class T>
  void native_all_to_all(const T* in, T* out, std::size_t block, const fingerprint& fp, const wait_context& wc, bool) {
    const std::size_t all = block * sizeof(T) * size_t_size();
    collective<T>(fp, wc, {in, all, out, all}, op::sum{}, nullptr, false,
                  [&](const detail::device::call_view& v) { return detail::device::plans::all_to_all(v, block * sizeof(T)); });
  }
  template <class T, class Op>
  void native_reduce_scatter(const T* in, T* out, std::size_t n, const Op& op, const fingerprint& fp,
                             const wait_context& wc, bool) {
    collective<T>(fp, wc, {in, n * sizeof(T) * size_t_size(), out, n * sizeof(T)}, op, nullptr, false,
                  [&](const detail::device::call_view& v) { return detail::device::plans::reduce_scatter(v, n); });
  }
  void native_barrier(const fingerprint& fp, const wait_context& wc, bool) {
    collective<char>(fp, wc, {}, op::sum{}, nullptr, false, [](const detail::device::call_view&) {
      detail::device::plan p;
      p.phase[0].k = detail::device::step::kind::copy;
      return p;
    });
  }
  template <class T>
  void native_all_gather_v(const T* in, T* out, const block_counts& b, const fingerprint& fp, const wait_context& wc, bool) {
    collective<T>(fp, wc, {in, b.count(rank()) * sizeof(T), out, b.total * sizeof(T)}, op::sum{}, nullptr, false,
                  [&](const detail::device::call_view& v) { return detail::device::plans::all_gather_v(v, b); });
  }
  template <class T>
  void native_gather_v(const T* in, std::size_t in_count, T* out, const block_counts& b, int root, const fingerprint& fp,
                       const wait_context& wc, bool) {
    const bool at_root = rank() == root;
    std::vector<std::uint64_t> words = blank_words();
    words[word(rank(), 2)] = in_count;  // what this rank sends, for every rank to check
    if (at_root)
      for (int q = 0; q < size(); ++q) words[word(q, 1)] = b.count(q);
    collective<T>(fp, wc, {in, in_count * sizeof(T), at_root ? out : nullptr, at_root ? b.total * sizeof(T) : 0}, op::sum{},
                  &words, false, [&](const detail::device::call_view& v) {
                    check_counts(v, root, "gather_v", "the root, rank " + std::to_string(root) + ", has counts[",
                                 "'s in has");
                    return detail::device::plans::gather_v(v, b, root);
                  });
  }
  template <class T>
  void native_scatter_v(const T* in, const block_counts& b, T* out, std::size_t out_count, int root, const fingerprint& fp,
                        const wait_context& wc, bool) {
    const bool at_root = rank() == root;
    std::vector<std::uint64_t> words = blank_words();
    words[word(rank(), 2)] = out_count;  // what this rank expects
    if (at_root)
      for (int q = 0; q < size(); ++q) {
        words[word(q, 0)] = b.offset(q);
        words[word(q, 1)] = b.count(q);
      }
    collective<T>(fp, wc, {at_root ? in : nullptr, at_root ? b.total * sizeof(T) : 0, out, out_count * sizeof(T)},
                  op::sum{}, &words, false, [&](const detail::device::call_view& v) {
                    check_counts(v, root, "scatter_v", "the root, rank " + std::to_string(root) + ", has counts[",
                                 "'s out has");
                    const auto& rw = v.words[static_cast<std::size_t>(root)];
                    return detail::device::plans::scatter_v(v, rw[word(rank(), 0)], out_count, root);
                  });
  }
  template <class T>
  void native_all_to_all_v(const T* in, const block_counts& send, T* out, const block_counts& recv, const fingerprint& fp,
                           const wait_context& wc, bool) {
    std::vector<std::uint64_t> words = blank_words();
    for (int q = 0; q < size(); ++q) {
      words[word(q, 0)] = send.offset(q);
      words[word(q, 1)] = send.count(q);
      words[word(q, 2)] = recv.count(q);
    }
    collective<T>(fp, wc, {in, send.total * sizeof(T), out, recv.total * sizeof(T)}, op::sum{}, &words, false,
                  [&](const detail::device::call_view& v) {
                    // Every pair, on every rank: all raise the same error, before any kernel.
                    for (int a = 0; a < size(); ++a)
                      for (int c = 0; c < size(); ++c) {
                        const auto sent = v.words[static_cast<std::size_t>(a)][word(c, 1)];
                        const auto expected = v.words[static_cast<std::size_t>(c)][word(a, 2)];
                        if (sent != expected)
                          throw mismatch_error("all_to_all_v(native): rank " + std::to_string(c) + " has recv_counts[" +
                                               std::to_string(a) + "] = " + std::to_string(expected) + ", but rank " +
                                               std::to_string(a) + " has send_counts[" + std::to_string(c) +
                                               "] = " + std::to_string(sent));
                      }
                    std::vector<std::size_t> from(size_t_size());
                    for (int q = 0; q < size(); ++q)
                      from[static_cast<std::size_t>(q)] = v.words[static_cast<std::size_t>(q)][word(rank(), 0)];
                    return detail::device::plans::all_to_all_v(v, recv, from);
                  });
  }
  template <class T, class Op>
  void native_reduce_scatter_v(const T* in, T* out, const block_counts& b, const Op& op, const fingerprint& fp,
                               const wait_context& wc, bool) {
    collective<T>(fp, wc, {in, b.total * sizeof(T), out, b.count(rank()) * sizeof(T)}, op, nullptr, false,
                  [&](const detail::device::call_view& v) { return detail::device::plans::reduce_scatter_v(v, b); });
  }

 private:
  struct buffers {
    const void* in = nullptr;
    std::size_t in_bytes = 0;
    const void* out = nullptr;
    std::size_t out_bytes = 0;
  };

  std::size_t size_t_size() const noexcept { return static_cast<std::size_t>(size()); }
  std::vector<std::uint64_t> blank_words() const { return std::vector<std::uint64_t>(3 * size_t_size(), 0); }
  /// Word `k` (0 offset, 1 count, 2 count expected) of a rank's record about rank `q`.
  static std::size_t word(int q, int k) noexcept { return 3 * static_cast<std::size_t>(q) + static_cast<std::size_t>(k); }

  /// gather_v and scatter_v: the root's count for each rank against that rank's own.
  void check_counts(const detail::device::call_view& v, int root, const char* name, const std::string& root_has,
                    const char* rank_has) const {
    for (int q = 0; q < size(); ++q) {
      const auto theirs = v.words[static_cast<std::size_t>(root)][word(q, 1)];
      const auto own = v.words[static_cast<std::size_t>(q)][word(q, 2)];
      if (theirs != own)
        throw mismatch_error(std::string(name) + "(native): " + root_has + std::to_string(q) + "] = " +
                             std::to_string(theirs) + ", but rank " + std::to_string(q) + rank_has + " " +
                             std::to_string(own) + " elements");
    }
  }

  /// The host-side synchronisation of the events mode: every rank has recorded `mine` on its
  /// stream (it records it before this), and this rank's stream waits for every peer's.
  void event_barrier(const fingerprint& fp, detail::device::event_handle& mine,
                     std::vector<detail::device::event_handle>& theirs, const wait_context& wc) {
    auto& w = *w_;
    const cudaStream_t s = w.stream();
    detail::device::cuda_check(cudaEventRecord(mine.get(), s), "cudaEventRecord");
    w.ctl.all_gather(fp, nullptr, nullptr, 0, wc);
    for (int q = 0; q < w.size; ++q)
      if (q != w.rank)
        detail::device::cuda_check(cudaStreamWaitEvent(s, theirs[static_cast<std::size_t>(q)].get(), 0),
                                   "cudaStreamWaitEvent");
  }

  /// One collective: the agreement (records with the fingerprint), the plan, its kernels and
  /// synchronisation on the bound stream. `stage`: copy `in` into this rank's staging buffer
  /// first (the in-place one-shot all_reduce).
  template <class T, class Op, class Make>
  void collective(const fingerprint& fp, const wait_context& wc, buffers b, const Op& op,
                  const std::vector<std::uint64_t>* words, bool stage, Make&& make) {
    namespace dv = detail::device;
    auto& w = *w_;
    const cudaStream_t s = w.stream();
    const std::uint64_t call = ++w.calls;
    w.call_name = std::string(collective_name(fp.coll)) + "(native) on rank " + std::to_string(w.rank) + " of tutti::cuda_ipc";
    const std::string what = std::string(collective_name(fp.coll)) + " on rank " + std::to_string(w.rank);
    if (stage) {
      if (b.in_bytes > w.stage_bytes) throw usage_error(what + ": larger than the staging buffer");
      dv::cuda_check(cudaMemcpyAsync(const_cast<std::byte*>(w.stage_of[static_cast<std::size_t>(w.rank)]), b.in,
                                     b.in_bytes, cudaMemcpyDeviceToDevice, s),
                     "cudaMemcpyAsync (staging)");
    }
    // 1. The agreement: every rank's record, with the fingerprint.
    const std::size_t nwords = 3 * size_t_size();
    const std::size_t rec_bytes = sizeof(dv::call_record) + nwords * sizeof(std::uint64_t);
    std::vector<std::byte> mine(rec_bytes), all(rec_bytes * size_t_size());
    dv::call_record rec;
    rec.retired = w.bufs->retire_freed();
    rec.in = w.bufs->export_buffer(b.in, b.in_bytes, what + ": in");
    rec.out = w.bufs->export_buffer(b.out, b.out_bytes, what + ": out");
    std::memcpy(mine.data(), &rec, sizeof rec);
    if (words) std::memcpy(mine.data() + sizeof rec, words->data(), nwords * sizeof(std::uint64_t));
    if (!w.flags) dv::cuda_check(cudaEventRecord(w.ready.get(), s), "cudaEventRecord");
    w.ctl.all_gather(fp, mine.data(), all.data(), rec_bytes, wc);

    // 2. Every rank's buffers as this rank reaches them, and the plan.
    dv::call_view v;
    v.rank = w.rank;
    v.size = w.size;
    v.elem = sizeof(T);
    v.in.resize(size_t_size());
    v.out.resize(size_t_size());
    v.stage = w.stage_of;
    v.words.resize(size_t_size());
    bool aligned = true;
    for (int q = 0; q < w.size; ++q) {
      const auto Q = static_cast<std::size_t>(q);
      dv::call_record r;
      std::memcpy(&r, all.data() + Q * rec_bytes, sizeof r);
      if (q != w.rank) w.bufs->peer_freed(q, r.retired);
      v.in[Q] = q == w.rank ? static_cast<const std::byte*>(b.in) : w.bufs->import_buffer(q, r.in);
      v.out[Q] = q == w.rank ? const_cast<std::byte*>(static_cast<const std::byte*>(b.out)) : w.bufs->import_buffer(q, r.out);
      v.words[Q].resize(nwords);
      std::memcpy(v.words[Q].data(), all.data() + Q * rec_bytes + sizeof r, nwords * sizeof(std::uint64_t));
      aligned = aligned && (r.in.raw % 16 == 0) && (r.out.raw % 16 == 0);
    }
    const dv::plan pl = make(v);
    // 16-byte vectors where every pointer of this rank's reductions allows them. The two-shot's
    // blocks start on 16 bytes, so there it is the buffers' own alignment, the same answer on
    // every rank (its barriers pair blocks that must cut the elements alike).
    auto at16 = [](const void* q) { return reinterpret_cast<std::uintptr_t>(q) % 16 == 0; };
    bool vec = aligned && dv::per_vector<T> > 1;
    for (int ph = 0; ph < pl.phases; ++ph) {
      const dv::step& st = pl.phase[static_cast<std::size_t>(ph)];
      if (st.k == dv::step::kind::reduce) {
        vec = vec && at16(st.dst);
        for (int q = 0; q < st.nsrc; ++q) vec = vec && at16(st.src[static_cast<std::size_t>(q)]);
      } else if (pl.phases == 2) {
        for (const dv::segment& c : st.copies) vec = vec && at16(c.dst) && at16(c.src);
      }
    }

    // 3. The kernels. With barriers, every kernel this call may launch is loaded first, on every
    // rank, and the ranks agree once more before any launches: with CUDA's lazy loading a kernel's
    // first launch may wait for the whole context, where a peer's kernel may already wait at a
    // barrier for this one (the first call of each element type and op, per group).
    if (w.flags) load_barrier_kernels<T, Op>(fp, wc);
    dv::barrier_args ba;
    for (int q = 0; q < w.size; ++q) ba.flags[q] = w.flags_of[static_cast<std::size_t>(q)];
    ba.rank = w.rank;
    ba.ranks = w.size;
    ba.gen = 4 * call;
    ba.timeout_ns = dv::kernel_timeout_ns(wc.timeout);  // before the host's: the report names the peer
    ba.report = w.report_dev;
    ba.abort = w.abort_dev;
    const int threads = dv::kernel_threads;
    if (w.flags) {
      // One kernel, the same grid on every rank (its barriers pair blocks).
      const unsigned g = static_cast<unsigned>(w.flag_blocks);
      ba.gen = 4 * call + 1;
      if (pl.phases == 2) {
        const dv::step& rs = pl.phase[0];
        dv::sources<T> src = sources_of<T>(rs);
        dv::copy_list c = copies_of(pl.phase[1], what);
        dv::two_shot_kernel<T, Op><<<g, threads, 0, s>>>(reinterpret_cast<T*>(rs.dst), src, rs.count, op, vec, c, ba);
      } else if (pl.phase[0].k == dv::step::kind::reduce) {
        const dv::step& st = pl.phase[0];
        dv::reduce_phase_kernel<T, Op, true><<<g, threads, 0, s>>>(reinterpret_cast<T*>(st.dst), sources_of<T>(st),
                                                                   st.count, op, vec, ba);
      } else {
        dv::copy_phase_kernel<true><<<g, threads, 0, s>>>(copies_of(pl.phase[0], what), ba);
      }
      w.work->launched(collective_name(fp.coll).data());
      return;
    }
    // Events: every peer's input is ready before this rank reads it; between the phases every
    // peer's first phase is done; after the last, no rank reuses a buffer a peer still reads.
    for (int q = 0; q < w.size; ++q)
      if (q != w.rank)
        dv::cuda_check(cudaStreamWaitEvent(s, w.peer_ready[static_cast<std::size_t>(q)].get(), 0), "cudaStreamWaitEvent");
    for (int ph = 0; ph < pl.phases; ++ph) {
      if (ph == 1) event_barrier(fp, w.mid, w.peer_mid, wc);
      const dv::step& st = pl.phase[static_cast<std::size_t>(ph)];
      if (st.empty()) continue;
      if (st.k == dv::step::kind::reduce) {
        const std::size_t units = vec ? st.count / dv::per_vector<T> + 1 : st.count;
        dv::reduce_phase_kernel<T, Op, false><<<w.work->grid(units), threads, 0, s>>>(reinterpret_cast<T*>(st.dst), sources_of<T>(st),
                                                                              st.count, op, vec, ba);
        w.work->launched(collective_name(fp.coll).data());
      } else {
        for (std::size_t i = 0; i < st.copies.size(); i += dv::max_copies) {
          dv::copy_list c{};
          c.n = static_cast<int>(std::min<std::size_t>(dv::max_copies, st.copies.size() - i));
          std::size_t most = 0;
          for (int k = 0; k < c.n; ++k) {
            c.seg[k] = st.copies[i + static_cast<std::size_t>(k)];
            most = std::max(most, c.seg[k].bytes);
          }
          dv::copy_phase_kernel<false><<<w.work->grid(most / 16 + 1), threads, 0, s>>>(c, ba);
          w.work->launched(collective_name(fp.coll).data());
        }
      }
    }
    event_barrier(fp, w.done, w.peer_done, wc);
  }

  /// Loads (cudaFuncGetAttributes) the kernels with barriers of element type T and op Op, the
  /// first time this group meets them, then agrees (a bare all-gather): no rank launches one
  /// before every rank has loaded it. The agreement before it told every rank that every
  /// earlier kernel of the group is launched, so a load that waits for the context ends.
  template <class T, class Op>
  void load_barrier_kernels(const fingerprint& fp, const wait_context& wc) {
    namespace dv = detail::device;
    auto& w = *w_;
    const void* key = reinterpret_cast<const void*>(&dv::two_shot_kernel<T, Op>);
    if (std::find(w.loaded.begin(), w.loaded.end(), key) != w.loaded.end()) return;
    cudaFuncAttributes a{};
    dv::cuda_check(cudaFuncGetAttributes(&a, dv::two_shot_kernel<T, Op>), "cudaFuncGetAttributes (two_shot_kernel)");
    dv::cuda_check(cudaFuncGetAttributes(&a, dv::reduce_phase_kernel<T, Op, true>),
                   "cudaFuncGetAttributes (reduce_phase_kernel)");
    dv::cuda_check(cudaFuncGetAttributes(&a, dv::copy_phase_kernel<true>), "cudaFuncGetAttributes (copy_phase_kernel)");
    w.loaded.push_back(key);
    w.ctl.all_gather(fp, nullptr, nullptr, 0, wc);
  }

  template <class T>
  static detail::device::sources<T> sources_of(const detail::device::step& st) {
    detail::device::sources<T> s{};
    s.n = st.nsrc;
    for (int q = 0; q < st.nsrc; ++q) s.p[q] = reinterpret_cast<const T*>(st.src[static_cast<std::size_t>(q)]);
    return s;
  }
  static detail::device::copy_list copies_of(const detail::device::step& st, const std::string& what) {
    detail::device::copy_list c{};
    if (st.copies.size() > static_cast<std::size_t>(detail::device::max_copies))
      throw usage_error(what + ": more copies than one kernel takes");  // not reached: one per rank
    c.n = static_cast<int>(st.copies.size());
    for (std::size_t i = 0; i < st.copies.size(); ++i) c.seg[i] = st.copies[i];
    return c;
  }

  /// Sends (to `to`, header `hs`, `sdata`) and receives (from `from`, `hr`, into `rdata`), either
  /// or both, as the host rendezvous in the file comment.
  void p2p(int to, const header* hs, const std::byte* sdata, int from, const header* hr, std::byte* rdata,
           const wait_context& wc) {
    namespace dv = detail::device;
    auto& w = *w_;
    const cudaStream_t s = w.stream();
    const std::string what = "send/recv on rank " + std::to_string(w.rank);
    struct offer {
      dv::buffer_token where;
      std::uint64_t bytes;
      dv::retired_ids retired;  ///< the sender's allocations freed since (the receiver closes its mappings)
    };
    offer offer_out{}, offer_in{};
    if (hs) {
      offer_out.retired = w.bufs->retire_freed_for(to);
      offer_out.where = w.bufs->export_buffer(sdata, hs->bytes, what + ": the data sent");
      offer_out.bytes = hs->bytes;
      dv::cuda_check(cudaEventRecord(w.send_ready[static_cast<std::size_t>(to)].get(), s), "cudaEventRecord");
    }
    // The offers: the host transport compares their headers (the fingerprint: collective,
    // dtype, count, tag), and the receiver the byte count, so a receive that does not match its
    // send fails here, before any copy.
    auto offered = [](const header* h) { return header{h->fp, sizeof(offer)}; };
    if (hs && hr)
      w.ctl.sendrecv(to, offered(hs), reinterpret_cast<const std::byte*>(&offer_out), from, offered(hr),
                     reinterpret_cast<std::byte*>(&offer_in), wc);
    else if (hs)
      w.ctl.send(to, offered(hs), reinterpret_cast<const std::byte*>(&offer_out), wc);
    else
      w.ctl.recv(from, offered(hr), reinterpret_cast<std::byte*>(&offer_in), wc);
    if (hr) {
      if (offer_in.bytes != hr->bytes)
        toolkit::throw_header_mismatch(*hr, w.rank, header{hr->fp, offer_in.bytes}, from, "p2p");
      w.bufs->peer_freed(from, offer_in.retired);
      const std::byte* src = w.bufs->import_buffer(from, offer_in.where);
      dv::cuda_check(cudaStreamWaitEvent(s, w.peer_send_ready[static_cast<std::size_t>(from)].get(), 0), "cudaStreamWaitEvent");
      if (hr->bytes) dv::cuda_check(cudaMemcpyAsync(rdata, src, hr->bytes, cudaMemcpyDeviceToDevice, s), "cudaMemcpyAsync");
      dv::cuda_check(cudaEventRecord(w.recv_done[static_cast<std::size_t>(from)].get(), s), "cudaEventRecord");
    }
    // The acknowledgements: the receiver's copy is enqueued (its event recorded).
    const header ack_s = hs ? header{hs->fp, 0} : header{}, ack_r = hr ? header{hr->fp, 0} : header{};
    if (hs && hr) w.ctl.sendrecv(from, ack_r, nullptr, to, ack_s, nullptr, wc);
    else if (hr) w.ctl.send(from, ack_r, nullptr, wc);
    else w.ctl.recv(to, ack_s, nullptr, wc);
    if (hs)
      dv::cuda_check(cudaStreamWaitEvent(s, w.peer_recv_done[static_cast<std::size_t>(to)].get(), 0), "cudaStreamWaitEvent");
  }

  std::shared_ptr<detail::device::ipc_world> w_;
};

static_assert(transport<cuda_ipc> && own_memory<cuda_ipc> && native_collectives<cuda_ipc> && stream_ordered<cuda_ipc> &&
              host_exchange<cuda_ipc> && failure_notices<cuda_ipc>);
static_assert(std::is_same_v<transport_traits<cuda_ipc>::memory, device_memory> && transport_traits<cuda_ipc>::native_first);

}  // namespace tutti

