// tutti::binned<T> and tutti::reproducible_sum: bitwise the same value for every order and split
// of the same inputs, within the header's error bound of the exact sum (computed here with a
// big fixed-point integer); detail::reproducible_reduce against its scalar definition.
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <set>
#include <span>
#include <type_traits>
#include <vector>

#include <tutti/op/binned.hpp>
#include <tutti/op/kernels.hpp>
#include <tutti/op/ops.hpp>

TEST_SUITE_BEGIN("unit");

namespace {

template <class T>
using bits_of = std::conditional_t<sizeof(T) == 4, std::uint32_t, std::uint64_t>;

template <class T>
bits_of<T> bits(T x) {
  return std::bit_cast<bits_of<T>>(x);
}

/// The exact sum of finite T values: a two's complement fixed-point integer whose unit is T's
/// smallest subnormal, with 64 bits of headroom above T's largest value.
template <class T>
struct exact_sum {
  static constexpr int p = std::numeric_limits<T>::digits;
  static constexpr int bias = std::numeric_limits<T>::max_exponent - 1;
  static constexpr int e_unit = 3 - std::numeric_limits<T>::max_exponent - p;  // -149, -1074
  static constexpr std::size_t limbs = (2 * bias + p + 64) / 64 + 2;
  std::array<std::uint64_t, limbs> v{};

