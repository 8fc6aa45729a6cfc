// tutti::tcp in one process: ranks as threads, each with its own transport over real loopback
// sockets. Start-up, the wire and every error a user can meet; the collectives themselves run as
// processes in tests/multiproc/tcp_collectives.cpp.
#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <latch>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <tutti/bootstrap/store.hpp>
#include <tutti/testing/p2p.hpp>
#include <utility>
#include <tutti/transport/tcp.hpp>
#include <vector>

#include "../support/collective_checks.hpp"
#include "../support/sockets.hpp"

using namespace tutti;
using namespace std::chrono_literals;

namespace {

using tutti::test::free_port;

struct setup {
  int n = 2;
  std::string master = "127.0.0.1";
  tcp_options opt{};
  std::chrono::milliseconds timeout = 10s;
  int port = 0;  // the store's MASTER_PORT; 0: a free one
  std::function<void(int, job_env&, std::string& token)> tweak = [](int, job_env&, std::string&) {};
};

/// Starts `s.n` ranks as threads and runs `body(transport)` on each; returns what each rank
/// threw ("" when it returned).
std::vector<std::string> run_tcp(const setup& s, const std::function<void(tcp&)>& body) {
  const int port = s.port ? s.port : free_port();
  std::vector<std::string> outcome(static_cast<std::size_t>(s.n));
  std::vector<std::thread> ts;
  for (int r = 0; r < s.n; ++r)
    ts.emplace_back([&, r] {
      try {
        job_env j;
        j.rank = j.local_rank = r;
        j.world_size = j.local_world_size = s.n;
        j.master_addr = s.master;
        j.master_port = port;
        j.job_id = "unit";
        j.source = "test";
        std::string token = "token";
        s.tweak(r, j, token);
        config c;
        c.timeout = s.timeout;
        tcp t = tcp::create(j, c, s.opt, token);
        body(t);
      } catch (const std::exception& e) {
        outcome[static_cast<std::size_t>(r)] = std::string("threw: ") + e.what();
      }
    });
  for (auto& t : ts) t.join();
  return outcome;
}

header make_header(std::size_t bytes, std::uint64_t count = 7) {
  header h;
  h.fp.coll = collective::all_reduce;
  h.fp.count = count;
  h.fp.seq = 3;
  h.bytes = bytes;
  return h;
}

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

/// What `f` threw as `E` ("no exception" when it returned; "wrong exception: ..." for another).
template <class E, class F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("wrong exception: ") + e.what();
  }
  return "no exception";
}

}  // namespace

TEST_SUITE_BEGIN("unit");

TEST_CASE("tcp: a mesh of threads runs the collectives") {
  for (int streams : {1, 3}) {
    CAPTURE(streams);
    setup s;
    s.n = 3;
    s.opt.streams = streams;
    s.opt.stripe_bytes = 1024;
    const auto out = run_tcp(s, [](tcp& t) {
      CHECK(t.size() == 3);
      CHECK_THROWS_AS(t.send(t.rank(), make_header(0), nullptr, wait_context{1s, "test"}), usage_error);
      CHECK_THROWS_AS(t.recv(3, make_header(0), nullptr, wait_context{1s, "test"}), usage_error);
      communicator<tcp> comm(std::move(t), {}, config{});
      test::check_collectives<algo::automatic, float>(comm, 1000, op::sum{});
      test::check_collectives<algo::ring, std::int32_t>(comm, 5000, op::max{});
      test::check_collectives<algo::recursive_doubling, double>(comm, 3, op::sum{});
    });
    for (const auto& o : out) CHECK(o == "");
  }
}

TEST_CASE("tcp: sendrecv is full duplex for messages far larger than the socket buffers") {
  for (int streams : {1, 2}) {
    CAPTURE(streams);
    setup s;
    s.opt.streams = streams;
    const std::size_t n = std::size_t{48} << 20;
    const auto out = run_tcp(s, [&](tcp& t) {
      const int other = 1 - t.rank();
      std::vector<std::byte> mine(n), theirs(n);
      for (std::size_t i = 0; i < n; i += 4096) mine[i] = static_cast<std::byte>(t.rank() + 1 + i / 4096);
      const header h = make_header(n);
      t.sendrecv(other, h, mine.data(), other, h, theirs.data(), wait_context{20s, "test"});
      bool ok = true;
      for (std::size_t i = 0; i < n; i += 4096) ok = ok && theirs[i] == static_cast<std::byte>(other + 1 + i / 4096);
      CHECK(ok);
    });
    for (const auto& o : out) CHECK(o == "");
  }
}

