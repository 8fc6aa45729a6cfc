// tuttirun's command line (tools/tuttirun/options.hpp): real argv arrays through parse_args, the
// options each gives, and for each bad one the exact message tuttirun prints.
#include <doctest/doctest.h>

#include <initializer_list>
#include <string>
#include <vector>

#include "tuttirun/options.hpp"

using namespace tuttirun;

namespace {

// An argv as main() gets it: "tuttirun", then `args`, then a null pointer. It owns the strings
// that the parsed options' `program` points into.
struct argv_array {
  std::vector<std::string> strings;
  std::vector<char*> pointers;

  argv_array(std::initializer_list<std::string> args) : argv_array(std::vector<std::string>(args)) {}
  explicit argv_array(const std::vector<std::string>& args) : strings{"tuttirun"} {
    strings.insert(strings.end(), args.begin(), args.end());
    for (std::string& s : strings) pointers.push_back(s.data());
    pointers.push_back(nullptr);
  }
  argv_array(const argv_array&) = delete;  // `pointers` points into this one's strings
  argv_array& operator=(const argv_array&) = delete;
  command_line parse() { return parse_args(static_cast<int>(strings.size()), pointers.data()); }
};

// The command line as a shell would show it, for the failure messages.
std::string shell_line(const std::vector<std::string>& args) {
  std::string line = "tuttirun";
  for (const std::string& a : args) line += " '" + a + "'";
  return line;
}

// The program and its arguments as the ranks get them, without the terminating null pointer.
std::vector<std::string> program_of(const options& o) {
  REQUIRE(!o.program.empty());
  CHECK(o.program.back() == nullptr);
  return {o.program.begin(), o.program.end() - 1};
}

}  // namespace

TEST_SUITE_BEGIN("unit");

TEST_CASE("tuttirun options: a bare program gets every default") {
  argv_array a{"prog"};
  const command_line c = a.parse();
  CHECK(c.what == command_line::action::run);
  const options& o = c.opts;
  CHECK(o.nproc_per_node == 1);
  CHECK(o.nnodes == 1);
  CHECK(o.node_rank == 0);
  CHECK(o.master_addr == "127.0.0.1");
  CHECK(!o.master_port);
  CHECK(o.failure_grace_s == 3.0);
  CHECK(o.grace_s == 3.0);
  CHECK(o.prefix);
  CHECK(!o.keep_going);
  CHECK(o.max_restarts == 0);
  CHECK(o.monitor_interval_s == 0.1);
  CHECK(!o.rdzv_port);
  CHECK(o.rdzv_timeout_s == 300);
  CHECK(program_of(o) == std::vector<std::string>{"prog"});
  CHECK(!restarts_across_nodes(o));
}

TEST_CASE("tuttirun options: every option as --opt=V or --opt V and with underscores") {
  argv_array a{"--nproc-per-node=4", "--nnodes", "3", "--node_rank=2", "--master-addr", "10.0.0.1",
               "--master_port", "29500", "--failure-grace=0.25", "--grace", "1.5", "--no-prefix", "--keep_going",
               "--max-restarts=5", "--monitor-interval", "0.001", "--rdzv-port=29600", "--rdzv_timeout", "86400",
               "prog", "x"};
  const command_line c = a.parse();
  REQUIRE(c.what == command_line::action::run);
  const options& o = c.opts;
  CHECK(o.nproc_per_node == 4);
  CHECK(o.nnodes == 3);
  CHECK(o.node_rank == 2);
  CHECK(o.master_addr == "10.0.0.1");
  CHECK(o.master_port == 29500);
  CHECK(o.failure_grace_s == 0.25);
  CHECK(o.grace_s == 1.5);
  CHECK(!o.prefix);
  CHECK(o.keep_going);
  CHECK(o.max_restarts == 5);
  CHECK(o.monitor_interval_s == 0.001);
  CHECK(o.rdzv_port == 29600);
  CHECK(o.rdzv_timeout_s == 86400);
  CHECK(program_of(o) == std::vector<std::string>{"prog", "x"});
  CHECK(restarts_across_nodes(o));
}