  void add(T x) {
    const bits_of<T> b = bits(x);
    const int be = static_cast<int>((b >> (p - 1)) & ((1u << (sizeof(T) == 4 ? 8 : 11)) - 1));
    bits_of<T> m = b & ((bits_of<T>{1} << (p - 1)) - 1);
    if (be != 0) m |= bits_of<T>{1} << (p - 1);
    const int shift = std::max(be, 1) - 1;  // x = m * 2^(e_unit + shift)
    const bool neg = (b >> (sizeof(T) * 8 - 1)) != 0;
    std::array<std::uint64_t, limbs> t{};
    const std::size_t li = static_cast<std::size_t>(shift / 64);
    const int bi = shift % 64;
    t[li] = static_cast<std::uint64_t>(m) << bi;
    if (bi != 0 && li + 1 < limbs) t[li + 1] = static_cast<std::uint64_t>(m) >> (64 - bi);
    if (neg) {  // two's complement of t
      std::uint64_t carry = 1;
      for (auto& l : t) {
        l = ~l + carry;
        carry = (carry != 0 && l == 0) ? 1 : 0;
      }
    }
    std::uint64_t carry = 0;
    for (std::size_t i = 0; i < limbs; ++i) {
      const std::uint64_t s = v[i] + t[i];
      const std::uint64_t c1 = s < v[i] ? 1 : 0;
      v[i] = s + carry;
      const std::uint64_t c2 = v[i] < s ? 1 : 0;
      carry = c1 | c2;
    }
  }
  bool negative() const { return (v[limbs - 1] >> 63) != 0; }
  /// The value, rounded (to 64 bits) as a long double.
  long double approx() const {
    std::array<std::uint64_t, limbs> a = v;
    const bool neg = negative();
    if (neg) {
      std::uint64_t carry = 1;
      for (auto& l : a) {
        l = ~l + carry;
        carry = (carry != 0 && l == 0) ? 1 : 0;
      }
    }
    std::size_t top = limbs;
    while (top > 0 && a[top - 1] == 0) --top;
    if (top == 0) return 0.0L;
    long double r = static_cast<long double>(a[top - 1]);
    if (top >= 2) r = r * 0x1p64L + static_cast<long double>(a[top - 2]);
    const int e = e_unit + 64 * static_cast<int>(top >= 2 ? top - 2 : top - 1);
    r = std::ldexp(r, e);
    return neg ? -r : r;
  }
};

/// Random finite values: random sign, exponent uniform in [emin, emax] (below the normal range:
/// subnormals), random mantissa; a few zeros of either sign.
template <class T>
std::vector<T> random_values(std::mt19937_64& rng, std::size_t n, int emin, int emax) {
  std::vector<T> v(n);
  std::uniform_int_distribution<int> ex(emin, emax);
  for (auto& x : v) {
    const std::uint64_t r = rng();
    if (r % 97 == 0) {
      x = (r & 2) != 0 ? T(-0.0) : T(0.0);
      continue;
    }
    T m = static_cast<T>(1.0 + std::ldexp(static_cast<double>(rng() >> 11), -53));  // [1, 2)
    x = std::ldexp(m, ex(rng));
    if ((r & 1) != 0) x = -x;
  }
  return v;
}

template <class T>
tutti::binned<T> accumulate(std::span<const T> v) {
  tutti::binned<T> a;
  a.add(v);
  return a;
}

/// One random way to sum `v`: permuted, cut into 1..7 parts, each added by spans and single
/// values, merged in a random tree.
template <class T>
tutti::binned<T> random_split(std::vector<T> v, std::mt19937_64& rng) {
  std::shuffle(v.begin(), v.end(), rng);
  const int parts = 1 + static_cast<int>(rng() % 7);
  std::vector<std::size_t> cuts{0, v.size()};
  for (int i = 1; i < parts; ++i) cuts.push_back(rng() % (v.size() + 1));
  std::sort(cuts.begin(), cuts.end());
  std::vector<tutti::binned<T>> accs;
  for (std::size_t c = 0; c + 1 < cuts.size(); ++c) {
    tutti::binned<T> a;
    std::size_t i = cuts[c];
    while (i < cuts[c + 1]) {
      const std::size_t len = std::min<std::size_t>(cuts[c + 1] - i, rng() % 3 == 0 ? 1 : rng() % 5000);
      if (len == 1) a.add(v[i]);
      else a.add(std::span<const T>(v.data() + i, len));
      i += len;
    }
    accs.push_back(a);
  }
  while (accs.size() > 1) {
    const std::size_t i = rng() % accs.size();
    std::size_t j = rng() % (accs.size() - 1);
    if (j >= i) ++j;
    switch (rng() % 3) {
      case 0: accs[i] += accs[j]; break;
      case 1: accs[i] = accs[j] + accs[i]; break;
      default: accs[i] = tutti::op::sum{}(accs[i], accs[j]); break;
    }
    accs.erase(accs.begin() + static_cast<std::ptrdiff_t>(j));
  }
  return accs[0];
}

/// The header's error bound for value() of `v` (finite, no overflow), against the exact sum.
template <class T>
void check_bound(const std::vector<T>& v) {
  exact_sum<T> e;
  long double amax = 0, asum = 0;
  for (const T x : v) {
    e.add(x);
    amax = std::max(amax, std::fabs(static_cast<long double>(x)));
    asum += std::fabs(static_cast<long double>(x));
  }
  const T got = tutti::reproducible_sum(std::span<const T>(v));
  REQUIRE(std::isfinite(got));
  const long double S = e.approx();
  exact_sum<T> d = e;
  d.add(-got);
  const long double err = std::fabs(d.approx());
  const long double n = static_cast<long double>(v.size());
  long double bound;
  if constexpr (std::is_same_v<T, float>)
    bound = 0x1p-24L * std::fabs(S) + 1.01L * n * 0x1p-26L * amax + 0x1p-150L;
  else
    bound = 0x1p-53L * std::fabs(S) + 1.01L * n * 0x1p-80L * amax + 0x1p-97L * asum + 0x1p-1075L;
  bound *= 1.0L + 0x1p-40L;  // the long double approximations above
  INFO("n=" << v.size() << " S=" << static_cast<double>(S) << " got=" << got << " err="
            << static_cast<double>(err) << " bound=" << static_cast<double>(bound));
  CHECK(err <= bound);
}

template <class T>
void check_reproducible(const std::vector<T>& v, std::mt19937_64& rng, int trials) {
  const tutti::binned<T> ref = accumulate<T>(v);
  const T r = tutti::reproducible_sum(std::span<const T>(v));
  CHECK(bits(ref.value()) == bits(r));
  tutti::binned<T> one;
  for (const T x : v) one.add(x);
  CHECK(one == ref);  // add(span) == repeated add(x): the same state
  CHECK(bits(one.value()) == bits(r));
  for (int t = 0; t < trials; ++t) {
    const tutti::binned<T> a = random_split(v, rng);
    CHECK(a == ref);
    CHECK(bits(a.value()) == bits(r));
  }
}

}  // namespace

