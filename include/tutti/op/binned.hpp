/// \file
/// Reproducible summation: `binned<T>` (T = float or double), an accumulator whose `value()` is
/// bitwise the same for the same multiset of inputs, however they were split into accumulators,
/// in whatever order they were added and the accumulators merged; `reproducible_sum(span)`, the
/// one-accumulator reference; and `detail::reproducible_reduce`, the element-wise kernel for an
/// all_reduce of plain T buffers.
///
/// The method is Demmel and Nguyen's binned summation (as in ReproBLAS), with K = 3 folds.
///
/// **Grid.** Level L (0 = coarsest) has step s_L = 2^e_L, e_L = e_bot + W * (levels - 1 - L):
/// W = 13 for float, 40 for double; the finest step is the smallest subnormal (2^-149, 2^-1074),
/// the coarsest is large enough that every finite x has |x| < 2^(W-1) s_0. An accumulator has an
/// index I (0 <= I <= I_max = levels - 3) and holds levels I, I+1, I+2. Its index is the finest
/// I with |x| < 2^(W-1) s_I for every x added so far, so it is a function of max|x| alone.
///
/// **Deposit.** Level L holds P_L, a T in its binade [B, 2B), B = 2^(p-1) s_L (p: mantissa bits
/// with the hidden one), whose ulp is therefore s_L. x goes into levels I, I+1, I+2 in turn:
/// `P' = P + (x|1); q = P' - P; x -= q` (`x|1`: x with the lowest bit of its representation set).
/// q is exact, and it is x rounded to the grid of step s_L, ties away from zero: x's ulp is at
/// most s_L / 4 (|x| <= 2^(W-1) s_L and W <= p - 2; a subnormal's ulp, the smallest subnormal,
/// is 2^-W s_L or less at every level but the finest), so the set bit makes x|1 lie strictly off
/// every midpoint of the grid, on x's side of it. So q = rnd_L(x) depends on x and L alone, never
/// on P or on the order of deposits. (The finest level, whose step is the smallest subnormal,
/// only ever the last level of I_max, takes x as it is: every x is on its grid, and setting a bit
/// there would change x.) The remainder x - q (exact, |x - q| <= s_L / 2 =
/// 2^(W-1) s_(L+1)) goes to the next level; at the last level the remainder is dropped. The
/// content of level L is therefore sum over inputs of q_L(x, I), the same for every order.
///
/// **Raising the index** (a larger x comes, or a merge meets a coarser accumulator) from I to
/// I' < I shifts the levels: level L keeps its content when I' <= L <= I'+2, the levels finer
/// than I'+2 are dropped, the new coarser ones start empty. This is the content a deposit with
/// index I' from the start would have given: every x deposited under I has |x| < 2^(W-1) s_I =
/// s_(I-1) / 2, so it rounds to 0 at every level coarser than I and reaches level I unchanged;
/// from there the recursion is the same, and the level that becomes the last (I'+2) computed
/// its q = rnd_L(x_L) exactly as the last level would (the only difference of the last level is
/// that its remainder is not passed on).
///
/// **Carries.** P moves by at most 2^(W-1) s_L = 2^(W-p) B per deposit; every `R` deposits (256
/// for float, 1024 for double, both < 2^(p-W-2)) and after every operation P is renormalised:
/// multiples of B/2 move into an integer carry C, leaving P in [1.25 B, 1.75 B). The pair is
/// stored as (d = P - 1.5 B, C), and for a given level sum V = C B/2 + d the canonical pair is
/// unique, so after every public operation the state is a function of (index, level sums,
/// specials) alone: merging is exactly commutative and associative, and `value()`, a fixed
/// sequence of IEEE operations on the canonical state, is reproducible.
///
/// **Scaling.** The top levels' P would overflow T; under the indexes 0 and 1 every P, d and
/// deposited x is kept in units of 2^sigma (sigma = 32 for float, 64 for double). Products by
/// powers of two are exact, and an x that underflows when scaled (|x| < 2^(sigma + emin)) rounds to
/// 0 at every level of those indexes anyway, so the content is unchanged.
///
/// **Error bound** (n finite inputs x_i, S their exact sum, u = 2^-p the unit roundoff of T):
///   float:  |value() - S| <= 2^-24 |S| + 1.01 * n * 2^-26 * max|x_i|
///   double: |value() - S| <= 2^-53 |S| + 1.01 * n * 2^-80 * max|x_i| + 2^-97 * sum|x_i|
/// (plus half the smallest subnormal where the result is subnormal).
/// The n 2^(-2W) max|x_i| term is the dropped remainders (at most s_(I+2) / 2 = 2^(-2W-1) s_I
/// each, and s_I <= 2 max|x_i| unless I = I_max, where the last level's step is the smallest
/// subnormal and nothing is dropped: sums of small numbers, subnormals included, are exact before
/// the final rounding). `value()` then adds the six terms C_j B_j/2 and d_j, each exact in
/// double, in a fixed order with error-free additions (TwoSum) and the errors summed apart
/// (Ogita, Rump and Oishi's Sum2): at most 2^-53 |D| + 25 * 2^-106 * sum|terms| from their exact
/// sum D, where sum|terms| <= 3 sum_j |V_j| <= 18 sum|x_i| (each input puts at most 2|x| into
/// each level); for float the double is then rounded once to float.
///
/// **Special values.** Infinities and NaNs are not deposited but recorded in flags (merged by or):
/// `value()` is NaN (the default quiet NaN, whatever the inputs' payloads) if any input was NaN
/// or both infinities were seen, else +-inf if one was seen. A finite exact sum beyond T's range
/// gives inf of its sign. Zeros: `value()` is +0.0 whenever the exact sum is zero, -0.0 inputs
/// included (the empty accumulator too).
///
/// **Limits.** Carries are 32-bit: the bounds hold up to about 2^40 inputs per accumulator and
/// its merges. IEEE arithmetic in round-to-nearest is assumed: no -ffast-math, no flush of
/// subnormals to zero (FTZ/DAZ), which would change the results (deterministically, but not to
/// those of a process without them).
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <string_view>
#include <type_traits>

