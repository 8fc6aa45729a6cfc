/// \file
/// What both device transports keep for a group's work in stream order, besides their medium:
/// the stream a call's work goes on (the caller's, bound per call, or the transport's own), the
/// ordering of a call after the previous one when the stream changes (the flags, staging buffer
/// and scratch are reused from call to call), the scratch of tutti's schedules, and the memory
/// seam's copy, combine and divide as kernels on that stream. Compiled by nvcc.
#pragma once

#if !defined(__CUDACC__)
#error "tutti/transport/device/stream_work.cuh launches kernels: compile this file with nvcc (a .cu file)"
#endif

#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <string>

#include "tutti/transport/device/cuda_runtime.hpp"
#include "tutti/transport/device/kernels.cuh"

namespace tutti::detail::device {

class stream_work {
 public:
  /// `who` names the transport in errors; `max_blocks` caps the memory seam's grids.
  stream_work(const char* who, int max_blocks)
      : who_(who), max_blocks_(std::max(1, max_blocks)), own_(stream_handle::create()), last_end_(event_handle::create(false)) {}
  stream_work(const stream_work&) = delete;
  stream_work& operator=(const stream_work&) = delete;
  /// Frees the scratch (the caller has synchronised the device).
  ~stream_work() {
    for (std::byte* s : scratch_)
      if (s) cudaFree(s);
  }

  /// The current call's stream.
  cudaStream_t stream() const noexcept { return bound_ ? bound_ : own_.get(); }
  /// Whether the current call's stream is being captured into a CUDA graph.
  bool capturing() const {
    cudaStreamCaptureStatus c = cudaStreamCaptureStatusNone;
    cuda_check(cudaStreamIsCapturing(stream(), &c), "cudaStreamIsCapturing");
    return c != cudaStreamCaptureStatusNone;
  }

  /// The next call's work goes on `*s` (null: the transport's own stream). On another stream
  /// than the last call's, it first waits for where that one ended (not under capture: a graph
  /// takes no dependency on work outside it).
  void bind(const cudaStream_t* s) {
    bound_ = s ? *s : own_.get();
    if (have_last_ && last_ != bound_ && !capturing())
      cuda_check(cudaStreamWaitEvent(bound_, last_end_.get(), 0), "cudaStreamWaitEvent");
  }
  /// The current call ends here (what the next call on another stream waits for).
  void ended() {
    if (capturing()) return;
    cuda_check(cudaEventRecord(last_end_.get(), stream()), "cudaEventRecord");
    last_ = stream();
    have_last_ = true;
  }
  /// As `ended`, for a call that failed part-way (what it enqueued so far is what teardown
  /// waits for); never throws.
  void ended_on_failure() noexcept {
    cudaStreamCaptureStatus c = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(stream(), &c) == cudaSuccess && c == cudaStreamCaptureStatusNone &&
        cudaEventRecord(last_end_.get(), stream()) == cudaSuccess) {
      last_ = stream();
      have_last_ = true;
    }
    cudaGetLastError();
  }
  /// Whether the work of every call so far has ended (or the device failed: nothing more of it
  /// runs). Never blocks.
  bool quiet() const noexcept {
    if (!have_last_) return true;
    const cudaError_t e = cudaEventQuery(last_end_.get());
    if (e == cudaErrorNotReady) {
      cudaGetLastError();
      return false;
    }
    return true;
  }

  // ---- the memory seam ------------------------------------------------------------------

  void copy(std::byte* dst, const std::byte* src, std::size_t n) {
    if (n) cuda_check(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, stream()), "cudaMemcpyAsync");
  }
  template <class T, class Op>
  void combine(T* out, const T* a, const T* b, std::size_t n, const Op& op) {
    if (n == 0) return;
    combine_kernel<T, Op><<<grid(n), kernel_threads, 0, stream()>>>(out, a, b, n, op);
    launched("combine");
  }
  template <class T>
  void divide(T* data, std::size_t n, int divisor) {
    if (n == 0) return;
    divide_kernel<T><<<grid(n), kernel_threads, 0, stream()>>>(data, n, divisor);
    launched("divide");
  }
  /// Device scratch for tutti's schedules (slots 0-3), kept between calls; a slot that grows
  /// waits for the device first (work in flight may still use the old one).
  std::byte* scratch(int slot, std::size_t bytes) {
    const auto i = static_cast<std::size_t>(slot);
    if (bytes > scratch_bytes_[i]) {
      if (scratch_[i]) {
        cuda_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
        cudaFree(scratch_[i]);
        scratch_[i] = nullptr;
      }
      const std::size_t n = std::max(bytes, scratch_bytes_[i] * 2);
      cuda_check(cudaMalloc(&scratch_[i], n), "cudaMalloc (scratch)");
      scratch_bytes_[i] = n;
    }
    return scratch_[i];
  }

  int max_blocks() const noexcept { return max_blocks_; }
  /// A grid for `units` threads' worth of work, at most `max_blocks`.
  unsigned grid(std::size_t units) const noexcept {
    const std::size_t per = kernel_threads;
    return static_cast<unsigned>(std::clamp<std::size_t>((units + per - 1) / per, 1, static_cast<std::size_t>(max_blocks_)));
  }
  /// Raises what launching `what` left (a kernel that did not start).
  void launched(const char* what) const {
    if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess)
      cuda_fail(e, std::string(who_) + ": launching its " + what + " kernel");
  }

 private:
  const char* who_;
  int max_blocks_;
  stream_handle own_;
  cudaStream_t bound_ = nullptr, last_ = nullptr;
  bool have_last_ = false;
  event_handle last_end_;
  std::array<std::byte*, 4> scratch_{};
  std::array<std::size_t, 4> scratch_bytes_{};
};

}  // namespace tutti::detail::device
