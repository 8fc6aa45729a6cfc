// The core vocabulary on its own: views, 16-bit floats, dtype and op identities, the reduce
// kernels against a scalar loop, environment parsing and the error family.
#include <doctest/doctest.h>

#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>
#include <ostream>  // doctest stringifies std::error_code with it
#include <set>
#include <span>
#include <string>
#include <system_error>
#include <type_traits>
#include <vector>

#include <tutti/tutti.hpp>

#include "../support/ranks.hpp"

TEST_SUITE_BEGIN("unit");

using namespace tutti;

// ---- view -----------------------------------------------------------------------------------

TEST_CASE("view: class template argument deduction from ranges and pointer + size") {
  std::vector<float> v(5, 1.0f);
  const std::vector<float> cv(3, 2.0f);
  std::array<int, 4> a{1, 2, 3, 4};
  const std::array<int, 2> ca{5, 6};
  std::span<double> s;
  double raw[7] = {};
  std::uint8_t c_array[3] = {};

  static_assert(std::is_same_v<decltype(view(v)), view<float>>);
  static_assert(std::is_same_v<decltype(view(cv)), view<const float>>);
  static_assert(std::is_same_v<decltype(view(a)), view<int>>);
  static_assert(std::is_same_v<decltype(view(ca)), view<const int>>);
  static_assert(std::is_same_v<decltype(view(s)), view<double>>);
  static_assert(std::is_same_v<decltype(view(raw, 7)), view<double>>);
  static_assert(std::is_same_v<decltype(view(c_array)), view<std::uint8_t>>);
  static_assert(std::is_same_v<decltype(view(static_cast<const double*>(raw), 2)), view<const double>>);

  CHECK(view(v).data() == v.data());
  CHECK(view(v).size() == 5);
  CHECK(view(cv).size() == 3);
  CHECK(view(a).data() == a.data());
  CHECK(view(a).size_bytes() == 4 * sizeof(int));
  CHECK(view(raw, 7).size() == 7);
  CHECK(view(c_array).size() == 3);
  CHECK(view(s).empty());
  CHECK(view<int>().empty());
  CHECK(view<int>().data() == nullptr);

  int sum = 0;
  for (int x : view(a)) sum += x;
  CHECK(sum == 10);
  CHECK(view(a)[2] == 3);
  const auto va = view(a);
  va[2] = 30;  // a view<int> writes through (even a const one: it is a handle)
  CHECK(a[2] == 30);
  CHECK(view(a).span().data() == a.data());
  CHECK(view(a).span().size() == 4);
  CHECK(view(a).end() - view(a).begin() == 4);
}

TEST_CASE("view: view<T> converts to view<const T> but never the other way and element types must match") {
  static_assert(std::is_convertible_v<view<float>, view<const float>>);
  static_assert(!std::is_convertible_v<view<const float>, view<float>>);
  static_assert(!std::is_constructible_v<view<float>, view<const float>>);
  static_assert(!std::is_constructible_v<view<float>, view<double>>);
  static_assert(!std::is_constructible_v<view<float>, std::vector<int>&>);
  static_assert(!std::is_constructible_v<view<float>, const std::vector<float>&>);
  static_assert(std::is_constructible_v<view<const float>, std::vector<float>&>);
  static_assert(std::is_constructible_v<view<const float>, const std::vector<float>&>);
  // A view of a derived-to-base or of a different size must not bind (pointer arithmetic would lie).
  static_assert(!std::is_constructible_v<view<std::int32_t>, std::vector<std::uint32_t>&>);

  std::vector<float> v(4);
  view<float> w = view(v);
  view<const float> r = w;
  CHECK(r.data() == v.data());
  CHECK(r.size() == 4);
  view<const float> from_vec = v;  // implicit from a range
  CHECK(from_vec.data() == v.data());
}

