/// \file
/// Definitions for tutti/transport/toolkit/p2p.hpp (see `TUTTI_DECL` in tutti/detail/attributes.hpp).
#pragma once

#include <cstdio>

#include "tutti/core/p2p.hpp"
#include "tutti/transport/toolkit/p2p.hpp"

namespace tutti::toolkit {

TUTTI_COLD TUTTI_DECL header p2p_header(dtype type, std::size_t count, int tag, std::size_t bytes) {
  header h;
  h.fp.coll = collective::send_recv;
  h.fp.dtype = type.id;
  h.fp.elem_size = static_cast<std::uint8_t>(type.size > 255 ? 255 : type.size);
  h.fp.count = count;
  h.fp.root = tag == any_tag ? -1 : tag;  // (a negative tag is not printed)
  h.bytes = bytes;
  return h;
}

TUTTI_COLD TUTTI_DECL std::string p2p_mismatch(int sender, int receiver, int tag, dtype sent, std::uint64_t sent_count,
                                               dtype buffer, std::size_t room) {
  if (p2p_fits(sent, sent_count, buffer, room)) return {};
  const bool same_type = sent.id == buffer.id && sent.size == buffer.size;
  // Group ranks, as the other mismatch texts name them.
  const std::string from = "rank " + std::to_string(sender), to = "rank " + std::to_string(receiver);
  const std::string at = "recv on " + to + " from " + from + " (tag " + std::to_string(tag) + "): " + from +
                         " sent count=" + std::to_string(sent_count) + " dtype=" + dtype_name(sent);
  const std::string holds = "count=" + std::to_string(room) + " dtype=" + dtype_name(buffer);
  if (!same_type) return at + ", " + to + " receives into " + holds;
  return at + ", more than the receive buffer of " + to + " holds (" + holds +
         "); a shorter message is received, and its recv_status says how many elements it held";
}

TUTTI_COLD TUTTI_DECL std::string p2p_pending_line(bool send, std::string_view peer, int tag, std::size_t bytes,
                                                   std::chrono::steady_clock::duration age) {
  char ms[32];
  std::snprintf(ms, sizeof ms, "%.1f", std::chrono::duration<double, std::milli>(age).count());
  return std::string(send ? "send to " : "recv from ") + std::string(peer) +
         (tag == any_tag ? std::string(" any tag") : " tag=" + std::to_string(tag)) + " (" + std::to_string(bytes) +
         " bytes), posted " + ms + " ms ago";
}

}  // namespace tutti::toolkit