TEST_CASE("tcp: recv_with hands the payload over in 64-byte aligned pieces, in order") {
  setup s;
  s.opt.streams = 2;
  s.opt.stripe_bytes = 4096;
  const std::size_t n = (std::size_t{3} << 20) + 100;
  const auto out = run_tcp(s, [&](tcp& t) {
    std::vector<std::byte> data(n);
    for (std::size_t i = 0; i < n; ++i) data[i] = static_cast<std::byte>(i * 7);
    if (t.rank() == 0) {
      t.send(1, make_header(n), data.data(), wait_context{10s, "test"});
    } else {
      std::vector<std::byte> got(n);
      std::size_t total = 0;
      bool aligned = true;
      auto consume = [&](const std::byte* p, std::size_t off, std::size_t k) {
        aligned = aligned && off % 64 == 0;
        std::memcpy(got.data() + off, p, k);
        total += k;
      };
      t.recv_with(0, make_header(n), consume, wait_context{10s, "test"});
      CHECK(aligned);
      CHECK(total == n);
      CHECK(got == data);
    }
  });
  for (const auto& o : out) CHECK(o == "");
}

TEST_CASE("tcp: a rank that leaves right after its last send does not cut off a slow reader") {
  // Rank 1 leaves a note (bytes rank 0 never reads), then reads rank 0's message slowly. Rank 0
  // returns, and closes its connections, as soon as its send is taken: with unread bytes a plain
  // close sends a reset, which throws away what rank 1 has not yet read, and rank 1 would lose
  // rank 0 mid-message. The transport's graceful close waits until rank 1 has it all.
  for (int streams : {1, 2}) {
    CAPTURE(streams);
    setup s;
    s.opt.streams = streams;
    s.opt.stripe_bytes = 4096;
    const std::size_t n = std::size_t{24} << 20;
    const auto out = run_tcp(s, [&](tcp& t) {
      std::vector<std::byte> data(n);
      for (std::size_t i = 0; i < n; i += 512) data[i] = static_cast<std::byte>(i / 512 * 13);
      if (t.rank() == 0) {
        t.send(1, make_header(n), data.data(), wait_context{10s, "test"});
        return;  // the transport's last copy goes here
      }
      t.note("rank 1 was here");
      std::vector<std::byte> got(n);
      auto slowly = [&](const std::byte* p, std::size_t off, std::size_t k) {
        std::this_thread::sleep_for(2ms);
        std::memcpy(got.data() + off, p, k);
      };
      t.recv_with(0, make_header(n), slowly, wait_context{10s, "test"});
      CHECK(got == data);
    });
    for (const auto& o : out) CHECK(o == "");
  }
}

TEST_CASE("tcp: a silent peer is a timeout naming it, the collective and the bytes") {
  setup s;
  const auto out = run_tcp(s, [](tcp& t) {
    if (t.rank() == 1) {
      std::vector<std::byte> buf(4096);
      const auto t0 = std::chrono::steady_clock::now();
      try {
        t.recv(0, make_header(4096), buf.data(), wait_context{200ms, "ring"});
        FAIL("no timeout");
      } catch (const timeout_error& e) {
        const std::string m = e.what();
        CHECK(has(m, "all_reduce(ring)"));
        CHECK(has(m, "rank 1 timed out after 0.2 s waiting to receive from rank 0"));
        CHECK(has(m, "4096 bytes"));
      }
      CHECK(std::chrono::steady_clock::now() - t0 < 2s);
    }
    std::this_thread::sleep_for(300ms);  // rank 0 stays until rank 1 timed out
  });
  for (const auto& o : out) CHECK(o == "");
}

