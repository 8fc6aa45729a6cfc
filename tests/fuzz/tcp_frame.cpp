// libFuzzer target: tutti::tcp's wire parsers (tutti/transport/tcp/wire.hpp, which needs no
// Asio: this target includes it alone), fed what a peer or a
// stranger could send: the first 64 bytes as a frame header, checked against the header this
// rank expects as the receiver checks it (`parse_frame_head`, then `check_header`, whose error
// message names every field it got); the whole input as a mesh hello (`parse_mesh_hello`), as an
// acceptor reads it; and as the answer to a hello (`parse_answer_head`). Every input must end in
// a result, "incomplete", `malformed` or `mismatch_error`: a crash, a sanitizer report or any
// other exception is a bug.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <tutti/transport/tcp/wire.hpp>

namespace {
using namespace tutti;
using namespace tutti::detail::tcp_impl;
using tutti::detail::net::malformed;

void frame(std::string_view in) {
  if (in.size() < sizeof(toolkit::wire::frame)) return;
  toolkit::wire::frame w;
  std::memcpy(&w, in.data(), sizeof w);
  try {
    const frame_head f = parse_frame_head(w);
    if (f.kind != toolkit::wire::kind::message) {
      if (f.text_bytes > toolkit::max_notice_text) __builtin_trap();
      return;
    }
    header want;
    want.fp.coll = collective::all_reduce;
    want.fp.seq = 3;
    want.fp.count = 7;
    want.fp.dtype = 9;
    want.fp.elem_size = 4;
    want.fp.op = 1;
    want.bytes = 28;
    toolkit::check_header(want, 1, f.h, 0, "ring");
  } catch (const malformed&) {
  } catch (const mismatch_error& e) {
    if (std::string_view(e.what()).empty()) __builtin_trap();
  }
}

void hello(std::string_view in) {
  try {
    const auto h = parse_mesh_hello(in);
    if (h && (h->size > max_hello_bytes || h->size > in.size() || h->job_id.size() > max_job_id)) __builtin_trap();
  } catch (const malformed&) {
  }
}

void answer(std::string_view in) {
  try {
    if (in.size() >= tutti::detail::net::answer_head_bytes)
      tutti::detail::net::parse_answer_head(in.substr(0, tutti::detail::net::answer_head_bytes),
                                                   hello_magic);
  } catch (const malformed&) {
  }
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  frame(in);
  hello(in);
  answer(in);
  return 0;
}
