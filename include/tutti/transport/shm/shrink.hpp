/// \file
/// How the survivors of an shm job agree on who carries on (`communicator::shrink`). Every
/// survivor marks its control block with a shrink generation and waits until every other rank
/// has done the same or its process is gone (pidfd); a rank alive but silent until the deadline
/// (stopped, hung) is left out. The lowest member writes the member set into its control block
/// and the others adopt it (if it dies first, the next one decides), so all agree even if a rank
/// dies meanwhile. The members then start a fresh job on a new segment.
#pragma once

#include <chrono>
#include <cstdint>

#include "tutti/detail/attributes.hpp"
#include "tutti/transport/shm/segment.hpp"

namespace tutti::detail::shm_impl {

/// The generation of this shrink and the agreed members (bit r: old world rank r carries on).
struct survivors {
  std::uint32_t generation;
  std::uint64_t members;
};

TUTTI_DECL survivors agree_survivors(segment& seg, std::chrono::milliseconds timeout);

}  // namespace tutti::detail::shm_impl

#if defined(TUTTI_DEFINITIONS)
#include "tutti/transport/shm/shrink.ipp"
#endif