TEST_CASE("tcp: a peer that fails or exits is peer_lost naming it") {
  SUBCASE("fail() sends the reason") {
    setup s;
    const auto out = run_tcp(s, [](tcp& t) {
      if (t.rank() == 0) {
        std::this_thread::sleep_for(50ms);
        t.fail("rank 0 hit a bad thing");
        return;
      }
      std::vector<std::byte> buf(100);
      try {
        t.recv(0, make_header(100), buf.data(), wait_context{10s, "tree"});
        FAIL("no error");
      } catch (const peer_lost& e) {
        CHECK(has(e.what(), "rank 0 failed"));
        CHECK(has(e.what(), "rank 0 hit a bad thing"));
      }
    });
    for (const auto& o : out) CHECK(o == "");
  }
  SUBCASE("the reason reaches a peer that was sending, not reading") {
    setup s;
    const auto out = run_tcp(s, [](tcp& t) {
      if (t.rank() == 0) {
        std::this_thread::sleep_for(100ms);
        t.fail("rank 0 gave up");
        return;
      }
      // Far more than the socket buffers hold; sent again until the notice arrives, since rank 0's
      // transport may take in a whole message before its fail() (64 MiB over loopback: ~30 ms).
      std::vector<std::byte> buf(std::size_t{64} << 20);
      try {
        for (int i = 0; i < 200; ++i) t.send(0, make_header(buf.size()), buf.data(), wait_context{10s, "ring"});
        FAIL("no error");
      } catch (const peer_lost& e) {
        CHECK(has(e.what(), "rank 0 failed, so "));
        CHECK(has(e.what(), " on rank 1 fails too: rank 0 gave up"));
      }
    });
    for (const auto& o : out) CHECK(o == "");
  }
  SUBCASE("a transport destroyed mid-job (an exit) closes the connection") {
    setup s;
    s.n = 3;
    const auto out = run_tcp(s, [](tcp& t) {
      if (t.rank() == 2) return;  // the transport goes away: its sockets close
      std::vector<std::byte> buf(1 << 20);
      try {
        t.sendrecv(2, make_header(buf.size()), buf.data(), 2, make_header(buf.size()), buf.data(),
                   wait_context{10s, "ring"});
        FAIL("no error");
      } catch (const peer_lost& e) {
        CHECK(has(e.what(), "lost rank 2"));
        CHECK(has(e.what(), "all_reduce(ring)"));
      }
    });
    for (const auto& o : out) CHECK(o == "");
  }
}

TEST_CASE("tcp: point-to-point has a connection of its own beside the streams, and learns a failure") {
  SUBCASE("the ring, 64 outstanding and any source, beside two striped streams") {
    setup s;
    s.n = 3;
    s.opt.streams = 2;
    s.opt.stripe_bytes = 4096;
    const auto out = run_tcp(s, [](tcp& t) {
      communicator<tcp> comm(std::move(t), {}, config{});
      testing::report rep;
      testing::check_p2p_ring(comm, rep);
      test::check_collectives<algo::ring, float>(comm, 5000, op::sum{});  // striped meanwhile
      testing::check_p2p_outstanding(comm, rep);
      testing::check_p2p_any_source(comm, rep);
      CHECK(rep.ok());
    });
    for (const auto& o : out) CHECK(o == "");
  }
  SUBCASE("fail() reaches a pending receive with its reason, and an any-source one") {
    setup s;
    const auto out = run_tcp(s, [](tcp& t) {
      if (t.rank() == 0) {
        // Its own pending receive, waited for from another thread while it fails, ends as this
        // rank's failure, not as a lost peer.
        communicator<tcp> comm(std::move(t), {}, config{});
        std::vector<float> v(100);
        auto mine = comm.irecv(view(v), 1, 7);
        std::string own;
        std::thread waiter([&] { own = message_of<error>([&] { mine.wait(); }); });
        std::this_thread::sleep_for(50ms);
        comm.transport().fail("rank 0 hit a bad thing");
        waiter.join();
        CAPTURE(own);
        CHECK(has(own, "this rank failed earlier: rank 0 hit a bad thing"));
        return;
      }
      communicator<tcp> comm(std::move(t), {}, config{});
      std::vector<float> v(100), w(100);
      auto from0 = comm.irecv(view(v), 0, 1);
      auto any = comm.irecv(view(w), any_source, 2);
      const std::string named = message_of<peer_lost>([&] { from0.wait(); });
      CHECK(has(named, "rank 0 hit a bad thing"));
      const std::string anyone = message_of<peer_lost>([&] { any.wait(); });
      CAPTURE(anyone);
      CHECK(has(anyone, "rank 0"));
    });
    for (const auto& o : out) CHECK(o == "");
  }
}

TEST_CASE("tcp: disagreeing headers and garbage on the wire are errors, not crashes") {
  SUBCASE("a different count") {
    setup s;
    const auto out = run_tcp(s, [](tcp& t) {
      std::vector<std::byte> buf(64);
      if (t.rank() == 0) {
        t.send(1, make_header(64, 10), buf.data(), wait_context{5s, "direct"});
        return;
      }
      try {
        t.recv(0, make_header(64, 12), buf.data(), wait_context{5s, "direct"});
        FAIL("no mismatch");
      } catch (const mismatch_error& e) {
        CHECK(has(e.what(), "count=12"));
        CHECK(has(e.what(), "count=10"));
      }
    });
    for (const auto& o : out) CHECK(o == "");
  }
  SUBCASE("bytes that are no tutti message") {
    setup s;
    const auto out = run_tcp(s, [](tcp& t) {
      std::vector<std::byte> buf(64);
      if (t.rank() == 0) {
        const std::string garbage(64, 'G');  // straight onto the socket
        REQUIRE(::send(t.native_handle(1), garbage.data(), garbage.size(), MSG_NOSIGNAL) == 64);
        std::this_thread::sleep_for(300ms);
        return;
      }
      t.recv(0, make_header(64), buf.data(), wait_context{5s, "direct"});
    });
    CHECK(out[0] == "");
    CHECK(has(out[1], "malformed header from rank 0"));
  }
  SUBCASE("half a header, then the peer is gone") {
    setup s;
    const auto out = run_tcp(s, [](tcp& t) {
      std::vector<std::byte> buf(64);
      if (t.rank() == 0) {
        const std::string part(20, 'x');
        REQUIRE(::send(t.native_handle(1), part.data(), part.size(), MSG_NOSIGNAL) == 20);
        return;
      }
      t.recv(0, make_header(64), buf.data(), wait_context{5s, "direct"});
    });
    CHECK(out[0] == "");
    CHECK(has(out[1], "lost rank 0"));
  }
}

