// The layout a multi-host test script announces: TUTTI_TEST_HOSTS, one label per rank in rank
// order ("b,a,c,a": ranks 1 and 3 share host a). Tests compare the groups tutti learned from
// the node keys with it.
#pragma once

#include <cstdlib>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace tutti::test {

inline std::optional<std::vector<std::string>> expected_hosts() {
  const char* v = std::getenv("TUTTI_TEST_HOSTS");
  if (!v || !*v) return std::nullopt;
  std::vector<std::string> labels;
  std::stringstream in(v);
  for (std::string item; std::getline(in, item, ',');) labels.push_back(item);
  return labels;
}

/// The ranks whose label is rank `me`'s, in rank order.
inline std::vector<int> ranks_on_host_of(const std::vector<std::string>& labels, int me) {
  std::vector<int> r;
  for (std::size_t i = 0; i < labels.size(); ++i)
    if (labels[i] == labels[static_cast<std::size_t>(me)]) r.push_back(static_cast<int>(i));
  return r;
}

}  // namespace tutti::test