#include "tutti/op/kernels.hpp"

namespace tutti {

namespace detail {

/// The grid of `binned<T>` (see the file comment).
template <class T>
struct binned_format;

template <>
struct binned_format<float> {
  using bits = std::uint32_t;
  using sbits = std::int32_t;
  static constexpr int p = 24;          // mantissa bits, the hidden one included
  static constexpr int bias = 127;
  static constexpr int W = 13;          // levels' width in bits
  static constexpr int e_bottom = -149; // the finest step
  static constexpr int levels = 22;     // e_0 = 124: 2^(W-1) s_0 > FLT_MAX
  static constexpr int sigma = 32;      // scale of the indexes below `scaled_below`
  static constexpr int scaled_below = 2;
  static constexpr int R = 256;         // deposits between renormalisations, < 2^(p-W-2)
  static constexpr int div_magic = 5042;  // (a * div_magic) >> 16 == a / W for the a that occur
};

template <>
struct binned_format<double> {
  using bits = std::uint64_t;
  using sbits = std::int64_t;
  static constexpr int p = 53;
  static constexpr int bias = 1023;
  static constexpr int W = 40;
  static constexpr int e_bottom = -1074;
  static constexpr int levels = 53;  // e_0 = 1006
  static constexpr int sigma = 64;
  static constexpr int scaled_below = 2;
  static constexpr int R = 1024;
  static constexpr int div_magic = 1639;
};

template <class F>
inline constexpr int binned_max_index = F::levels - 3;
/// Exponent threshold of the finest index: |x| < 2^(W-1) s_(I_max) iff exponent(x) <= c0.
template <class F>
inline constexpr int binned_c0 = F::W - 2 + F::e_bottom + 2 * F::W;

template <class F>
constexpr bool binned_magic_ok() {
  for (int a = 0; a <= F::bias + 1 - binned_c0<F>; ++a)  // finite x: exponent <= bias
    if (((a + F::W - 1) * F::div_magic) >> 16 != (a + F::W - 1) / F::W) return false;
  return true;
}
static_assert(binned_magic_ok<binned_format<float>>());
static_assert(binned_magic_ok<binned_format<double>>());

/// 2^e as a T, for e in T's normal range.
template <class T>
inline T binned_pow2(int e) noexcept {
  using F = binned_format<T>;
  return std::bit_cast<T>(static_cast<typename F::bits>(e + F::bias) << (F::p - 1));
}

template <class T>
inline T binned_or1(T x) noexcept {
  return std::bit_cast<T>(std::bit_cast<typename binned_format<T>::bits>(x) | 1u);
}

/// s + c += a: s the rounded sum, c the accumulated rounding errors (Knuth's TwoSum, exact).
template <class D>
inline void binned_two_sum(D& s, D& c, const D& a) noexcept {
  const D t = s + a;
  const D z = t - s;
  c += (s - (t - z)) + (a - z);
  s = t;
}

template <class T>
void reproducible_reduce(T* out, const T* const* in, int k, std::size_t n);

}  // namespace detail

/// A reproducible sum accumulator for T = float or double (see the file comment for the method,
/// its error bound and what it does with infinities, NaN and zeros). Trivially copyable, standard
/// layout, no pointers: arrays of it travel between processes as bytes, and `op::sum` merges two
/// (`a + b`). Default-constructed (or all bytes zero) it is empty, `value() == +0.0`.
template <class T>
class binned {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>,
                "tutti::binned<T> supports float and double");
  using F = detail::binned_format<T>;
  using U = typename F::bits;
  static constexpr int I_max = detail::binned_max_index<F>;
  static constexpr U abs_mask = ~U{0} >> 1;
  static constexpr U inf_bits = std::bit_cast<U>(std::numeric_limits<T>::infinity());

