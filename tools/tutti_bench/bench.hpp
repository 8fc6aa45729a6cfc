// tutti-bench: the options, the rank-0 report, and the measuring loop shared by every transport.
// One translation unit per transport (over_*.cpp) registers it (`registrar`) and instantiates
// `run_on` for its communicator, so the templates are compiled once per transport and in
// parallel; main.cpp parses the command line, launches the ranks and writes the report. The
// collectives measured, their buffers and their checked results come from the collective table
// (tutti/testing/calls.hpp): a new row is measured without a line here.
#pragma once

#include <tutti/testing/calls.hpp>
#include <tutti/tutti.hpp>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "../../bench/allreduce_sweep.hpp"  // iterations_measured, data_varying_sets: the rules the peers share

namespace tutti_bench {

enum class dtype_kind { f32, f64, i32, i64, u8, f16, bf16 };
enum class op_kind { sum, prod, min, max, avg };
/// How the v-collectives' counts are spread over the ranks (--counts).
enum class counts_pattern { uniform, linear, one_heavy };

struct options;

/// A transport tutti-bench measures: each over_<name>.cpp registers its own (a `registrar` of
/// static storage), and the build adds that file where the transport can be had
/// (tools/CMakeLists.txt): a new transport is that file and its line there.
struct transport_entry {
  std::string_view name;
  std::string_view alias;        ///< another name it answers to (or empty)
  std::string_view description;  ///< for --help
  enum class ranks_are { threads, processes, mpi_processes } ranks;
  bool device = false;           ///< device buffers: all_reduce only (over_cuda.cu)
  std::string_view tuning_kind;  ///< its rows of the tuned table (--tune; empty: not tuned)
  /// Joins the job (or starts the threads), runs, returns the exit status (1: a result was wrong).
  int (*run)(const options&) = nullptr;
  /// Whether candidate `algo` of automatic has a schedule for `c` there (null: device transports).
  bool (*supports)(std::size_t algo, tutti::collective c) = nullptr;
};
/// Every transport of this build, by name (registration order across files is unspecified).
std::vector<const transport_entry*>& transports();
/// The transport called `name` (or its alias), if built.
const transport_entry* transport_named(std::string_view name);
struct registrar {
  explicit registrar(const transport_entry& e) {
    auto& all = transports();
    auto at = all.begin();
    while (at != all.end() && (*at)->name < e.name) ++at;
    all.insert(at, &e);
  }
};
/// automatic's support table of `Transport`, as a transport_entry's `supports`.
template <class Transport>
bool supports_of(std::size_t algo, tutti::collective c) {
  return tutti::algo::automatic::support<Transport>[algo][static_cast<std::size_t>(c)];
}

/// Everything the command line sets; identical on every rank (each parses the same argv).
struct options {
  std::size_t min_bytes = 8, max_bytes = std::size_t{32} << 20;
  std::size_t factor = 2;
  int iters = 20;       // -n; 0: calibrated from the warm-up time (seconds_per_size per size)
  int warmup = 5;       // -w
  bool check = true;    // -c
  dtype_kind dtype = dtype_kind::f32;
  op_kind op = op_kind::sum;
  int root = 0;
  std::vector<tutti::collective> collectives{tutti::collective::all_reduce};
  const transport_entry* transport = nullptr;  // --transport (default shm)
  std::string algo = "automatic";  // automatic or a candidate of automatic (automatic::names)
  counts_pattern counts = counts_pattern::uniform;
  int np = 0;                      // --np; 0: not given
  double seconds_per_size = 0.25;  // with -n 0
  std::size_t data_varying = 0;    // --data-varying: bytes of buffer sets the calls rotate over (0: one set)
  std::string json_path, csv_path;  // empty: none; "-": stdout
  bool osu = false;
  bool progress = false;           // --progress: also when stderr is not a tty
  std::string command_line;        // for the JSON meta
};

const char* dtype_name(dtype_kind d);
const char* op_name(op_kind o);
inline std::string transport_name(const transport_entry* t) { return t ? std::string(t->name) : std::string("?"); }
/// Whether `--algo` has a schedule for `c` on the chosen transport (automatic always has), and
/// whether it has one for any collective there.
bool algo_supports(const options& o, tutti::collective c);
bool algo_runs_any(const options& o);
/// Why collective c cannot be measured with these options ("": it can): the algorithm has no
/// schedule for it, or -o avg on a collective that reduces in rank order (the scans).
std::string skip_reason(const options& o, tutti::collective c);
/// Whether collective C's size column holds a block per rank (its count column one block).
template <tutti::collective C>
constexpr bool blocks_column() {
  constexpr tutti::collective_info row = tutti::info(C);
  return row.layout.in == tutti::extent::blocks || row.layout.out == tutti::extent::blocks ||
         row.counts == tutti::counts_kind::per_rank;
}

/// One placement of one size: the slowest rank's mean time per call (time_us), the fastest's
/// and the mean over ranks (for --osu), and the wrong elements summed over ranks (-1: unchecked).
struct measurement {
  bool present = false;
  double time_us = 0, min_us = 0, avg_us = 0;
  int iters = 0;
  long long wrong = -1;
};

/// One size of one collective: `bytes` and `count` as nccl-tests prints them (the largest
/// per-rank buffer, the per-rank count the call takes).
struct size_result {
  tutti::collective coll;
  std::size_t bytes = 0, count = 0;
  int root = -1;
  bool uses_op = false;
  measurement out_of_place, in_place;
};

/// Rank 0's output: table (or OSU table), CSV, JSON, progress line. Implemented in main.cpp.
class report {
 public:
  report(const options& o, int np, int threads);
  report(const report&) = delete;
  report& operator=(const report&) = delete;
  ~report();
  void begin(tutti::collective c);
  void add(const size_result& r);
  void note(const std::string& text);  // a '#' line in the table, and on stderr
  void end(tutti::collective c);
  void progress(tutti::collective c, std::size_t bytes, int step, int steps);
  /// Writes the footer and the JSON file; returns the wrong elements of the whole run.
  long long finish();