TEST_CASE("tuttirun options: the range ends are accepted") {
  argv_array a{"--nproc-per-node=4096", "--nnodes=65536", "--node-rank=65535", "--master-port=65535",
               "--grace=0", "--failure-grace=86400", "--max-restarts=10000", "--rdzv-port=1", "prog"};
  const options o = a.parse().opts;
  CHECK(o.nproc_per_node == 4096);
  CHECK(o.nnodes == 65536);
  CHECK(o.node_rank == 65535);
  CHECK(o.master_port == 65535);
  CHECK(o.grace_s == 0);
  CHECK(o.failure_grace_s == 86400);
  CHECK(o.max_restarts == 10000);
  CHECK(o.rdzv_port == 1);
}

TEST_CASE("tuttirun options: the program starts at the first word that is not an option or after --") {
  SUBCASE("its own options stay its own") {
    argv_array a{"--nproc-per-node=2", "prog", "--nproc-per-node=5", "-x", "--", "--bogus"};
    const options o = a.parse().opts;
    CHECK(o.nproc_per_node == 2);
    CHECK(program_of(o) == std::vector<std::string>{"prog", "--nproc-per-node=5", "-x", "--", "--bogus"});
  }
  SUBCASE("after --, a program whose name starts with a dash") {
    argv_array a{"--no-prefix", "--", "--weird", "arg"};
    const options o = a.parse().opts;
    CHECK(!o.prefix);
    CHECK(program_of(o) == std::vector<std::string>{"--weird", "arg"});
  }
  SUBCASE("the ranks' argv points into tuttirun's") {
    argv_array a{"prog", "arg"};
    const options o = a.parse().opts;
    CHECK(o.program[0] == a.pointers[1]);
    CHECK(o.program[1] == a.pointers[2]);
  }
}

TEST_CASE("tuttirun options: the rendezvous port") {
  SUBCASE("--master-port + 1 by default, with --nnodes > 1 and --max-restarts") {
    argv_array a{"--nnodes=2", "--master-port=29500", "--max-restarts=1", "prog"};
    CHECK(a.parse().opts.rdzv_port == 29501);
  }
  SUBCASE("--master-port + 1 without restarts too (the job's hang report), none on one node") {
    argv_array nodes{"--nnodes=2", "--master-port=29500", "prog"};
    const options across = nodes.parse().opts;
    CHECK(across.rdzv_port == 29501);
    CHECK(!restarts_across_nodes(across));
    // No port left for it: without restarts the job runs without the rendezvous.
    argv_array last{"--nnodes=2", "--master-port=65535", "prog"};
    CHECK(!last.parse().opts.rdzv_port);
    argv_array one{"--max-restarts=3", "--master-port=29500", "prog"};
    const options o = one.parse().opts;
    CHECK(!o.rdzv_port);
    CHECK(!restarts_across_nodes(o));
  }
  SUBCASE("--rdzv-port as given, even at --master-port=65535") {
    argv_array a{"--nnodes=2", "--master-port=65535", "--max-restarts=1", "--rdzv-port=1", "prog"};
    CHECK(a.parse().opts.rdzv_port == 1);
  }
}

TEST_CASE("tuttirun options: --help (-h) and --version end the reading where they stand") {
  struct want {
    std::vector<std::string> args;
    command_line::action what;
  };
  const want cases[] = {{{"-h"}, command_line::action::help},
                        {{"--help"}, command_line::action::help},
                        {{"--version"}, command_line::action::version},
                        {{"--help", "--bogus"}, command_line::action::help},
                        {{"--nproc-per-node=2", "--version", "-x"}, command_line::action::version},
                        {{"--nnodes=2", "-h"}, command_line::action::help}};
  for (const want& w : cases) {
    argv_array a(w.args);
    const std::string line = shell_line(w.args);
    CAPTURE(line);
    CHECK(a.parse().what == w.what);
  }
  argv_array after_program{"prog", "--help"};
  const command_line c = after_program.parse();
  CHECK(c.what == command_line::action::run);
  CHECK(program_of(c.opts) == std::vector<std::string>{"prog", "--help"});
  CHECK(version_text.starts_with("tuttirun (tutti) "));
  CHECK(help_text.starts_with("Usage: tuttirun [options] [--] program [args...]\n"));
}