 public:
  binned() noexcept = default;

  /// Adds one value.
  void add(T x) noexcept {
    const U a = std::bit_cast<U>(x) & abs_mask;
    if (a >= inf_bits) {
      special_ |= a > inf_bits ? 4u : (x > 0 ? 1u : 2u);
      return;
    }
    rise_to(index_of(a));
    T P[3];
    unpack(P);
    deposit(P, x, index());
    pack(P);
  }

  /// Adds every value of `v`: the same state as adding them one by one, computed in blocks with
  /// SIMD lanes.
  void add(std::span<const T> v) noexcept;

  /// The sum, rounded to T (see the file comment for the bound).
  T value() const noexcept {
    if (special_ != 0) {
      if ((special_ & 4u) != 0 || (special_ & 3u) == 3u) return std::numeric_limits<T>::quiet_NaN();
      return (special_ & 1u) != 0 ? std::numeric_limits<T>::infinity()
                                  : -std::numeric_limits<T>::infinity();
    }
    // The six exact terms C_j B_j/2 and d_j, summed in this order with error-free additions
    // (float: in double, unscaled; double: in the index's units, scaled back at the end).
    const int I = index();
    const int sg = sigma_of(I);
    double s = 0, c = 0;
    if constexpr (std::is_same_v<T, float>) {
      const double up = detail::binned_pow2<double>(sg);
      for (int j = 0; j < 3; ++j) {
        detail::binned_two_sum(s, c, static_cast<double>(c_[j]) *
                                         detail::binned_pow2<double>(F::p - 2 + e_level(I + j)));
        detail::binned_two_sum(s, c, static_cast<double>(d_[j]) * up);
      }
      return static_cast<float>(s + c);
    } else {
      for (int j = 0; j < 3; ++j) {
        detail::binned_two_sum(
            s, c, static_cast<double>(c_[j]) * detail::binned_pow2<double>(F::p - 2 + e_level(I + j) - sg));
        detail::binned_two_sum(s, c, d_[j]);
      }
      return (s + c) * detail::binned_pow2<double>(sg);
    }
  }

