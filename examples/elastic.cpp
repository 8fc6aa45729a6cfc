// A training-style job that survives the loss of a rank, two ways, over tutti::tcp:
//
//   restart (torchrun's way): rank 0 saves a checkpoint after every step; when a rank dies,
//     tuttirun --max-restarts stops the others and starts them all again, and the job resumes
//     from the checkpoint. TUTTI_RESTART_COUNT (= TORCHELASTIC_RESTART_COUNT) says which attempt
//     this is.
//       tuttirun --max-restarts=2 --nproc-per-node=4 tutti_elastic --checkpoint ckpt --kill 2:6
//   shrink (ULFM's / ncclCommShrink's way): the survivors call shrink() and carry on among
//     themselves, redoing the step that failed.
//       tuttirun --keep-going --nproc-per-node=4 tutti_elastic --shrink --kill 0:6
//
// Each step reduces a "global batch" of 60 samples split over however many ranks there are, so
// the result does not depend on the number of ranks: a disturbed run must end with the same
// parameters, to the bit, as an undisturbed one (the last line prints their checksum).
//   --kill R:S   rank R kills itself (SIGKILL) at the start of step S, on the first attempt only
//   --steps N    (default 12)   --checkpoint FILE (restart mode; written by rank 0, atomically)
#include <signal.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <tutti/transport/tcp.hpp>
#include <tutti/tutti.hpp>
#include <vector>

namespace {

constexpr int batch = 60;          // samples per step, split over the ranks
constexpr std::size_t params = 1024;

/// Sample i's gradient at step s: small integers, so that every sum is exact in double.
double gradient(int step, int sample, std::size_t j) {
  return static_cast<double>((step * 31 + sample * 7 + static_cast<int>(j)) % 13) - 6.0;
}

/// This rank's share of the step: the samples i with i % size == rank.
void local_gradient(std::vector<double>& g, int step, int rank, int size) {
  for (std::size_t j = 0; j < params; ++j) {
    double sum = 0;
    for (int i = rank; i < batch; i += size) sum += gradient(step, i, j);
    g[j] = sum;
  }
}

std::uint64_t checksum(const std::vector<double>& w) {
  std::uint64_t h = 1469598103934665603ull;
  for (double x : w) {
    std::uint64_t b;
    std::memcpy(&b, &x, sizeof b);
    h = (h ^ b) * 1099511628211ull;
  }
  return h;
}

/// The checkpoint: the next step, then the parameters (binary). Written to FILE.tmp, renamed.
bool load(const std::string& file, int& step, std::vector<double>& w) {
  std::ifstream in(file, std::ios::binary);
  if (!in) return false;
  in.read(reinterpret_cast<char*>(&step), sizeof step);
  in.read(reinterpret_cast<char*>(w.data()), static_cast<std::streamsize>(w.size() * sizeof(double)));
  return static_cast<bool>(in);
}

void save(const std::string& file, int step, const std::vector<double>& w) {
  const std::string tmp = file + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(&step), sizeof step);
    out.write(reinterpret_cast<const char*>(w.data()), static_cast<std::streamsize>(w.size() * sizeof(double)));
  }
  std::rename(tmp.c_str(), file.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  bool shrink = false;
  int steps = 12, victim = -1, kill_step = -1;
  std::string checkpoint;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--shrink") shrink = true;
    else if (a == "--steps" && i + 1 < argc) steps = std::atoi(argv[++i]);
    else if (a == "--checkpoint" && i + 1 < argc) checkpoint = argv[++i];
    else if (a == "--kill" && i + 1 < argc && std::strchr(argv[i + 1], ':')) {
      victim = std::atoi(argv[++i]);
      kill_step = std::atoi(std::strchr(argv[i], ':') + 1);
    } else {
      std::fprintf(stderr, "usage: %s [--shrink] [--steps N] [--checkpoint FILE] [--kill RANK:STEP]\n", argv[0]);
      return 2;
    }
  }
  const char* count = std::getenv("TUTTI_RESTART_COUNT");
  const int attempt = count ? std::atoi(count) : 0;

  auto comm = tutti::communicator<tutti::tcp>::from_env();
  const int me = comm.rank();  // in the job as started
  std::vector<double> w(params, 0.0), g(params);
  int step = 0;
  if (!checkpoint.empty()) {  // rank 0 reads it and tells the others
    std::vector<double> state(params + 1, 0.0);
    if (me == 0 && load(checkpoint, step, w)) {
      state[0] = step;
      std::copy(w.begin(), w.end(), state.begin() + 1);
    }
    comm.broadcast(tutti::view(state), 0);
    step = static_cast<int>(state[0]);
    std::copy(state.begin() + 1, state.end(), w.begin());
    if (step > 0 && me == 0) std::printf("attempt %d: resuming from the checkpoint at step %d\n", attempt, step);
  }
  for (; step < steps; ++step) {
    if (step == kill_step && me == victim && attempt == 0) ::raise(SIGKILL);
    local_gradient(g, step, comm.rank(), comm.size());
    try {
      comm.all_reduce(tutti::view(g));
    } catch (const tutti::error& e) {
      std::printf("step %d: rank %d: %s\n", step, me, e.what());
      if (!shrink) return 1;  // tuttirun --max-restarts starts the job again
      comm = comm.shrink();
      std::printf("step %d: rank %d carries on as rank %d of %d\n", step, me, comm.rank(), comm.size());
      --step;  // redo it, split over the ranks that are left
      continue;
    }
    for (std::size_t j = 0; j < params; ++j) w[j] += g[j] / 64.0;
    if (!checkpoint.empty() && comm.rank() == 0) save(checkpoint, step + 1, w);
  }
  if (comm.rank() == 0)
    std::printf("finished %d steps with %d ranks (attempt %d): checksum %016llx\n", steps, comm.size(), attempt,
                static_cast<unsigned long long>(checksum(w)));
  return 0;
}
