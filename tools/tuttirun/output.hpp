// tuttirun: a rank's output streams, cut into whole lines and prefixed with "[rank R] ".
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace tuttirun {

// A line longer than this is emitted in pieces: the alternative is unbounded memory.
inline constexpr std::size_t max_line = 1 << 20;
// The exit summary quotes at most this much of a rank's last stderr line.
inline constexpr std::size_t max_quoted_line = 400;

// One of a rank's output streams and the start of a line not yet complete.
struct output_stream {
  int fd = -1;
  int dest = -1;
  std::string pending;
  bool keeps_last_line = false;  // stderr: its last line is quoted in the exit summary
  std::string last_line;         // the last line that was not blank, without its newline
  std::string last_words;        // the same, not counting tutti's flight recorder ("[tutti rank N] ...")
};

// Takes the complete lines of `s.pending`, each after `prefix` ("[rank R] ", or nothing with
// --no-prefix), as one text for one write(); a line longer than max_line goes out in pieces. At
// EOF, an unterminated last line is completed (unchanged without a prefix). A stream that keeps
// its last line (stderr) remembers the last one that is not blank, for the exit summary.
inline std::string take_lines(output_stream& s, std::string_view prefix, bool eof) {
  std::string out;
  std::size_t begin = 0;
  std::string_view last;  // the last line of this batch that is not blank
  std::string_view words;  // the last that is not a flight recorder line either
  while (begin < s.pending.size()) {
    std::size_t nl = s.pending.find('\n', begin);
    std::size_t end = nl == std::string::npos ? s.pending.size() : nl + 1;
    bool complete = nl != std::string::npos;
    if (!complete && !eof && end - begin < max_line) break;
    out += prefix;
    out.append(s.pending, begin, end - begin);
    if (!complete && (!prefix.empty() || !eof)) out += '\n';
    std::string_view line(s.pending.data() + begin, end - begin);
    if (line.find_first_not_of(" \t\r\n") != std::string_view::npos) {
      last = line;
      if (!line.starts_with("[tutti rank ")) words = line;
    }
    begin = end;
  }
  auto keep = [](std::string& kept, std::string_view line) {
    while (line.ends_with('\n') || line.ends_with('\r')) line.remove_suffix(1);
    kept.assign(line.substr(0, max_quoted_line));
    if (line.size() > max_quoted_line) kept += "...";
  };
  if (s.keeps_last_line && !last.empty()) keep(s.last_line, last);
  if (s.keeps_last_line && !words.empty()) keep(s.last_words, words);
  s.pending.erase(0, begin);
  return out;
}

}  // namespace tuttirun