  /// Merges `b` into this: afterwards this holds both multisets.
  binned& operator+=(const binned& b) noexcept {
    binned t = b;
    special_ |= t.special_;
    const int I = std::min(index(), t.index());
    rise_to(I);
    t.rise_to(I);
    const int sg = sigma_of(I);
    for (int j = 0; j < 3; ++j) {
      const T b15 = p15(I + j, sg);
      T P = (d_[j] + b15) + t.d_[j];  // [B, 2B): exact
      c_[j] = wrap_add(c_[j], t.c_[j]);
      renorm(P, c_[j], I + j, sg);
      d_[j] = P - b15;
    }
    return *this;
  }
  friend binned operator+(binned a, const binned& b) noexcept {
    a += b;
    return a;
  }
  /// Equal states: equal index, level sums and specials (states are canonical).
  friend bool operator==(const binned&, const binned&) noexcept = default;

  /// The index I (0 = coarsest; the grid of the file comment).
  int index() const noexcept { return I_max - up_; }

 private:
  T d_[3]{};                   // level I+j: P_j - 1.5 B_j (scaled units), in [-B/4, B/4)
  std::int32_t c_[3]{};        // level I+j: carries, in units of B_j / 2
  std::int32_t up_{};          // I_max - I, so that zero bytes are the empty state
  std::conditional_t<sizeof(T) == 8, std::uint64_t, std::uint32_t> special_{};  // 1 +inf, 2 -inf, 4 NaN

  static constexpr int e_level(int L) noexcept { return F::e_bottom + F::W * (F::levels - 1 - L); }
  static constexpr int sigma_of(int I) noexcept { return I < F::scaled_below ? F::sigma : 0; }
  /// 1.5 B of level L, in units of 2^sg.
  static T p15(int L, int sg) noexcept { return detail::binned_pow2<T>(F::p - 1 + e_level(L) - sg) * T(1.5); }
  static std::int32_t wrap_add(std::int32_t a, std::int32_t b) noexcept {
    return static_cast<std::int32_t>(static_cast<std::uint32_t>(a) + static_cast<std::uint32_t>(b));
  }

  /// The index of an |x| given as bits (finite): the finest I with |x| < 2^(W-1) s_I.
  static int index_of(U abs_bits) noexcept {
    const int a = static_cast<int>(abs_bits >> (F::p - 1)) - F::bias - detail::binned_c0<F>;
    if (a <= 0) return I_max;
    return I_max - (a + F::W - 1) / F::W;
  }

  /// Raises the index to I (if coarser than the current one): shifts the levels (see the file
  /// comment), rescaling where the scale changes.
  void rise_to(int I) noexcept {
    const int old = index();
    if (I >= old) return;
    const int delta = old - I;
    const T f = detail::binned_pow2<T>(sigma_of(old) - sigma_of(I));
    for (int j = 2; j >= 0; --j) {
      if (j >= delta) {
        d_[j] = d_[j - delta] * f;
        c_[j] = c_[j - delta];
      } else {
        d_[j] = T(0);
        c_[j] = 0;
      }
    }
    up_ = I_max - I;
  }

  void unpack(T (&P)[3]) const noexcept {
    const int I = index(), sg = sigma_of(I);
    for (int j = 0; j < 3; ++j) P[j] = d_[j] + p15(I + j, sg);
  }
  /// Renormalises P into carries and stores it.
  void pack(T (&P)[3]) noexcept {
    const int I = index(), sg = sigma_of(I);
    for (int j = 0; j < 3; ++j) {
      renorm(P[j], c_[j], I + j, sg);
      d_[j] = P[j] - p15(I + j, sg);
    }
  }

  /// Moves multiples of B/2 between P and c so that P is in [1.25 B, 1.75 B).
  static void renorm(T& P, std::int32_t& c, int L, int sg) noexcept {
    const T B = detail::binned_pow2<T>(F::p - 1 + e_level(L) - sg);
    if (P >= T(1.75) * B) {
      P -= T(0.5) * B;
      c = wrap_add(c, 1);
    } else if (P < T(1.25) * B) {
      P += T(0.5) * B;
      c = wrap_add(c, -1);
    }
  }

  /// Deposits a finite x (|x| < 2^(W-1) s_I) into the levels P of index I.
  static void deposit(T (&P)[3], T x, int I) noexcept {
    T y = x * detail::binned_pow2<T>(-sigma_of(I));
    for (int j = 0; j < 2; ++j) {
      const T Pn = P[j] + detail::binned_or1(y);
      const T q = Pn - P[j];
      P[j] = Pn;
      y -= q;
    }
    P[2] += I == I_max ? y : detail::binned_or1(y);  // the finest level: exact as it is
  }

#if defined(TUTTI_HAVE_VECTOR_EXT)
  void add_simd(const T* x, std::size_t n) noexcept;
#endif
};

