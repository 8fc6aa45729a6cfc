/// \file
/// Definitions for tutti/transport/tcp/wire.hpp (see `TUTTI_DECL` in tutti/detail/attributes.hpp).
#pragma once

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "tutti/transport/tcp/wire.hpp"

namespace tutti::detail::tcp_impl {

TUTTI_DECL std::string hello_text(int from, int world, int stream, int streams, const std::string& job,
                                  const std::string& token) {
  net::writer w;
  w.num(hello_magic).num(hello_version).num(static_cast<std::int32_t>(from)).num(static_cast<std::int32_t>(world));
  w.num(static_cast<std::int32_t>(stream)).num(static_cast<std::int32_t>(streams)).str(job).str(token);
  return w.out;
}

TUTTI_DECL bool hello_field(net::reader& r, std::string_view& out, std::size_t cap, const char* what) {
  if (r.in.size() < 4) return false;
  const auto n = net::reader{r.in}.num<std::uint32_t>();
  if (n > cap) throw net::malformed(std::string(what) + " of " + std::to_string(n) + " bytes");
  if (r.in.size() < 4 + std::size_t{n}) return false;
  out = r.str(cap);
  return true;
}

TUTTI_DECL std::optional<mesh_hello> parse_mesh_hello(std::string_view in) {
  using net::malformed;
  if (in.size() < 8) return std::nullopt;
  net::reader r{in};
  if (r.num<std::uint64_t>() != hello_magic) throw malformed("not a tutti connection (wrong magic)", true);
  if (in.size() < hello_fixed) return std::nullopt;
  mesh_hello h;
  h.version = r.num<std::uint32_t>();
  h.from = r.num<std::int32_t>();
  h.world = r.num<std::int32_t>();
  h.stream = r.num<std::int32_t>();
  h.streams = r.num<std::int32_t>();
  if (!hello_field(r, h.job_id, max_job_id, "job id") || !hello_field(r, h.token, net::max_token, "token")) return std::nullopt;
  h.size = in.size() - r.in.size();
  return h;
}

TUTTI_DECL std::string group_hello_text(int from, int stream, std::uint64_t context, const std::string& job,
                                        const std::string& token) {
  net::writer w;
  w.num(group_hello_magic).num(hello_version).num(static_cast<std::int32_t>(from)).num(static_cast<std::int32_t>(stream));
  w.num(context).str(job).str(token);
  return w.out;
}

TUTTI_DECL std::optional<group_hello> parse_group_hello(std::string_view in) {
  using net::malformed;
  if (in.size() < 8) return std::nullopt;
  net::reader r{in};
  if (r.num<std::uint64_t>() != group_hello_magic) throw malformed("not a tutti group connection (wrong magic)", true);
  if (in.size() < group_hello_fixed) return std::nullopt;
  group_hello h;
  h.version = r.num<std::uint32_t>();
  h.from = r.num<std::int32_t>();
  h.stream = r.num<std::int32_t>();
  h.context = r.num<std::uint64_t>();
  if (!hello_field(r, h.job_id, max_job_id, "job id") || !hello_field(r, h.token, net::max_token, "token")) return std::nullopt;
  return h;
}

TUTTI_DECL frame_head parse_frame_head(const toolkit::wire::frame& f) {
  using net::malformed;
  using toolkit::wire::kind;
  frame_head out;
  for (kind k : {kind::failure, kind::stall, kind::note, kind::waiting})
    if (f.is(k)) {
      out.kind = k;
      out.h = f.head();
      out.text_bytes = k == kind::waiting ? 0 : static_cast<std::size_t>(std::min<std::uint64_t>(f.bytes, toolkit::max_notice_text));
      return out;
    }
  if (!f.is(kind::message))
    throw malformed("not a tutti message: the stream is corrupt or another program wrote to it", true);
  out.h = f.head();
  if (!is_collective(static_cast<std::uint8_t>(out.h.fp.coll)))
    throw malformed("unknown collective " + std::to_string(static_cast<unsigned>(out.h.fp.coll)));
  return out;
}

TUTTI_COLD TUTTI_DECL void log_refusal(int rank, const std::string& from, const std::string& why, int& logged) {
  static constexpr int max_logged = 100;
  if (logged > max_logged) return;
  if (logged++ == max_logged)
    std::fprintf(stderr, "[tutti rank %d] tcp start-up: more refused connections; no longer logged\n", rank);
  else
    std::fprintf(stderr, "[tutti rank %d] tcp start-up: refused a connection from %s: %s\n", rank, from.c_str(),
                 why.c_str());
}

}  // namespace tutti::detail::tcp_impl