TEST_CASE("tuttirun options: each bad command line is a usage_error with its message") {
  struct bad {
    std::vector<std::string> args;
    const char* message;
  };
  const bad cases[] = {
      {{}, "no program to run"},
      {{"--"}, "no program to run"},
      {{"--nproc-per-node=2"}, "no program to run"},
      {{"--nproc-per-node"}, "--nproc-per-node needs a value"},
      {{"--master_addr"}, "--master-addr needs a value"},
      {{"--bogus", "true"}, "unknown option '--bogus'"},
      {{"--bogus=3", "true"}, "unknown option '--bogus=3'"},
      {{"-x", "true"}, "unknown option '-x'"},
      {{"-", "true"}, "unknown option '-'"},
      {{"--bogus", "--help"}, "unknown option '--bogus'"},
      {{"--nproc-per-node=abc", "true"}, "--nproc-per-node: 'abc' is not an integer"},
      {{"--nproc-per-node=3x", "true"}, "--nproc-per-node: '3x' is not an integer"},
      {{"--nproc-per-node=", "true"}, "--nproc-per-node: '' is not an integer"},
      {{"--nproc-per-node=+2", "true"}, "--nproc-per-node: '+2' is not an integer"},
      {{"--nproc-per-node=0", "true"}, "--nproc-per-node: 0 is out of range (1-4096)"},
      {{"--nproc-per-node=4097", "true"}, "--nproc-per-node: 4097 is out of range (1-4096)"},
      {{"--nproc-per-node=-1", "true"}, "--nproc-per-node: -1 is out of range (1-4096)"},
      {{"--nproc-per-node=99999999999999999999999", "true"},
       "--nproc-per-node: 99999999999999999999999 is out of range (1-4096)"},
      {{"--nnodes=0", "true"}, "--nnodes: 0 is out of range (1-65536)"},
      {{"--node-rank=65536", "true"}, "--node-rank: 65536 is out of range (0-65535)"},
      {{"--nnodes=2", "--node-rank=2", "--master-port=29500", "true"}, "--node-rank=2 must be less than --nnodes=2"},
      {{"--node-rank=1", "true"}, "--node-rank=1 must be less than --nnodes=1"},
      {{"--nnodes=2", "true"}, "--master-port is required with --nnodes > 1 (every node must use the same port)"},
      {{"--master-port=0", "true"}, "--master-port: 0 is out of range (1-65535)"},
      {{"--master-port=65536", "true"}, "--master-port: 65536 is out of range (1-65535)"},
      {{"--rdzv-port=0", "true"}, "--rdzv-port: 0 is out of range (1-65535)"},
      {{"--max-restarts=10001", "true"}, "--max-restarts: 10001 is out of range (0-10000)"},
      {{"--max-restarts=-1", "true"}, "--max-restarts: -1 is out of range (0-10000)"},
      {{"--grace=-1", "true"}, "--grace: -1 is out of range (0-86400)"},
      {{"--grace=86400.5", "true"}, "--grace: 86400.5 is out of range (0-86400)"},
      {{"--grace=soon", "true"}, "--grace: 'soon' is not a number of seconds"},
      {{"--grace=", "true"}, "--grace: '' is not a number of seconds"},
      {{"--grace=inf", "true"}, "--grace: 'inf' is not a number of seconds"},
      {{"--grace=nan", "true"}, "--grace: 'nan' is not a number of seconds"},
      {{"--failure-grace=-1", "true"}, "--failure-grace: -1 is out of range (0-86400)"},
      {{"--failure-grace=1e3", "true"}, "--failure-grace: '1e3' is not a number of seconds"},
      {{"--failure-grace=1s", "true"}, "--failure-grace: '1s' is not a number of seconds"},
      {{"--monitor-interval=0", "true"}, "--monitor-interval: 0 is out of range (0.001-86400)"},
      {{"--rdzv-timeout=0.5", "true"}, "--rdzv-timeout: 0.5 is out of range (1-86400)"},
      {{"--no-prefix=yes", "true"}, "--no-prefix takes no value"},
      {{"--keep_going=1", "true"}, "--keep-going takes no value"},
      {{"--help=1"}, "--help takes no value"},
      {{"--version=1"}, "--version takes no value"},
      {{"--master-addr=", "true"}, "--master-addr: empty address"},
      {{"--nnodes=2", "--master-port=65535", "--max-restarts=1", "true"},
       "--master-port=65535 leaves no port for the restart rendezvous (--master-port + 1): give --rdzv-port"},
      {{"--nnodes=2", "--master-port=29500", "--rdzv-port=29500", "--max-restarts=1", "true"},
       "--rdzv-port=29500 must differ from --master-port (rank 0's store listens there)"},
  };
  for (const bad& b : cases) {
    argv_array a(b.args);
    const std::string line = shell_line(b.args);
    CAPTURE(line);
    CHECK_THROWS_WITH_AS(a.parse(), b.message, usage_error);
  }
}

TEST_SUITE_END();
