// The driver shared by the Open MPI and Gloo peers of tutti-bench (mpi_bench.cpp, gloo_bench.cpp):
// one sweep per (collective, algorithm) with nccl-tests' sizes, columns and bandwidth rules, and
// the CSV that tutti-bench writes, so bench/compare.sh can put the three side by side.
//
// Flags (the subset of tutti-bench's that a peer can honour):
//   -b MIN -e MAX (bytes, suffixes K M G = 2^10 2^20 2^30)  -f FACTOR  -n ITERS  -w WARMUP
//   -c 0|1 (verify)  -d float|double|int32|int64  -o sum|prod|min|max  -r ROOT
//   --collective NAME[,NAME...]|all  --csv FILE|-  (-: the CSV on stdout, the table on stderr)
//   -a / --algo NAME|all (the library's algorithms for the collective; MPI has one, native)
//   --skip-algo NAME[,NAME...] (with --algo all: leave these out; bench/compare.sh names one
//     that stalled past --peer-limit in an earlier round)
//   --transport LABEL (the CSV's transport column; the program infers it when it can)
//   --placement both|out|in|tutti (default both: each size out of place, then in place; tutti: the
//     placement tutti-bench has, in place for broadcast and reduce, out of place for the others;
//     bench/compare.sh and compare_netns.sh ask for the one they compare, halving a sweep's time)
//
// Sizes, as nccl-tests defines them (its doc/PERFORMANCE.md and the *GetCollByteCount functions):
// `bytes` is the largest buffer one rank passes, `count` the elements of one rank's piece:
//   broadcast, reduce, all_reduce   bytes = the buffer;                  count = bytes / size
//   all_gather, gather              bytes = the output (np pieces);      count = bytes / size / np
//   scatter, reduce_scatter         bytes = the input (np pieces);       count = bytes / size / np
//   all_to_all                      bytes = the input = the output;      count = bytes / size / np
//   barrier                         one row, bytes = count = 0
// so bytes is rounded down to a multiple of np * element size, as nccl-tests does (a size that
// leaves count 0 is skipped). algbw = bytes / time; busbw = algbw * 2(n-1)/n (all_reduce),
// (n-1)/n (all_gather, reduce_scatter, all_to_all, gather, scatter), 1 (broadcast, reduce).
//
// In place, as nccl-tests lays it out: all_gather's input is its piece of the output
// (out + rank * count); reduce_scatter's output is its piece of the input (in + rank * count,
// or the front of the input where the library puts it there, as MPI_IN_PLACE and Gloo's
// ReduceScatterHalvingDoubling do: a backend says so with reduce_scatter_in_place_at_front);
// gather at the root reads its input from out + root * count, scatter at the root leaves its
// piece at in + root * count; the others use one buffer. A backend that cannot do a placement
// natively says so and that row is left out.
//
//   --data-varying BYTES (tutti-bench's: the warm-up and timed calls rotate over as many sets of
//     buffers as fill BYTES per rank, at most 64, each filled with its own inputs, so that no call
//     finds its buffers where the one before left them in the cache; 0, the default: one set)
//
// Timing (tutti-bench's): -w warm-up calls, a barrier, -n timed calls; time = the slowest rank's
// mean per call. With -c 1 the inputs are refilled and one more call is checked on every rank:
// #wrong = the wrong elements summed over ranks (-1 in the CSV when not checked; 0 for barrier,
// which has no elements). Inputs are small integers, so every op is exact in every dtype.
// Rank 0 ends its table with "# done" once every figure is written, before the library's own
// shutdown (bench/compare.sh stops a peer that hangs after it).
#pragma once

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "../allreduce_sweep.hpp"  // iterations_measured, data_varying_sets: tutti-bench's rules