#if defined(TUTTI_HAVE_VECTOR_EXT)
template <class T>
inline void binned<T>::add_simd(const T* x, std::size_t n) noexcept {
  using S = typename F::sbits;
  using vT [[gnu::vector_size(detail::simd_bytes)]] = T;
  using vS [[gnu::vector_size(detail::simd_bytes)]] = S;
  constexpr std::size_t w = sizeof(vT) / sizeof(T);
  constexpr int M = 4;  // independent lane vectors (latency of the adds)
  constexpr std::size_t group = w * M;
  constexpr int per_block = 128;  // groups per block (<= R); a block stays in L1 between passes
  constexpr std::size_t block = group * per_block;
  constexpr S abs_s = static_cast<S>(abs_mask);

  // The lanes: M * w accumulators on one index IL, levels as P (unnormalised between
  // renormalisations) and carries C.
  int IL = I_max;
  vT P[3][M], C15[3], Clo[3], Chi[3], Chalf[3];
  vS C[3][M];
  auto set_consts = [&](int I) {
    const int sg = sigma_of(I);
    for (int j = 0; j < 3; ++j) {
      const T b = detail::binned_pow2<T>(F::p - 1 + e_level(I + j) - sg);
      C15[j] = vT{} + T(1.5) * b;
      Clo[j] = vT{} + T(1.25) * b;
      Chi[j] = vT{} + T(1.75) * b;
      Chalf[j] = vT{} + T(0.5) * b;
    }
  };
  set_consts(IL);
  for (int j = 0; j < 3; ++j)
    for (int m = 0; m < M; ++m) {
      P[j][m] = C15[j];
      C[j][m] = vS{};
    }
  auto renorm_lanes = [&] {
    for (int j = 0; j < 3; ++j)
      for (int m = 0; m < M; ++m) {
        const vS k = (P[j][m] < Clo[j]) - (P[j][m] >= Chi[j]);  // masks are -1: +1 high, -1 low
        C[j][m] += k;
        P[j][m] -= __builtin_convertvector(k, vT) * Chalf[j];
      }
  };

  std::size_t pos = 0;
  while (n - pos >= group) {
    const std::size_t len = std::min(block, (n - pos) / group * group);
    const T* xb = x + pos;
    vS mx[M] = {};
    for (std::size_t i = 0; i < len; i += group)
      for (int m = 0; m < M; ++m) {
        vS v;
        std::memcpy(&v, xb + i + m * w, sizeof v);
        v &= abs_s;
        mx[m] = v > mx[m] ? v : mx[m];
      }
    for (int m = 1; m < M; ++m) mx[0] = mx[m] > mx[0] ? mx[m] : mx[0];
    S top = 0;
    for (std::size_t l = 0; l < w; ++l) top = std::max(top, mx[0][l]);
    if (static_cast<U>(top) >= inf_bits) {  // a block with infinities or NaN: one by one
      for (std::size_t i = 0; i < len; ++i) add(xb[i]);
      pos += len;
      continue;
    }
    const int Ib = index_of(static_cast<U>(top));
    if (Ib < IL) {  // raise the lanes' index (they are canonical here)
      const int delta = IL - Ib;
      const T f = detail::binned_pow2<T>(sigma_of(IL) - sigma_of(Ib));
      vT old15[3];
      for (int j = 0; j < 3; ++j) old15[j] = C15[j];
      set_consts(Ib);
      for (int j = 2; j >= 0; --j)
        for (int m = 0; m < M; ++m) {
          if (j >= delta) {
            P[j][m] = C15[j] + (P[j - delta][m] - old15[j - delta]) * f;
            C[j][m] = C[j - delta][m];
          } else {
            P[j][m] = C15[j];
            C[j][m] = vS{};
          }
        }
      IL = Ib;
    }
    const vT scale = vT{} + detail::binned_pow2<T>(-sigma_of(IL));
    const vS last_or = vS{} + (IL == I_max ? 0 : 1);  // the finest level takes x as it is
    for (std::size_t i = 0; i < len; i += group) {
      vT y[M];
      for (int m = 0; m < M; ++m) {
        std::memcpy(&y[m], xb + i + m * w, sizeof(vT));
        y[m] *= scale;
      }
      for (int j = 0; j < 2; ++j)
        for (int m = 0; m < M; ++m) {
          const vT Pn = P[j][m] + (vT)((vS)y[m] | 1);
          const vT q = Pn - P[j][m];
          P[j][m] = Pn;
          y[m] -= q;
        }
      for (int m = 0; m < M; ++m) P[2][m] += (vT)((vS)y[m] | last_or);
    }
    renorm_lanes();
    pos += len;
  }
  // Merge the lanes: first the M vectors into one (each addition of a canonical d stays in the
  // binade, then renormalises), then its w lanes one by one into this.
  for (int m = 1; m < M; ++m) {
    for (int j = 0; j < 3; ++j) {
      P[j][0] += P[j][m] - C15[j];
      C[j][0] += C[j][m];
    }
    renorm_lanes();
  }
  if (IL != I_max || pos != 0) {
    for (std::size_t l = 0; l < w; ++l) {
      binned t;
      t.up_ = I_max - IL;
      for (int j = 0; j < 3; ++j) {
        t.d_[j] = P[j][0][l] - C15[j][l];
        t.c_[j] = static_cast<std::int32_t>(C[j][0][l]);
      }
      *this += t;
    }
  }
  for (; pos < n; ++pos) add(x[pos]);
}
#endif