TEST_CASE_TEMPLATE("binned: layout, empty state", T, float, double) {
  using B = tutti::binned<T>;
  static_assert(std::is_trivially_copyable_v<B>);
  static_assert(std::is_standard_layout_v<B>);
  static_assert(sizeof(B) == (sizeof(T) == 4 ? 32 : 48));
  B a;
  CHECK(bits(a.value()) == bits(T(0)));
  B z;
  std::memset(static_cast<void*>(&z), 0, sizeof z);  // zero bytes are the empty state
  CHECK(z == a);
  a.add(T(1.5));
  CHECK(a.value() == T(1.5));
  B b;
  b.add(T(-0.0));
  CHECK(bits(b.value()) == bits(T(0)));
}

TEST_CASE_TEMPLATE("binned: same bits for every permutation and split (reproducible)", T, float,
                   double) {
  std::mt19937_64 rng(42);
  constexpr int emax = std::numeric_limits<T>::max_exponent - 8;
  constexpr int emin = std::numeric_limits<T>::min_exponent - std::numeric_limits<T>::digits - 1;
  // mixed magnitude: the whole range, subnormals included; and moderate ranges with cancellation
  for (const auto& [lo, hi] : {std::pair{emin, emax}, std::pair{-20, 20}, std::pair{-5, 5},
                              std::pair{emin, emin + 40}, std::pair{emax - 30, emax}}) {
    for (const std::size_t n : {std::size_t{1}, std::size_t{3}, std::size_t{100}, std::size_t{5000},
                                std::size_t{40000}}) {
      const std::vector<T> v = random_values<T>(rng, n, lo, hi);
      check_reproducible(v, rng, n > 10000 ? 3 : 10);
    }
  }
  // values in ascending magnitude: the index rises block after block in add(span)
  std::vector<T> v = random_values<T>(rng, 30000, emin, emax);
  std::sort(v.begin(), v.end(), [](T a, T b) { return std::fabs(a) < std::fabs(b); });
  tutti::binned<T> a, b;
  a.add(std::span<const T>(v));
  for (const T x : v) b.add(x);
  CHECK(a == b);
  check_reproducible(v, rng, 3);
}

TEST_CASE_TEMPLATE("binned: merge is commutative and associative (reproducible)", T, float, double) {
  std::mt19937_64 rng(7);
  for (int t = 0; t < 200; ++t) {
    tutti::binned<T> x[3];
    for (auto& a : x) {
      const auto v = random_values<T>(rng, 1 + rng() % 300, -30 - static_cast<int>(rng() % 100),
                                      static_cast<int>(rng() % 100));
      a.add(std::span<const T>(v));
    }
    CHECK(x[0] + x[1] == x[1] + x[0]);
    CHECK((x[0] + x[1]) + x[2] == x[0] + (x[1] + x[2]));
    tutti::binned<T> self = x[0];
    self += self;
    CHECK(self == x[0] + x[0]);
  }
}

TEST_CASE("binned: a plain float loop differs across permutations (negative control)") {
  std::mt19937_64 rng(3);
  std::vector<float> v = random_values<float>(rng, 5000, -20, 20);
  std::set<std::uint32_t> plain, rep;
  for (int t = 0; t < 20; ++t) {
    std::shuffle(v.begin(), v.end(), rng);
    float s = 0;
    for (const float x : v) s += x;
    plain.insert(bits(s));
    rep.insert(bits(tutti::reproducible_sum(std::span<const float>(v))));
  }
  CHECK(plain.size() > 1);
  CHECK(rep.size() == 1);
}

