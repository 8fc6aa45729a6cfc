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
}  // namespace detail

}  // namespace tutti