 private:
  struct impl;
  impl* p_;
};

/// The busbw factor of nccl-tests' PERFORMANCE.md for collective `c` on `n` ranks (the
/// collective table's `traffic`).
inline double bus_factor(tutti::collective c, int n) { return tutti::bus_factor(tutti::info(c).bus, n); }

/// The v-collectives' counts on `n` ranks for an average block of `block` elements (--counts):
/// counts[r] for all_gather_v, gather_v, scatter_v and reduce_scatter_v; for all_to_all_v,
/// counts[j] is what every rank sends rank j. The total is n x block whatever the pattern.
inline std::vector<std::size_t> counts_for(counts_pattern pattern, int n, std::size_t block) {
  const auto N = static_cast<std::size_t>(n);
  std::vector<std::size_t> c(N, block);
  if (pattern == counts_pattern::one_heavy) {
    std::fill(c.begin(), c.end(), 0);
    c[0] = block * N;
  } else if (pattern == counts_pattern::linear && n > 1) {
    // rank r: block * 2(r+1)/(n+1), rounded down; rank n-1 takes what is left
    std::size_t sum = 0;
    for (std::size_t r = 0; r + 1 < N; ++r) sum += c[r] = block * 2 * (r + 1) / (N + 1);
    c[N - 1] = block * N - sum;
  }
  return c;
}

/// The sizes of the sweep (-b, -e, -f), in bytes.
inline std::vector<std::size_t> sweep_sizes(const options& o) {
  std::vector<std::size_t> s;
  for (std::size_t b = o.min_bytes; b <= o.max_bytes; b *= o.factor) {
    s.push_back(b);
    if (o.factor < 2 || b > o.max_bytes / o.factor) break;
  }
  return s;
}

// ---- values the check fills in and expects ------------------------------------------------

template <class T>
T to(long long v) {
  if constexpr (std::is_same_v<T, tutti::float16> || std::is_same_v<T, tutti::bfloat16>) return T(static_cast<float>(v));
  else return static_cast<T>(v);
}
template <class T>
bool same(T a, T b) {
  if constexpr (std::is_same_v<T, tutti::float16> || std::is_same_v<T, tutti::bfloat16>)
    return static_cast<float>(a) == static_cast<float>(b);
  else return a == b;
}
/// A value no input holds, written into outputs before the checked call.
template <class T>
T sentinel() {
  return to<T>(std::is_unsigned_v<T> ? 201 : -77);
}

/// Inputs: small integers, exact in every dtype (bfloat16 too) after reducing over 50 ranks.
/// Products use 1, 2 and -1 only (exact powers of two). `who` is the rank (or a rank-derived id).
template <class T>
long long input_value(op_kind op, bool reduction, long long who, std::size_t i) {
  constexpr bool uns = std::is_unsigned_v<T>;
  if (reduction && op == op_kind::prod) {
    static constexpr int s[4] = {1, 2, 1, -1}, u[4] = {1, 2, 1, 1};
    const auto k = (static_cast<std::size_t>(who) * 3 + i * 5) % 4;
    return uns ? u[k] : s[k];
  }
  const std::size_t m = reduction ? 11 : 101;  // reductions: |sum| <= 5 n; otherwise a wider spread
  const long long v = static_cast<long long>((static_cast<std::size_t>(who) * 7 + i * 13) % m) - static_cast<long long>(m / 2);
  return uns ? v + static_cast<long long>(m / 2) : v;
}

/// What the reduction of every rank's input_value(r, i) over n ranks gives, as tutti computes it
/// (avg: the sum divided once, in T, as communicator::finish does).
template <class T>
T reduced_value(op_kind op, int n, std::size_t i) {
  long long acc = input_value<T>(op, true, 0, i);
  for (int r = 1; r < n; ++r) {
    const long long v = input_value<T>(op, true, r, i);
    switch (op) {
      case op_kind::prod: acc *= v; break;
      case op_kind::min: acc = std::min(acc, v); break;
      case op_kind::max: acc = std::max(acc, v); break;
      default: acc += v;
    }
  }
  T res;
  if constexpr (std::is_integral_v<T>) res = static_cast<T>(static_cast<std::make_unsigned_t<T>>(acc));  // wraps as T does
  else res = to<T>(acc);
  if (op == op_kind::avg) {
    using D = std::conditional_t<std::is_arithmetic_v<T>, T, float>;
    res = static_cast<T>(res / static_cast<D>(n));
  }
  return res;
}

template <class T>
struct type_tag {
  using type = T;
};

template <class F>
void with_dtype(dtype_kind d, F&& f) {
  switch (d) {
    case dtype_kind::f32: return f(type_tag<float>{});
    case dtype_kind::f64: return f(type_tag<double>{});
    case dtype_kind::i32: return f(type_tag<std::int32_t>{});
    case dtype_kind::i64: return f(type_tag<std::int64_t>{});
    case dtype_kind::u8: return f(type_tag<std::uint8_t>{});
    case dtype_kind::f16: return f(type_tag<tutti::float16>{});
    case dtype_kind::bf16: return f(type_tag<tutti::bfloat16>{});
  }
}
template <class F>
void with_op(op_kind o, F&& f) {
  switch (o) {
    case op_kind::sum: return f(tutti::op::sum{});
    case op_kind::prod: return f(tutti::op::prod{});
    case op_kind::min: return f(tutti::op::min{});
    case op_kind::max: return f(tutti::op::max{});
    case op_kind::avg: return f(tutti::op::avg{});
  }
}

// ---- the measuring loop ---------------------------------------------------------------------

/// Runs every requested collective over every size on `comm`; every rank calls it, `rep` is
/// rank 0's report (nullptr elsewhere). Returns the wrong elements summed over ranks and sizes.
template <class Comm>
class runner {
 public:
  runner(Comm& comm, const options& o, report* rep) : c_(comm), o_(o), rep_(rep), n_(comm.size()), r_(comm.rank()) {}