template <class T>
inline void binned<T>::add(std::span<const T> v) noexcept {
#if defined(TUTTI_HAVE_VECTOR_EXT)
  if (v.size() >= 64) {
    add_simd(v.data(), v.size());
    return;
  }
#endif
  for (const T x : v) add(x);
}

/// The reproducible sum of `v` on one process: `binned<float>` over all of it, rounded.
inline float reproducible_sum(std::span<const float> v) noexcept {
  binned<float> acc;
  acc.add(v);
  return acc.value();
}
/// The reproducible sum of `v` on one process: `binned<double>` over all of it, rounded.
inline double reproducible_sum(std::span<const double> v) noexcept {
  binned<double> acc;
  acc.add(v);
  return acc.value();
}

namespace detail {

#if defined(TUTTI_HAVE_VECTOR_EXT)
/// reproducible_reduce on the G * w elements from i, each element's binned state in a SIMD
/// lane on its own index. Without carries (k <= R) the level sums of k deposits stay within the
/// canonical window (|d| <= k 2^(W-p) B <= B/8), so the canonical carries are 0 and need no
/// renormalisation. Returns false, having written nothing, if an input of these elements is an
/// infinity or NaN.
template <class T, int G, bool Carries>
inline bool reproducible_reduce_lanes(T* out, const T* const* in, int k, std::size_t i) noexcept {
  using F = binned_format<T>;
  using S = typename F::sbits;
  using vT [[gnu::vector_size(simd_bytes)]] = T;
  using vS [[gnu::vector_size(simd_bytes)]] = S;
  constexpr std::size_t w = sizeof(vT) / sizeof(T);
  constexpr S abs_s = static_cast<S>(~typename F::bits{0} >> 1);
  constexpr S inf_s = static_cast<S>(std::bit_cast<typename F::bits>(std::numeric_limits<T>::infinity()));
  constexpr int I_max = binned_max_index<F>;
  constexpr S mant = F::p - 1;
  // k streams at once outrun the hardware prefetcher: ask 2 KiB ahead (integer arithmetic: the
  // address may lie past the buffer, which a prefetch may name)
  for (int r = 0; r < k; ++r)
    for (std::size_t l = 0; l < G * sizeof(vT); l += 64)
      __builtin_prefetch(reinterpret_cast<const void*>(reinterpret_cast<std::uintptr_t>(in[r] + i) + 2048 + l));
  vS mx[G] = {};
  for (int r = 0; r < k; ++r)
    for (int g = 0; g < G; ++g) {
      vS v;
      std::memcpy(&v, in[r] + i + g * w, sizeof v);
      v &= abs_s;
      mx[g] = v > mx[g] ? v : mx[g];
    }
  vS bad = mx[0] >= inf_s;
  for (int g = 1; g < G; ++g) bad |= mx[g] >= inf_s;
  std::uint64_t words[sizeof(vS) / 8];
  std::memcpy(words, &bad, sizeof words);
  std::uint64_t any = 0;
  for (const std::uint64_t word : words) any |= word;
  if (any != 0) return false;

  vT P[G][3], p15[G][3], lo[G][3], hi[G][3], half[G][3], scale[G];
  vS C[G][3], sg[G], delta[G], last_or[G];
  for (int g = 0; g < G; ++g) {
    // the lanes' index: delta = I_max - I = ceil(max(0, E - c0) / W)
    vS a = (mx[g] >> mant) - (F::bias + binned_c0<F>);
    a = a > 0 ? a : 0;
    delta[g] = ((a + (F::W - 1)) * F::div_magic) >> 16;
    sg[g] = (delta[g] > I_max - F::scaled_below) & F::sigma;
    scale[g] = (vT)((F::bias - sg[g]) << mant);
    last_or[g] = (delta[g] != 0) & 1;  // the finest level takes x as it is
    for (int j = 0; j < 3; ++j) {
      // exponent of B_j: p - 1 + e_(I+j) - sigma, e_(I+j) = e_bottom + W (2 - j + delta)
      const vS eb = (F::p - 1 + F::e_bottom + F::W * (2 - j)) + F::W * delta[g] - sg[g];
      const vT B = (vT)((eb + F::bias) << mant);
      p15[g][j] = B * T(1.5);
      P[g][j] = p15[g][j];
      if constexpr (Carries) {
        lo[g][j] = B * T(1.25);
        hi[g][j] = B * T(1.75);
        half[g][j] = B * T(0.5);
        C[g][j] = vS{};
      }
    }
  }
  auto renorm = [&] {
    for (int g = 0; g < G; ++g)
      for (int j = 0; j < 3; ++j) {
        const vS kk = (P[g][j] < lo[g][j]) - (P[g][j] >= hi[g][j]);
        C[g][j] += kk;
        P[g][j] -= __builtin_convertvector(kk, vT) * half[g][j];
      }
  };
  for (int r = 0; r < k; ++r) {
    for (int g = 0; g < G; ++g) {
      vT y;
      std::memcpy(&y, in[r] + i + g * w, sizeof y);
      y *= scale[g];
      for (int j = 0; j < 2; ++j) {
        const vT Pn = P[g][j] + (vT)((vS)y | 1);
        const vT q = Pn - P[g][j];
        P[g][j] = Pn;
        y -= q;
      }
      P[g][2] += (vT)((vS)y | last_or[g]);
    }
    if constexpr (Carries)
      if ((r + 1) % F::R == 0) renorm();
  }
  if constexpr (Carries) renorm();
  // value(), as binned<T>::value() computes it from the canonical state. Without carries the
  // terms C_j B_j/2 are +0, and a TwoSum of +0 changes neither s nor c (neither is ever -0).
  for (int g = 0; g < G; ++g) {
    if constexpr (std::is_same_v<T, float>) {
      using vD [[gnu::vector_size(2 * simd_bytes)]] = double;
      using vL [[gnu::vector_size(2 * simd_bytes)]] = std::int64_t;
      const vD up = (vD)((__builtin_convertvector(sg[g], vL) + 1023) << 52);
      vD s = {}, c = {};
      if constexpr (Carries) {
        for (int j = 0; j < 3; ++j) {
          const vL eh = (F::p - 2 + F::e_bottom + F::W * (2 - j)) +
                        F::W * __builtin_convertvector(delta[g], vL);  // B_j / 2, unscaled
          binned_two_sum(s, c, __builtin_convertvector(C[g][j], vD) * (vD)((eh + 1023) << 52));
          binned_two_sum(s, c, __builtin_convertvector(P[g][j] - p15[g][j], vD) * up);
        }
      } else {
        // |d_0| <= 2^20 s_I and d_2 a multiple of 2^-26 s_I: every partial sum is exact in
        // double, so the TwoSums' errors are all +0, and plain additions, scaled once at the
        // end (by a power of two, exactly), give the same bits
        s = __builtin_convertvector(P[g][0] - p15[g][0], vD);
        s += __builtin_convertvector(P[g][1] - p15[g][1], vD);
        s += __builtin_convertvector(P[g][2] - p15[g][2], vD);
        s *= up;
      }
      const vT res = __builtin_convertvector(s + c, vT);
      std::memcpy(out + i + g * w, &res, sizeof res);
    } else {
      vT s = {}, c = {};
      for (int j = 0; j < 3; ++j) {
        if constexpr (Carries) binned_two_sum(s, c, __builtin_convertvector(C[g][j], vT) * half[g][j]);
        binned_two_sum(s, c, P[g][j] - p15[g][j]);
      }
      const vT res = (s + c) * (vT)((F::bias + sg[g]) << mant);
      std::memcpy(out + i + g * w, &res, sizeof res);
    }
  }
  return true;
}
#endif

/// out[i] = the value() of a binned<T> into which in[0][i], ..., in[k-1][i] were added, for
/// i < n (bitwise that); `out` may be in[0]. Vectorised across i: each element's binned state
/// lives in a SIMD lane, on its own index (from the largest |x| of its k inputs); elements with
/// an infinity or NaN among their inputs go through binned<T> itself.
template <class T>
void reproducible_reduce(T* out, const T* const* in, int k, std::size_t n) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>,
                "reproducible_reduce supports float and double");
  auto one = [&](std::size_t e) {
    binned<T> acc;
    for (int r = 0; r < k; ++r) acc.add(in[r][e]);
    out[e] = acc.value();
  };
  std::size_t i = 0;