TEST_CASE("tcp: start-up refuses a wrong world size, a duplicate rank, a wrong token, naming them") {
  SUBCASE("world size") {
    setup s;
    s.timeout = 3s;
    s.tweak = [](int r, job_env& j, std::string&) {
      if (r == 1) j.world_size = 3;
    };
    const auto out = run_tcp(s, [](tcp&) {});
    CHECK(has(out[1], "rank 1 says the world has 3 ranks, rank 0 says 2"));
    CHECK(has(out[0], "rank 1 says the world has 3 ranks, rank 0 says 2"));  // told, not timed out
  }
  SUBCASE("duplicate rank") {
    setup s;
    s.n = 3;
    s.timeout = 3s;
    s.tweak = [](int r, job_env& j, std::string&) {
      if (r == 2) {
        j.rank = 1;
        j.world_size = 3;
      }
    };
    const auto out = run_tcp(s, [](tcp&) {});
    CHECK((has(out[1], "two processes claim rank 1") || has(out[2], "two processes claim rank 1")));
  }
  SUBCASE("token") {
    setup s;
    s.timeout = 2s;
    s.tweak = [](int r, job_env&, std::string& token) {
      if (r == 1) token = "another job's token";
    };
    const auto out = run_tcp(s, [](tcp&) {});
    CHECK(has(out[1], "refused this process: wrong job token"));
    CHECK(has(out[0], "timed out"));  // rank 0 never hears of rank 1
  }
  SUBCASE("no MASTER_PORT") {
    job_env j;
    j.rank = 0;
    j.world_size = 2;
    j.local_world_size = 2;
    const auto msg = [&] {
      try {
        tcp::create(j, config{}, tcp_options{}, "");
      } catch (const config_error& e) {
        return std::string(e.what());
      }
      return std::string("no config_error");
    }();
    CHECK(has(msg, "MASTER_PORT"));
  }
}