  long long run() {
    long long wrong = 0;
    const auto sizes = sweep_sizes(o_);
    int steps = 0, step = 0;
    for (auto c : o_.collectives)
      if (skip_reason(o_, c).empty()) steps += tutti::info(c).counts == tutti::counts_kind::none ? 1 : static_cast<int>(sizes.size());
    for (auto c : o_.collectives) {
      if (const auto why = skip_reason(o_, c); !why.empty()) {  // only with --collective all: main rejects a single one
        if (rep_) rep_->note(std::string(tutti::collective_name(c)) + ": skipped, " + why);
        continue;
      }
      if (rep_) rep_->begin(c);
      if (tutti::info(c).counts == tutti::counts_kind::none) {  // no data (barrier): one row
        if (rep_) rep_->progress(c, 0, ++step, steps);
        size_result res{c, 0, 0, -1, false, {}, {}};
        auto call = [&](int) {
          tutti::with_collective(c, [&](auto k) {
            constexpr tutti::collective C = decltype(k)::value;
            if constexpr (tutti::info(C).counts == tutti::counts_kind::none)
              c_.template call<C>(tutti::call_desc<char, typename Comm::memory>{});
          });
        };
        res.out_of_place = measure([] {}, call, [] { return 0LL; });
        add(res, wrong);
      } else {
        with_dtype(o_.dtype, [&](auto tag) {
          using T = typename decltype(tag)::type;
          for (std::size_t bytes : sizes) {
            if (rep_) rep_->progress(c, bytes, ++step, steps);
            add(one_size<T>(c, bytes), wrong);
          }
        });
      }
      if (rep_) rep_->end(c);
    }
    return wrong;
  }