TEST_CASE("view: subview") {
  std::vector<int> v{0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  const auto all = view(v);
  const auto mid = all.subview(3, 4);
  static_assert(std::is_same_v<std::remove_const_t<decltype(mid)>, view<int>>);
  CHECK(mid.data() == v.data() + 3);
  CHECK(mid.size() == 4);
  CHECK(mid[0] == 3);
  CHECK(mid[3] == 6);
  CHECK(all.subview(10, 0).empty());
  CHECK(all.subview(0, 10).size() == 10);
  CHECK(mid.subview(1, 2)[0] == 4);
  static constexpr int arr[4] = {1, 2, 3, 4};
  static_assert(view(arr, 4).subview(1, 2).size() == 2);
  static_assert(view(arr, 4).subview(1, 2)[1] == 3);
}

TEST_CASE("detail::overlaps compares byte ranges") {
  std::vector<float> v(10);
  auto all = view(v);
  CHECK(detail::overlaps(all.subview(0, 5), all.subview(4, 3)));
  CHECK_FALSE(detail::overlaps(all.subview(0, 5), all.subview(5, 5)));
  CHECK_FALSE(detail::overlaps(all.subview(0, 0), all));  // empty never overlaps
  CHECK(detail::overlaps(all, view<const char>(reinterpret_cast<const char*>(v.data()) + 39, 1)));
  CHECK_FALSE(detail::overlaps(all, view<const char>(reinterpret_cast<const char*>(v.data()) + 40, 1)));
}

// ---- float16 / bfloat16 ---------------------------------------------------------------------

static_assert(float16(1.0f).bits == 0x3c00);
static_assert(float16(-2.0f).bits == 0xc000);
static_assert(float16(65504.0f).bits == 0x7bff);
static_assert(bfloat16(1.0f).bits == 0x3f80);
static_assert(float(float16::from_bits(0x3555)) > 0.333f && float(float16::from_bits(0x3555)) < 0.334f);

TEST_CASE("float16: every non-NaN bit pattern round-trips exactly through float") {
  int nans = 0;
  for (std::uint32_t b = 0; b <= 0xffff; ++b) {
    const auto bits = static_cast<std::uint16_t>(b);
    const float f = float16::to_float(bits);
    const bool nan_pattern = (bits & 0x7c00u) == 0x7c00u && (bits & 0x03ffu) != 0;
    if (nan_pattern) {
      ++nans;
      REQUIRE(std::isnan(f));
      REQUIRE(std::isnan(float16::to_float(float16::from_float(f))));  // NaN stays NaN
      continue;
    }
    REQUIRE_FALSE(std::isnan(f));
    CAPTURE(b);
    REQUIRE(float16::from_float(f) == bits);
    REQUIRE(float16(f).bits == bits);
    REQUIRE(float(float16::from_bits(bits)) == f);
  }
  CHECK(nans == 2 * 1023);
}

TEST_CASE("bfloat16: every non-NaN bit pattern round-trips exactly through float") {
  int nans = 0;
  for (std::uint32_t b = 0; b <= 0xffff; ++b) {
    const auto bits = static_cast<std::uint16_t>(b);
    const float f = bfloat16::to_float(bits);
    if (std::isnan(f)) {
      ++nans;
      REQUIRE(std::isnan(bfloat16::to_float(bfloat16::from_float(f))));
      continue;
    }
    CAPTURE(b);
    REQUIRE(bfloat16::from_float(f) == bits);
    REQUIRE(bfloat16(f).bits == bits);
  }
  CHECK(nans == 2 * 127);
}

namespace {
float next_up(float x) { return std::nextafter(x, std::numeric_limits<float>::infinity()); }
float next_down(float x) { return std::nextafter(x, -std::numeric_limits<float>::infinity()); }
}  // namespace

TEST_CASE("float16: round to nearest with ties to even at every midpoint between neighbours") {
  // Positive finite halves are ordered by their bits; b and b+1 are neighbours.
  for (std::uint32_t b = 0; b < 0x7bff; ++b) {
    const auto lo = static_cast<std::uint16_t>(b), hi = static_cast<std::uint16_t>(b + 1);
    const float flo = float16::to_float(lo), fhi = float16::to_float(hi);
    const float mid = (flo + fhi) / 2;  // exact: 12 significant bits
    REQUIRE(mid > flo);
    REQUIRE(mid < fhi);
    const std::uint16_t even = (lo & 1u) ? hi : lo;
    CAPTURE(b);
    REQUIRE(float16::from_float(mid) == even);
    REQUIRE(float16::from_float(next_up(mid)) == hi);
    REQUIRE(float16::from_float(next_down(mid)) == lo);
    REQUIRE(float16::from_float(-mid) == (even | 0x8000u));
    REQUIRE(float16::from_float(-next_up(mid)) == (hi | 0x8000u));
  }
  // Named examples.
  CHECK(float16::from_float(1.0f + 0x1p-11f) == 0x3c00);         // tie, even is 1.0
  CHECK(float16::from_float(1.0f + 3 * 0x1p-11f) == 0x3c02);     // tie, even is 1 + 2^-9
  CHECK(float16::from_float(2049.0f) == float16::from_float(2048.0f));  // tie at spacing 2
  CHECK(float16::from_float(2051.0f) == float16::from_float(2052.0f));
  CHECK(float16::from_float(0.1f) == 0x2e66);
}

TEST_CASE("float16: overflow to infinity and infinities and NaN") {
  const float inf = std::numeric_limits<float>::infinity();
  CHECK(float16::from_float(65504.0f) == 0x7bff);              // the largest half
  CHECK(float16::from_float(65519.99f) == 0x7bff);             // below the midpoint to 65536
  CHECK(float16::from_float(65520.0f) == 0x7c00);              // the midpoint: ties to even = inf
  CHECK(float16::from_float(1e6f) == 0x7c00);
  CHECK(float16::from_float(-1e6f) == 0xfc00);
  CHECK(float16::from_float(std::numeric_limits<float>::max()) == 0x7c00);
  CHECK(float16::from_float(inf) == 0x7c00);
  CHECK(float16::from_float(-inf) == 0xfc00);
  CHECK(float16::to_float(0x7c00) == inf);
  CHECK(float16::to_float(0xfc00) == -inf);
  const float qnan = std::numeric_limits<float>::quiet_NaN();
  const float snan_low = std::bit_cast<float>(0x7f800001u);  // payload only in the low bits
  const float neg_nan = std::bit_cast<float>(0xffc00000u);
  for (float n : {qnan, snan_low, neg_nan}) {
    const auto h = float16::from_float(n);
    CHECK((h & 0x7c00u) == 0x7c00u);
    CHECK((h & 0x03ffu) != 0);  // not infinity
    CHECK(std::isnan(float(float16::from_bits(h))));
  }
  CHECK((float16::from_float(neg_nan) & 0x8000u) != 0);  // the sign survives
}

TEST_CASE("float16: subnormals and zeros") {
  CHECK(float16::to_float(0x0001) == 0x1p-24f);  // smallest subnormal
  CHECK(float16::to_float(0x03ff) == 1023 * 0x1p-24f);  // largest subnormal
  CHECK(float16::to_float(0x0400) == 0x1p-14f);  // smallest normal
  CHECK(float16::from_float(0x1p-24f) == 0x0001);
  CHECK(float16::from_float(0x1p-25f) == 0x0000);                // tie between 0 and 2^-24: even
  CHECK(float16::from_float(next_up(0x1p-25f)) == 0x0001);
  CHECK(float16::from_float(3 * 0x1p-25f) == 0x0002);            // tie between 1 and 2: even
  CHECK(float16::from_float(0x1p-26f) == 0x0000);
  CHECK(float16::from_float(-0x1p-26f) == 0x8000);               // signed zero
  CHECK(float16::from_float(1023.5f * 0x1p-24f) == 0x0400);      // tie at the normal boundary
  CHECK(float16::from_float(std::numeric_limits<float>::denorm_min()) == 0x0000);
  CHECK(float16::from_float(0.0f) == 0x0000);
  CHECK(float16::from_float(-0.0f) == 0x8000);
  CHECK(std::signbit(float16::to_float(0x8000)));
  CHECK(float16::to_float(0x8001) == -0x1p-24f);
}

TEST_CASE("bfloat16: round to nearest even and overflow and NaN and subnormals") {
  // Midpoints between neighbouring positive finite bfloat16s (the last one's upper neighbour is
  // infinity: at and above that midpoint a float rounds to infinity, as IEEE requires).
  for (std::uint32_t b = 0; b < 0x7f80; ++b) {
    const auto lo = static_cast<std::uint16_t>(b), hi = static_cast<std::uint16_t>(b + 1);
    const float mid = std::bit_cast<float>((b << 16) | 0x8000u);
    const std::uint16_t even = (lo & 1u) ? hi : lo;
    CAPTURE(b);
    REQUIRE(bfloat16::from_float(mid) == even);
    REQUIRE(bfloat16::from_float(next_up(mid)) == hi);
    REQUIRE(bfloat16::from_float(next_down(mid)) == lo);
    REQUIRE(bfloat16::from_float(-mid) == (even | 0x8000u));
  }
  CHECK(bfloat16::from_float(1.0f + 0x1p-8f) == 0x3f80);
  CHECK(bfloat16::from_float(1.0f + 3 * 0x1p-8f) == 0x3f82);
  CHECK(bfloat16::from_float(std::numeric_limits<float>::max()) == 0x7f80);  // overflows to inf
  CHECK(bfloat16::from_float(std::numeric_limits<float>::infinity()) == 0x7f80);
  CHECK(bfloat16::from_float(-std::numeric_limits<float>::infinity()) == 0xff80);
  for (std::uint32_t nan_bits : {0x7fc00000u, 0x7f800001u, 0x7f80ffffu, 0xff800001u}) {
    const auto h = bfloat16::from_float(std::bit_cast<float>(nan_bits));
    CAPTURE(nan_bits);
    CHECK(std::isnan(bfloat16::to_float(h)));
  }
  // float subnormals: bfloat16 shares float's exponent range.
  CHECK(bfloat16::from_float(std::numeric_limits<float>::denorm_min()) == 0x0000);
  CHECK(bfloat16::from_float(std::bit_cast<float>(0x00008000u)) == 0x0000);  // tie, even
  CHECK(bfloat16::from_float(std::bit_cast<float>(0x00018000u)) == 0x0002);  // tie, even
  CHECK(bfloat16::from_float(std::bit_cast<float>(0x00010000u)) == 0x0001);
  CHECK(bfloat16::to_float(0x0001) == std::bit_cast<float>(0x00010000u));
  CHECK(bfloat16::from_float(-0.0f) == 0x8000);
}

TEST_CASE("16-bit floats compare as floats and convert implicitly") {
  CHECK(float16(0.0f) == float16(-0.0f));
  CHECK_FALSE(float16::from_bits(0x7e00) == float16::from_bits(0x7e00));  // NaN != NaN
  CHECK(bfloat16(3.0f) == bfloat16(3.0f));
  const float16 h = 1.5f;
  const float f = h;
  CHECK(f == 1.5f);
  CHECK(float(float16(1.5f) + float16(2.25f)) == 3.75f);  // arithmetic widens to float
  static_assert(std::is_trivially_copyable_v<float16> && std::is_trivially_copyable_v<bfloat16>);
}

// ---- dtype ----------------------------------------------------------------------------------

namespace {
struct user_pod {
  int a;
  float b;
};
struct other_pod {
  double d[3];
};
}  // namespace

TEST_CASE("dtype_of: built-in ids are distinct and sized and user types hash stably") {
  const dtype all[] = {dtype_of<std::int8_t>(),  dtype_of<std::uint8_t>(),  dtype_of<std::int16_t>(),
                       dtype_of<std::uint16_t>(), dtype_of<std::int32_t>(), dtype_of<std::uint32_t>(),
                       dtype_of<std::int64_t>(),  dtype_of<std::uint64_t>(), dtype_of<float>(),
                       dtype_of<double>(),        dtype_of<float16>(),      dtype_of<bfloat16>(),
                       dtype_of<char>(),          dtype_of<bool>(),         dtype_of<long double>(),
                       dtype_of<long long>(),     dtype_of<long>(),         dtype_of<unsigned long long>(),
                       dtype_of<unsigned long>()};
  std::set<std::uint32_t> ids;
  for (const auto& d : all) {
    CHECK(d.id != 0);
    CHECK(d.id < 0x80000000u);  // built-ins never collide with the user-type hash space
    ids.insert(d.id);
  }
  CHECK(ids.size() == std::size(all) - 2);  // long/long long and unsigned ones: one of each pair is int64/uint64
  CHECK(dtype_of<long long>().id != dtype_of<long>().id);
  CHECK(dtype_of<unsigned long long>().id != dtype_of<unsigned long>().id);
  CHECK(dtype_of<std::int8_t>().id != dtype_of<char>().id);

  CHECK(dtype_of<float>().size == sizeof(float));
  CHECK(dtype_of<double>().size == sizeof(double));
  CHECK(dtype_of<float16>().size == 2);
  CHECK(dtype_of<bfloat16>().size == 2);
  CHECK(dtype_of<long double>().size == sizeof(long double));
  CHECK(dtype_of<const float>().id == dtype_of<float>().id);
  CHECK(dtype_of<volatile int>().id == dtype_of<int>().id);

  CHECK(dtype_name(dtype_of<std::int32_t>()) == "int32");
  CHECK(dtype_name(dtype_of<float>()) == "float");
  CHECK(dtype_name(dtype_of<double>()) == "float64");
  CHECK(dtype_name(dtype_of<float16>()) == "float16");
  CHECK(dtype_name(dtype_of<bfloat16>()) == "bfloat16");
  CHECK(dtype_name(dtype_of<std::uint64_t>()) == "uint64");

  const dtype u = dtype_of<user_pod>();
  CHECK(u.id == dtype_of<user_pod>().id);  // stable
  CHECK(u.id == dtype_of<const user_pod>().id);
  CHECK((u.id & 0x80000000u) != 0);
  CHECK(u.size == sizeof(user_pod));
  CHECK(dtype_of<other_pod>().id != u.id);
  CHECK(dtype_of<tutti::test::vec3>().id != u.id);
  CHECK(dtype_name(u).find("user type") != std::string::npos);
  CHECK(dtype_name(u).find(std::to_string(sizeof(user_pod)) + " bytes") != std::string::npos);
}

// ---- op traits ------------------------------------------------------------------------------

namespace {
struct plain_user_op {
  int operator()(int a, int b) const { return a > b ? a : b; }
};
struct named_user_op {
  static constexpr std::string_view name = "gcd-ish";
  int operator()(int a, int b) const { return a < b ? a : b; }
};
}  // namespace

TEST_CASE("op_traits: built-in ids and names and user ops hash stably") {
  CHECK(op_traits<op::sum>::id() == 1);
  CHECK(op_traits<op::prod>::id() == 2);
  CHECK(op_traits<op::min>::id() == 3);
  CHECK(op_traits<op::max>::id() == 4);
  CHECK(op_traits<op::band>::id() == 5);
  CHECK(op_traits<op::bor>::id() == 6);
  CHECK(op_traits<op::bxor>::id() == 7);
  CHECK(op_traits<op::avg>::id() == 8);
  CHECK(op_traits<op::sum>::name() == "sum");
  CHECK(op_traits<op::avg>::name() == "avg");
  CHECK(op_traits<op::bxor>::name() == "bxor");
  static_assert(op_traits<op::max>::builtin && !op_traits<plain_user_op>::builtin);
  for (std::uint32_t id = 1; id <= 8; ++id) CHECK(op_name(id) != "user op");
  CHECK(op_name(0) == "none");
  CHECK(op_name(op_traits<op::min>::id()) == "min");

  const auto u = op_traits<plain_user_op>::id();
  CHECK(u == op_traits<plain_user_op>::id());
  CHECK((u & 0x80000000u) != 0);
  CHECK(u != op_traits<named_user_op>::id());
  CHECK(op_traits<plain_user_op>::name() == "user op");
  CHECK(op_traits<named_user_op>::name() == "gcd-ish");
  CHECK(op_name(u) == "user op");

  static_assert(reduce_op<op::band, int> && !reduce_op<op::band, float>);
  static_assert(reduce_op<op::sum, float16> && reduce_op<op::max, bfloat16>);
  static_assert(reduce_op<tutti::test::vec3_max_abs, tutti::test::vec3>);
  static_assert(!reduce_op<tutti::test::vec3_max_abs, float>);
}

// ---- detail::combine ------------------------------------------------------------------------

namespace {

template <class T>
T sample(std::size_t i, int salt) {
  const int v = static_cast<int>((i * 7 + static_cast<std::size_t>(salt) * 5) % 23) - 11;
  if constexpr (std::is_same_v<T, tutti::test::vec3>)
    return tutti::test::value<T>(salt, i);
  else if constexpr (std::is_same_v<T, float16> || std::is_same_v<T, bfloat16>)
    return T(static_cast<float>(v) * 0.75f);  // exact in both
  else if constexpr (std::is_floating_point_v<T>)
    return static_cast<T>(v) * static_cast<T>(0.375);
  else if constexpr (std::is_unsigned_v<T>)
    return static_cast<T>(static_cast<unsigned long long>(i * 2654435761u + static_cast<std::size_t>(salt)) >> 3);
  else
    return static_cast<T>(v);
}

template <class T>
bool same_bits(const T& a, const T& b) {
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}

/// combine(out, a, b) for every aliasing pattern against out[i] = op(a[i], b[i]) computed one
/// element at a time; also from unaligned starting points.
template <class T, class Op>
void check_combine(const Op& op) {
  for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{63}, std::size_t{64},
                        std::size_t{65}, std::size_t{1000}}) {
    for (std::size_t offset : {std::size_t{0}, std::size_t{1}}) {
      const std::string type = dtype_name(dtype_of<T>());
      const std::string opname = std::string(op_traits<Op>::name());
      CAPTURE(n);
      CAPTURE(offset);
      CAPTURE(type);
      CAPTURE(opname);
      std::vector<T> a(n + offset), b(n + offset), want(n + offset);
      for (std::size_t i = 0; i < n + offset; ++i) {
        a[i] = sample<T>(i, 1);
        b[i] = sample<T>(i, 2);
      }
      for (std::size_t i = 0; i < n + offset; ++i) want[i] = op(a[i], b[i]);
      auto compare = [&](const std::vector<T>& got, const char* how) {
        std::size_t bad = n;
        for (std::size_t i = 0; i < n; ++i)
          if (!same_bits(got[offset + i], want[offset + i])) {
            bad = i;
            break;
          }
        CHECK_MESSAGE(bad == n, how << ": first difference at element " << bad);
      };
      {  // separate out
        std::vector<T> out(n + offset);
        detail::combine(out.data() + offset, a.data() + offset, b.data() + offset, n, op);
        compare(out, "out separate");
      }
      {  // out is a
        std::vector<T> x = a;
        detail::combine(x.data() + offset, x.data() + offset, b.data() + offset, n, op);
        compare(x, "out aliases a");
      }
      {  // out is b
        std::vector<T> y = b;
        detail::combine(y.data() + offset, a.data() + offset, y.data() + offset, n, op);
        compare(y, "out aliases b");
      }
    }
  }
}