TEST_CASE("tcp: a late duplicate rank or a process of another job is refused, and the job still grows") {
  // Once the job runs, a process with its token claims rank 1 at the store: one with the job's
  // id (a duplicate RANK), one of an earlier job on the same port and token. Both are refused;
  // the members then grow by a joiner (a thread: TUTTI_JOIN=1 through tcp::from_env) and run a
  // collective in the grown world.
  setup s;
  s.port = free_port();
  s.timeout = 5s;
  const std::string port = std::to_string(s.port);
  // For the joiner's tcp::from_env, set before any thread runs; as they were afterwards.
  const std::vector<std::pair<const char*, std::string>> joiner_env{
      {"TUTTI_JOIN", "1"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", port}, {"TUTTI_JOB_TOKEN", "token"}, {"TUTTI_TIMEOUT", "5"}};
  std::vector<std::optional<std::string>> saved;
  for (const auto& [name, value] : joiner_env) {
    const char* was = std::getenv(name);
    saved.push_back(was ? std::optional<std::string>(was) : std::nullopt);
    ::setenv(name, value.c_str(), 1);
  }
  std::string duplicate, other_job, joiner = "not run";
  const auto sum_of_ranks = [](tcp& t) {
    config c;
    c.timeout = 5s;
    communicator<tcp> comm(std::move(t), {}, c);
    std::vector<int> v(4, comm.rank());
    comm.all_reduce(view(v));
    return v[0];
  };
  const auto out = run_tcp(s, [&](tcp& t) {
    std::thread joining;
    struct join_at_exit {
      std::thread& t;
      ~join_at_exit() {
        if (t.joinable()) t.join();
      }
    } guard{joining};
    if (t.rank() == 0) {
      duplicate = message_of<config_error>([&] { store("127.0.0.1", s.port, 1, 2, "token", 5s); });
      other_job = message_of<config_error>([&] {
        job_env j;
        j.rank = j.local_rank = 1;
        j.world_size = j.local_world_size = 2;
        j.master_addr = "127.0.0.1";
        j.master_port = s.port;
        j.job_id = "an-earlier-job";
        j.source = "test";
        config c;
        c.timeout = 2s;
        tcp::create(j, c, tcp_options{}, "token");
      });
      joining = std::thread([&] {
        try {
          tcp j = tcp::from_env();
          CHECK(j.rank() == 2);
          CHECK(sum_of_ranks(j) == 3);
          joiner = "";
        } catch (const std::exception& e) {
          joiner = std::string("threw: ") + e.what();
        }
      });
    }
    tcp grown = t.grow(1, 5s);
    CHECK(grown.size() == 3);
    CHECK(sum_of_ranks(grown) == 3);
  });
  for (std::size_t i = 0; i < joiner_env.size(); ++i) {
    if (saved[i]) ::setenv(joiner_env[i].first, saved[i]->c_str(), 1);
    else ::unsetenv(joiner_env[i].first);
  }
  for (const auto& o : out) CHECK(o == "");
  CHECK(joiner == "");
  CHECK(has(duplicate, "two processes claim rank 1"));
  CHECK(has(other_job, "another job"));
  CHECK(has(other_job, "'an-earlier-job'"));
  CHECK(has(other_job, "'unit'"));
}

TEST_CASE("tcp: IPv6 and TUTTI_SOCKET_IFNAME") {
  SUBCASE("::1") {
    setup s;
    s.master = "::1";
    s.n = 3;
    const auto out = run_tcp(s, [](tcp& t) {
      communicator<tcp> comm(std::move(t), {}, config{});
      test::check_collectives<algo::automatic, float>(comm, 100, op::sum{});
    });
    for (const auto& o : out) CHECK(o == "");
  }
  SUBCASE("the loopback interface by name") {
    setup s;
    s.opt.ifname = "lo";
    const auto out = run_tcp(s, [](tcp& t) {
      communicator<tcp> comm(std::move(t), {}, config{});
      test::check_collectives<algo::direct, float>(comm, 100, op::sum{});
    });
    for (const auto& o : out) CHECK(o == "");
  }
  SUBCASE("an interface that does not exist") {
    setup s;
    s.opt.ifname = "nosuch0";
    s.timeout = 2s;
    const auto out = run_tcp(s, [](tcp&) {});
    CHECK(has(out[0], "TUTTI_SOCKET_IFNAME='nosuch0'"));
    CHECK(has(out[0], " lo"));  // lists what exists
  }
}

namespace {
/// A raw connection to a rank's listener, for bytes no rank would send.
struct raw_peer {
  int fd = -1;
  /// Connects to `host:port`, from the address `source` when one is given.
  raw_peer(const std::string& host, int port, const std::string& source = "") {
    fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (!source.empty()) {
      sockaddr_in b{};
      b.sin_family = AF_INET;
      ::inet_pton(AF_INET, source.c_str(), &b.sin_addr);
      REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&b), sizeof b) == 0);
    }
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<std::uint16_t>(port));
    ::inet_pton(AF_INET, host.c_str(), &a.sin_addr);
    REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    timeval tv{5, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  }
  ~raw_peer() { ::close(fd); }
  /// Whether this host lets a socket bind to `source` (any 127.x.y.z on Linux's loopback).
  static bool can_bind(const std::string& source) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in b{};
    b.sin_family = AF_INET;
    ::inet_pton(AF_INET, source.c_str(), &b.sin_addr);
    const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&b), sizeof b) == 0;
    ::close(fd);
    return ok;
  }
  std::string address() const {
    sockaddr_in a{};
    socklen_t len = sizeof a;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    char host[INET_ADDRSTRLEN] = {};
    ::inet_ntop(AF_INET, &a.sin_addr, host, sizeof host);
    return std::string(host) + ":" + std::to_string(ntohs(a.sin_port));
  }
  /// Sends `bytes` (then closes this side when `close_write`) and returns all the rank answers
  /// until it closes the connection.
  std::string exchange(const std::string& bytes, bool close_write = false) const {
    REQUIRE(::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(bytes.size()));
    if (close_write) ::shutdown(fd, SHUT_WR);
    std::string all;
    char buf[4096];
    ssize_t k;
    while ((k = ::recv(fd, buf, sizeof buf, 0)) > 0) all.append(buf, static_cast<std::size_t>(k));
    CHECK(k == 0);  // closed by the rank, not timed out
    return all;
  }
};
}  // namespace

