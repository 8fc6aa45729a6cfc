/// \file
/// `tutti::inproc::run(n, body)`: runs `body(comm)` on `n` threads of this process, `comm` being
/// a `communicator<inproc, Algorithm>&` of rank 0..n-1, and rethrows the first exception any rank
/// threw first (the others see that rank fail and stop promptly; their errors follow from it). The threads flavour of a multi-rank
/// program: the same body runs over processes with `communicator<shm>::from_env()` under tuttirun.
#pragma once

#include <exception>
#include <memory>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "tutti/core/config.hpp"
#include "tutti/core/error.hpp"
#include "tutti/core/launch.hpp"
#include "tutti/group/communicator.hpp"
#include "tutti/transport/inproc.hpp"

namespace tutti {

/// The algorithm `Algorithm` names: the communicator's default for `default_algorithm`.
template <class Algorithm>
using launched_algorithm = std::conditional_t<std::is_same_v<Algorithm, default_algorithm>, algo::automatic, Algorithm>;

/// `inproc::run_wrapped`'s launch (core/launch.hpp): a world of `n` ranks, one thread each, a
/// communicator over `wrap(inproc)` per rank; the first exception any rank threw is rethrown.
template <class Algorithm, class Wrap, class F>
void launch_threads(thread_launch<Algorithm>, int n, Wrap&& wrap, F&& f) {
  using A = launched_algorithm<Algorithm>;
  if (n < 1) throw usage_error("inproc::run: need at least one rank, got " + std::to_string(n));
  const config cfg = config::from_env();  // read once, before any thread starts
  auto w = std::make_shared<inproc::world>(n);
  std::vector<std::thread> threads;
  threads.reserve(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      std::exception_ptr err;
      try {
        auto t = wrap(inproc(w, r));
        communicator<decltype(t), A> comm(std::move(t), A{}, cfg);
        f(comm);
      } catch (...) {
        err = std::current_exception();
      }
      w->finish(r, err);
    });
  }
  for (auto& t : threads) t.join();
  if (const auto e = w->first_error()) std::rethrow_exception(e);
}

}  // namespace tutti