template <class T>
void check_all_ops() {
  check_combine<T>(op::sum{});
  check_combine<T>(op::prod{});
  check_combine<T>(op::min{});
  check_combine<T>(op::max{});
  check_combine<T>(op::avg{});
  if constexpr (std::is_integral_v<T>) {
    check_combine<T>(op::band{});
    check_combine<T>(op::bor{});
    check_combine<T>(op::bxor{});
  }
}

}  // namespace

TEST_CASE("detail::combine matches a scalar loop for every built-in op") {
  check_all_ops<std::int32_t>();
  check_all_ops<float>();
  check_all_ops<double>();
  check_all_ops<std::int8_t>();
  check_all_ops<std::uint64_t>();
  check_all_ops<std::uint16_t>();
  check_all_ops<std::int64_t>();
}

TEST_CASE("detail::combine on float16/bfloat16 matches widening then combining in float then narrowing once") {
  check_all_ops<float16>();
  check_all_ops<bfloat16>();
  // Rounding happens once per step: 2048 + 1 in float16 is a tie that rounds to even (2048).
  std::vector<float16> a(300, float16(2048.0f)), b(300, float16(1.0f)), out(300);
  detail::combine(out.data(), a.data(), b.data(), out.size(), op::sum{});
  CHECK(float(out[0]) == 2048.0f);
  CHECK(float(out[299]) == 2048.0f);
  std::vector<float16> c(300, float16(3.0f));
  detail::combine(out.data(), a.data(), c.data(), out.size(), op::sum{});
  CHECK(float(out[257]) == 2052.0f);  // 2051 is a tie between 2050 and 2052: even mantissa
}

