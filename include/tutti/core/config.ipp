/// \file
/// Definitions for tutti/core/config.hpp (see `TUTTI_DECL` in tutti/detail/attributes.hpp).
#pragma once

#include <cmath>
#include <cstdio>

#include "tutti/core/config.hpp"

namespace tutti {

namespace detail {
TUTTI_COLD TUTTI_DECL std::chrono::milliseconds parse_seconds(const char* var, std::string_view text) {
  std::string s(text);
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size() || !std::isfinite(v) || v <= 0)
    throw config_error(std::string(var) + "='" + s +
                       "': expected a positive number of seconds, like 300 or 0.5");
  return std::chrono::milliseconds(static_cast<long long>(std::ceil(v * 1000.0)));
}
}  // namespace detail

TUTTI_COLD TUTTI_DECL config config::from_env() {
  config c;
  if (const char* t = detail::getenv_nonempty("TUTTI_TIMEOUT"))
    c.timeout = detail::parse_seconds("TUTTI_TIMEOUT", t);
  if (const char* a = detail::getenv_nonempty("TUTTI_ALGO")) c.algo_override = a;
  if (const char* d = detail::getenv_nonempty("TUTTI_DEBUG")) {
    std::string_view v = d;
    if (v == "info" || v == "INFO" || v == "1") c.debug = log_level::info;
    else if (v == "warn" || v == "WARN") c.debug = log_level::warn;
    else if (v == "none" || v == "0") c.debug = log_level::none;
    else
      throw config_error("TUTTI_DEBUG='" + std::string(v) + "': expected none, warn or info");
  }
  return c;
}

namespace detail {
TUTTI_DECL void log(log_level want, const config& c, int rank, const std::string& msg) {
  if (static_cast<int>(c.debug) >= static_cast<int>(want))
    std::fprintf(stderr, "[tutti rank %d] %s\n", rank, msg.c_str());
}
}  // namespace detail

}  // namespace tutti
