/// \file
/// Definitions for tutti/transport/toolkit/wait.hpp (see `TUTTI_DECL` in tutti/detail/attributes.hpp).
#pragma once

#include "tutti/transport/toolkit/wait.hpp"

namespace tutti::toolkit {

TUTTI_DECL void check_aborted(const wait_context& w, const wait_subject& s) {
  if (w.aborted && w.aborted->load(std::memory_order_acquire))
    throw error(errc::aborted, where(s.h, w.algorithm) + ": rank " + std::to_string(s.me) + " stopped waiting " +
                                   std::string(s.doing) + (s.peer >= 0 ? " rank " + std::to_string(s.peer) : std::string()) +
                                   ": the communicator was aborted (communicator::abort)");
}

}  // namespace tutti::toolkit
