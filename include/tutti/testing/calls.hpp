/// \file
/// Any collective of the table as generic code calls it: the buffers one call needs on one rank
/// (from the row's `layout`), the inputs, the result it must give (from the row's `result`), and
/// the call itself through `communicator::call<C>`. The conformance suite, the tests and
/// tutti-bench build their calls from these, so a new row is exercised everywhere without a line
/// written for it; a new `result_kind` fails to build until `expected` knows it.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "tutti/core/collective.hpp"
#include "tutti/core/counts.hpp"
#include "tutti/core/view.hpp"
#include "tutti/group/collectives.hpp"
#include "tutti/op/ops.hpp"

#if defined(__linux__)
#include <sys/mman.h>
#endif

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TUTTI_TESTING_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) && !defined(TUTTI_TESTING_ASAN)
#define TUTTI_TESTING_ASAN 1
#endif
#if defined(TUTTI_TESTING_ASAN)
#include <sanitizer/asan_interface.h>
#endif

namespace tutti::testing {

/// The large blocks the suite's buffers free, kept for the next buffer of about their size: a
/// check allocates and frees buffers of 16 MiB over and over, and each fresh one arrives as
/// thousands of page faults (under the sanitizers, whose allocators map every large block afresh,
/// a quarter of a process conformance part's time). A kept block and the bytes of a reused one
/// beyond the buffer's size are poisoned under AddressSanitizer, so a write past a buffer's end
/// or into a freed one is still reported (as use-after-poison); elsewhere the reuse is as good
/// as a new block. Thread-safe: the in-process suite's ranks are threads.
class block_pool {
 public:
  static constexpr std::size_t smallest = std::size_t{1} << 20;  ///< smaller blocks are not kept
  static constexpr std::size_t alignment = 64;

  static block_pool& instance() {
    // Never destroyed: buffers may outlive any static, and the blocks it keeps stay reachable
    // (LeakSanitizer does not report them at exit).
    static block_pool* const pool = new block_pool;
    return *pool;
  }
  /// A block of at least `bytes` (>= smallest) bytes, 64-byte aligned; its size in `capacity`.
  void* take(std::size_t bytes, std::size_t& capacity) {
    {
      std::lock_guard lock(mu_);
      std::size_t best = blocks_.size();
      for (std::size_t i = 0; i < blocks_.size(); ++i)  // the smallest block that fits, at most twice the size
        if (blocks_[i].bytes >= bytes && blocks_[i].bytes / 2 <= bytes &&
            (best == blocks_.size() || blocks_[i].bytes < blocks_[best].bytes))
          best = i;
      if (best != blocks_.size()) {
        const block b = blocks_[best];
        blocks_[best] = blocks_.back();
        blocks_.pop_back();
        kept_ -= b.bytes;
        capacity = b.bytes;
        unpoison(b.at, bytes);
        return b.at;
      }
    }
    capacity = (bytes + smallest - 1) / smallest * smallest;  // whole MiB: more blocks fit more sizes
    void* p = ::operator new(capacity, std::align_val_t(alignment));
    poison(static_cast<char*>(p) + bytes, capacity - bytes);
    return p;
  }
  /// Returns a block from take(); kept while the pool holds less than `most` bytes.
  void give(void* p, std::size_t capacity) noexcept {
    {
      std::lock_guard lock(mu_);
      if (kept_ + capacity <= most && blocks_.size() < blocks_.capacity()) {
        poison(p, capacity);
        blocks_.push_back({p, capacity});
        kept_ += capacity;
        return;
      }
    }
    unpoison(p, capacity);
    ::operator delete(p, std::align_val_t(alignment));
  }