TEST_CASE_TEMPLATE("binned: within the error bound of the exact sum (reproducible)", T, float, double) {
  std::mt19937_64 rng(11);
  constexpr int emax = std::numeric_limits<T>::max_exponent - 8;
  constexpr int emin = std::numeric_limits<T>::min_exponent - std::numeric_limits<T>::digits - 1;
  for (int t = 0; t < 40; ++t) {
    const int lo = emin + static_cast<int>(rng() % static_cast<unsigned>(emax - emin));
    const int hi = lo + static_cast<int>(rng() % static_cast<unsigned>(emax - lo + 1));
    const std::size_t n = 1 + rng() % (t % 4 == 0 ? 100000 : 2000);
    check_bound(random_values<T>(rng, n, lo, hi));
  }
  // heavy cancellation: x and -x (1 + tiny) pairs
  std::vector<T> v;
  for (int i = 0; i < 10000; ++i) {
    const T x = std::ldexp(T(1) + T(i) * std::numeric_limits<T>::epsilon(), i % 40);
    v.push_back(x);
    v.push_back(-x);
    v.push_back(std::ldexp(T(1), -30 - i % 20));
  }
  check_bound(v);
  // a huge value and many tiny ones: the tiny ones are (partly) dropped, within the bound
  std::vector<T> w(1000, std::numeric_limits<T>::epsilon());
  w.push_back(T(1) / std::numeric_limits<T>::epsilon());
  check_bound(w);
}

TEST_CASE_TEMPLATE("binned: subnormals are summed exactly (reproducible)", T, float, double) {
  std::mt19937_64 rng(5);
  const T tiny = std::numeric_limits<T>::denorm_min();
  std::vector<T> v;
  std::uniform_int_distribution<int> m(1, 1 << 20);
  long double exact = 0;  // multiples of denorm_min below 2^40 of them: exact in long double
  for (int i = 0; i < 3000; ++i) {
    const T x = tiny * static_cast<T>(m(rng)) * ((i % 3 == 0) ? T(-1) : T(1));
    v.push_back(x);
    exact += static_cast<long double>(x);
  }
  const T got = tutti::reproducible_sum(std::span<const T>(v));
  CHECK(got != T(0));
  CHECK(bits(got) == bits(static_cast<T>(exact)));  // exact level sums, one rounding
  check_bound(v);
  tutti::binned<T> a;
  a.add(tiny);
  a.add(tiny);
  a.add(-tiny * 5);
  CHECK(a.value() == -tiny * 3);
  check_reproducible(v, rng, 5);
}

TEST_CASE_TEMPLATE("binned: infinities, NaN, signed zeros and overflow (reproducible)", T, float,
                   double) {
  using L = std::numeric_limits<T>;
  std::mt19937_64 rng(9);
  auto sum = [](std::vector<T> v) { return tutti::reproducible_sum(std::span<const T>(v)); };
  CHECK(sum({T(1), L::infinity(), T(-3)}) == L::infinity());
  CHECK(sum({T(1), -L::infinity(), L::max()}) == -L::infinity());
  CHECK(bits(sum({L::infinity(), T(2), -L::infinity()})) == bits(L::quiet_NaN()));
  const T payload = std::bit_cast<T>(bits(L::quiet_NaN()) | 5u);
  CHECK(bits(sum({T(1), payload, T(2)})) == bits(L::quiet_NaN()));
  CHECK(bits(sum({-L::quiet_NaN(), L::infinity()})) == bits(L::quiet_NaN()));
  // zeros
  CHECK(bits(sum({T(-0.0), T(-0.0)})) == bits(T(0)));
  CHECK(bits(sum({T(2.5), T(-2.5)})) == bits(T(0)));
  CHECK(bits(sum({})) == bits(T(0)));
  // overflow of the exact sum; an intermediate overflow that cancels is exact
  CHECK(sum({L::max(), L::max()}) == L::infinity());
  CHECK(sum({-L::max(), -L::max() / 2}) == -L::infinity());
  CHECK(sum({L::max(), L::max(), -L::max()}) == L::max());
  // beside L::max() the index is the coarsest: 2^(max_exponent - 28) is on its last level's grid
  const T on_grid = std::ldexp(T(1), L::max_exponent - 28);
  CHECK(sum({L::max(), -L::max(), on_grid}) == on_grid);
  // specials inside a long span, wherever they sit, same bits
  std::vector<T> v = random_values<T>(rng, 20000, -30, 30);
  v[rng() % v.size()] = L::infinity();
  v[rng() % v.size()] = payload;
  check_reproducible(v, rng, 5);
  CHECK(std::isnan(sum(v)));
  std::vector<T> w = random_values<T>(rng, 20000, -30, 30);
  w[12345] = -L::infinity();
  check_reproducible(w, rng, 5);
  CHECK(sum(w) == -L::infinity());
}