#if defined(TUTTI_HAVE_VECTOR_EXT)
  constexpr std::size_t w = simd_bytes / sizeof(T);
  auto run = [&]<bool Carries>() {
    for (; i + 4 * w <= n; i += 4 * w)
      if (!reproducible_reduce_lanes<T, 4, Carries>(out, in, k, i))
        for (std::size_t l = 0; l < 4 * w; ++l) one(i + l);
    for (; i + w <= n; i += w)
      if (!reproducible_reduce_lanes<T, 1, Carries>(out, in, k, i))
        for (std::size_t l = 0; l < w; ++l) one(i + l);
  };
  if (k > 0) {
    if (k <= binned_format<T>::R) run.template operator()<false>();
    else run.template operator()<true>();
  }
#endif
  for (; i < n; ++i) one(i);
}

}  // namespace detail

namespace op {
/// A sum of float or double whose every element's bits depend only on the multiset of the
/// ranks' values: the same at any rank count, in any rank order, with any algorithm, size,
/// transport or fusion. `comm.all_reduce(v, tutti::op::reproducible_sum{})` (also reduce and
/// reduce_scatter(_v)): each element's values are moved raw to where it is reduced and summed
/// there as one `binned<T>` (`detail::reproducible_reduce`), within `binned<T>`'s error bound
/// (file comment). A rank-ordered op (`rank_ordered`): the communicator runs it as it runs
/// `op::ordered` (group/ordered_path.hpp), and over shared windows `algo::shared_memory` hands
/// the fold every rank's values where they lie.
struct reproducible_sum {
  static constexpr std::string_view name = "reproducible_sum";
  static constexpr bool rank_ordered = true;
  /// a + b: what the op means for two values (the library never reduces with it: see `fold`).
  template <class T>
  constexpr T operator()(const T& a, const T& b) const {
    return static_cast<T>(a + b);
  }
  /// out[i] = the reproducible sum of rows[0][i], ..., rows[k-1][i].
  template <class T>
  static void fold(T* out, const T* const* rows, int k, std::size_t n) {
    static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>,
                  "tutti::op::reproducible_sum sums float or double; for other types use op::ordered<op::sum>");
    detail::reproducible_reduce(out, rows, k, n);
  }
};
}  // namespace op

}  // namespace tutti