namespace tutti_peers {

/// A bad flag: the program prints it and exits 2.
struct usage_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

enum class collective { broadcast, reduce, all_reduce, gather, all_gather, scatter, all_to_all, reduce_scatter, barrier };
inline constexpr std::array<std::string_view, 9> collective_names = {
    "broadcast", "reduce", "all_reduce", "gather", "all_gather", "scatter", "all_to_all", "reduce_scatter", "barrier"};
inline std::string_view name(collective c) { return collective_names[static_cast<int>(c)]; }

enum class reduce_op { sum, prod, min, max };
inline constexpr std::array<std::string_view, 4> op_names = {"sum", "prod", "min", "max"};

inline bool reduces(collective c) {
  return c == collective::reduce || c == collective::all_reduce || c == collective::reduce_scatter;
}
inline bool rooted(collective c) {
  return c == collective::broadcast || c == collective::reduce || c == collective::gather || c == collective::scatter;
}

struct options {
  std::size_t min_bytes = 8, max_bytes = std::size_t{64} << 20;
  std::size_t factor = 2;
  int iters = 20, warmup = 5;   // -n 0: calibrated, as tutti-bench's -n 0 (--time-per-size)
  double seconds_per_size = 0.25;
  bool check = true;
  std::string dtype = "float";
  reduce_op op = reduce_op::sum;
  int root = 0;
  std::vector<collective> collectives{collective::all_reduce};
  std::string csv;         // "": none; "-": stdout
  std::string algo = "all";
  std::vector<std::string> skip_algos;  // --skip-algo
  std::string transport;   // "": the backend's guess
  std::string placement = "both";  // --placement: both, out, in, tutti
  std::size_t data_varying = 0;    // --data-varying: bytes of buffer sets the calls rotate over
};

/// Whether the sweep measures collective c out of place (in_place false) or in place.
inline bool measures(const options& o, collective c, bool in_place) {
  if (o.placement == "both") return true;
  if (o.placement == "tutti") return in_place == (c == collective::broadcast || c == collective::reduce);
  return in_place == (o.placement == "in");
}

inline std::size_t parse_bytes(const std::string& flag, const std::string& v) {
  char* end = nullptr;
  const unsigned long long n = std::strtoull(v.c_str(), &end, 10);
  std::size_t mult = 1;
  const std::string suffix = end ? end : "";
  if (suffix == "K" || suffix == "k") mult = std::size_t{1} << 10;
  else if (suffix == "M" || suffix == "m") mult = std::size_t{1} << 20;
  else if (suffix == "G" || suffix == "g") mult = std::size_t{1} << 30;
  else if (!suffix.empty() || end == v.c_str()) throw usage_error(flag + ": expected bytes with an optional K, M or G, got '" + v + "'");
  return static_cast<std::size_t>(n) * mult;
}

inline int parse_int(const std::string& flag, const std::string& v, int lo) {
  char* end = nullptr;
  const long n = std::strtol(v.c_str(), &end, 10);
  if (end == v.c_str() || *end || n < lo) throw usage_error(flag + ": expected an integer >= " + std::to_string(lo) + ", got '" + v + "'");
  return static_cast<int>(n);
}

inline options parse(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; i += 2) {
    const std::string k = argv[i];
    if (i + 1 >= argc) throw usage_error(k + ": missing its value");
    const std::string v = argv[i + 1];
    if (k == "-b") o.min_bytes = parse_bytes(k, v);
    else if (k == "-e") o.max_bytes = parse_bytes(k, v);
    else if (k == "-f") o.factor = static_cast<std::size_t>(parse_int(k, v, 2));
    else if (k == "-n") o.iters = parse_int(k, v, 0);
    else if (k == "--time-per-size") {
      char* end = nullptr;
      o.seconds_per_size = std::strtod(v.c_str(), &end);
      if (end == v.c_str() || *end || !(o.seconds_per_size > 0) || o.seconds_per_size > 3600)
        throw usage_error("--time-per-size: expected seconds, like 0.05, got '" + v + "'");
    }
    else if (k == "-w") o.warmup = parse_int(k, v, 0);
    else if (k == "-c") o.check = parse_int(k, v, 0) != 0;
    else if (k == "-r") o.root = parse_int(k, v, 0);
    else if (k == "-d") {
      if (v == "float" || v == "float32") o.dtype = "float";
      else if (v == "double" || v == "float64") o.dtype = "double";
      else if (v == "int32" || v == "int") o.dtype = "int32";
      else if (v == "int64") o.dtype = "int64";
      else throw usage_error("-d: expected float, double, int32 or int64 (the types both peers reduce), got '" + v + "'");
    } else if (k == "-o") {
      auto it = std::find(op_names.begin(), op_names.end(), v);
      if (it == op_names.end())
        throw usage_error("-o: expected sum, prod, min or max, got '" + v + "'" +
                          (v == "avg" ? " (neither Open MPI nor Gloo has an average)" : ""));
      o.op = static_cast<reduce_op>(it - op_names.begin());
    } else if (k == "--collective") {  // a name, a comma-separated list of names, or all
      o.collectives.clear();
      std::size_t from = 0;
      while (from <= v.size()) {
        const std::size_t comma = std::min(v.find(',', from), v.size());
        const std::string one = v.substr(from, comma - from);
        from = comma + 1;
        if (one == "all") {
          for (int c = 0; c < 9; ++c) o.collectives.push_back(static_cast<collective>(c));
          continue;
        }
        auto it = std::find(collective_names.begin(), collective_names.end(), one);
        if (it == collective_names.end())
          throw usage_error("--collective: expected broadcast, reduce, all_reduce, gather, all_gather, scatter, "
                            "all_to_all, reduce_scatter, barrier, a comma-separated list of them, or all, got '" + v + "'");
        o.collectives.push_back(static_cast<collective>(it - collective_names.begin()));
      }
    } else if (k == "--csv") o.csv = v;
    else if (k == "-a" || k == "--algo") o.algo = v;
    else if (k == "--skip-algo") {
      for (std::size_t from = 0; from <= v.size();) {
        const std::size_t comma = std::min(v.find(',', from), v.size());
        o.skip_algos.push_back(v.substr(from, comma - from));
        from = comma + 1;
      }
    }
    else if (k == "--transport") o.transport = v;
    else if (k == "--data-varying") o.data_varying = parse_bytes(k, v);
    else if (k == "--placement") {
      if (v != "both" && v != "out" && v != "in" && v != "tutti")
        throw usage_error("--placement: expected both, out, in or tutti, got '" + v + "'");
      o.placement = v;
    } else throw usage_error("unknown flag '" + k + "'");
  }
  if (o.min_bytes > o.max_bytes)
    throw usage_error("-b " + std::to_string(o.min_bytes) + " is larger than -e " + std::to_string(o.max_bytes));
  return o;
}

