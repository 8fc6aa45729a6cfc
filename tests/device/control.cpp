// The host side of the device transports (tutti/transport/device/control.hpp), over threads:
// what every device call agrees on before any device work. Its all-gather gives every rank every
// record; ranks in different calls, or with different counts, dtypes or roots, get
// mismatch_error naming both ranks and both values; a rank that never comes is a timeout_error
// naming it; a rank that fails tells the others, who quote its reason.
#include <doctest/doctest.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <tutti/transport/device/control.hpp>
#include <tutti/transport/inproc.hpp>
#include <vector>

using namespace tutti;
namespace dv = tutti::detail::device;

namespace {

/// Runs `body(control&)` on n threads over one inproc world; returns each rank's error text ("" if none).
/// A rank that fails tells its peers (`fail`), as a device transport's communicator does.
template <class Body>
std::vector<std::string> on_threads(int n, Body body) {
  auto w = std::make_shared<inproc::world>(n);
  std::vector<std::string> errors(static_cast<std::size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      dv::control c{inproc(w, r)};
      try {
        body(c);
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(r)] = e.what();
        c.fail(e.what());
      }
    });
  for (auto& t : threads) t.join();
  return errors;
}

/// A call's fingerprint; `seq` as the communicator numbers its calls (one per call).
fingerprint call(collective c, std::uint64_t count, int root = -1, std::uint64_t seq = 3) {
  fingerprint fp;
  fp.coll = c;
  fp.count = count;
  fp.root = root;
  fp.dtype = 7;
  fp.elem_size = 4;
  fp.seq = seq;
  return fp;
}

}  // namespace

TEST_SUITE_BEGIN("multirank");

TEST_CASE("device control: all_gather gives every rank every record, broadcast the root's, on 1-5 ranks") {
  for (int n = 1; n <= 5; ++n) {
    std::vector<std::vector<std::uint64_t>> got(static_cast<std::size_t>(n));
    std::vector<std::uint64_t> ids(static_cast<std::size_t>(n));
    const auto errors = on_threads(n, [&](dv::control& c) {
      const wait_context w{std::chrono::seconds(20), "test", nullptr};
      const std::uint64_t mine[2] = {static_cast<std::uint64_t>(c.rank()) * 10, 42};
      auto& all = got[static_cast<std::size_t>(c.rank())];
      all.resize(2 * static_cast<std::size_t>(c.size()));
      c.all_gather(call(collective::all_reduce, 8), reinterpret_cast<const std::byte*>(mine),
                   reinterpret_cast<std::byte*>(all.data()), sizeof mine, w);
      std::uint64_t id = c.rank() == n - 1 ? 0xabcdef : 0;
      c.broadcast(call(collective::group, 0, -1, 4), reinterpret_cast<std::byte*>(&id), sizeof id, n - 1, w);
      ids[static_cast<std::size_t>(c.rank())] = id;
      c.all_gather(call(collective::barrier, 0, -1, 5), nullptr, nullptr, 0, w);  // a bare agreement
    });
    for (int r = 0; r < n; ++r) {
      CHECK(errors[static_cast<std::size_t>(r)] == "");
      for (int q = 0; q < n; ++q) {
        CHECK(got[static_cast<std::size_t>(r)][2 * static_cast<std::size_t>(q)] == static_cast<std::uint64_t>(q) * 10);
        CHECK(got[static_cast<std::size_t>(r)][2 * static_cast<std::size_t>(q) + 1] == 42);
      }
      CHECK(ids[static_cast<std::size_t>(r)] == 0xabcdef);
    }
  }
}

TEST_CASE("device control: ranks in different calls, or with different counts, get mismatch_error naming both") {
  for (int n : {2, 3}) {
    // rank 1 calls broadcast while the others call all_reduce
    auto errors = on_threads(n, [&](dv::control& c) {
      const wait_context w{std::chrono::seconds(20), "native", nullptr};
      const auto fp = c.rank() == 1 ? call(collective::broadcast, 8, 0) : call(collective::all_reduce, 8);
      c.all_gather(fp, nullptr, nullptr, 0, w);
    });
    for (int r = 0; r < n; ++r) {
      CAPTURE(errors[static_cast<std::size_t>(r)]);
      CHECK(errors[static_cast<std::size_t>(r)].find("broadcast") != std::string::npos);
      CHECK(errors[static_cast<std::size_t>(r)].find("all_reduce") != std::string::npos);
      CHECK(errors[static_cast<std::size_t>(r)].find("rank 1") != std::string::npos);
    }
    // rank 0 passes count 8, the others 12
    errors = on_threads(n, [&](dv::control& c) {
      const wait_context w{std::chrono::seconds(20), "native", nullptr};
      c.all_gather(call(collective::all_reduce, c.rank() == 0 ? 8 : 12), nullptr, nullptr, 0, w);
    });
    for (int r = 0; r < n; ++r) {
      CAPTURE(errors[static_cast<std::size_t>(r)]);
      CHECK(errors[static_cast<std::size_t>(r)].find("12") != std::string::npos);
      CHECK(errors[static_cast<std::size_t>(r)].find("8") != std::string::npos);
    }
  }
}

TEST_CASE("device control: a rank that never agrees is a timeout_error naming it") {
  const auto t0 = std::chrono::steady_clock::now();
  const auto errors = on_threads(3, [&](dv::control& c) {
    const wait_context w{std::chrono::milliseconds(300), "native", nullptr};
    if (c.rank() == 2) {
      std::this_thread::sleep_for(std::chrono::milliseconds(900));  // late for the whole deadline
      return;
    }
    try {
      c.all_gather(call(collective::all_reduce, 4), nullptr, nullptr, 0, w);
    } catch (const timeout_error&) {
      throw;
    } catch (const peer_lost&) {
      throw;  // a peer released by another's failure quotes it
    }
  });
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10));
  bool named = false;
  for (int r = 0; r < 2; ++r) {
    CAPTURE(errors[static_cast<std::size_t>(r)]);
    CHECK(errors[static_cast<std::size_t>(r)] != "");
    named = named || errors[static_cast<std::size_t>(r)].find("rank 2") != std::string::npos;
  }
  CHECK(named);
}

TEST_CASE("device control: a rank that fails tells its peers, who quote its reason") {
  const auto errors = on_threads(3, [&](dv::control& c) {
    const wait_context w{std::chrono::seconds(20), "native", nullptr};
    if (c.rank() == 0) {
      c.fail("rank 0's device work failed: cudaErrorIllegalAddress");
      return;
    }
    c.all_gather(call(collective::all_reduce, 4), nullptr, nullptr, 0, w);
  });
  for (int r = 1; r < 3; ++r) {
    CAPTURE(errors[static_cast<std::size_t>(r)]);
    CHECK(errors[static_cast<std::size_t>(r)].find("cudaErrorIllegalAddress") != std::string::npos);
  }
}

TEST_SUITE_END();
