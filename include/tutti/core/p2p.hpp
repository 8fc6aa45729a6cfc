/// \file
/// Point-to-point's public names: `any_source`, `any_tag` and `recv_status` (what a receive got),
/// as MPI's `MPI_ANY_SOURCE`, `MPI_ANY_TAG` and `MPI_Status`.
#pragma once

#include <cstddef>
#include <limits>

namespace tutti {

/// A receive's source that matches a message from any rank (`recv`, `irecv` only; where the
/// transport matches point-to-point itself: `matched_p2p`). Not -1, so that a neighbour's rank
/// computed as `rank() - 1` on rank 0 stays an error instead of becoming "any".
inline constexpr int any_source = std::numeric_limits<int>::min();
/// A receive's tag that matches a message with any tag (`recv`, `irecv` only).
inline constexpr int any_tag = std::numeric_limits<int>::min();

/// What a receive got: the rank that sent the message (in the communicator's numbering), its
/// tag, and how many elements it held (at most the receive buffer's size; a shorter message
/// leaves the rest of the buffer as it was). `recv` returns it; `request::status()` gives an
/// `irecv`'s once it has completed.
struct recv_status {
  int source = -1;
  int tag = -1;
  std::size_t count = 0;
  friend bool operator==(const recv_status&, const recv_status&) = default;
};

}  // namespace tutti
