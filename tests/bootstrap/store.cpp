// The rendezvous store: operations, deadlines, and every way a client or a message can be wrong.
#include <doctest/doctest.h>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <tutti/bootstrap/store.hpp>
#include <vector>

using namespace tutti;
using namespace std::chrono_literals;

namespace {
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

/// A raw TCP connection to the server, for bytes no client would send.
struct raw_conn {
  int fd = -1;
  explicit raw_conn(int port) {
    fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<std::uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    timeval tv{5, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  }
  ~raw_conn() { ::close(fd); }
  void send(const std::string& s) const { REQUIRE(::send(fd, s.data(), s.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(s.size())); }
  /// Everything until the server closes the connection (or 5 s pass).
  std::string drain() const {
    std::string all;
    char buf[4096];
    ssize_t k;
    while ((k = ::recv(fd, buf, sizeof buf, 0)) > 0) all.append(buf, static_cast<std::size_t>(k));
    return all;
  }
};

std::string hello(const std::string& token, int rank = -1, int world = 0) {
  detail::store_impl::writer w;
  w.num(detail::store_impl::magic).num(detail::store_impl::version).num(std::int32_t{rank}).num(std::int32_t{world}).str(token);
  return w.out;
}
}  // namespace

TEST_SUITE_BEGIN("unit");

TEST_CASE("store: set, get, add and wait between clients") {
  store_server server("127.0.0.1", 0, 0, "tok");
  REQUIRE(server.port() > 0);
  store a("127.0.0.1", server.port(), -1, 0, "tok", 5s);
  store b("127.0.0.1", server.port(), -1, 0, "tok", 5s);
  a.set("k", "v1");
  CHECK(b.get("k", 1s) == "v1");
  a.set("k", std::string(100000, 'x'));  // overwrite, a large value
  CHECK(b.get("k", 1s).size() == 100000);
  a.set("empty", "");
  CHECK(b.get("empty", 1s).empty());
  CHECK(a.add("n", 5) == 5);
  CHECK(b.add("n", -2) == 3);
  CHECK(a.get("n", 1s) == "3");
  // get waits for a key another client sets later.
  std::thread later([&] {
    std::this_thread::sleep_for(100ms);
    a.set("late", "here");
  });
  const auto t0 = std::chrono::steady_clock::now();
  CHECK(b.get("late", 5s) == "here");
  CHECK(std::chrono::steady_clock::now() - t0 >= 50ms);
  later.join();
  const std::vector<std::string> keys{"k", "n", "late"};
  b.wait(keys, 1s);
}

TEST_CASE("store: counters are atomic under concurrent clients") {
  store_server server("127.0.0.1", 0, 0, "");
  std::vector<std::thread> ts;
  for (int t = 0; t < 4; ++t)
    ts.emplace_back([&] {
      store c("127.0.0.1", server.port(), -1, 0, "", 5s);
      for (int i = 0; i < 50; ++i) c.add("count", 1);
    });
  for (auto& t : ts) t.join();
  store c("127.0.0.1", server.port(), -1, 0, "", 5s);
  CHECK(c.get("count", 1s) == "200");
}

TEST_CASE("store: a wait that passes its deadline names the missing keys") {
  store_server server("127.0.0.1", 0, 0, "");
  store c("127.0.0.1", server.port(), -1, 0, "", 5s);
  c.set("present", "1");
  const std::vector<std::string> keys{"present", "absent-a", "absent-b"};
  const auto t0 = std::chrono::steady_clock::now();
  const auto msg = message_of<timeout_error>([&] { c.wait(keys, 200ms); });
  CHECK(std::chrono::steady_clock::now() - t0 < 3s);
  CHECK(msg.find("absent-a, absent-b") != std::string::npos);
  CHECK(msg.find("present") == std::string::npos);
  CHECK(message_of<timeout_error>([&] { c.get("never", 100ms); }).find("never") != std::string::npos);
  c.set("after", "ok");  // the connection is still in step after a timeout
  CHECK(c.get("after", 1s) == "ok");
}

TEST_CASE("store: a client with the wrong job token is refused, clearly") {
  store_server server("127.0.0.1", 0, 0, "right-token");
  const auto msg = message_of<config_error>([&] { store("127.0.0.1", server.port(), 1, 2, "wrong-token", 5s); });
  CHECK(msg.find("refused") != std::string::npos);
  CHECK(msg.find("job token") != std::string::npos);
  // A stranger does not spoil the store for the job.
  store ok("127.0.0.1", server.port(), 1, 2, "right-token", 5s);
  ok.set("a", "b");
  CHECK(ok.get("a", 1s) == "b");
}

TEST_CASE("store: a wrong world size or a duplicate rank fails the whole start-up, naming both") {
  {
    store_server server("127.0.0.1", 0, 4, "");
    store r0("127.0.0.1", server.port(), 0, 4, "", 5s);
    const auto msg = message_of<config_error>([&] { store("127.0.0.1", server.port(), 2, 3, "", 5s); });
    CHECK(msg.find("rank 2 says the world has 3 ranks, rank 0 says 4") != std::string::npos);
    // The ranks already waiting hear of it at once instead of at their deadline.
    const auto t0 = std::chrono::steady_clock::now();
    const auto waited = message_of<config_error>([&] { r0.get("tutti/addr/2", 20s); });
    CHECK(waited.find("rank 2 says the world has 3 ranks") != std::string::npos);
    CHECK(std::chrono::steady_clock::now() - t0 < 5s);
  }
  {
    store_server server("127.0.0.1", 0, 4, "");
    store first("127.0.0.1", server.port(), 1, 4, "", 5s);
    const auto msg = message_of<config_error>([&] { store("127.0.0.1", server.port(), 1, 4, "", 5s); });
    CHECK(msg.find("two processes claim rank 1") != std::string::npos);
    const auto msg2 = message_of<config_error>([&] { store("127.0.0.1", server.port(), 7, 4, "", 5s); });
    CHECK(msg2.find("rank 7") != std::string::npos);
  }
}

TEST_CASE("store: malformed messages get an error and a closed connection, never a crash") {
  store_server server("127.0.0.1", 0, 0, "t");
  using namespace detail::store_impl;
  SUBCASE("a frame claiming 4 GiB") {
    raw_conn c(server.port());
    c.send(hello("t") + std::string("\xff\xff\xff\xff", 4));
    const auto got = c.drain();
    CHECK(got.find("malformed") != std::string::npos);
  }
  SUBCASE("a key length beyond the frame") {
    raw_conn c(server.port());
    writer body;
    body.num(static_cast<std::uint8_t>(opcode::set)).num(std::uint32_t{1000}).out += "abc";
    c.send(hello("t") + frame(body.out));
    CHECK(c.drain().find("malformed message (set)") != std::string::npos);
  }
  SUBCASE("an unknown operation") {
    raw_conn c(server.port());
    c.send(hello("t") + frame(std::string(1, '\x63')));
    CHECK(c.drain().find("unknown operation 99") != std::string::npos);
  }
  SUBCASE("a token longer than allowed") {
    raw_conn c(server.port());
    c.send(hello(std::string(1000, 'x')));
    CHECK(c.drain().find("token of 1000 bytes") != std::string::npos);
  }
  SUBCASE("not our protocol at all") {
    raw_conn c(server.port());
    c.send("GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    CHECK(c.drain().empty());  // closed without a word
  }
  SUBCASE("the client side: raw_call of a malformed body") {
    store s("127.0.0.1", server.port(), -1, 0, "t", 5s);
    CHECK(message_of<config_error>([&] { s.raw_call(std::string(1, '\x01'), 1s); }).find("malformed") != std::string::npos);
  }
  // The server survived all of it.
  store s("127.0.0.1", server.port(), -1, 0, "t", 5s);
  s.set("alive", "yes");
  CHECK(s.get("alive", 1s) == "yes");
}

TEST_CASE("store: a busy port is named, with who holds it") {
  store_server first("127.0.0.1", 0, 0, "");
  const auto msg = message_of<config_error>([&] { store_server("127.0.0.1", first.port(), 0, ""); });
  CHECK(msg.find("MASTER_PORT " + std::to_string(first.port())) != std::string::npos);
  CHECK(msg.find("already in use") != std::string::npos);
  CHECK(msg.find("pid " + std::to_string(::getpid())) != std::string::npos);
}

TEST_CASE("store: an unreachable master is retried until the deadline, then named") {
  int port;
  {
    store_server s("127.0.0.1", 0, 0, "");
    port = s.port();
  }  // closed: nobody listens there now
  const auto t0 = std::chrono::steady_clock::now();
  const auto msg = message_of<timeout_error>([&] { store("127.0.0.1", port, 1, 2, "", 300ms); });
  const auto took = std::chrono::steady_clock::now() - t0;
  CHECK(took >= 250ms);
  CHECK(took < 5s);
  CHECK(msg.find("127.0.0.1:" + std::to_string(port)) != std::string::npos);
  CHECK(msg.find("MASTER_ADDR") != std::string::npos);
  // A server that comes up while the client retries is found.
  std::optional<store_server> late;
  std::thread starter([&] {
    std::this_thread::sleep_for(200ms);
    late.emplace("127.0.0.1", port, 0, "");
  });
  store c("127.0.0.1", port, -1, 0, "", 5s);
  starter.join();
  c.set("x", "1");
}

TEST_CASE("store: IPv6") {
  store_server server("::1", 0, 0, "");
  store c("::1", server.port(), -1, 0, "", 5s);
  c.set("v6", "yes");
  CHECK(c.get("v6", 1s) == "yes");
  CHECK(c.where() == "[::1]:" + std::to_string(server.port()));
}

TEST_CASE("store: the server going away is peer_lost, not a hang") {
  auto server = std::make_unique<store_server>("127.0.0.1", 0, 0, "");
  store c("127.0.0.1", server->port(), -1, 0, "", 5s);
  std::thread stop([&] {
    std::this_thread::sleep_for(100ms);
    server.reset();
  });
  const auto msg = message_of<peer_lost>([&] { c.get("never", 10s); });
  stop.join();
  CHECK(msg.find("closed the connection") != std::string::npos);
}

TEST_SUITE_END();
