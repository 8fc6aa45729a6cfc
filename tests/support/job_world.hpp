// The communicator of the whole job, made once per process from the environment (the launcher's
// variables), for the process tests that share it across their test cases.
#pragma once

#include <chrono>
#include <tutti/tutti.hpp>

namespace tutti::test {

template <class Transport>
communicator<Transport>& job_world(std::chrono::seconds timeout = std::chrono::seconds(60)) {
  static communicator<Transport> comm = [&] {
    auto c = communicator<Transport>::from_env();
    c.set_timeout(timeout);
    return c;
  }();
  return comm;
}

}  // namespace tutti::test
