/// \file
/// Definitions for tutti/core/error.hpp (see `TUTTI_DECL` in tutti/detail/attributes.hpp).
#pragma once

#include "tutti/core/error.hpp"

namespace tutti {

namespace detail {
TUTTI_DECL std::string error_category_impl::message(int c) const {
  switch (static_cast<errc>(c)) {
    case errc::timeout: return "timed out";
    case errc::peer_lost: return "peer lost";
    case errc::mismatch: return "ranks disagree";
    case errc::config: return "bad configuration";
    case errc::usage: return "invalid arguments";
    case errc::aborted: return "communicator aborted";
  }
  return "unknown tutti error";
}

TUTTI_COLD TUTTI_DECL std::string own_text(const std::exception& e) {
  std::string w = e.what();
  if (const auto* t = dynamic_cast<const error*>(&e)) {
    const std::string tail = ": " + t->code().message();
    if (w.size() >= tail.size() && w.compare(w.size() - tail.size(), tail.size(), tail) == 0) w.resize(w.size() - tail.size());
  }
  return w;
}
}  // namespace detail

}  // namespace tutti
