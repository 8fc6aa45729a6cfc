// Helpers for tests of failing multi-rank runs: record what each rank raised, run with a watchdog
// (a hang fails the test with a message instead of stalling the suite), read rank numbers out of
// error messages.
#pragma once

#include <doctest/doctest.h>

#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <future>
#include <iostream>
#include <set>
#include <string>
#include <thread>
#include <tutti/tutti.hpp>

#include "ranks.hpp"

namespace tutti::test {

/// What a rank raised, by type.
enum class kind { none, mismatch, peer_lost, timeout, usage, config, aborted, other_tutti, other };

inline std::string kind_name(kind k) {
  switch (k) {
    case kind::none: return "nothing";
    case kind::mismatch: return "mismatch_error";
    case kind::peer_lost: return "peer_lost";
    case kind::timeout: return "timeout_error";
    case kind::usage: return "usage_error";
    case kind::config: return "config_error";
    case kind::aborted: return "tutti::error(aborted)";
    case kind::other_tutti: return "tutti::error(other)";
    case kind::other: return "a non-tutti exception";
  }
  return "?";
}

/// Classifies an exception; `what` gets its message.
inline kind classify(std::exception_ptr e, std::string& what) {
  try {
    std::rethrow_exception(e);
  } catch (const timeout_error& x) {
    what = x.what();
    return kind::timeout;
  } catch (const peer_lost& x) {
    what = x.what();
    return kind::peer_lost;
  } catch (const mismatch_error& x) {
    what = x.what();
    return kind::mismatch;
  } catch (const usage_error& x) {
    what = x.what();
    return kind::usage;
  } catch (const config_error& x) {
    what = x.what();
    return kind::config;
  } catch (const tutti::error& x) {
    what = x.what();
    return x.code() == errc::aborted ? kind::aborted : kind::other_tutti;
  } catch (const std::exception& x) {
    what = x.what();
    return kind::other;
  } catch (...) {
    what = "(not a std::exception)";
    return kind::other;
  }
}

/// The numbers N of every "rank N" in a message.
inline std::set<int> ranks_named(const std::string& s) {
  std::set<int> out;
  for (auto pos = s.find("rank "); pos != std::string::npos; pos = s.find("rank ", pos + 1)) {
    std::size_t i = pos + 5;
    int v = 0;
    bool digits = false;
    while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) {
      v = v * 10 + (s[i] - '0');
      digits = true;
      ++i;
    }
    if (digits) out.insert(v);
  }
  return out;
}

inline bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

inline void rethrow_if(const std::exception_ptr& e) {
  if (e) std::rethrow_exception(e);
}

/// Runs `body` on n ranks (run_ranks) on a helper thread and returns what the run threw (null if
/// nothing). A run that has not finished after `limit` is a hang: the test fails with `what`
/// and the process ends at once (the blocked threads cannot be joined).
template <class Algorithm = algo::automatic, class Body>
std::exception_ptr run_watched(int n, Body& body, const std::string& what,
                               std::chrono::seconds limit = std::chrono::seconds(60)) {
  std::exception_ptr err;
  std::promise<void> done;
  auto finished = done.get_future();
  std::thread t([&] {
    try {
      run_ranks<Algorithm>(n, body);
    } catch (...) {
      err = std::current_exception();
    }
    done.set_value();
  });
  if (finished.wait_for(limit) != std::future_status::ready) {
    FAIL_CHECK("HANG: " << what << " -- the run on " << n << " ranks was still blocked after "
                        << limit.count() << " s; ending the test process");
    std::cout.flush();
    std::cerr.flush();
    std::fflush(nullptr);
    std::_Exit(3);
  }
  t.join();
  return err;
}

}  // namespace tutti::test