/// What one size means for collective c (see the top of this file).
struct shape {
  std::size_t count = 0;  // elements of one rank's piece
  std::size_t send = 0;   // elements of the input buffer
  std::size_t recv = 0;   // elements of the output buffer
  std::size_t bytes = 0;  // the size reported
  double bus = 1;         // busbw / algbw
};

inline shape shape_of(collective c, std::size_t bytes, std::size_t elem, int np) {
  const auto n = static_cast<std::size_t>(np);
  const double share = static_cast<double>(np - 1) / np;
  shape s;
  switch (c) {
    case collective::broadcast:
    case collective::reduce:
    case collective::all_reduce:
      s.count = s.send = s.recv = bytes / elem;
      s.bus = c == collective::all_reduce ? 2 * share : 1.0;
      break;
    case collective::all_gather:
    case collective::gather:
      s.count = bytes / elem / n;
      s.send = s.count, s.recv = s.count * n;
      s.bus = share;
      break;
    case collective::scatter:
    case collective::reduce_scatter:
      s.count = bytes / elem / n;
      s.send = s.count * n, s.recv = s.count;
      s.bus = share;
      break;
    case collective::all_to_all:
      s.count = bytes / elem / n;
      s.send = s.recv = s.count * n;
      s.bus = share;
      break;
    case collective::barrier:
      s.bus = 0;
      break;
  }
  s.bytes = std::max(s.send, s.recv) * elem;
  return s;
}