TEST_CASE("detail::combine with user ops and user types runs the op element by element") {
  check_combine<std::int32_t>(plain_user_op{});
  check_combine<tutti::test::vec3>(tutti::test::vec3_max_abs{});
  auto lambda = [](double x, double y) { return x * 2 + y; };  // not commutative: order matters
  std::vector<double> a{1, 2, 3}, b{10, 20, 30}, out(3);
  detail::combine(out.data(), a.data(), b.data(), 3, lambda);
  CHECK(out == std::vector<double>{12, 24, 36});
}

// ---- config::from_env -----------------------------------------------------------------------

namespace {
/// Sets (or unsets, with nullopt) an environment variable for one scope and restores it after.
class scoped_env {
 public:
  scoped_env(const char* name, std::optional<std::string> value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) ::setenv(name, value->c_str(), 1);
    else ::unsetenv(name);
  }
  ~scoped_env() {
    if (old_) ::setenv(name_, old_->c_str(), 1);
    else ::unsetenv(name_);
  }
  scoped_env(const scoped_env&) = delete;
  scoped_env& operator=(const scoped_env&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

void expect_env_error(const char* var, const char* value) {
  scoped_env e(var, value);
  CAPTURE(var);
  CAPTURE(value);
  bool thrown = false;
  try {
    (void)config::from_env();
  } catch (const config_error& err) {
    thrown = true;
    const std::string what = err.what();
    CAPTURE(what);
    CHECK(what.find(var) != std::string::npos);
    CHECK(what.find(value) != std::string::npos);
    CHECK(err.code() == errc::config);
  }
  CHECK_MESSAGE(thrown, var << "='" << value << "' should raise config_error");
}
}  // namespace

TEST_CASE("config::from_env: TUTTI_TIMEOUT") {
  scoped_env algo("TUTTI_ALGO", std::nullopt), debug("TUTTI_DEBUG", std::nullopt);
  {
    scoped_env t("TUTTI_TIMEOUT", std::nullopt);
    CHECK(config::from_env().timeout == std::chrono::seconds(300));
  }
  {
    scoped_env t("TUTTI_TIMEOUT", "");  // empty counts as unset
    CHECK(config::from_env().timeout == std::chrono::seconds(300));
  }
  {
    scoped_env t("TUTTI_TIMEOUT", "0.5");
    CHECK(config::from_env().timeout == std::chrono::milliseconds(500));
  }
  {
    scoped_env t("TUTTI_TIMEOUT", "12");
    CHECK(config::from_env().timeout == std::chrono::seconds(12));
  }
  {
    scoped_env t("TUTTI_TIMEOUT", "0.0001");  // a tiny positive value never becomes 0
    CHECK(config::from_env().timeout == std::chrono::milliseconds(1));
  }
  for (const char* bad : {"abc", "-1", "0", "5s", "0.0", "inf", "nan", "1e999", "1,5", "s"})
    expect_env_error("TUTTI_TIMEOUT", bad);
}

TEST_CASE("config::from_env: TUTTI_DEBUG and TUTTI_ALGO") {
  scoped_env timeout("TUTTI_TIMEOUT", std::nullopt);
  {
    scoped_env d("TUTTI_DEBUG", std::nullopt), a("TUTTI_ALGO", std::nullopt);
    const auto c = config::from_env();
    CHECK(c.debug == log_level::none);
    CHECK(c.algo_override.empty());
  }
  for (const char* v : {"info", "INFO", "1"}) {
    scoped_env d("TUTTI_DEBUG", v);
    CHECK(config::from_env().debug == log_level::info);
  }
  for (const char* v : {"warn", "WARN"}) {
    scoped_env d("TUTTI_DEBUG", v);
    CHECK(config::from_env().debug == log_level::warn);
  }
  for (const char* v : {"none", "0"}) {
    scoped_env d("TUTTI_DEBUG", v);
    CHECK(config::from_env().debug == log_level::none);
  }
  for (const char* bad : {"verbose", "2", "Info "}) expect_env_error("TUTTI_DEBUG", bad);
  {
    scoped_env a("TUTTI_ALGO", "all_reduce=ring");
    CHECK(config::from_env().algo_override == "all_reduce=ring");
  }
}

TEST_CASE("a malformed environment fails communicator construction with config_error") {
  scoped_env d("TUTTI_DEBUG", std::nullopt);
  {
    scoped_env a("TUTTI_ALGO", "all_to_all=ring");
    scoped_env t("TUTTI_TIMEOUT", std::nullopt);
    CHECK_THROWS_AS(inproc::run(2, [](auto&) {}), config_error);
  }
  {
    scoped_env a("TUTTI_ALGO", std::nullopt);
    scoped_env t("TUTTI_TIMEOUT", "soon");
    CHECK_THROWS_AS(inproc::run(2, [](auto&) {}), config_error);
  }
  {  // and a good one takes effect
    scoped_env a("TUTTI_ALGO", "ring");
    scoped_env t("TUTTI_TIMEOUT", "7.5");
    inproc::run(2, [](auto& comm) {
      CHECK(comm.timeout() == std::chrono::milliseconds(7500));
      std::vector<int> v{comm.rank() + 1};
      comm.all_reduce(view(v));
      CHECK(v[0] == 3);
    });
  }
}

// ---- errors ---------------------------------------------------------------------------------

namespace {
template <class E>
void check_error_type(errc code, const char* category_message) {
  static_assert(std::is_base_of_v<tutti::error, E>);
  static_assert(std::is_base_of_v<std::system_error, E>);
  static_assert(std::is_base_of_v<std::exception, E>);
  try {
    throw E("something specific happened");
  } catch (const tutti::error& e) {
    CHECK(e.code() == code);
    CHECK(e.code().category() == tutti::error_category());
    CHECK(std::string(e.code().category().name()) == "tutti");
    CHECK(e.code().message() == category_message);
    CHECK(std::string(e.what()).find("something specific happened") != std::string::npos);
    CHECK(dynamic_cast<const E*>(&e) != nullptr);
  }
  try {
    throw E("via system_error");
  } catch (const std::system_error& e) {
    CHECK(e.code() == code);
    CHECK(std::string(e.code().category().name()) == "tutti");
  }
}
}  // namespace

TEST_CASE("the error family: every error is-a tutti::error and a std::system_error of category tutti") {
  check_error_type<timeout_error>(errc::timeout, "timed out");
  check_error_type<peer_lost>(errc::peer_lost, "peer lost");
  check_error_type<mismatch_error>(errc::mismatch, "ranks disagree");
  check_error_type<config_error>(errc::config, "bad configuration");
  check_error_type<usage_error>(errc::usage, "invalid arguments");
  const tutti::error aborted(errc::aborted, "gone");
  CHECK(aborted.code() == errc::aborted);
  CHECK(aborted.code().message() == "communicator aborted");

  // errc is an error code enum: it converts and compares.
  const std::error_code ec = errc::mismatch;
  CHECK(ec == errc::mismatch);
  CHECK(ec != errc::timeout);
  CHECK(std::string(ec.category().name()) == "tutti");
  CHECK(tutti::make_error_code(errc::usage).value() == static_cast<int>(errc::usage));
  CHECK(tutti::error_category().message(999) == "unknown tutti error");
  // Distinct codes for distinct kinds.
  std::set<int> codes;
  for (auto c : {errc::timeout, errc::peer_lost, errc::mismatch, errc::config, errc::usage, errc::aborted})
    codes.insert(static_cast<int>(c));
  CHECK(codes.size() == 6);
  CHECK(codes.count(0) == 0);  // 0 means "no error" for std::error_code
}

TEST_SUITE_END();
