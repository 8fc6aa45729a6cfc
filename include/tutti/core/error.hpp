/// \file
/// The error family of tutti: one root, `tutti::error` (a `std::system_error`), and a child per
/// kind of failure, so callers can catch exactly what they can handle.
#pragma once

#include <memory>
#include <string>
#include <system_error>

#include "tutti/detail/attributes.hpp"

namespace tutti {

/// Error codes of the `tutti` category; each has a typed exception below.
enum class errc {
  timeout = 1,  ///< a blocking wait passed its deadline
  peer_lost,    ///< a peer died, left, or failed with an error of its own
  mismatch,     ///< ranks disagree on what they are doing (collective, count, dtype, op, root)
  config,       ///< the environment or a configuration value is missing or malformed
  usage,        ///< the caller passed arguments that can never work (checked before any traffic)
  aborted,      ///< the communicator was aborted, or is unusable after an earlier failure
};

namespace detail {
class error_category_impl final : public std::error_category {
 public:
  const char* name() const noexcept override { return "tutti"; }
  std::string message(int c) const override;
};
}  // namespace detail

/// The error category of every tutti error code.
inline const std::error_category& error_category() noexcept {
  static const detail::error_category_impl instance;
  return instance;
}

inline std::error_code make_error_code(errc e) noexcept {
  return {static_cast<int>(e), error_category()};
}

namespace detail {
struct error_origin;
}

/// Root of every exception tutti throws. `what()` carries the full context: collective,
/// algorithm, this rank, the peer and the byte count where they apply.
///
/// A failure that began on another rank reaches this one with its own kind (a mismatch that
/// rank 1 found is a `mismatch_error` on rank 0 too, a usage error a `usage_error`), its
/// message names that rank first, and `origin()` says which it was.
class error : public std::system_error {
 public:
  error(errc code, const std::string& what) : std::system_error(make_error_code(code), what) {}
  /// The world rank (the rank in the whole job of the transport) where this failure began,
  /// when that is another rank: the one that found a mismatch or made a usage error, that
  /// timed out, or that was lost. -1 when it began on this rank.
  int origin() const noexcept { return origin_; }

 private:
  friend struct detail::error_origin;
  int origin_ = -1;
  std::shared_ptr<const std::string> account_;  // the origin's own message, relayed as it was
};

/// A blocking wait passed its deadline (`TUTTI_TIMEOUT`, `communicator::set_timeout`).
class timeout_error : public error {
 public:
  explicit timeout_error(const std::string& what) : error(errc::timeout, what) {}
};

/// A peer is gone: it died, returned early, or failed with an error of its own.
class peer_lost : public error {
 public:
  explicit peer_lost(const std::string& what) : error(errc::peer_lost, what) {}
};

/// Ranks disagree on the call they are making; the message names both ranks and both values.
class mismatch_error : public error {
 public:
  explicit mismatch_error(const std::string& what) : error(errc::mismatch, what) {}
};

/// The environment or a configuration value is missing, contradictory or malformed.
class config_error : public error {
 public:
  explicit config_error(const std::string& what) : error(errc::config, what) {}
};

/// Arguments that can never work (root out of range, buffer too small, ...); raised before any
/// communication, so the other ranks see this rank fail rather than hang.
class usage_error : public error {
 public:
  explicit usage_error(const std::string& what) : error(errc::usage, what) {}
};

namespace detail {
/// Sets and reads what an error carries from its origin (see `error::origin`).
struct error_origin {
  static void set(error& e, int origin, std::string account) {
    e.origin_ = origin;
    e.account_ = std::make_shared<const std::string>(std::move(account));
  }
  /// The origin's own message, or null when the failure began here.
  static const std::string* account(const error& e) noexcept { return e.account_.get(); }
};

/// `e.what()` without the ": <kind>" that std::system_error appends to a tutti error's text
/// (so a message quoted in another does not repeat it at every step).
std::string own_text(const std::exception& e);
}  // namespace detail

}  // namespace tutti

template <>
struct std::is_error_code_enum<tutti::errc> : std::true_type {};

#if defined(TUTTI_DEFINITIONS)
#include "tutti/core/error.ipp"
#endif
