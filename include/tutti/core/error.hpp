/// \file
/// The error family of tutti: one root, `tutti::error` (a `std::system_error`), and a child per
/// kind of failure, so callers can catch exactly what they can handle.
#pragma once

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

/// Root of every exception tutti throws. `what()` carries the full context: collective,
/// algorithm, this rank, the peer and the byte count where they apply.
class error : public std::system_error {
 public:
  error(errc code, const std::string& what) : std::system_error(make_error_code(code), what) {}
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

}  // namespace tutti

template <>
struct std::is_error_code_enum<tutti::errc> : std::true_type {};

#if defined(TUTTI_DEFINITIONS)
#include "tutti/core/error.ipp"
#endif