/// The value rank r puts at index j of its input: small integers, so sums, products, minima and
/// maxima over a few dozen ranks are exact in every dtype; products stay below 2^np.
template <class T>
T input_value(collective c, reduce_op op, int r, std::size_t j) {
  if (!reduces(c)) return static_cast<T>((r + 1) * 1000 + static_cast<int>(j % 997));
  switch (op) {
    case reduce_op::sum: return static_cast<T>((r + 1) * static_cast<int>(j % 7 + 1));
    case reduce_op::prod: return static_cast<T>((static_cast<std::size_t>(r) + j) % 4 == 0 ? 2 : 1);
    case reduce_op::min:
    case reduce_op::max: return static_cast<T>((r * 5 + static_cast<int>(j % 11)) % 11);
  }
  return T{};
}

template <class T>
T fold(reduce_op op, T a, T b) {
  switch (op) {
    case reduce_op::sum: return a + b;
    case reduce_op::prod: return a * b;
    case reduce_op::min: return std::min(a, b);
    case reduce_op::max: return std::max(a, b);
  }
  return a;
}

/// One call's buffers: `in` and `out` as the collective reads and writes them.
template <class T>
struct call {
  collective coll;
  const T* in;
  T* out;
  std::size_t count;  // elements of one rank's piece
  bool in_place;
  int root;
  reduce_op op;
};

/// The sweep. A Backend has
///   static constexpr bool reduce_scatter_in_place_at_front;
///   std::vector<std::string> algorithms(collective)            what it runs for a collective
///   bool in_place(collective, const std::string& algo)         whether it has an in-place form
///   template <class T> void run(const std::string& algo, const call<T>&)
///   double max_of(double); double sum_of(double); void barrier();
///   library(), transport(): the CSV's first and third columns
template <class T, class Backend>
class sweep {
 public:
  sweep(const options& o, int rank, int np, Backend& b, std::FILE* table, std::FILE* csv)
      : o_(o), rank_(rank), np_(np), b_(b), table_(table), csv_(csv) {}

  void run(collective c) {
    auto algos = b_.algorithms(c);
    if (o_.algo != "all") {
      if (std::find(algos.begin(), algos.end(), o_.algo) == algos.end()) {
        if (rank_ == 0) std::fprintf(table_, "# %s: no algorithm '%s' for %s (it has:%s); skipped\n", b_.library(), o_.algo.c_str(), std::string(name(c)).c_str(), list(algos).c_str());
        return;
      }
      algos = {o_.algo};
    }
    for (const auto& skip : o_.skip_algos) {
      const auto it = std::find(algos.begin(), algos.end(), skip);
      if (it == algos.end()) continue;
      algos.erase(it);
      if (rank_ == 0) std::fprintf(table_, "# %s %s (%s): left out (--skip-algo)\n", b_.library(), std::string(name(c)).c_str(), skip.c_str());
    }
    if (rooted(c) && o_.root >= np_) throw usage_error("-r " + std::to_string(o_.root) + ": there are only " + std::to_string(np_) + " ranks");
    const int root = rooted(c) ? o_.root : -1;
    const shape big = shape_of(c, o_.max_bytes, sizeof(T), np_);
    send_.assign(big.send + 1, T{});
    recv_.assign(big.recv + 1, T{});
    for (const auto& algo : algos) {
      if (rank_ == 0) header(c, algo, root);
      if (c == collective::barrier) {
        row(c, algo, root, shape_of(c, 0, sizeof(T), np_));
        continue;
      }
      for (std::size_t bytes = o_.min_bytes; bytes <= o_.max_bytes; bytes = bytes ? bytes * o_.factor : 1) {
        const shape s = shape_of(c, bytes, sizeof(T), np_);
        if (s.count > 0) row(c, algo, root, s);
        if (bytes == 0 && o_.max_bytes == 0) break;
      }
    }
  }

