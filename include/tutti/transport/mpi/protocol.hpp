/// \file
/// How a `tutti::mpi` transport uses its MPI communicator: the tags (a collective's header and
/// payload, failure notices, waiting notices, a pair per user tag), when a receive tells its
/// peers what it waits for, the largest payload piece and failure notice, how long a failed call
/// goes on driving what it posted (`settle_within`, `abort_settle`), and the header
/// (`toolkit::wire::frame`) with the fingerprint as words.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "tutti/core/fingerprint.hpp"
#include "tutti/transport/toolkit.hpp"

namespace tutti::detail::mpi_impl {

/// Tags on a transport's communicator: a collective's header and payload, failure notices,
/// waiting notices, then a (header, payload) pair per user tag t of point to point: 4 + 2t and
/// 5 + 2t.
inline constexpr int tag_header = 0, tag_payload = 1, tag_failure = 2, tag_waiting = 3, tag_p2p = 4;
/// A collective's receive still without its header after this long tells the peers what it waits for.
inline constexpr std::chrono::milliseconds waiting_notice_after{20};
/// Largest payload piece: MPI counts are `int`.
inline std::size_t max_piece = std::size_t{1} << 30;  // not const: tests shrink it to cover the split
/// Longest failure notice (`toolkit::max_notice_text`): short enough to go eagerly (Open MPI's
/// shared-memory eager limit is 4 KiB), so sending it never blocks.
inline constexpr std::size_t max_notice = toolkit::max_notice_text;
/// How long a failed call goes on driving what it posted before it gives up on it (`mpi::settle`).
/// A transfer whose two ends are both inside MPI runs at memory or network speed (a 1 GiB piece:
/// about 0.1 s through shared memory, 1 s at 10 Gb/s; the tests' 4 MiB, milliseconds even under
/// ASan on a loaded host); one still running after this long has an end that is stopped or gone,
/// and waiting longer would only delay the error, and the failure notice the peers wait for. Not
/// the call's timeout: that would double the time to report a timeout.
inline constexpr std::chrono::seconds settle_within{2};
/// The same once the communicator is aborted: abort() returns within about 20 ms (what is still
/// pending then is kept, never freed).
inline constexpr std::chrono::milliseconds abort_settle{10};

/// The fingerprint as words (toolkit::wire's fixed encoding): what agreement reduces and
/// waiting notices carry. The header message is a `toolkit::wire::frame`.
inline constexpr int fp_words = static_cast<int>(toolkit::wire::fingerprint_words);
inline void encode(const fingerprint& f, std::uint64_t* w) noexcept {
  const auto words = toolkit::wire::to_words(f);
  std::memcpy(w, words.data(), sizeof words);
}
inline fingerprint decode(const std::uint64_t* w) noexcept { return toolkit::wire::from_words(w); }
using wire_header = toolkit::wire::frame;

}  // namespace tutti::detail::mpi_impl
