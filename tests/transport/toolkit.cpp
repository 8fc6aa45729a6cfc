// The transport toolkit's pure parts: the fingerprint's one wire encoding, and failure texts cut
// where a reader can tell.
#include <doctest/doctest.h>

#include <cstring>
#include <string>
#include <tutti/transport/toolkit.hpp>

using namespace tutti;

TEST_SUITE_BEGIN("unit");

TEST_CASE("toolkit::wire: a fingerprint survives its 52-byte encoding and its seven words") {
  fingerprint f;
  f.context = 0x0123456789abcdefULL;
  f.seq = 77;
  f.count = (std::uint64_t{1} << 40) + 3;
  f.shape = 0xfeedfacecafebeefULL;
  f.dtype = 9;
  f.op = 4;
  f.root = -1;
  f.algo = 0xabcdef;
  f.coll = collective::all_to_all_v;
  f.elem_size = 8;
  std::byte buf[toolkit::wire::fingerprint_bytes];
  toolkit::wire::encode(f, buf);
  CHECK(toolkit::wire::decode(buf) == f);
  const auto words = toolkit::wire::to_words(f);
  CHECK(words.size() == 7);
  CHECK(toolkit::wire::from_words(words.data()) == f);
  f.root = 12;
  CHECK_FALSE(toolkit::wire::from_words(words.data()) == f);
}

TEST_CASE("toolkit::wire: a frame written in place matches its header, and no byte of it goes unchecked") {
  header h;
  h.fp.context = 5;  // put() writes the channel's context in its place
  h.fp.seq = 41;
  h.fp.count = 1000;
  h.fp.shape = 0x1122334455667788ULL;
  h.fp.dtype = 3;
  h.fp.op = 2;
  h.fp.root = 1;
  h.fp.algo = 7;
  h.fp.coll = collective::scatter;
  h.fp.elem_size = 4;
  h.bytes = 4000;
  constexpr std::uint64_t context = 0x0102030405060708ULL;
  alignas(64) std::byte at[toolkit::wire::frame_bytes + 1];  // (one more: an unaligned frame too)
  for (const std::size_t off : {std::size_t{0}, std::size_t{1}}) {
    std::byte* f = at + off;
    toolkit::wire::frame::put(toolkit::wire::kind::message, h, context, f);
    // The same bytes as the frame built and copied, context included.
    header with = h;
    with.fp.context = context;
    const toolkit::wire::frame built = toolkit::wire::frame::of(toolkit::wire::kind::message, with);
    CHECK(std::memcmp(f, &built, sizeof built) == 0);
    CHECK(toolkit::wire::frame::matches(f, toolkit::wire::kind::message, h, context));
    CHECK_FALSE(toolkit::wire::frame::matches(f, toolkit::wire::kind::failure, h, context));
    CHECK_FALSE(toolkit::wire::frame::matches(f, toolkit::wire::kind::message, h, context + 1));
    header more = h;
    more.bytes += 1;
    CHECK_FALSE(toolkit::wire::frame::matches(f, toolkit::wire::kind::message, more, context));
    // A flipped bit anywhere in the 64 bytes is seen.
    for (std::size_t i = 0; i < toolkit::wire::frame_bytes; ++i) {
      f[i] ^= std::byte{0x10};
      CHECK_MESSAGE(!toolkit::wire::frame::matches(f, toolkit::wire::kind::message, h, context), "byte ", i);
      f[i] ^= std::byte{0x10};
    }
  }
}

TEST_CASE("toolkit::notice_text: a reason that fits travels whole, a longer one is cut at a word with a marker") {
  const std::string short_reason = "all_reduce(ring) #3: rank 1 called with count=10, rank 0 with count=12";
  CHECK(toolkit::notice_text(short_reason) == short_reason);
  // 5000 bytes of words: cut, at a space, within the limit, saying how much is missing.
  std::string long_reason;
  for (int i = 0; long_reason.size() < 5000; ++i) long_reason += "word" + std::to_string(i) + " ";
  const std::string cut = toolkit::notice_text(long_reason);
  CHECK(cut.size() <= toolkit::max_notice_text);
  const auto marker = cut.rfind(" [cut: ");
  REQUIRE(marker != std::string::npos);
  const std::string head = cut.substr(0, marker);
  CHECK(long_reason.compare(0, head.size(), head) == 0);
  CHECK(long_reason[head.size()] == ' ');  // the cut falls between words
  CHECK(cut.substr(marker) == " [cut: " + std::to_string(long_reason.size() - head.size()) + " more bytes]");
  // One long word: cut inside it, but never inside a UTF-8 sequence.
  std::string utf8;
  while (utf8.size() < 4000) utf8 += "\xc3\xa9";  // é
  const std::string cut8 = toolkit::notice_text(utf8);
  const auto m8 = cut8.rfind(" [cut: ");
  REQUIRE(m8 != std::string::npos);
  CHECK(m8 % 2 == 0);
  CHECK(cut8.size() <= toolkit::max_notice_text);
}

TEST_SUITE_END();