TEST_CASE("tcp: the parsers take bytes and give a hello, a frame header, 'incomplete', or malformed") {
  using namespace detail::tcp_impl;
  using detail::net::malformed;
  const std::string h = hello_text(1, 3, 0, 2, "job", "tok");
  for (std::size_t n = 0; n < h.size(); ++n) CHECK_FALSE(parse_mesh_hello(std::string_view(h).substr(0, n)));
  const auto got = parse_mesh_hello(h);
  REQUIRE(got);
  CHECK(got->from == 1);
  CHECK(got->world == 3);
  CHECK(got->streams == 2);
  CHECK(got->job_id == "job");
  CHECK(got->token == "tok");
  CHECK(got->size == h.size());
  CHECK(hello_text(1, 3, 0, 2, std::string(max_job_id, 'j'), std::string(detail::net::max_token, 't')).size() ==
        max_hello_bytes);
  auto reason = [](auto&& parse) {
    try {
      parse();
    } catch (const malformed& e) {
      return e.reason + (e.stranger ? " [stranger]" : "");
    }
    return std::string("accepted");
  };
  std::string long_id = h.substr(0, hello_fixed) + std::string("\xff\xff\xff\x7f", 4);
  CHECK(reason([&] { parse_mesh_hello(long_id); }) == "job id of 2147483647 bytes");
  CHECK(reason([] { parse_mesh_hello(std::string(8, 'G')); }) == "not a tutti connection (wrong magic) [stranger]");
  toolkit::wire::frame w{};
  w.magic = static_cast<std::uint32_t>(toolkit::wire::kind::message);
  w.bytes = ~std::uint64_t{0};
  const auto f = parse_frame_head(w);
  CHECK(f.kind == toolkit::wire::kind::message);
  CHECK(f.h.bytes == ~std::uint64_t{0});  // a count the receiver compares, never allocates
  for (auto k : {toolkit::wire::kind::failure, toolkit::wire::kind::stall, toolkit::wire::kind::note}) {
    w.magic = static_cast<std::uint32_t>(k);
    CHECK(parse_frame_head(w).kind == k);
    CHECK(parse_frame_head(w).text_bytes == toolkit::max_notice_text);  // cut to the cap
  }
  w.magic = static_cast<std::uint32_t>(toolkit::wire::kind::waiting);
  CHECK(parse_frame_head(w).text_bytes == 0);
  w.magic = static_cast<std::uint32_t>(toolkit::wire::kind::message);
  fingerprint odd;
  odd.coll = static_cast<collective>(200);
  toolkit::wire::encode(odd, w.fp.data());
  CHECK(reason([&] { parse_frame_head(w); }) == "unknown collective 200");
  w.magic = 0x47474747u;
  CHECK(reason([&] { parse_frame_head(w); }).find("not a tutti message") == 0);
}