 private:
  void add(const size_result& r, long long& wrong) {
    for (const measurement* m : {&r.out_of_place, &r.in_place})
      if (m->present && m->wrong > 0) wrong += m->wrong;
    if (rep_) rep_->add(r);
  }

  template <class T>
  size_result one_size(tutti::collective c, std::size_t bytes) {
    return tutti::with_collective(c, [&](auto k) { return one_size_of<decltype(k)::value, T>(bytes); });
  }

  /// One size of collective C, from its row: nccl-tests' sizes (the size column is the largest
  /// buffer: the whole buffer for broadcast, reduce, all_reduce and the scans, all ranks' blocks
  /// together for the others, whose count column is the per-rank block); out of place where the
  /// call has that form, in place where it has that one.
  template <tutti::collective C, class T>
  size_result one_size_of(std::size_t bytes) {
    namespace tt = tutti::testing;
    constexpr tutti::collective_info row = tutti::info(C);
    const std::size_t n = static_cast<std::size_t>(n_), me = static_cast<std::size_t>(r_);
    const bool reduction = row.reduces;
    const int root = o_.root;
    constexpr bool blocks = blocks_column<C>();
    const std::size_t count = blocks ? bytes / (sizeof(T) * n) : bytes / sizeof(T);
    tt::call_shape s = tt::call_shape::any(C, n_, count, root);
    if constexpr (row.counts == tutti::counts_kind::per_rank) {
      const auto per = counts_for(o_.counts, n_, count);
      s = row.where == tutti::counts_at::own_row ? tt::call_shape::same_counts(n_, per) : tt::call_shape::same_counts(n_, per, root);
    }
    // The size column: the largest buffer; all_to_all_v's, whose ranks' buffers differ, what each sends.
    const int at = row.rooted ? root : r_;
    const std::size_t total = row.where == tutti::counts_at::own_row ? tt::in_size<C>(s, at)
                                                                       : std::max(tt::in_size<C>(s, at), tt::out_size<C>(s, at));
    size_result res{C, total * sizeof(T), count, row.rooted ? root : -1, reduction, {}, {}};
    (void)me;
    auto input = [&](int who, std::size_t i) { return to<T>(input_value<T>(o_.op, reduction, who, i)); };
    auto measure_op = [&](const auto& op) {
      for (auto pl : {tt::placement::apart, tt::placement::in_place}) {
        if (pl == tt::placement::apart ? !tt::has_apart<C> : !tt::has_in_place<C>) continue;
        tt::call_buffers<T> b;
        std::vector<T> before;
        // --data-varying: the further sets the warm-up and timed calls rotate over, each with
        // inputs of its own (the next elements' values); `b`, set 0, is the one checked.
        std::vector<tt::call_buffers<T>> more;
        measurement m = measure([&] { b = tt::make_buffers<C, T>(s, r_, pl, input, sentinel<T>());
                                      before = tt::result_of<C>(s, r_, b, pl);
                                      const std::size_t sets = data_varying_sets(o_.data_varying,
                                                                                 (b.in.size() + b.out.size()) * sizeof(T));
                                      for (std::size_t j = more.size() + 1; j < sets; ++j)
                                        more.push_back(tt::make_buffers<C, T>(
                                            s, r_, pl, [&](int who, std::size_t i) { return input(who, i + j); },
                                            sentinel<T>())); },
                                [&](int i) {
                                  const auto k = static_cast<std::size_t>(i) % (more.size() + 1);
                                  c_.template call<C>(tt::describe<C>(s, r_, k == 0 ? b : more[k - 1], pl, op));
                                },
                                [&] {
                                  const auto got = tt::result_of<C>(s, r_, b, pl);
                                  const auto want = tt::expected<C, T>(s, r_, before, input, op);
                                  long long w = got.size() == want.size() ? 0 : 1;
                                  for (std::size_t i = 0; i < got.size() && i < want.size(); ++i) w += !same(got[i], want[i]);
                                  return w;
                                });
        (pl == tt::placement::apart ? res.out_of_place : res.in_place) = m;
      }
    };
    if constexpr (row.reduces) with_op(o_.op, [&](auto op) {
      // (skip_reason keeps -o avg away from the ordered rows; the call would not compile)
      if constexpr (!(row.ordered && std::is_same_v<decltype(op), tutti::op::avg>)) measure_op(op);
    });
    else measure_op(tutti::algo::no_op{});
    return res;
  }

