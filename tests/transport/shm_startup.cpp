// Start-up of tutti::shm and the environment it reads: the failures a user meets first.
#include <doctest/doctest.h>
#include <sched.h>

#include <cstdlib>
#include <future>
#include <string>
#include <thread>
#include <tutti/tutti.hpp>
#include <vector>

using namespace tutti;
using namespace std::chrono_literals;

namespace {
/// Sets environment variables for one scope and restores them afterwards.
class scoped_env {
 public:
  scoped_env(std::initializer_list<std::pair<const char*, const char*>> vars) {
    for (auto [k, v] : vars) {
      const char* old = std::getenv(k);
      saved_.emplace_back(k, old ? std::optional<std::string>(old) : std::nullopt);
      if (v) ::setenv(k, v, 1);
      else ::unsetenv(k);
    }
  }
  ~scoped_env() {
    for (auto& [k, v] : saved_) {
      if (v) ::setenv(k.c_str(), v->c_str(), 1);
      else ::unsetenv(k.c_str());
    }
  }

 private:
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

const char* const rank_vars[] = {"TUTTI_RANK", "TUTTI_WORLD_SIZE", "TUTTI_LOCAL_RANK", "TUTTI_LOCAL_WORLD_SIZE",
                                 "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_RANK",
                                 "OMPI_COMM_WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS", "PMI_RANK", "PMI_SIZE",
                                 "MASTER_PORT", "TUTTI_JOB_ID"};

/// A clean slate: none of the variables any convention reads.
scoped_env clean_env() {
  return scoped_env{{rank_vars[0], nullptr},  {rank_vars[1], nullptr},  {rank_vars[2], nullptr},
                    {rank_vars[3], nullptr},  {rank_vars[4], nullptr},  {rank_vars[5], nullptr},
                    {rank_vars[6], nullptr},  {rank_vars[7], nullptr},  {rank_vars[8], nullptr},
                    {rank_vars[9], nullptr},  {rank_vars[10], nullptr}, {rank_vars[11], nullptr},
                    {rank_vars[12], nullptr}, {rank_vars[13], nullptr}, {rank_vars[14], nullptr},
                    {rank_vars[15], nullptr}};
}

template <class F>
std::string config_message(F&& f) {
  try {
    f();
  } catch (const config_error& e) {
    return e.what();
  }
  return "no config_error";
}

std::string unique_job(const char* what) {
  return std::string(what) + std::to_string(::getpid()) + "-" +
         std::to_string(std::chrono::steady_clock::now().time_since_epoch().count());
}
}  // namespace

TEST_SUITE_BEGIN("unit");

TEST_CASE("job_env reads torchrun's variables and rejects bad ones by name") {
  auto clean = clean_env();
  {
    scoped_env e{{"RANK", "2"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "2"}, {"LOCAL_WORLD_SIZE", "4"},
                 {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "29500"}};
    const auto j = job_env::from_env();
    CHECK(j.rank == 2);
    CHECK(j.world_size == 4);
    CHECK(j.local_world_size == 4);
    CHECK(j.master_port == 29500);
    CHECK(j.job_id == "port29500");
    CHECK(j.source == "torchrun");
  }
  {
    scoped_env e{{"RANK", "1"}};
    CHECK(config_message([] { job_env::from_env(); }).find("WORLD_SIZE") != std::string::npos);
  }
  {
    scoped_env e{{"RANK", "4"}, {"WORLD_SIZE", "4"}, {"MASTER_PORT", "1"}};
    CHECK(config_message([] { job_env::from_env(); }).find("RANK=4 is not below WORLD_SIZE=4") != std::string::npos);
  }
  {
    scoped_env e{{"RANK", "x"}, {"WORLD_SIZE", "4"}};
    CHECK(config_message([] { job_env::from_env(); }).find("RANK='x' is not an integer") != std::string::npos);
  }
  {
    scoped_env e{{"RANK", "1"}, {"WORLD_SIZE", "4"}, {"OMPI_COMM_WORLD_RANK", "2"}, {"OMPI_COMM_WORLD_SIZE", "4"},
                 {"MASTER_PORT", "1"}};
    CHECK(config_message([] { job_env::from_env(); }).find("contradictory") != std::string::npos);
  }
  {
    scoped_env e{{"RANK", "1"}, {"WORLD_SIZE", "4"}};
    CHECK(config_message([] { job_env::from_env(); }).find("TUTTI_JOB_ID") != std::string::npos);
  }
  CHECK(config_message([] { job_env::from_env(); }).find("no rank in the environment") != std::string::npos);
  {
    scoped_env e{{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"}, {"TUTTI_JOB_ID", "j"}};
    const auto j = job_env::from_env();
    CHECK(j.source == "Open MPI");
    CHECK(j.world_size == 2);
  }
  {
    scoped_env e{{"RANK", "0"}, {"WORLD_SIZE", "4"}, {"LOCAL_WORLD_SIZE", "2"}, {"LOCAL_RANK", "0"}, {"TUTTI_JOB_ID", "j"}};
    CHECK(config_message([] { shm::from_env(); }).find("every rank on one host") != std::string::npos);
  }
}

TEST_CASE("shm start-up: a world of threads, a busy job id, a missing rank 0, a wrong world size") {
  SUBCASE("three ranks in one process share a segment and reduce correctly") {
    const auto job = unique_job("threads");
    std::vector<std::thread> ts;
    std::vector<int> ok(3, 0);
    for (int r = 0; r < 3; ++r)
      ts.emplace_back([&, r] {
        communicator<shm> comm(shm::create(r, 3, job, shm_options{}, 10s));
        std::vector<double> v(1000, r + 1.0);
        comm.all_reduce(view(v));
        comm.all_reduce(view(v), op::sum{}, algo::ring{});
        ok[static_cast<std::size_t>(r)] = v[999] == 18.0;
      });
    for (auto& t : ts) t.join();
    CHECK(ok == std::vector<int>{1, 1, 1});
  }
  SUBCASE("windows that are not a whole number of pages: three ranks start and reduce") {
    // The arenas are mapped at the offset where the windows end, which must be a page.
    const auto job = unique_job("odd-windows");
    shm_options opt;
    opt.window_bytes = 8192 + 128;
    std::vector<std::thread> ts;
    std::vector<int> ok(3, 0);
    for (int r = 0; r < 3; ++r)
      ts.emplace_back([&, r] {
        communicator<shm> comm(shm::create(r, 3, job, opt, 10s));
        std::vector<double> v(5000, r + 1.0);  // more than a window holds: several rounds
        comm.all_reduce(view(v), op::sum{}, algo::shared_memory{});
        ok[static_cast<std::size_t>(r)] = v.front() == 6.0 && v.back() == 6.0;
      });
    for (auto& t : ts) t.join();
    CHECK(ok == std::vector<int>{1, 1, 1});
  }
  SUBCASE("single copy is on for every rank or for none, and says why") {
    // Threads of one process may always read each other. One rank that does not want single copy
    // turns it off for all, and so do ranks that outnumber the cores; the note names the cause.
    // Unforced, the speed vote may keep all_reduce on the windows, saying so with both rates (as
    // this machine measures). Large all_reduces agree either way.
    cpu_set_t cpus;
    const int ncpu = ::sched_getaffinity(0, sizeof cpus, &cpus) == 0 ? CPU_COUNT(&cpus) : 1;
    using mode = shm_options::mode;
    struct run_case {
      int ranks, refuser;  // the refuser asks for `never`
      mode others;
      const char* note;
    };
    std::vector<run_case> cases;
    if (ncpu >= 2) {
      cases.push_back({2, -1, mode::automatic, "single copy on"});
      cases.push_back({2, -1, mode::always, "single copy on"});
      cases.push_back({2, 1, mode::automatic, "TUTTI_SHM_SINGLE_COPY=0 on rank 1"});
    }
    if (ncpu < 8) {
      cases.push_back({ncpu + 1, -1, mode::automatic, "outnumber the cores"});
      cases.push_back({ncpu + 1, -1, mode::always, "single copy on"});  // rank 2+ stages its own part in place
    }
    for (const auto& c : cases) {
      const auto job = unique_job("single-copy");
      const auto P = static_cast<std::size_t>(c.ranks);
      std::vector<std::thread> ts;
      std::vector<int> on(P, -1), ok(P, 0);
      std::vector<std::string> notes(P);
      for (int r = 0; r < c.ranks; ++r)
        ts.emplace_back([&, r] {
          shm_options opt;
          opt.single_copy = r == c.refuser ? mode::never : c.others;
          auto t = shm::create(r, c.ranks, job, opt, 10s);
          on[static_cast<std::size_t>(r)] = t.single_copy();
          notes[static_cast<std::size_t>(r)] = t.single_copy_note();
          communicator<shm> comm(t);
          std::vector<float> v((std::size_t{3} << 20) / 4 + 7, float(r + 1));
          comm.all_reduce(view(v));
          const float want = float(c.ranks * (c.ranks + 1) / 2);
          ok[static_cast<std::size_t>(r)] = v.front() == want && v.back() == want;
        });
      for (auto& t : ts) t.join();
      CAPTURE(c.ranks);
      CAPTURE(c.refuser);
      CAPTURE(notes[0]);
      CHECK(ok == std::vector<int>(P, 1));
      const int want = std::string(c.note) == "single copy on" ? 1 : 0;
      CHECK(on == std::vector<int>(P, want));
      for (const auto& n : notes) CHECK(n == notes[0]);
      CHECK(notes[0].find(c.note) != std::string::npos);
      // The speed vote's note, where it kept all_reduce on the windows: both rates, and only
      // where this rank voted (forced: no vote).
      const auto vote = notes[0].find("; all_reduce copies through the shared segment: rank ");
      if (vote != std::string::npos) {
        CHECK(want == 1);
        CHECK(c.others == mode::automatic);
        CHECK(notes[0].find(" MB/s where a memcpy out of a window moved ", vote) != std::string::npos);
      }
    }
  }
  SUBCASE("a second rank 0 with a running job's id is refused, naming the cause") {
    const auto job = unique_job("busy");
    auto first = std::async(std::launch::async, [&] {
      try {
        shm::create(0, 2, job, shm_options{}, 1500ms);  // waits for a rank 1 that never comes
      } catch (const timeout_error&) {
        return std::string("timeout");
      }
      return std::string("returned");
    });
    std::this_thread::sleep_for(300ms);
    const auto msg = config_message([&] { shm::create(0, 2, job, shm_options{}, 1s); });
    CHECK(msg.find("another job with the same id") != std::string::npos);
    CHECK(first.get() == "timeout");
  }
  SUBCASE("a rank without its rank 0 times out naming rank 0") {
    try {
      shm::create(1, 2, unique_job("orphan"), shm_options{}, 300ms);
      FAIL("no timeout");
    } catch (const timeout_error& e) {
      CHECK(std::string(e.what()).find("waiting for rank 0") != std::string::npos);
    }
  }
  SUBCASE("ranks that disagree on the world size are refused") {
    const auto job = unique_job("size");
    auto zero = std::async(std::launch::async, [&] { return config_message([&] { shm::create(0, 2, job, shm_options{}, 3s); }); });
    const auto one = config_message([&] { shm::create(1, 3, job, shm_options{}, 3s); });
    CHECK(one.find("says the world has 3 ranks, rank 0 says 2") != std::string::npos);
    CHECK(zero.get().find("says the world has 3 ranks") != std::string::npos);
  }
}

TEST_SUITE_END();