TEST_CASE_TEMPLATE("reproducible_reduce against its scalar definition", T, float, double) {
  using L = std::numeric_limits<T>;
  std::mt19937_64 rng(13);
  constexpr int emax = L::max_exponent - 2;
  constexpr int emin = L::min_exponent - L::digits - 1;
  for (int k = 1; k <= 8; ++k) {
    for (const std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{100003}}) {
      std::vector<std::vector<T>> in(static_cast<std::size_t>(k));
      for (auto& b : in) {
        // per element magnitudes differ: lanes on different indexes, the scaled top ones too
        b = random_values<T>(rng, n, emin, emax);
        for (std::size_t i = 0; i < n; i += 1 + rng() % 50) b[i] = random_values<T>(rng, 1, -3, 3)[0];
      }
      if (n > 100) {
        in[0][n / 2] = L::infinity();
        in[static_cast<std::size_t>(k - 1)][n / 3] = L::quiet_NaN();
      }
      std::vector<const T*> ptr;
      for (auto& b : in) ptr.push_back(b.data());
      std::vector<T> out(n), want(n);
      tutti::detail::reproducible_reduce(out.data(), ptr.data(), k, n);
      for (std::size_t i = 0; i < n; ++i) {
        tutti::binned<T> a;
        for (int r = 0; r < k; ++r) a.add(in[static_cast<std::size_t>(r)][i]);
        want[i] = a.value();
      }
      std::size_t bad = 0, first = n;
      for (std::size_t i = 0; i < n; ++i)
        if (bits(out[i]) != bits(want[i])) {
          ++bad;
          first = std::min(first, i);
        }
      INFO("k=" << k << " n=" << n << " first mismatch at " << first);
      CHECK(bad == 0);
      // in place: out is in[0]
      tutti::detail::reproducible_reduce(in[0].data(), ptr.data(), k, n);
      CHECK((n == 0 || std::memcmp(in[0].data(), want.data(), n * sizeof(T)) == 0));
    }
  }
}

TEST_CASE_TEMPLATE("reproducible_reduce with more inputs than a renormalisation interval", T, float,
                   double) {
  // k beyond binned_format<T>::R (256 for float, 1024 for double): the lanes carry
  std::mt19937_64 rng(17);
  const int k = std::is_same_v<T, float> ? 300 : 1100;
  const std::size_t n = 203;
  std::vector<std::vector<T>> in(8);
  for (auto& b : in) b = random_values<T>(rng, n, -10, 10);
  for (std::size_t i = 0; i < n; i += 3) in[2][i] = T(1);  // same sign: carries build up
  std::vector<const T*> ptr;
  for (int r = 0; r < k; ++r) ptr.push_back(in[static_cast<std::size_t>(r % 3 == 0 ? 2 : r % 8)].data());
  std::vector<T> out(n);
  tutti::detail::reproducible_reduce(out.data(), ptr.data(), k, n);
  std::size_t bad = 0;
  for (std::size_t i = 0; i < n; ++i) {
    tutti::binned<T> a;
    for (int r = 0; r < k; ++r) a.add(ptr[static_cast<std::size_t>(r)][i]);
    if (bits(out[i]) != bits(a.value())) ++bad;
  }
  CHECK(bad == 0);
}

TEST_CASE_TEMPLATE("binned: buffers merge element-wise through combine and op::sum (reproducible)", T,
                   float, double) {
  // the all_reduce of binned<T> elements: out[i] = op::sum{}(a[i], b[i]), out aliasing a
  std::mt19937_64 rng(19);
  const std::size_t n = 37;
  std::vector<tutti::binned<T>> a(n), b(n), want(n);
  for (std::size_t i = 0; i < n; ++i) {
    const auto x = random_values<T>(rng, 1 + i * 10, -40, 40);
    const std::size_t cut = rng() % (x.size() + 1);
    a[i].add(std::span<const T>(x.data(), cut));
    b[i].add(std::span<const T>(x.data() + cut, x.size() - cut));
    want[i] = accumulate<T>(x);
  }
  tutti::detail::combine(a.data(), a.data(), b.data(), n, tutti::op::sum{});
  for (std::size_t i = 0; i < n; ++i) {
    CHECK(a[i] == want[i]);
    CHECK(bits(a[i].value()) == bits(want[i].value()));
  }
}