 private:
  static constexpr std::size_t most = std::size_t{256} << 20;
  struct block {
    void* at;
    std::size_t bytes;
  };
  block_pool() { blocks_.reserve(most / smallest); }  // give() never allocates
  static void poison([[maybe_unused]] void* p, [[maybe_unused]] std::size_t n) noexcept {
#if defined(TUTTI_TESTING_ASAN)
    if (n) __asan_poison_memory_region(p, n);
#endif
  }
  static void unpoison([[maybe_unused]] void* p, [[maybe_unused]] std::size_t n) noexcept {
#if defined(TUTTI_TESTING_ASAN)
    __asan_unpoison_memory_region(p, n);
#endif
  }
  std::mutex mu_;
  std::vector<block> blocks_;
  std::size_t kept_ = 0;
};

/// The conformance suite's buffers: a vector of trivially copyable elements, sized for
/// overwriting and copied with memcpy, where a std::vector with any allocator but std::allocator
/// constructs element by element (at -O0, in the sanitizer builds, most of a check's time). A
/// buffer of 1 MiB or more takes its block from `block_pool` (reused, already paged in) and asks
/// for the whole 2 MiB pages inside a new block of 4 MiB or more as transparent huge pages
/// (`MADV_HUGEPAGE`, best effort: the kernels that back anonymous memory with huge pages only on
/// request then do). The memory is `operator new`'s (the sanitizers' redzones stay; the pool
/// poisons what it keeps).
template <class T>
class suite_buffer {
  static_assert(std::is_trivially_copyable_v<T>, "tutti::testing::suite_buffer holds trivially copyable elements");

 public:
  using value_type = T;
  suite_buffer() = default;
  explicit suite_buffer(std::span<const T> from) : suite_buffer() {
    allocate(from.size());
    if (!from.empty()) std::memcpy(p_.get(), from.data(), from.size_bytes());
  }
  suite_buffer(const suite_buffer& o) : suite_buffer(std::span<const T>(o.data(), o.size())) {}
  suite_buffer(suite_buffer&& o) noexcept : p_(std::move(o.p_)), n_(std::exchange(o.n_, 0)) {}
  suite_buffer& operator=(const suite_buffer& o) {
    if (this != &o) *this = suite_buffer(o);
    return *this;
  }
  suite_buffer& operator=(suite_buffer&& o) noexcept {
    p_ = std::move(o.p_);
    n_ = std::exchange(o.n_, 0);
    return *this;
  }

  /// n elements, none of them set (a new buffer): for a caller that writes every one next.
  void resize_for_overwrite(std::size_t n) {
    suite_buffer b;
    b.allocate(n);
    *this = std::move(b);
  }
  T* data() noexcept { return p_.get(); }
  const T* data() const noexcept { return p_.get(); }
  std::size_t size() const noexcept { return n_; }
  bool empty() const noexcept { return n_ == 0; }
  T* begin() noexcept { return p_.get(); }
  T* end() noexcept { return p_.get() + n_; }
  const T* begin() const noexcept { return p_.get(); }
  const T* end() const noexcept { return p_.get() + n_; }
  T& operator[](std::size_t i) noexcept { return p_.get()[i]; }
  const T& operator[](std::size_t i) const noexcept { return p_.get()[i]; }

 private:
  static constexpr bool poolable = alignof(T) <= block_pool::alignment;
  struct release {
    std::size_t pooled = 0;  ///< the block's size when it came from block_pool, else 0
    void operator()(T* p) const noexcept {
      if (pooled)
        block_pool::instance().give(p, pooled);
      else
        ::operator delete(static_cast<void*>(p), std::align_val_t(alignof(T)));
    }
  };
  void allocate(std::size_t n) {
    const std::size_t bytes = n * sizeof(T);
    n_ = n;
    if (!poolable || bytes < block_pool::smallest) {
      p_ = std::unique_ptr<T, release>(n ? static_cast<T*>(::operator new(bytes, std::align_val_t(alignof(T)))) : nullptr);
      return;
    }
    // take() first: it sets `capacity`, which the deleter keeps (the two as arguments of one
    // call would be evaluated in an unspecified order; GCC made the deleter first, with 0, and
    // every block was deleted instead of kept).
    std::size_t capacity = 0;
    T* const p = static_cast<T*>(block_pool::instance().take(bytes, capacity));
    p_ = std::unique_ptr<T, release>(p, release{capacity});
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    constexpr std::uintptr_t huge = std::uintptr_t{2} << 20;
    const auto at = reinterpret_cast<std::uintptr_t>(p_.get());
    const std::uintptr_t first = (at + huge - 1) & ~(huge - 1), last = (at + bytes) & ~(huge - 1);
    if (bytes >= 2 * huge && last > first) (void)::madvise(reinterpret_cast<void*>(first), last - first, MADV_HUGEPAGE);
#endif
  }
  std::unique_ptr<T, release> p_;
  std::size_t n_ = 0;
};

/// Fills p[0, n) with v by doubling copies: memcpy, at full speed in the sanitizer builds, where
/// an element loop runs at -O0.
template <class T>
void fill(T* p, std::size_t n, const T& v) {
  static_assert(std::is_trivially_copyable_v<T>);
  if (n == 0) return;
  p[0] = v;
  for (std::size_t have = 1; have < n;) {
    const std::size_t k = std::min(have, n - have);
    std::memcpy(p + have, p, k * sizeof(T));
    have += k;
  }
}

/// The shape of one call of a collective, as every rank sees it: the group size, the root, the
/// call's count `n` (uniform collectives: what `layout`'s `count` and `blocks` are made of), and
/// for the v-collectives the counts each rank passes (`counts[r]`: rank r's; for all_to_all_v,
/// what rank r sends to each rank).
struct call_shape {
  int p = 1;
  int root = 0;
  std::size_t n = 0;
  std::vector<std::vector<std::size_t>> counts;

