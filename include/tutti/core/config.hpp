/// \file
/// Settings read from the environment: `TUTTI_TIMEOUT` (seconds, default 300), `TUTTI_ALGO`
/// (override of the automatic choice), `TUTTI_DEBUG` (`info` to log choices to stderr).
/// Values are parsed strictly; a malformed one raises `config_error` naming the variable.
#pragma once

#include <chrono>
#include <cstdlib>
#include <string>
#include <string_view>

#include "tutti/detail/attributes.hpp"
#include "tutti/core/error.hpp"

namespace tutti {

namespace detail {
inline const char* getenv_nonempty(const char* name) {
  const char* v = std::getenv(name);
  return (v && *v) ? v : nullptr;
}

/// Seconds as a decimal number ("300", "0.5") -> milliseconds.
std::chrono::milliseconds parse_seconds(const char* var, std::string_view text);
}  // namespace detail

/// Debug verbosity (`TUTTI_DEBUG`).
enum class log_level { none, warn, info };

/// The settings one communicator starts with.
struct config {
  std::chrono::milliseconds timeout{std::chrono::seconds(300)};
  std::string algo_override;  ///< raw `TUTTI_ALGO`, parsed by algo::automatic
  log_level debug = log_level::none;

  /// Reads `TUTTI_TIMEOUT`, `TUTTI_ALGO` and `TUTTI_DEBUG`.
  static config from_env();
};

namespace detail {
TUTTI_DECL void log(log_level want, const config& c, int rank, const std::string& msg);
}  // namespace detail

}  // namespace tutti

#if defined(TUTTI_DEFINITIONS)
#include "tutti/core/config.ipp"
#endif
