/// \file
/// The host side of a device transport (`tutti::cuda_ipc`, `tutti::nccl`): another transport of
/// the same ranks, whose memory is the host's (`tutti::shm` between processes of one host,
/// `tutti::inproc` between threads, `tutti::tcp` across hosts), carries what the device work
/// needs agreed before it is enqueued: each call's fingerprint (ranks that disagree get
/// `mismatch_error` naming both ranks and both values, as a message header would, before any
/// device work), where each rank's buffers lie, NCCL's unique id. It brings its transport's
/// deadlines, failure notices and abort with it.
///
/// Type-erased (one virtual call per message), so that one device transport type runs over any
/// host transport chosen at run time. Copies share the host transport.
///
/// Host code only: compiles without CUDA.
#pragma once

#include <cstddef>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "tutti/core/fingerprint.hpp"
#include "tutti/transport/capabilities.hpp"

namespace tutti::detail::device {

class control {
 public:
  control() = default;
  // The copy check comes first: `transport<control>` asks whether control is copyable, which
  // would consider this constructor again (clang reports the recursion; gcc stops it).
  template <class Host>
    requires(!std::is_same_v<std::remove_cvref_t<Host>, control> && transport<Host>)
  explicit control(Host h) : impl_(std::make_shared<model<Host>>(std::move(h))) {}

  explicit operator bool() const noexcept { return impl_ != nullptr; }
  int rank() const { return impl_->rank(); }
  int size() const { return impl_->size(); }

  void send(int peer, const header& h, const std::byte* data, const wait_context& w) { impl_->send(peer, h, data, w); }
  void recv(int peer, const header& h, std::byte* data, const wait_context& w) { impl_->recv(peer, h, data, w); }
  void sendrecv(int to, const header& hs, const std::byte* sdata, int from, const header& hr, std::byte* rdata,
                const wait_context& w) {
    impl_->sendrecv(to, hs, sdata, from, hr, rdata, w);
  }

  /// Every rank's `bytes` bytes, in rank order, into `all` (size() · bytes): p − 1 full-duplex
  /// steps (at step k, to rank + k, from rank − k), each message carrying `fp`, so that a rank
  /// in another call, or with another count, dtype, op or root, raises `mismatch_error` here.
  void all_gather(const fingerprint& fp, const std::byte* mine, std::byte* all, std::size_t bytes,
                  const wait_context& w) {
    const int p = size(), r = rank();
    if (bytes) std::memcpy(all + static_cast<std::size_t>(r) * bytes, mine, bytes);
    const header h{fp, bytes};
    for (int k = 1; k < p; ++k) {
      const int to = (r + k) % p, from = (r - k + p) % p;
      impl_->sendrecv(to, h, mine, from, h, all + static_cast<std::size_t>(from) * bytes, w);
    }
  }

  /// Root's `bytes` into every rank's `data` (a chain from the root; for start-up: NCCL's id).
  void broadcast(const fingerprint& fp, std::byte* data, std::size_t bytes, int root, const wait_context& w) {
    const int p = size(), r = rank();
    const int pos = (r - root + p) % p;
    const header h{fp, bytes};
    if (pos > 0) impl_->recv((r - 1 + p) % p, h, data, w);
    if (pos + 1 < p) impl_->send((r + 1) % p, h, data, w);
  }

  /// Tells the peers this rank failed, and why (where the host transport can); never throws.
  void fail(std::string_view what) noexcept {
    if (impl_) impl_->fail(what);
  }

  /// Leaves last words with the peers (where the host transport can); never throws.
  void note(std::string_view what) noexcept {
    if (impl_) impl_->note(what);
  }

  /// The host transport of a sub-group (called by its members), for the device transport's own
  /// sub-group.
  control sub(std::span<const int> members, std::uint64_t context) const {
    control c;
    c.impl_ = impl_->sub(members, context);
    return c;
  }

  /// The host transport's name, for messages ("shm", "inproc", "tcp").
  std::string_view kind() const { return impl_->kind(); }

 private:
  struct base {
    virtual ~base() = default;
    virtual int rank() const = 0;
    virtual int size() const = 0;
    virtual void send(int, const header&, const std::byte*, const wait_context&) = 0;
    virtual void recv(int, const header&, std::byte*, const wait_context&) = 0;
    virtual void sendrecv(int, const header&, const std::byte*, int, const header&, std::byte*,
                          const wait_context&) = 0;
    virtual void fail(std::string_view) noexcept = 0;
    virtual void note(std::string_view) noexcept = 0;
    virtual std::shared_ptr<base> sub(std::span<const int>, std::uint64_t) const = 0;
    virtual std::string_view kind() const = 0;
  };
  template <class Host>
  struct model final : base {
    explicit model(Host h) : t(std::move(h)) {}
    int rank() const override { return t.rank(); }
    int size() const override { return t.size(); }
    void send(int peer, const header& h, const std::byte* d, const wait_context& w) override { t.send(peer, h, d, w); }
    void recv(int peer, const header& h, std::byte* d, const wait_context& w) override { t.recv(peer, h, d, w); }
    void sendrecv(int to, const header& hs, const std::byte* sd, int from, const header& hr, std::byte* rd,
                  const wait_context& w) override {
      t.sendrecv(to, hs, sd, from, hr, rd, w);
    }
    void fail(std::string_view what) noexcept override {
      if constexpr (failure_notices<Host>) t.fail(what);
    }
    void note(std::string_view what) noexcept override {
      if constexpr (last_words<Host>) t.note(what);
    }
    std::shared_ptr<base> sub(std::span<const int> members, std::uint64_t context) const override {
      return std::make_shared<model>(t.sub(members, context));
    }
    std::string_view kind() const override {
      if constexpr (!transport_traits<Host>::tuning_kind.empty()) return transport_traits<Host>::tuning_kind;
      else return "host";
    }
    mutable Host t;
  };
  std::shared_ptr<base> impl_;
};

}  // namespace tutti::detail::device
