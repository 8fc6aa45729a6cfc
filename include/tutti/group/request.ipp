/// \file
/// Definitions for tutti/group/request.hpp (see `TUTTI_DECL` in tutti/detail/attributes.hpp).
#pragma once

#include <chrono>

#include "tutti/group/request.hpp"

namespace tutti {

namespace detail {

TUTTI_DECL progress_engine::progress_engine(std::atomic<std::uint64_t>* waiting)
    : waiting_(waiting), worker_([this] { loop(); }) {}

TUTTI_DECL progress_engine::~progress_engine() {
  {
    std::lock_guard lk(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  worker_.join();
}

TUTTI_DECL std::shared_ptr<operation_state> progress_engine::post(std::unique_ptr<task> t) {
  auto s = t->state;
  const std::size_t requests = t->members.empty() ? 1 : t->members.size();
  {
    std::lock_guard lk(mu_);
    queue_.push_back(std::move(t));
    pending_.fetch_add(requests, std::memory_order_release);
    if (waiting_) waiting_->fetch_add(requests, std::memory_order_relaxed);
  }
  cv_.notify_all();
  return s;
}

TUTTI_DECL void progress_engine::drain() {
  if (idle() || on_engine()) return;
  std::unique_lock lk(mu_);
  drained_.wait(lk, [&] { return pending_.load(std::memory_order_acquire) == 0; });
}

TUTTI_DECL void progress_engine::loop() {
  std::unique_lock lk(mu_);
  while (true) {
    cv_.wait(lk, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, nothing left
    std::unique_ptr<task> t = std::move(queue_.front());
    queue_.pop_front();
    const std::size_t requests = t->members.empty() ? 1 : t->members.size();
    if (waiting_) waiting_->fetch_sub(requests, std::memory_order_relaxed);
    // The operations already posted when one fails (other than with a usage error) fail with
    // its error: a lost peer is lost to all of them. Later ones run, and fail as aborted.
    std::exception_ptr e;
    if (inherit_ > 0) {
      --inherit_;
      e = failed_;
    }
    lk.unlock();
    if (!e) {
      try {
        t->run();
      } catch (const usage_error&) {
        e = std::current_exception();
      } catch (...) {
        e = std::current_exception();
        lk.lock();
        failed_ = e;
        inherit_ = queue_.size();
        lk.unlock();
      }
    }
    auto state = t->state;
    auto members = std::move(t->members);
    t.reset();  // the task's captures go before its request sees it complete
    lk.lock();
    // Uncounted before it completes: whoever sees it complete sees it no longer pending, and
    // a drain returns only once its request is complete.
    const bool last = pending_.fetch_sub(requests, std::memory_order_acq_rel) == requests;
    if (members.empty()) {
      complete(*state, std::move(e));
    } else {
      for (auto& m : members) complete(*m, e, /*quiet=*/true);
      completion_signal::get().notify();
    }
    if (last) drained_.notify_all();
  }
}

}  // namespace detail

TUTTI_DECL request& request::operator=(request&& o) noexcept {
  if (this != &o) {
    settle();
    s_ = std::move(o.s_);
    status_ = o.status_;
  }
  return *this;
}

TUTTI_COLD TUTTI_DECL void request::check_not_held(const char* call) const {
  if (s_->held.load(std::memory_order_relaxed))
    throw usage_error(std::string(call) +
                      ": the operation is held in a batch that is still open (communicator::fuse); it runs "
                      "when the batch ends (batch::post() or the end of its scope), so end the batch first");
}

TUTTI_DECL recv_status request::status() const {
  if (s_)
    throw usage_error(
        "request::status: the operation has not completed yet (wait() for it, or test() until it returns true)");
  return status_;
}

TUTTI_DECL void request::wait() {
  if (!s_) return;
  if (s_->held.load(std::memory_order_relaxed)) [[unlikely]]
    check_not_held("request::wait");
  detail::await(*s_);
  finish();
}

TUTTI_DECL bool request::test() {
  if (!s_) return true;
  if (!s_->done.load(std::memory_order_acquire) && s_->poll) s_->poll(*s_);
  if (!s_->done.load(std::memory_order_acquire)) return false;
  finish();
  return true;
}

TUTTI_DECL void wait_all(std::span<request> rs) {
  std::exception_ptr first;
  for (auto& r : rs) {
    try {
      r.wait();
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
}

TUTTI_DECL std::size_t wait_any(std::span<request> rs) {
  auto& sig = detail::completion_signal::get();
  while (true) {
    bool any = false;
    for (std::size_t i = 0; i < rs.size(); ++i) {
      if (!rs[i].s_) continue;
      any = true;
      if (rs[i].s_->done.load(std::memory_order_acquire)) {
        rs[i].finish();
        return i;
      }
    }
    if (!any) return rs.size();
    bool runs = false;  // a pending operation that something runs: not held in an open batch
    for (auto& r : rs) runs = runs || (r.s_ && !r.s_->held.load(std::memory_order_relaxed));
    if (!runs)
      for (auto& r : rs)
        if (r.s_) r.check_not_held("wait_any");
    // Operations that complete only when polled (device work on a stream): poll them, and
    // look again shortly instead of sleeping until a completion is signalled.
    bool polled = false;
    for (auto& r : rs) {
      if (!r.s_ || !r.s_->poll) continue;
      polled = true;
      if (!r.s_->done.load(std::memory_order_acquire)) r.s_->poll(*r.s_);
    }
    if (polled) {
      std::this_thread::sleep_for(std::chrono::microseconds(20));
      continue;
    }
    sig.waiters.fetch_add(1, std::memory_order_seq_cst);
    {
      std::unique_lock lk(sig.mu);
      const auto seen = sig.epoch;
      // Look again now that completions notify: one between the scan and here is seen here.
      bool ready = false;
      for (auto& r : rs) ready = ready || (r.s_ && r.s_->done.load(std::memory_order_seq_cst));
      if (!ready) sig.cv.wait(lk, [&] { return sig.epoch != seen; });
    }
    sig.waiters.fetch_sub(1, std::memory_order_seq_cst);
  }
}

}  // namespace tutti