  /// A uniform collective's call of `n` elements.
  static call_shape uniform(int p, std::size_t n, int root = 0) { return {p, root, n, {}}; }
  /// A v-collective's call in which every rank passes `c` (all_to_all_v: every rank sends c[j] to rank j).
  static call_shape same_counts(int p, const std::vector<std::size_t>& c, int root = 0) {
    return {p, root, 0, std::vector<std::vector<std::size_t>>(static_cast<std::size_t>(p), c)};
  }
  /// all_to_all_v: rank i sends rows[i][j] elements to rank j.
  static call_shape rows(std::vector<std::vector<std::size_t>> rows) {
    const int p = static_cast<int>(rows.size());
    return {p, 0, 0, std::move(rows)};
  }
  /// The shape of collective `c` with `n` elements a rank (`v`: every count `n`).
  static call_shape any(collective c, int p, std::size_t n, int root = 0) {
    if (info(c).counts == counts_kind::per_rank)
      return same_counts(p, std::vector<std::size_t>(static_cast<std::size_t>(p), n), root);
    return uniform(p, n, root);
  }

  /// What rank r passes as counts (all_to_all_v: its send counts).
  const std::vector<std::size_t>& counts_of(int r) const { return counts[static_cast<std::size_t>(r)]; }
  /// all_to_all_v: what rank r receives from each rank.
  std::vector<std::size_t> recv_counts_of(int r) const {
    std::vector<std::size_t> c(static_cast<std::size_t>(p));
    for (int i = 0; i < p; ++i) c[static_cast<std::size_t>(i)] = counts[static_cast<std::size_t>(i)][static_cast<std::size_t>(r)];
    return c;
  }
  static std::size_t sum(const std::vector<std::size_t>& c) {
    std::size_t t = 0;
    for (auto x : c) t += x;
    return t;
  }
  std::size_t blocks() const { return n * static_cast<std::size_t>(p); }
};

namespace calls_detail {
template <collective C>
constexpr bool one_buffer = info(C).layout.overlap == aliasing::one_buffer;

/// The size of a buffer of extent `e` on rank r (0 for the root's buffer of blocks elsewhere).
template <collective C>
std::size_t size_of(extent e, bool is_in, const call_shape& s, int r) {
  constexpr collective_info row = info(C);
  const bool blocks_buffer = e == extent::blocks || e == extent::room;
  if (row.layout.blocks_at_root && blocks_buffer && r != s.root) return 0;
  switch (e) {
    case extent::none: return 0;
    case extent::count: return s.n;
    case extent::blocks: return s.blocks();
    case extent::own: return s.counts_of(r)[static_cast<std::size_t>(r)];
    case extent::room: return call_shape::sum(s.counts_of(r));
    case extent::total:
      if (row.where == counts_at::own_row) return call_shape::sum(is_in ? s.counts_of(r) : s.recv_counts_of(r));
      return call_shape::sum(s.counts_of(r));
  }
  return 0;
}
/// Whether `expected` has a reference for result kind `r` (a switch without `default`: a new
/// kind is an error in tutti's own build until it is handled here and in `expected`).
constexpr bool knows(result_kind r) {
  switch (r) {
    case result_kind::none:
    case result_kind::copy_root:
    case result_kind::reduce_to_root:
    case result_kind::reduce_all:
    case result_kind::gather_to_root:
    case result_kind::gather_all:
    case result_kind::scatter_from_root:
    case result_kind::transpose:
    case result_kind::reduce_blocks:
    case result_kind::prefix_inclusive:
    case result_kind::prefix_exclusive: return true;
  }
  return false;
}
}  // namespace calls_detail

/// Rank r's `in` and `out` sizes for a call of `C` of shape `s` (a collective of one buffer: 0 and
/// the buffer's).
template <collective C>
std::size_t in_size(const call_shape& s, int r) {
  return calls_detail::size_of<C>(info(C).layout.in, true, s, r);
}
template <collective C>
std::size_t out_size(const call_shape& s, int r) {
  return calls_detail::size_of<C>(info(C).layout.out, false, s, r);
}

/// The count a call of `C` of shape `s` puts in its fingerprint (uniform collectives).
template <collective C>
std::size_t fingerprint_count(const call_shape& s) {
  constexpr buffer_layout l = info(C).layout;
  return l.in == extent::blocks && l.out == extent::blocks ? s.blocks() : s.n;
}

/// Where rank r's own block starts in the buffer that holds every rank's (uniform: r·n; v: the
/// prefix sum of the counts).
inline std::size_t block_offset(const call_shape& s, const std::vector<std::size_t>& counts, int r) {
  if (counts.empty()) return static_cast<std::size_t>(r) * s.n;
  std::size_t at = 0;
  for (int i = 0; i < r; ++i) at += counts[static_cast<std::size_t>(i)];
  return at;
}
inline std::size_t block_count(const call_shape& s, const std::vector<std::size_t>& counts, int r) {
  return counts.empty() ? s.n : counts[static_cast<std::size_t>(r)];
}

/// What a call of `C` must leave in rank me's `out`: `input(r, i)` is element i of rank r's input
/// buffer (a collective of one buffer: of that buffer, before the call), `before` what `out` held
/// before it (its parts the call leaves alone keep it), `op` the op the call was given.
///
/// `expected_into` computes it in place: `out` holds what `out` held before the call.
template <collective C, class T, class Input, class Op>
void expected_into(const call_shape& s, int me, std::span<T> out, Input&& input, const Op& op) {
  constexpr collective_info row = info(C);
  const bool v = row.counts == counts_kind::per_rank;
  const std::vector<std::size_t> none;
  auto counts = [&](int r) -> const std::vector<std::size_t>& { return v ? s.counts_of(r) : none; };
  auto fold = [&](int first, int last, std::size_t i) {  // input over ranks first..last, in rank order
    T acc = input(first, i);
    if constexpr (std::is_invocable_v<const Op&, T, T>)
      for (int r = first + 1; r <= last; ++r) acc = static_cast<T>(op(acc, input(r, i)));
    if constexpr (std::is_same_v<Op, op::avg>) {  // avg: the sum divided once, in T, as the communicator does
      using D = std::conditional_t<std::is_arithmetic_v<T>, T, float>;
      acc = static_cast<T>(acc / static_cast<D>(last - first + 1));
    }
    return acc;
  };
  auto each = [&](std::size_t n, auto f) {
    T* o = out.data();
    for (std::size_t i = 0, k = std::min(n, out.size()); i < k; ++i) o[i] = f(i);
  };
  const std::size_t mine = out.size();
  static_assert(calls_detail::knows(row.result), "tutti::testing::expected: a result kind it has no reference for");
  constexpr result_kind R = row.result;
  if constexpr (R == result_kind::copy_root) {
    each(mine, [&](std::size_t i) { return input(s.root, i); });
  } else if constexpr (R == result_kind::reduce_to_root) {
    if (me == s.root) each(mine, [&](std::size_t i) { return fold(0, s.p - 1, i); });
  } else if constexpr (R == result_kind::reduce_all) {
    each(mine, [&](std::size_t i) { return fold(0, s.p - 1, i); });
  } else if constexpr (R == result_kind::gather_to_root || R == result_kind::gather_all) {
    if (R == result_kind::gather_all || me == s.root)
      for (int r = 0; r < s.p; ++r) {
        const std::size_t at = block_offset(s, counts(me), r), k = block_count(s, counts(me), r);
        for (std::size_t i = 0; i < k; ++i) out[at + i] = input(r, i);
      }
  } else if constexpr (R == result_kind::scatter_from_root) {
    const std::size_t at = block_offset(s, counts(s.root), me);
    each(mine, [&](std::size_t i) { return input(s.root, at + i); });
  } else if constexpr (R == result_kind::transpose) {
    const auto recv = v ? s.recv_counts_of(me) : none;
    for (int r = 0; r < s.p; ++r) {  // block r of out: rank r's block for me
      const std::size_t at = block_offset(s, recv, r), k = block_count(s, recv, r);
      const std::size_t from = block_offset(s, counts(r), me);
      for (std::size_t i = 0; i < k; ++i) out[at + i] = input(r, from + i);
    }
  } else if constexpr (R == result_kind::reduce_blocks) {
    const std::size_t at = block_offset(s, counts(me), me);
    each(mine, [&](std::size_t i) { return fold(0, s.p - 1, at + i); });
  } else if constexpr (R == result_kind::prefix_inclusive) {
    each(mine, [&](std::size_t i) { return fold(0, me, i); });
  } else if constexpr (R == result_kind::prefix_exclusive) {
    if (me > 0) each(mine, [&](std::size_t i) { return fold(0, me - 1, i); });
  }
}
template <collective C, class T, class Input, class Op>
std::vector<T> expected(const call_shape& s, int me, const std::vector<T>& before, Input&& input, const Op& op) {
  std::vector<T> out = before;
  expected_into<C, T>(s, me, std::span<T>(out), std::forward<Input>(input), op);
  return out;
}

/// How a call places its buffers: apart, or in place (one buffer where the row allows it: the
/// one-buffer form of all_reduce and the scans, `in` as this rank's own block of `out`, or `out`
/// as its own block of `in`).
enum class placement { apart, in_place };

/// Whether collective `C` has an in-place form.
template <collective C>
constexpr bool has_in_place = info(C).layout.overlap == aliasing::same || info(C).layout.overlap == aliasing::own_block ||
                              info(C).layout.overlap == aliasing::one_buffer;
/// Whether collective `C` can be called with its buffers apart.
template <collective C>
constexpr bool has_apart = info(C).layout.overlap != aliasing::one_buffer;

/// One rank's buffers for a call: `in` and `out` as `placement` wants them (in place: `out`
/// only, or the larger of the two holding the smaller as this rank's block), and the counts it
/// passes. (`Buffer`: the conformance suite's is `suite_buffer<T>`.)
template <class T, class Buffer = std::vector<T>>
struct call_buffers {
  Buffer in, out;
  std::vector<std::size_t> counts, recv_counts;
};

/// Rank me's buffers for a call of `C` of shape `s`: `input(r, i)` fills the input; outputs
/// start as `fill`.
template <collective C, class T, class Buffer = std::vector<T>, class Input>
call_buffers<T, Buffer> make_buffers(const call_shape& s, int me, placement pl, Input&& input, T fill) {
  constexpr collective_info row = info(C);
  call_buffers<T, Buffer> b;
  auto size = [](Buffer& x, std::size_t n) {  // (both are written in full below)
    if constexpr (requires { x.resize_for_overwrite(n); }) x.resize_for_overwrite(n);
    else x.resize(n);
  };
  size(b.in, in_size<C>(s, me));
  size(b.out, out_size<C>(s, me));
  testing::fill(b.out.data(), b.out.size(), fill);
  // Raw pointers and hoisted bounds: the sanitizer builds run this at -O0.
  auto make = [&](Buffer& buffer) {
    T* p = buffer.data();
    for (std::size_t i = 0, n = buffer.size(); i < n; ++i) p[i] = input(me, i);
  };
  make(b.in);
  if constexpr (calls_detail::one_buffer<C>) make(b.out);
  if (row.counts == counts_kind::per_rank) {
    if (row.where == counts_at::own_row) {
      b.counts = s.counts_of(me);
      b.recv_counts = s.recv_counts_of(me);
    } else if (row.where == counts_at::every_rank || me == s.root) {
      b.counts = s.counts_of(me);
    }
  }
  if (pl == placement::in_place) {
    constexpr aliasing a = row.layout.overlap;
    if constexpr (a == aliasing::same) {
      b.out = b.in;  // the one buffer holds the input
    } else if constexpr (a == aliasing::own_block) {
      // the smaller buffer is this rank's block of the larger: copy the input there
      const bool out_larger = row.layout.out == extent::blocks || row.layout.out == extent::room;
      const auto& cs = row.counts == counts_kind::per_rank ? s.counts_of(me) : std::vector<std::size_t>{};
      const std::size_t at = block_offset(s, cs, me);
      if (out_larger && b.out.size() >= at + b.in.size())
        for (std::size_t i = 0; i < b.in.size(); ++i) b.out[at + i] = b.in[i];
      (void)at;
    }
  }
  return b;
}

/// The description of a call of `C` with element type T on memory M and op `Op` (`algo::no_op`
/// where the row does not reduce), as `describe` makes it.
template <collective C, class T, class M, class Op>
using desc_of = call_desc<T, M, std::conditional_t<info(C).reduces, Op, algo::no_op>>;

/// The description of rank me's call from its buffers (`op` only where the row reduces).
template <collective C, class M = host_memory, class T, class B, class Op = algo::no_op>
auto describe(const call_shape& s, int me, call_buffers<T, B>& b, placement pl, const Op& op = {}) {
  constexpr collective_info row = info(C);
  using O = std::conditional_t<row.reduces, Op, algo::no_op>;
  call_desc<T, M, O> d;
  d.root = row.rooted ? s.root : -1;
  d.counts = b.counts;
  d.recv_counts = b.recv_counts;
  if constexpr (row.reduces) d.op = op;
  d.out = view<T, M>(b.out.data(), b.out.size());
  d.in = view<const T, M>(b.in.data(), b.in.size());
  if constexpr (calls_detail::one_buffer<C>) {
    d.in = view<const T, M>(b.out.data(), b.out.size());
    d.in_place = true;
  } else if (pl == placement::in_place) {
    constexpr aliasing a = row.layout.overlap;
    if constexpr (a == aliasing::same) {
      d.in = view<const T, M>(b.out.data(), b.out.size());
      d.in_place = true;
    } else if constexpr (a == aliasing::own_block) {
      const auto& cs = row.counts == counts_kind::per_rank && !b.counts.empty() ? s.counts_of(me) : std::vector<std::size_t>{};
      const std::size_t at = block_offset(s, cs, me);
      const bool out_larger = row.layout.out == extent::blocks || row.layout.out == extent::room;
      // at a rank that holds no buffer of blocks (not the root), there is nothing to place
      if (out_larger && b.out.size() >= at + b.in.size()) d.in = view<const T, M>(b.out.data() + at, b.in.size());
      else if (!out_larger && b.in.size() >= at + b.out.size()) d.out = view<T, M>(b.in.data() + at, b.out.size());
    }
  }
  return d;
}

/// The output a call leaves to compare (in place with `out` inside `in`: that block of `in`), as
/// a view into the buffers (`result_of`: a copy).
template <collective C, class T, class B>
std::span<const T> result_view(const call_shape& s, int me, const call_buffers<T, B>& b, placement pl) {
  constexpr collective_info row = info(C);
  if constexpr (row.layout.overlap == aliasing::own_block) {
    const bool out_larger = row.layout.out == extent::blocks || row.layout.out == extent::room;
    if (pl == placement::in_place && !out_larger) {
      const auto& cs = row.counts == counts_kind::per_rank && !b.counts.empty() ? s.counts_of(me) : std::vector<std::size_t>{};
      const std::size_t at = block_offset(s, cs, me);
      if (b.in.size() >= at + b.out.size())
        return std::span<const T>(b.in.data() + at, b.out.size());
    }
  }
  (void)s;
  (void)me;
  return std::span<const T>(b.out.data(), b.out.size());
}
template <collective C, class T, class B>
std::vector<T> result_of(const call_shape& s, int me, const call_buffers<T, B>& b, placement pl) {
  const std::span<const T> r = result_view<C>(s, me, b, pl);
  return std::vector<T>(r.begin(), r.end());
}

}  // namespace tutti::testing
