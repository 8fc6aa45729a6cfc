/// \file
/// Each rank's arena in the shared segment: reserved address space (mapped without pre-faulting)
/// from which `comm.allocate<T>(n)` hands out `shared_buffer`s, first fit. Peers read a
/// collective's input straight from it (zero copy) where it lies there.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "tutti/detail/attributes.hpp"
#include "tutti/transport/shm/segment.hpp"

namespace tutti::detail::shm_impl {

/// `bytes` of this rank's arena (64-byte aligned); `usage_error` when it is full.
TUTTI_DECL std::byte* arena_allocate(segment& seg, std::size_t bytes);

/// Gives back what `arena_allocate` returned, merging free neighbours.
TUTTI_DECL void arena_deallocate(segment& seg, std::byte* p) noexcept;

/// Where `bytes` at `p` lie in this rank's arena, if they do.
TUTTI_DECL std::optional<std::uint64_t> arena_offset(const segment& seg, const void* p, std::size_t bytes) noexcept;

}  // namespace tutti::detail::shm_impl

#if defined(TUTTI_DEFINITIONS)
#include "tutti/transport/shm/arena.ipp"
#endif