 private:
  static std::string list(const std::vector<std::string>& v) {
    std::string s;
    for (const auto& a : v) s += " " + a;
    return s;
  }

  const char* op_name(collective c) const { return reduces(c) ? op_names[static_cast<int>(o_.op)].data() : "none"; }

  void header(collective c, const std::string& algo, int root) {
    const std::string iterations = o_.iters ? std::to_string(o_.iters) + " iterations"
                                            : "iterations for " + std::to_string(o_.seconds_per_size) + " s per size";
    std::fprintf(table_, "# %s %s (%s), transport %s, %d ranks, %s, op %s, root %d, %s after %d warm-up\n",
                 b_.library(), std::string(name(c)).c_str(), algo.c_str(), b_.transport(), np_, o_.dtype.c_str(),
                 op_name(c), root, iterations.c_str(), o_.warmup);
    if (o_.data_varying)
      std::fprintf(table_, "# data-varying: the calls rotate over buffer sets filling %zu bytes per rank (at most 64 sets)\n",
                   o_.data_varying);
    std::fprintf(table_, "#%11s %12s %6s %6s %5s   %10s %8s %8s %6s   %10s %8s %8s %6s\n", "", "", "", "", "",
                 "out-of-place", "", "", "", "in-place", "", "", "");
    std::fprintf(table_, "#%11s %12s %6s %6s %5s   %10s %8s %8s %6s   %10s %8s %8s %6s\n", "size", "count", "type",
                 "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong");
    std::fprintf(table_, "#%11s %12s %6s %6s %5s   %10s %8s %8s %6s   %10s %8s %8s %6s\n", "(B)", "(elements)", "", "",
                 "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
  }

  struct result {
    bool ran = false;
    double us = 0;
    long wrong = -1;
  };

  /// The pointers for one placement (see the top of this file).
  std::pair<T*, T*> place(T* s, T* r, collective c, bool in_place, int root, std::size_t count) {
    if (!in_place) return {s, r};
    switch (c) {
      case collective::all_gather: return {r + rank_ * count, r};
      case collective::gather: return rank_ == root ? std::pair{r + root * count, r} : std::pair{s, r};
      case collective::scatter: return rank_ == root ? std::pair{s, s + root * count} : std::pair{s, r};
      case collective::reduce_scatter:
        return {s, Backend::reduce_scatter_in_place_at_front ? s : s + rank_ * count};
      default: return {r, r};
    }
  }

  /// The inputs of set `shift` (0: the checked one; the others take the next elements' values).
  void fill(collective c, const shape& s, T* in, std::size_t shift = 0) const {
    const std::size_t n = s.count;
    switch (c) {
      case collective::scatter:  // the piece for rank k; root's pieces differ from any other rank's
        for (std::size_t k = 0; k < static_cast<std::size_t>(np_); ++k)
          for (std::size_t j = 0; j < n; ++j)
            in[k * n + j] = input_value<T>(c, o_.op, rank_ * np_ + static_cast<int>(k), j + shift);
        break;
      case collective::reduce_scatter:
      case collective::all_to_all:
        for (std::size_t j = 0; j < n * np_; ++j) in[j] = input_value<T>(c, o_.op, rank_, j + shift);
        break;
      default:
        for (std::size_t j = 0; j < n; ++j) in[j] = input_value<T>(c, o_.op, rank_, j + shift);
    }
  }

  T reduced(collective c, std::size_t j) const {
    T acc = input_value<T>(c, o_.op, 0, j);
    for (int r = 1; r < np_; ++r) acc = fold(o_.op, acc, input_value<T>(c, o_.op, r, j));
    return acc;
  }

  long count_wrong(collective c, int root, const shape& s, const T* out) const {
    const std::size_t n = s.count;
    long w = 0;
    auto check = [&](std::size_t i, T expected) { w += out[i] != expected; };
    switch (c) {
      case collective::broadcast:
        for (std::size_t j = 0; j < n; ++j) check(j, input_value<T>(c, o_.op, root, j));
        break;
      case collective::reduce:
        if (rank_ == root)
          for (std::size_t j = 0; j < n; ++j) check(j, reduced(c, j));
        break;
      case collective::all_reduce:
        for (std::size_t j = 0; j < n; ++j) check(j, reduced(c, j));
        break;
      case collective::gather:
        if (rank_ != root) break;
        [[fallthrough]];
      case collective::all_gather:
        for (int k = 0; k < np_; ++k)
          for (std::size_t j = 0; j < n; ++j) check(k * n + j, input_value<T>(c, o_.op, k, j));
        break;
      case collective::scatter:
        for (std::size_t j = 0; j < n; ++j) check(j, input_value<T>(c, o_.op, root * np_ + rank_, j));
        break;
      case collective::reduce_scatter:
        for (std::size_t j = 0; j < n; ++j) check(j, reduced(c, rank_ * n + j));
        break;
      case collective::all_to_all:
        for (int k = 0; k < np_; ++k)
          for (std::size_t j = 0; j < n; ++j) check(k * n + j, input_value<T>(c, o_.op, k, rank_ * n + j));
        break;
      case collective::barrier: break;
    }
    return w;
  }

  result measure(collective c, const std::string& algo, int root, const shape& s, bool in_place) {
    result res;
    if (in_place && !b_.in_place(c, algo)) return res;
    auto [in, out] = place(send_.data(), recv_.data(), c, in_place, root, s.count);
    const call<T> k{c, in, out, s.count, in_place, root, o_.op};
    // --data-varying: the further sets the warm-up and timed calls rotate over, each filled with
    // inputs of its own (the values of the next elements); set 0 is the one checked.
    const std::size_t sets = c == collective::barrier ? 1 : tutti_bench::data_varying_sets(o_.data_varying, (s.send + s.recv) * sizeof(T));
    std::vector<std::vector<T>> more_send(sets - 1), more_recv(sets - 1);
    std::vector<call<T>> calls{k};
    for (std::size_t j = 1; j < sets; ++j) {
      more_send[j - 1].assign(s.send + 1, T{});
      more_recv[j - 1].assign(s.recv + 1, static_cast<T>(-1));
      auto [in_j, out_j] = place(more_send[j - 1].data(), more_recv[j - 1].data(), c, in_place, root, s.count);
      fill(c, s, in_j, j);
      calls.push_back(call<T>{c, in_j, out_j, s.count, in_place, root, o_.op});
    }
    auto nth = [&](int i) -> const call<T>& { return calls[static_cast<std::size_t>(i) % calls.size()]; };
    // the output is cleared first: in place, the input lies inside it (or it inside the input)
    auto prepare = [&, in = in, out = out] {
      if (c == collective::barrier) return;
      std::fill(out, out + s.recv, static_cast<T>(-1));  // never an expected value
      fill(c, s, in);
    };
    prepare();
    int iters = o_.iters;
    if (iters == 0) {  // calibrated from the warm-up's pace, as tutti-bench's -n 0
      b_.run(algo, k);  // the first call may set things up: not timed
      const int w = std::max(o_.warmup, 1);
      const auto w0 = std::chrono::steady_clock::now();
      for (int i = 0; i < w; ++i) b_.run(algo, nth(i));
      const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - w0).count() / w;
      iters = tutti_bench::iterations_measured(b_.max_of(us), o_.seconds_per_size);
    } else {
      for (int i = 0; i < o_.warmup; ++i) b_.run(algo, nth(i));
    }
    b_.barrier();
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) b_.run(algo, nth(i));
    const auto t1 = std::chrono::steady_clock::now();
    res.us = b_.max_of(std::chrono::duration<double, std::micro>(t1 - t0).count() / iters);
    res.ran = true;
    if (c == collective::barrier) {
      res.wrong = 0;
    } else if (o_.check) {
      prepare();
      // Gloo's algorithm classes write straight into a peer's output: no rank may start the
      // checked call before every rank has refilled its buffers
      b_.barrier();
      b_.run(algo, k);
      res.wrong = static_cast<long>(b_.sum_of(static_cast<double>(count_wrong(c, root, s, out))));
    }
    return res;
  }

  void row(collective c, const std::string& algo, int root, const shape& s) {
    // barrier has one form, reported as out of place
    const result oop = c == collective::barrier || measures(o_, c, false) ? measure(c, algo, root, s, false) : result{};
    const result ip = c == collective::barrier || !measures(o_, c, true) ? result{} : measure(c, algo, root, s, true);
    if (rank_ != 0) return;
    auto algbw = [&](double us) { return us > 0 ? static_cast<double>(s.bytes) / (us * 1e-6) / 1e9 : 0.0; };
    auto cols = [&](const result& r) {
      char buf[96];
      if (!r.ran) std::snprintf(buf, sizeof buf, "%10s %8s %8s %6s", "-", "-", "-", "-");
      else if (r.wrong < 0) std::snprintf(buf, sizeof buf, "%10.2f %8.2f %8.2f %6s", r.us, algbw(r.us), algbw(r.us) * s.bus, "N/A");
      else std::snprintf(buf, sizeof buf, "%10.2f %8.2f %8.2f %6ld", r.us, algbw(r.us), algbw(r.us) * s.bus, r.wrong);
      return std::string(buf);
    };
    std::fprintf(table_, " %11zu %12zu %6s %6s %5d   %s   %s\n", s.bytes, s.count, o_.dtype.c_str(), op_name(c), root,
                 cols(oop).c_str(), cols(ip).c_str());
    std::fflush(table_);
    if (!csv_) return;
    for (int placed = 0; placed < 2; ++placed) {
      const result& r = placed ? ip : oop;
      if (!r.ran) continue;
      std::fprintf(csv_, "%s,%s,%s,%s,%d,%s,%s,%d,%zu,%zu,%d,%.3f,%.6g,%.6g,%ld\n", b_.library(),
                   std::string(name(c)).c_str(), b_.transport(), algo.c_str(), np_, o_.dtype.c_str(), op_name(c), root,
                   s.bytes, s.count, placed, r.us, algbw(r.us), algbw(r.us) * s.bus, r.wrong);
    }
    std::fflush(csv_);
  }

  const options& o_;
  int rank_, np_;
  Backend& b_;
  std::FILE* table_;
  std::FILE* csv_;
  std::vector<T> send_, recv_;
};

