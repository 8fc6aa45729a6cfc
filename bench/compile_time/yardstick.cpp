// The yardstick every figure is a ratio to: all of the standard library, one regex, one sort (a
// heavy but ordinary translation unit, compiled in the same run as the others, so that a busy
// machine moves both alike).
#include <bits/stdc++.h>
int main(int argc, char** argv) {
  std::vector<std::string> v(argv, argv + argc);
  std::sort(v.begin(), v.end());
  std::regex re("[a-z]+[0-9]*");
  return std::regex_match(v.back(), re) ? 0 : 1;
}