TEST_CASE("tcp: connections without this job's hello are refused and logged, and the job still completes") {
  // Rank 2 accepts ranks 0 and 1. Rank 1 starts only once the strangers below have been
  // answered, so rank 2 is still accepting while they knock.
  const std::string secret = "s3cret-job-token";
  std::vector<std::string> lines;  // what rank 2 must have logged
  int store_port = 0;
  setup s;
  s.n = 3;
  s.tweak = [&](int r, job_env& j, std::string& token) {
    token = secret;
    if (r == 0) store_port = j.master_port;
    if (r != 1) return;
    store kv("127.0.0.1", j.master_port, -1, 0, secret, 10s);
    const std::string where = kv.get("tutti/addr/2", 10s);
    const std::string host = where.substr(0, where.find(' '));
    const int port = std::stoi(where.substr(where.find(' ') + 1));
    const std::string prefix = "[tutti rank 2] tcp start-up: refused a connection from ";
    using namespace detail::tcp_impl;
    {
      raw_peer c(host, port);  // another job's token
      const auto answer = c.exchange(hello_text(1, 3, 0, 1, j.job_id, "not-the-token"));
      CHECK(has(answer, "wrong job token or job id"));
      lines.push_back(prefix + c.address() + ": wrong job token or job id");
    }
    {
      raw_peer c(host, port);  // garbage
      CHECK(c.exchange(std::string(64, 'G')).empty());
      lines.push_back(prefix + c.address() + ": not a tutti connection (wrong magic)");
    }
    {
      raw_peer c(host, port);  // a hello cut short
      CHECK(c.exchange(hello_text(1, 3, 0, 1, j.job_id, secret).substr(0, 20), true).empty());
      lines.push_back(prefix + c.address() + ": it closed the connection after 20 bytes of an incomplete hello");
    }
    {
      raw_peer c(host, port);  // a job id of 2 GiB
      CHECK(c.exchange(hello_text(1, 3, 0, 1, "", "").substr(0, hello_fixed) + std::string("\xff\xff\xff\x7f", 4)).empty());
      lines.push_back(prefix + c.address() + ": malformed hello (job id of 2147483647 bytes)");
    }
    {
      raw_peer c(host, port);  // another protocol version: refused, not fatal
      std::string v2 = hello_text(1, 3, 0, 1, j.job_id, secret);
      v2[8] = 1;  // version 1: before the fingerprint's fixed encoding and the table's version
      v2[9] = v2[10] = v2[11] = 0;
      const std::string refused = "protocol version 1 differs from " + std::to_string(hello_version);
      CHECK(has(c.exchange(v2), refused));
      lines.push_back(prefix + c.address() + ": " + refused);
    }
    {
      // Silent connections past the caps: the oldest are closed to make room for newer ones,
      // first those of the address that has its share (127.0.0.1's), then, from other
      // addresses, the oldest of all once the queue is full.
      using detail::net::max_silent;
      using detail::net::max_silent_per_address;
      std::vector<std::unique_ptr<raw_peer>> quiet;
      for (std::size_t i = 0; i < max_silent_per_address + 2; ++i) quiet.push_back(std::make_unique<raw_peer>(host, port));
      for (std::size_t i = 0; i < 2; ++i) {
        CHECK(quiet[i]->exchange("").empty());
        lines.push_back(prefix + quiet[i]->address() + ": closed for a newer one: " +
                        std::to_string(max_silent_per_address) + " connections from 127.0.0.1 were waiting to say hello");
      }
      if (raw_peer::can_bind("127.0.0.2") && raw_peer::can_bind("127.0.0.3")) {
        for (std::size_t i = 0; i < max_silent - max_silent_per_address; ++i)
          quiet.push_back(std::make_unique<raw_peer>(host, port, "127.0.0.2"));
        for (std::size_t i = 0; i < 2; ++i) quiet.push_back(std::make_unique<raw_peer>(host, port, "127.0.0.3"));
        for (std::size_t i = 2; i < 4; ++i) {
          CHECK(quiet[i]->exchange("").empty());
          lines.push_back(prefix + quiet[i]->address() + ": closed for a newer one: " + std::to_string(max_silent) +
                          " connections were waiting to say hello");
        }
      } else {
        MESSAGE("cannot bind to 127.0.0.2 or 127.0.0.3 here: the cap on all silent connections is not checked");
      }
    }
  };
  std::vector<std::string> out;
  std::string log;
  {
    test::stderr_capture capture;
    out = run_tcp(s, [&](tcp& t) {
      if (t.rank() == 0)  // rank 0's store listens on loopback only, as MASTER_ADDR says
        CHECK(test::listening_addresses(store_port) == std::vector<std::string>{"127.0.0.1"});
      communicator<tcp> comm(std::move(t), {}, config{});
      test::check_collectives<algo::direct, float>(comm, 100, op::sum{});
    });
    log = capture.text();
  }
  for (const auto& o : out) CHECK(o == "");
  REQUIRE(lines.size() >= 7);
  for (const auto& l : lines) {
    CAPTURE(l);
    CHECK(has(log, l));
  }
  CHECK_FALSE(has(log, "s3cret"));
  CHECK_FALSE(has(log, "not-the-token"));
}

namespace {
/// Connections that connect to a rank's port and never say a word (a port scanner, a stuck or
/// stopped client), held open until destroyed.
struct idle_connections {
  std::vector<int> fds;
  idle_connections() = default;
  idle_connections(const idle_connections&) = delete;
  idle_connections& operator=(const idle_connections&) = delete;
  ~idle_connections() {
    for (int fd : fds) ::close(fd);
  }
  /// `n` more to `host:port`: non-blocking connects, then a moment for the handshakes (a full
  /// accept queue is not waited for: the kernel keeps retrying).
  void open(const std::string& host, int port, int n) {
    std::vector<pollfd> pending;
    for (int i = 0; i < n; ++i) {
      const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
      if (fd < 0) throw std::runtime_error("socket: " + std::string(std::strerror(errno)));
      fds.push_back(fd);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_port = htons(static_cast<std::uint16_t>(port));
      ::inet_pton(AF_INET, host.c_str(), &a.sin_addr);
      if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
        if (errno != EINPROGRESS) throw std::runtime_error("connect: " + std::string(std::strerror(errno)));
        pending.push_back({fd, POLLOUT, 0});
      }
    }
    const auto until = std::chrono::steady_clock::now() + 1s;
    while (!pending.empty() && std::chrono::steady_clock::now() < until) {
      ::poll(pending.data(), pending.size(), 10);
      std::erase_if(pending, [](const pollfd& p) { return p.revents != 0; });
    }
  }
};

