/// \file
/// Definitions for tutti/bootstrap/progress.hpp (see `TUTTI_DECL` in tutti/detail/attributes.hpp).
#pragma once

#include <algorithm>
#include <cstddef>

#include "tutti/bootstrap/progress.hpp"

namespace tutti::detail {

TUTTI_DECL std::chrono::milliseconds startup_progress::first_word(std::chrono::milliseconds timeout) noexcept {
  using std::chrono::milliseconds;
  return std::clamp(timeout / 4, milliseconds(1000), milliseconds(3000));
}

TUTTI_DECL startup_progress::startup_progress(std::chrono::milliseconds timeout, clock::time_point start)
    : start_(start), deadline_(start + timeout), next_(start + first_word(timeout)) {}

TUTTI_DECL bool startup_progress::due(clock::time_point now) {
  if (now < next_ || now >= deadline_) return false;
  while (next_ <= now) next_ = start_ + 2 * (next_ - start_);
  return true;
}

TUTTI_DECL std::string rank_list(const std::vector<int>& ranks, bool with_word) {
  std::string out = with_word ? (ranks.size() == 1 ? "rank " : "ranks ") : "";
  for (std::size_t i = 0; i < ranks.size();) {
    std::size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (i > 0) out += ", ";
    if (j >= i + 2) {
      out += std::to_string(ranks[i]) + "-" + std::to_string(ranks[j]);
      i = j + 1;
    } else {
      out += std::to_string(ranks[i]);
      ++i;
    }
  }
  return out;
}

TUTTI_DECL std::string seconds_said(std::chrono::milliseconds d) {
  const long long tenths = (std::max<long long>(d.count(), 0) + 50) / 100;
  return std::to_string(tenths / 10) + (tenths % 10 ? "." + std::to_string(tenths % 10) : "") + " s";
}

}  // namespace tutti::detail
