// libFuzzer target: the rendezvous store's parsers (tutti/bootstrap/store/wire.hpp, alone), fed what a
// client or a stranger could send, the way the server consumes it: a hello, then requests, each
// parsed from the front of the bytes received so far, then the same bytes as replies and a
// welcome, as a client reads them. Every input must end in a message, "incomplete", or
// `malformed`: a crash, a sanitizer report or any other exception is a bug.
// Build and run: see tests/fuzz/CMakeLists.txt and tests/fuzz/run.sh.
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <tutti/bootstrap/store/wire.hpp>

namespace {
using namespace tutti::detail::store_impl;

/// What the server does with the stream: the hello, then every complete request; `add`s are
/// applied to a small map as the server applies them.
void serve(std::string_view in) {
  std::map<std::string, std::string, std::less<>> data;
  try {
    const auto h = parse_hello(in);
    if (!h) return;
    if (h->size > max_hello_bytes) __builtin_trap();  // the cap on what one hello takes
    if (h->token.size() > max_token || h->job_id.size() > max_job_id) __builtin_trap();
    in.remove_prefix(h->size);
    while (const auto q = parse_request(in)) {
      if (q->size < 5 || q->size > in.size()) __builtin_trap();
      if (q->key.size() > max_key || q->value.size() > max_value || q->keys.size() > max_keys) __builtin_trap();
      if (q->op == opcode::set) data[std::string(q->key)] = std::string(q->value);
      if (q->op == opcode::add) {
        auto& slot = data[std::string(q->key)];
        slot = add_to(slot, q->delta);
      }
      in.remove_prefix(q->size);
    }
  } catch (const malformed&) {
    // the server answers and closes the connection
  }
}

/// What a client does with the same bytes as the server's answers.
void read_answers(std::string_view in) {
  try {
    if (in.size() >= answer_head_bytes) {
      const auto a = parse_answer_head(in.substr(0, answer_head_bytes), magic);
      if (a.text_bytes > max_answer_text) __builtin_trap();
    }
  } catch (const malformed&) {
  }
  try {
    if (in.size() >= reply_head_bytes) {
      const auto r = parse_reply_head(in.substr(0, reply_head_bytes));
      if (r.payload_bytes > max_value) __builtin_trap();
    }
  } catch (const malformed&) {
  }
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  serve(in);
  // Every prefix of a valid stream is "incomplete", never an error: check a few cut points.
  if (size > 0) serve(in.substr(0, size / 2));
  read_answers(in);
  return 0;
}