inline constexpr const char* csv_header =
    "library,collective,transport,algorithm,np,dtype,op,root,bytes,count,in_place,time_us,algbw_GBps,busbw_GBps,wrong\n";

/// Runs every collective of `o` with the dtype it names; rank 0 prints the tables and the CSV.
template <class Backend>
void run_all(const options& o, int rank, int np, Backend& b) {
  std::FILE* csv = nullptr;
  std::FILE* table = stdout;
  if (rank == 0 && o.csv == "-") {
    csv = stdout;
    table = stderr;
  } else if (rank == 0 && !o.csv.empty()) {
    csv = std::fopen(o.csv.c_str(), "w");
    if (!csv) throw std::runtime_error("--csv " + o.csv + ": cannot open it for writing");
  }
  if (csv) std::fputs(csv_header, csv);
  auto each = [&](auto zero) {
    using T = decltype(zero);
    sweep<T, Backend> s(o, rank, np, b, table, csv);
    for (collective c : o.collectives) s.run(c);
  };
  if (o.dtype == "float") each(float{});
  else if (o.dtype == "double") each(double{});
  else if (o.dtype == "int32") each(std::int32_t{});
  else each(std::int64_t{});
  if (csv && csv != stdout) std::fclose(csv);
  // the last line before the library's own shutdown (MPI_Finalize can hang over UCX tcp): a
  // script that sees it knows every figure is written
  if (rank == 0) {
    std::fputs("# done\n", table);
    std::fflush(table);
  }
}

}  // namespace tutti_peers