/// Where rank `r` of the job whose store is at 127.0.0.1:`store_port` listens (its "address
/// port" in the store).
std::pair<std::string, int> listener_of(int store_port, int r) {
  store kv("127.0.0.1", store_port, -1, 0, "token", 5s);
  const std::string where = kv.get("tutti/addr/" + std::to_string(r), 5s);
  return {where.substr(0, where.find(' ')), std::stoi(where.substr(where.find(' ') + 1))};
}
}  // namespace

TEST_CASE("tcp: idle connections to a rank's port hold up neither new_group nor split") {
  // Rank 0 opens the idle connections once the job runs; then every rank makes two groups and
  // runs a collective in each. Each rank reads the hellos of the connections waiting on its port
  // side by side, so a silent one delays nobody: both groups are made well within the deadline
  // (3 s; before, each idle connection held a rank's accept for up to 10 s, or to the deadline).
  std::vector<int> idle_per_rank;
  SUBCASE("one idle connection to every rank") { idle_per_rank = {1, 1, 1}; }
  SUBCASE("200 idle connections to one rank") { idle_per_rank = {0, 0, 200}; }
  setup s;
  s.n = 3;
  s.timeout = 3s;
  s.port = free_port();
  idle_connections idle;
  std::latch opened(s.n);
  std::vector<std::chrono::steady_clock::duration> took(static_cast<std::size_t>(s.n));
  const auto out = run_tcp(s, [&](tcp& t) {
    if (t.rank() == 0)
      for (int r = 0; r < s.n; ++r) {
        const auto [host, port] = listener_of(s.port, r);
        idle.open(host, port, idle_per_rank[static_cast<std::size_t>(r)]);
      }
    opened.arrive_and_wait();
    config c;
    c.timeout = s.timeout;
    communicator<tcp> comm(std::move(t), {}, c);
    comm.set_timeout(s.timeout);
    const int me = comm.rank();
    const auto t0 = std::chrono::steady_clock::now();
    auto all = comm.new_group({0, 1, 2});
    auto half = comm.split(me % 2, me);
    took[static_cast<std::size_t>(me)] = std::chrono::steady_clock::now() - t0;
    if (!all || !half) throw std::runtime_error("a group this rank is in came back empty");
    std::vector<int> v(4, me);
    all->all_reduce(view(v));
    CHECK(v[0] == 0 + 1 + 2);
    std::vector<int> w(4, me);
    half->all_reduce(view(w));
    CHECK(w[0] == (me % 2 == 0 ? 0 + 2 : 1));
  });
  for (const auto& o : out) CHECK(o == "");
  for (const auto& d : took) CHECK(d < s.timeout);
}

TEST_CASE("tcp: idle connections to the survivors' ports do not split a shrink") {
  // Two idle connections to each rank's port, then rank 2 goes away (its transport closes, as a
  // killed process's does). Ranks 0 and 1 shrink: both carry on, together, as ranks 0 and 1.
  setup s;
  s.n = 3;
  s.timeout = 3s;
  s.port = free_port();
  idle_connections idle;
  std::latch opened(s.n), gone(1);
  std::vector<std::vector<int>> kept(static_cast<std::size_t>(s.n));
  const auto out = run_tcp(s, [&](tcp& t) {
    if (t.rank() == 0)
      for (int r = 0; r < s.n; ++r) {
        const auto [host, port] = listener_of(s.port, r);
        idle.open(host, port, 2);
      }
    opened.arrive_and_wait();
    const int me = t.rank();
    if (me == 2) {
      { tcp dying = std::move(t); }
      gone.count_down();
      return;
    }
    gone.wait();
    tcp next = t.shrink(s.timeout, &kept[static_cast<std::size_t>(me)]);
    CHECK(next.rank() == me);
    config c;
    c.timeout = s.timeout;
    communicator<tcp> comm(std::move(next), {}, c);
    std::vector<int> v(4, me);
    comm.all_reduce(view(v));
    CHECK(v[0] == 0 + 1);
  });
  for (const auto& o : out) CHECK(o == "");
  CHECK(kept[0] == std::vector<int>{0, 1});
  CHECK(kept[1] == std::vector<int>{0, 1});
}

TEST_CASE("tcp: without MASTER_ADDR the store listens on loopback only") {
  setup s;
  s.master = "";  // every rank on this host: 127.0.0.1
  int store_port = 0;
  s.tweak = [&](int r, job_env& j, std::string&) {
    if (r == 0) store_port = j.master_port;
  };
  const auto out = run_tcp(s, [&](tcp& t) {
    if (t.rank() == 0) CHECK(test::listening_addresses(store_port) == std::vector<std::string>{"127.0.0.1"});
  });
  for (const auto& o : out) CHECK(o == "");
}

TEST_SUITE_END();
