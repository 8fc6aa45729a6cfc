// The rendezvous store: operations, deadlines, and every way a client or a message can be wrong.
#include <doctest/doctest.h>

#include <ifaddrs.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <tutti/bootstrap/progress.hpp>
#include <tutti/bootstrap/store.hpp>
#include <vector>

#include "../support/sockets.hpp"

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
  /// "127.0.0.1:port" of this end, as the server's log names it.
  std::string address() const {
    sockaddr_in a{};
    socklen_t len = sizeof a;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    return "127.0.0.1:" + std::to_string(ntohs(a.sin_port));
  }
  void close_write() const { ::shutdown(fd, SHUT_WR); }
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

std::string hello(const std::string& token, int rank = -1, int world = 0, const std::string& job_id = "") {
  detail::store_impl::writer w;
  w.num(detail::store_impl::magic).num(detail::store_impl::version).num(std::int32_t{rank}).num(std::int32_t{world}).str(token);
  w.str(job_id);
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

TEST_CASE("store: tokens that differ anywhere, or in length, are refused, and an equal one is not") {
  using tutti::detail::store_impl::same_token;
  CHECK(same_token("right-token", "right-token"));
  CHECK(same_token("", ""));
  CHECK_FALSE(same_token("right-tokem", "right-token"));
  CHECK_FALSE(same_token("Right-token", "right-token"));
  CHECK_FALSE(same_token("right-toke", "right-token"));
  CHECK_FALSE(same_token("right-token!", "right-token"));
  CHECK_FALSE(same_token("", "right-token"));
  CHECK_FALSE(same_token(std::string_view("right\0token", 11), std::string_view("right\1token", 11)));
  // a prefix of ours padded with what a stranger cannot know still fails
  CHECK_FALSE(same_token(std::string(11, '\0'), "right-token"));
  store_server server("127.0.0.1", 0, 0, "right-token");
  CHECK(message_of<config_error>([&] { store("127.0.0.1", server.port(), 1, 2, "right-tok", 5s); }).find("job token") !=
        std::string::npos);
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

TEST_CASE("store: a rank claimed again once every rank signed in is refused, and the job's store carries on") {
  // The job's ranks have all signed in; then a process with the job's token claims rank 1 (a
  // leftover of an earlier job on the same port and token, or a RANK typo in a late start).
  store_server server("127.0.0.1", 0, 2, "tok");
  store r0("127.0.0.1", server.port(), 0, 2, "tok", 5s);
  store r1("127.0.0.1", server.port(), 1, 2, "tok", 5s);
  r0.set("tutti/addr/0", "here");
  CHECK(message_of<config_error>([&] { store("127.0.0.1", server.port(), 1, 2, "tok", 5s); })
            .find("two processes claim rank 1") != std::string::npos);
  CHECK(message_of<config_error>([&] { store("127.0.0.1", server.port(), 5, 2, "tok", 5s); }).find("rank 5") !=
        std::string::npos);
  CHECK(message_of<config_error>([&] { store("127.0.0.1", server.port(), 0, 3, "tok", 5s); })
            .find("says the world has 3 ranks") != std::string::npos);
  // The members' store is as it was: a wait answered by a later set, a get, an add, and an
  // anonymous client's wait (a grow's), none answered with the intruder's problem.
  std::thread later([&] {
    std::this_thread::sleep_for(50ms);
    r0.set("later", "set");
  });
  std::string got;
  CHECK_NOTHROW(got = r1.get("later", 5s));
  later.join();
  CHECK(got == "set");
  long long n = 0;
  CHECK_NOTHROW(n = r0.add("n", 2));
  CHECK(n == 2);
  store anonymous("127.0.0.1", server.port(), -1, 0, "tok", 5s);
  const std::vector<std::string> keys{"tutti/addr/0", "later", "n"};
  CHECK_NOTHROW(anonymous.wait(keys, 1s));
}

TEST_CASE("store: a client of another job is refused, naming both job ids, and the job carries on") {
  store_server server("127.0.0.1", 0, 2, "tok", "job-b");
  store r0("127.0.0.1", server.port(), 0, 2, "tok", 5s, "job-b");
  // During start-up: a process of an earlier job with the same port and token claims rank 1. It
  // is refused, the start-up is not failed, and rank 1 is still free for the job's own.
  const auto msg = message_of<config_error>([&] { store("127.0.0.1", server.port(), 1, 2, "tok", 5s, "job-a"); });
  CHECK(msg.find("refused this process: another job") != std::string::npos);
  CHECK(msg.find("job id is 'job-a', the store's is 'job-b'") != std::string::npos);
  store r1("127.0.0.1", server.port(), 1, 2, "tok", 5s, "job-b");
  // After start-up too, anonymous or not.
  CHECK(message_of<config_error>([&] { store("127.0.0.1", server.port(), -1, 0, "tok", 5s, "job-a"); })
            .find("another job") != std::string::npos);
  r1.set("k", "v");
  std::string got;
  CHECK_NOTHROW(got = r0.get("k", 1s));
  CHECK(got == "v");
  // A client that does not know the job's id (a joiner, a tool) is let in.
  store anonymous("127.0.0.1", server.port(), -1, 0, "tok", 5s);
  CHECK(anonymous.get("k", 1s) == "v");
}

TEST_CASE("store: a hello of another protocol version is refused, naming both versions") {
  store_server server("127.0.0.1", 0, 0, "t");
  raw_conn c(server.port());
  detail::store_impl::writer v1;  // version 1: no job id after the token
  v1.num(detail::store_impl::magic).num(std::uint32_t{1}).num(std::int32_t{0}).num(std::int32_t{2}).str("t");
  c.send(v1.out);
  CHECK(c.drain().find("protocol version 1 differs from the store's " + std::to_string(detail::store_impl::version)) !=
        std::string::npos);
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

TEST_CASE("start-up progress: the first word after a quarter of the deadline (1 to 3 s), then as the wait doubles") {
  using detail::startup_progress;
  using clock = startup_progress::clock;
  CHECK(startup_progress::first_word(300s) == 3s);
  CHECK(startup_progress::first_word(8s) == 2s);
  CHECK(startup_progress::first_word(4s) == 1s);
  CHECK(startup_progress::first_word(2s) == 1s);
  const auto t0 = clock::now();
  startup_progress p(300s, t0);
  std::vector<long long> said;  // the seconds at which a word was due, looked at every 100 ms
  for (auto t = t0; t < t0 + 400s; t += 100ms)
    if (p.due(t)) said.push_back(std::chrono::duration_cast<std::chrono::seconds>(t - t0).count());
  CHECK(said == std::vector<long long>{3, 6, 12, 24, 48, 96, 192});  // none at or past the deadline
  CHECK(p.next() == clock::time_point::max());
  startup_progress late(4s, t0);  // looked at late: one word, the intervals it slept through skipped
  CHECK_FALSE(late.due(t0 + 999ms));
  CHECK(late.due(t0 + 2500ms));
  CHECK_FALSE(late.due(t0 + 2600ms));
  CHECK(late.next() == clock::time_point::max());  // 4 s: the deadline's, where the error speaks
  CHECK(detail::rank_list({2}) == "rank 2");
  CHECK(detail::rank_list({2, 3}) == "ranks 2, 3");
  CHECK(detail::rank_list({0, 1, 2, 3, 5, 7, 8, 9}) == "ranks 0-3, 5, 7-9");
  CHECK(detail::rank_list({0, 1}, false) == "0, 1");
  CHECK(detail::seconds_said(1000ms) == "1 s");
  CHECK(detail::seconds_said(2460ms) == "2.5 s");
  CHECK(detail::seconds_said(299999ms) == "300 s");
}

TEST_CASE("store: a start-up that lasts names who signed in and who did not, early, and at the deadline") {
  std::string log, error;
  int port = 0;
  {
    test::stderr_capture capture;
    store_server server("127.0.0.1", 0, 3, "tok", "job", 1500ms);  // a word due at 1 s
    port = server.port();
    store r0("127.0.0.1", port, 0, 3, "tok", 5s, "job");
    store r1("127.0.0.1", port, 1, 3, "tok", 5s, "job");
    r0.set("tutti/addr/0", "x");
    error = message_of<timeout_error>([&] { r1.get("tutti/addr/2", 1200ms); });  // rank 2 never comes
    log = capture.text();
  }
  const std::string where = "127.0.0.1:" + std::to_string(port);
  CAPTURE(log);
  CHECK(log.rfind("[tutti store " + where + "] start-up: after 1", 0) == 0);  // "1 s", or a little more
  const std::string middle = ", 2 of 3 ranks signed in (0, 1); waiting for rank 2 to sign in to the store at "
                             "MASTER_ADDR:MASTER_PORT = " + where + " (not started yet, or started with another "
                             "MASTER_ADDR or MASTER_PORT?); giving up in 0.";  // 0.5 s, or a little less
  CHECK(log.find(middle) != std::string::npos);
  CHECK(std::count(log.begin(), log.end(), '\n') == 1);
  CHECK(error == "store: rank 2 never signed in to the store at " + where +
                     " (not started, or started with another MASTER_ADDR or MASTER_PORT?); timed out after 1200 ms "
                     "waiting for key(s) tutti/addr/2: timed out");
  // Once every rank is in, the store is quiet, and a wait that times out names only its keys.
  {
    test::stderr_capture capture;
    store_server server("127.0.0.1", 0, 2, "tok", "job", 1500ms);
    store r0("127.0.0.1", server.port(), 0, 2, "tok", 5s, "job");
    store r1("127.0.0.1", server.port(), 1, 2, "tok", 5s, "job");
    error = message_of<timeout_error>([&] { r1.get("never", 1100ms); });
    log = capture.text();
  }
  CHECK(log.empty());
  CHECK(error.find("waiting for key(s) never at 127.0.0.1:") != std::string::npos);
  CHECK(error.find("signed in") == std::string::npos);
}

TEST_CASE("store: a rank that cannot reach the store says so while it retries, with the address") {
  int port;
  {
    store_server s("127.0.0.1", 0, 0, "");
    port = s.port();
  }  // closed: nobody listens there now
  std::string log, error;
  {
    test::stderr_capture capture;
    error = message_of<timeout_error>([&] { store("127.0.0.1", port, 1, 2, "", 1500ms); });
    log = capture.text();
  }
  const std::string where = "127.0.0.1:" + std::to_string(port);
  CAPTURE(log);
  const std::string head = "[tutti rank 1] start-up: cannot reach the store at MASTER_ADDR:MASTER_PORT = " + where;
  CHECK(log.rfind(head + " for 1", 0) == 0);  // "1 s", or a little more
  CHECK(log.find("(Connection refused); still trying, for 0.") != std::string::npos);
  CHECK(std::count(log.begin(), log.end(), '\n') == 1);
  CHECK(error.find("cannot reach the store at MASTER_ADDR:MASTER_PORT = " + where) != std::string::npos);
}

namespace {
/// Another program on the port: it listens, accepts one connection, sends `answer` (maybe
/// nothing) and keeps the connection open until destroyed.
struct stranger {
  int listener = -1, port = 0, conn = -1;
  std::thread accepter;
  explicit stranger(std::string answer) {
    listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(listener, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    REQUIRE(::listen(listener, 4) == 0);
    socklen_t len = sizeof a;
    ::getsockname(listener, reinterpret_cast<sockaddr*>(&a), &len);
    port = ntohs(a.sin_port);
    accepter = std::thread([this, answer = std::move(answer)] {
      conn = ::accept(listener, nullptr, nullptr);
      if (conn >= 0 && !answer.empty()) (void)::send(conn, answer.data(), answer.size(), MSG_NOSIGNAL);
    });
  }
  ~stranger() {
    ::shutdown(listener, SHUT_RDWR);  // wakes the accepter if nobody connected
    accepter.join();
    if (conn >= 0) ::close(conn);
    ::close(listener);
  }
};
}  // namespace

TEST_CASE("store: another program on MASTER_PORT is config_error at once, naming the address, never a silent wait") {
  const auto check_message = [](const std::string& msg, int port) {
    CHECK(msg.find("MASTER_ADDR:MASTER_PORT = 127.0.0.1:" + std::to_string(port)) != std::string::npos);
    CHECK(msg.find("not a tutti store") != std::string::npos);
    CHECK(msg.find("Another program probably holds MASTER_PORT") != std::string::npos);
  };
  SUBCASE("it accepts and stays silent: an error after welcome_within, not after the 60 s timeout") {
    stranger s("");
    const auto t0 = std::chrono::steady_clock::now();
    const auto msg = message_of<config_error>([&] { store("127.0.0.1", s.port, 1, 2, "tok", 60s); });
    const auto took = std::chrono::steady_clock::now() - t0;
    CHECK(took >= detail::store_impl::welcome_within - 100ms);
    CHECK(took < detail::store_impl::welcome_within + 3s);
    check_message(msg, s.port);
    CHECK(msg.find("no welcome within 5 s") != std::string::npos);
  }
  SUBCASE("it answers something else: an error at once") {
    stranger s("HTTP/1.1 400 Bad Request\r\n\r\n");
    const auto t0 = std::chrono::steady_clock::now();
    const auto msg = message_of<config_error>([&] { store("127.0.0.1", s.port, 1, 2, "tok", 60s); });
    CHECK(std::chrono::steady_clock::now() - t0 < 2s);
    check_message(msg, s.port);
    CHECK(msg.find("not tutti's welcome") != std::string::npos);
  }
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

TEST_CASE("store: the parsers take bytes and give a message, 'incomplete', or malformed") {
  using namespace detail::store_impl;
  const std::string h = hello("tok", 2, 4, "job");
  for (std::size_t n = 0; n < h.size(); ++n) CHECK_FALSE(parse_hello(std::string_view(h).substr(0, n)));
  const std::string h_and_more = h + "extra";  // the parsed message points into it
  const auto got = parse_hello(h_and_more);
  REQUIRE(got);
  CHECK(got->token == "tok");
  CHECK(got->job_id == "job");
  CHECK(got->rank == 2);
  CHECK(got->world == 4);
  CHECK(got->size == h.size());
  CHECK(hello(std::string(max_token, 't'), 0, 1, std::string(max_job_id, 'j')).size() == max_hello_bytes);
  writer body;
  body.num(static_cast<std::uint8_t>(opcode::wait)).num(std::uint64_t{100}).num(std::uint32_t{2}).str("a").str("bb");
  const std::string f = frame(body.out);
  for (std::size_t n = 0; n < f.size(); ++n) CHECK_FALSE(parse_request(std::string_view(f).substr(0, n)));
  const std::string two = f + f;
  const auto q = parse_request(two);
  REQUIRE(q);
  CHECK(q->op == opcode::wait);
  CHECK(q->keys == std::vector<std::string_view>{"a", "bb"});
  CHECK(q->size == f.size());
  auto reason = [](auto&& parse) {
    try {
      parse();
    } catch (const malformed& e) {
      return e.reason + (e.stranger ? " [stranger]" : "");
    }
    return std::string("accepted");
  };
  // Caps are checked on the length alone, before the bytes it announces have arrived.
  CHECK(reason([] { parse_request(std::string("\xff\xff\xff\xff", 4)); }) == "frame of 4294967295 bytes");
  writer big_token;
  big_token.num(magic).num(version).num(std::int32_t{0}).num(std::int32_t{1}).num(std::uint32_t{1} << 31);
  CHECK(reason([&] { parse_hello(big_token.out); }) == "token of 2147483648 bytes");
  CHECK(reason([] { parse_hello(std::string(24, 'G')); }) == "not a tutti store client (wrong magic) [stranger]");
  const std::string no_job = hello("tok", 0, 1).substr(0, hello_fixed + 3);
  CHECK(reason([&] { parse_hello(no_job + std::string("\x01\x01\0\0", 4)); }) == "job id of 257 bytes");
  writer old_version;  // another version's hello ends after its token: enough to refuse it
  old_version.num(magic).num(std::uint32_t{1}).num(std::int32_t{0}).num(std::int32_t{1}).str("tok");
  const auto v1 = parse_hello(old_version.out);
  REQUIRE(v1);
  CHECK(v1->version == 1);
  CHECK(v1->size == old_version.out.size());
  writer many;
  many.num(static_cast<std::uint8_t>(opcode::wait)).num(std::uint64_t{1}).num(std::uint32_t{5000});
  CHECK(reason([&] { parse_request(frame(many.out)); }) == "wait for 5000 keys");
  CHECK(reason([] { parse_reply_head(std::string("\x07\0\0\0\0", 5)); }) == "reply status 7");
  CHECK(reason([] { parse_reply_head(std::string("\0\xff\xff\xff\xff", 5)); }) == "reply of 4294967295 bytes");
  CHECK(add_to("41", 1) == "42");
  CHECK(add_to("", -3) == "-3");
  CHECK(reason([] { add_to("9223372036854775807", 1); }) == "add of 1 to 9223372036854775807 overflows");
}

TEST_CASE("store: refused and dropped connections are logged with the client's address, never the token") {
  const std::string secret = "s3cret-job-token";
  store_server server("127.0.0.1", 0, 0, secret);
  const std::string where = "[tutti store 127.0.0.1:" + std::to_string(server.port()) + "] refused a connection from ";
  std::string log;
  std::vector<std::string> lines;  // what each case must have logged
  {
    test::stderr_capture capture;
    {
      raw_conn c(server.port());  // another job's token
      c.send(hello("not-the-token"));
      CHECK(c.drain().find("wrong job token") != std::string::npos);
      lines.push_back(where + c.address() + ": wrong job token");
    }
    {
      raw_conn c(server.port());  // garbage
      c.send("GET / HTTP/1.1\r\nHost: x\r\n\r\n");
      CHECK(c.drain().empty());
      lines.push_back(where + c.address() + ": not a tutti store client (wrong magic)");
    }
    {
      raw_conn c(server.port());  // a hello cut short
      c.send(hello(secret).substr(0, 10));
      c.close_write();
      CHECK(c.drain().empty());
      lines.push_back(where + c.address() + ": it closed the connection after 10 bytes of an incomplete hello");
    }
    {
      raw_conn c(server.port());  // a token length of 2 GiB
      detail::store_impl::writer w;
      w.num(detail::store_impl::magic).num(detail::store_impl::version).num(std::int32_t{-1}).num(std::int32_t{0});
      w.num(std::uint32_t{1} << 31);
      c.send(w.out);
      CHECK(c.drain().find("token of 2147483648 bytes") != std::string::npos);
      lines.push_back(where + c.address() + ": malformed message (token of 2147483648 bytes)");
    }
    {
      raw_conn c(server.port());  // the right hello, then a frame claiming 4 GiB
      c.send(hello(secret) + std::string("\xff\xff\xff\xff", 4));
      CHECK(c.drain().find("frame of 4294967295 bytes") != std::string::npos);
      lines.push_back(where + c.address() + ": malformed message (frame of 4294967295 bytes)");
    }
    {
      raw_conn c(server.port());  // a port probe: connects, says nothing, leaves: not worth a line
      c.close_write();
      CHECK(c.drain().empty());
    }
    // The job's own clients are served all along.
    store ok("127.0.0.1", server.port(), 0, 1, secret, 5s);
    ok.set("after", "attacks");
    CHECK(ok.get("after", 1s) == "attacks");
    log = capture.text();
  }
  for (const auto& l : lines) {
    CAPTURE(l);
    CHECK(log.find(l) != std::string::npos);
  }
  CHECK(std::count(log.begin(), log.end(), '\n') == static_cast<long>(lines.size()));
  CHECK(log.find("s3cret") == std::string::npos);
  CHECK(log.find("not-the-token") == std::string::npos);
}

TEST_CASE("store: silent connections cannot crowd out the job: past the cap the oldest is closed") {
  using detail::store_impl::max_silent;
  const std::string secret = "tok";
  store_server server("127.0.0.1", 0, 0, secret);
  std::string log;
  {
    test::stderr_capture capture;
    std::vector<std::unique_ptr<raw_conn>> silent;
    for (std::size_t i = 0; i < max_silent + 3; ++i) silent.push_back(std::make_unique<raw_conn>(server.port()));
    // The three oldest were closed to make room (the server closes them: EOF, not the 5 s timeout).
    for (std::size_t i = 0; i < 3; ++i) CHECK(silent[i]->drain().empty());
    // A rank of the job that connects now is served.
    store ok("127.0.0.1", server.port(), 0, 1, secret, 5s);
    ok.set("k", "v");
    CHECK(ok.get("k", 1s) == "v");
    log = capture.text();
  }
  CHECK(log.find("closed for a newer one: " + std::to_string(max_silent) + " connections were waiting to say hello") !=
        std::string::npos);
}

TEST_CASE("store: listens on MASTER_ADDR only, so on loopback by default") {
  {
    store_server server("127.0.0.1", 0, 0, "");
    CHECK(server.address() == "127.0.0.1");
    CHECK(test::listening_addresses(server.port()) == std::vector<std::string>{"127.0.0.1"});
    // Not reachable through this host's other addresses.
    ifaddrs* all = nullptr;
    REQUIRE(::getifaddrs(&all) == 0);
    int tried = 0;
    for (ifaddrs* i = all; i; i = i->ifa_next) {
      if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET) continue;
      sockaddr_in a = *reinterpret_cast<sockaddr_in*>(i->ifa_addr);
      if ((ntohl(a.sin_addr.s_addr) >> 24) == 127) continue;
      a.sin_port = htons(static_cast<std::uint16_t>(server.port()));
      const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
      CHECK(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0);
      ::close(fd);
      ++tried;
    }
    ::freeifaddrs(all);
    MESSAGE("tried the store through " << tried << " non-loopback IPv4 address(es)");
  }
  {
    store_server server("localhost", 0, 0, "");
    CHECK((server.address() == "127.0.0.1" || server.address() == "::1"));
    CHECK(test::listening_addresses(server.port()) == std::vector<std::string>{server.address()});
  }
  {
    store_server server("::1", 0, 0, "");
    CHECK(test::listening_addresses(server.port()) == std::vector<std::string>{"::1"});
  }
  {
    store_server server("", 0, 0, "");  // asked for every address: the wildcard
    CHECK((server.address() == "0.0.0.0" || server.address() == "::"));
  }
}

TEST_SUITE_END();