  /// Warm-up, a barrier, the timed loop (`call(i)`: the i-th call of the warm-up or the loop);
  /// then (with -c 1) one more call on fresh inputs, checked.
  template <class Fill, class Call, class Verify>
  measurement measure(Fill&& fill, Call&& call, Verify&& verify) {
    using clock = std::chrono::steady_clock;
    measurement m;
    m.present = true;
    fill();
    int iters = o_.iters;
    if (iters == 0) {  // calibrated, as bench/allreduce_sweep.hpp's -c 1: from the warm-up's pace
      call(0);         // the first call may set things up: not timed
      const int w = std::max(o_.warmup, 1);
      const auto t0 = clock::now();
      for (int i = 0; i < w; ++i) call(i);
      const double us = std::chrono::duration<double, std::micro>(clock::now() - t0).count() / w;
      iters = iterations_measured(max_over_ranks(us), o_.seconds_per_size);
    } else {
      for (int i = 0; i < o_.warmup; ++i) call(i);
    }
    c_.barrier();
    const auto t0 = clock::now();
    for (int i = 0; i < iters; ++i) call(i);
    const double mean = std::chrono::duration<double, std::micro>(clock::now() - t0).count() / iters;
    m.iters = iters;
    // the slowest rank's mean is the time (nccl-tests); the fastest's and the average for --osu
    double t[2] = {mean, -mean}, sum = mean;
    c_.all_reduce(tutti::view<double>(t, 2), tutti::op::max{});
    c_.all_reduce(tutti::view<double>(&sum, 1), tutti::op::sum{});
    m.time_us = t[0];
    m.min_us = -t[1];
    m.avg_us = sum / n_;
    if (o_.check) {
      fill();
      call(0);
      long long w = verify();
      c_.all_reduce(tutti::view<long long>(&w, 1), tutti::op::sum{});
      m.wrong = w;
    }
    return m;
  }

  double max_over_ranks(double x) {
    c_.all_reduce(tutti::view<double>(&x, 1), tutti::op::max{});
    return x;
  }

  Comm& c_;
  const options& o_;
  report* rep_;
  int n_, r_;
  // Buffers, kept across sizes and grown as they grow: the page faults happen in the warm-up.
  // Cache-line aligned storage, viewed as T.
  struct alignas(64) cell {
    unsigned char b[64];
  };
  struct storage {
    std::vector<cell> v;
    void reserve(std::size_t bytes) {
      bytes = std::max<std::size_t>(bytes, sizeof(cell));  // never a null pointer, even at count 0
      if (v.size() * sizeof(cell) < bytes) v.assign((bytes + sizeof(cell) - 1) / sizeof(cell), cell{});
    }
    void* data() { return v.data(); }
  };
  storage a_, b_;
};

/// Runs the benchmark on every rank of `comm`: runner plus the report on rank 0.
template <class Comm>
long long run_on(Comm& comm, const options& o, report* rep) {
  return runner<Comm>(comm, o, comm.rank() == 0 ? rep : nullptr).run();
}

/// One rank per process over `Transport` (shm, tcp, mpi): joins the job the environment
/// describes, runs, and returns the exit status (0; 1 when a result was wrong).
template <class Transport>
int run_process(const options& o) {
  auto comm = tutti::communicator<Transport>::from_env();
  std::optional<report> rep;
  if (comm.rank() == 0) rep.emplace(o, comm.size(), 1);
  const long long wrong = run_on(comm, o, rep ? &*rep : nullptr);
  if (rep) rep->finish();
  return wrong == 0 ? 0 : 1;
}


}  // namespace tutti_bench
