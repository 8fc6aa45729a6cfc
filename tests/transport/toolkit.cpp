// The transport toolkit's pure parts: the fingerprint's one wire encoding, and failure texts cut
// where a reader can tell.
#include <doctest/doctest.h>

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
