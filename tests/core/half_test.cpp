#include "testing.hpp"

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace gx = gradix;

// Conversions are constexpr: these facts are checked by the compiler.
static_assert(float(gx::bfloat16(1.5f)) == 1.5f);
static_assert(gx::bfloat16(1.0f + 1.0f / 256).bits() == 0x3f80);  // a tie: to the even neighbour (1)
static_assert(gx::bfloat16(1.0f + 3.0f / 256).bits() == 0x3f82);  // a tie: up to the even neighbour
static_assert(float(gx::half(65504.0f)) == 65504.0f);             // the largest half
static_assert(gx::half(65519.0f).bits() == 0x7bff);               // below the halfway point: 65504
static_assert(gx::half(65520.0f).bits() == 0x7c00);               // the halfway point: infinity (65504 is odd)
static_assert(gx::half(-0.0f).bits() == 0x8000);
static_assert(float(gx::half::from_bits(0x0001)) == 5.9604644775390625e-8f);  // the smallest subnormal
static_assert(gx::half(2.9802322387695312e-8f).bits() == 0x0000);             // half of it: a tie, to 0
static_assert(gx::half(2.98023259e-8f).bits() == 0x0001);                     // just above: up
static_assert(std::is_same_v<gx::compute_type_t<gx::bfloat16 const>, float>);
static_assert(std::is_same_v<gx::tensor_view<gx::half const, gx::shape<3>>::value_type, float>);
static_assert(std::is_same_v<gx::tensor_view<gx::half const, gx::shape<3>>::storage_type, gx::half>);
static_assert(gx::storage_element<gx::bfloat16> && !gx::element<gx::bfloat16>);

namespace {

std::uint32_t bits(float f) { return std::bit_cast<std::uint32_t>(f); }

// The two representable neighbours of f in a half-width type (by bits, f finite, >= 0) and
// the expected round-to-nearest-even result, computed in double from the neighbours' values.
template <class H>
std::uint16_t nearest_reference(float f) {
  double const x = f;
  std::uint16_t lo = 0;
  // the largest finite non-negative pattern whose value is <= x (linear scan of the ordered
  // non-negative patterns by bisection)
  std::uint16_t a = 0, b = std::is_same_v<H, gx::half> ? 0x7c00 : 0x7f80;  // [a, b): finite
  while (b - a > 1) {
    std::uint16_t const m = std::uint16_t((a + b) / 2);
    if (double(float(H::from_bits(m))) <= x) a = m;
    else b = m;
  }
  lo = a;
  double const vlo = float(H::from_bits(lo));
  if (vlo == x) return lo;
  std::uint16_t const hi = std::uint16_t(lo + 1);  // may be infinity's pattern
  double vhi = float(H::from_bits(hi));
  if (std::isinf(vhi)) {  // above the largest finite: the rounding is done in an unbounded exponent range
    vhi = 2 * vlo - double(float(H::from_bits(std::uint16_t(lo - 1))));
  }
  double const dl = x - vlo, dh = vhi - x;
  if (dl < dh) return lo;
  if (dh < dl) return hi;
  return (lo & 1) ? hi : lo;
}

}  // namespace

TEST_CASE("half-width types: every pattern widens exactly and rounds back to itself") {
  for (std::uint32_t p = 0; p < 65536; ++p) {
    auto const b = gx::bfloat16::from_bits(std::uint16_t(p));
    auto const h = gx::half::from_bits(std::uint16_t(p));
    float const fb = b, fh = h;
    // bfloat16 is float's upper half
    REQUIRE(bits(fb) == (p << 16));
    // a NaN keeps its payload and is made quiet
    if (std::isnan(fh)) REQUIRE(gx::half(fh).bits() == (p | 0x200));
    else REQUIRE(gx::half(fh).bits() == p);
    if (std::isnan(fb)) REQUIRE(gx::bfloat16(fb).bits() == (p | 0x40));
    else REQUIRE(gx::bfloat16(fb).bits() == p);
  }
  CHECK(float(gx::half::from_bits(0x3c00)) == 1.0f);
  CHECK(float(gx::half::from_bits(0x7c00)) == std::numeric_limits<float>::infinity());
  CHECK(float(gx::half::from_bits(0x0400)) == std::ldexp(1.0f, -14));  // the smallest normal
}

TEST_CASE("half-width types: rounding to nearest, ties to even, against a reference in double") {
  // every 997th float pattern (positive and negative), then the ties and their neighbours
  std::vector<float> xs;
  for (std::uint64_t u = 0; u < (std::uint64_t(1) << 31); u += 997) xs.push_back(std::bit_cast<float>(std::uint32_t(u)));
  for (std::uint32_t p = 0; p < 0x7c00; p += 3) {  // half ties: value halfway between p and p + 1
    double const mid = (double(float(gx::half::from_bits(std::uint16_t(p)))) +
                        double(float(gx::half::from_bits(std::uint16_t(p + 1))))) / 2;
    if (std::isinf(mid)) continue;
    float const m = float(mid);
    xs.push_back(m);
    xs.push_back(std::nextafter(m, 0.0f));
    xs.push_back(std::nextafter(m, 1e9f));
  }
  std::size_t checked = 0;
  for (float f : xs) {
    if (!std::isfinite(f)) continue;
    float const a = std::fabs(f);
    std::uint16_t const sign_h = std::signbit(f) ? 0x8000 : 0;
    if (a < 65520.0f) REQUIRE(gx::half(f).bits() == (sign_h | nearest_reference<gx::half>(a)));
    else REQUIRE(gx::half(f).bits() == (sign_h | 0x7c00));
    if (a < 3.3961514e38f) REQUIRE(gx::bfloat16(f).bits() == (sign_h | nearest_reference<gx::bfloat16>(a)));
    ++checked;
  }
  CHECK(checked > 2000000);
}

TEST_CASE("half-width types: SIMD packs convert as the scalars do") {
#if defined(GRADIX_HAS_VECTOR_EXT)
  constexpr int W = gx::simd::width<float>;
  std::vector<float> xs = {0.0f, -0.0f, 1.1f, -2.7f, 65504.0f, 65519.0f, 65520.0f, -1e6f, 1e-7f, -3e-8f,
                           std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                           3e-39f, 1e38f, 3.4e38f, std::bit_cast<float>(0x7f800001u)};
  for (std::uint32_t k = 0; k < 4096; ++k) xs.push_back(std::bit_cast<float>(std::uint32_t(gx::rng::bits(3, k))));
  while (xs.size() % W) xs.push_back(0.5f);
  for (std::size_t i = 0; i < xs.size(); i += W) {
    gx::simd::pack<float, W> v;
    for (int w = 0; w < W; ++w) v[w] = xs[i + std::size_t(w)];
    gx::half h[W];
    gx::bfloat16 b[W];
    gx::simd::narrow<gx::half, W>(h, v);
    gx::simd::narrow<gx::bfloat16, W>(b, v);
    auto const wh = gx::simd::widen<gx::half, W>(h);
    auto const wb = gx::simd::widen<gx::bfloat16, W>(b);
    for (int w = 0; w < W; ++w) {
      REQUIRE(h[w].bits() == gx::half(v[w]).bits());
      REQUIRE(b[w].bits() == gx::bfloat16(v[w]).bits());
      REQUIRE(bits(wh[w]) == bits(float(h[w])));
      REQUIRE(bits(wb[w]) == bits(float(b[w])));
    }
  }
  MESSAGE("pack conversions: " << std::string(gx::half_isa()));
#endif
}

TEST_CASE("half-width types: stochastic rounding") {
  // exact values stay exact, whatever the bits
  for (std::uint32_t r : {0u, 1u, 0x7fffu, 0xffffu, 0xffffffffu}) {
    CHECK(gx::round_stochastic<gx::bfloat16>(1.5f, r).bits() == gx::bfloat16(1.5f).bits());
    CHECK(gx::round_stochastic<gx::half>(-3.25f, r).bits() == gx::half(-3.25f).bits());
    CHECK(gx::round_stochastic<gx::half>(5.9604644775390625e-8f, r).bits() == 0x0001);
    CHECK(std::isnan(float(gx::round_stochastic<gx::half>(std::numeric_limits<float>::quiet_NaN(), r))));
  }
  // the result is one of the two neighbours, and up with the right probability (mean), for
  // normal values, subnormal ones and beyond the largest finite half
  for (float f : {1.001f, -3.14159f, 1e-6f, 3e-8f, -2.5e-5f, 65510.0f, 1e30f}) {
    for (int which = 0; which < 2; ++which) {
      double sum = 0, lo = 0, hi = 0;
      bool inf_up = false;
      int const n = 40000;
      for (int i = 0; i < n; ++i) {
        std::uint32_t const r = std::uint32_t(gx::rng::bits(11, std::uint64_t(i)));
        float const v = which == 0 ? float(gx::round_stochastic<gx::bfloat16>(f, r))
                                   : float(gx::round_stochastic<gx::half>(f, r));
        if (i == 0) lo = hi = v;
        lo = std::fmin(lo, v);
        hi = std::fmax(hi, v);
        if (std::isinf(v)) inf_up = true;
        else sum += v;
      }
      if (which == 1 && std::fabs(f) > 65504.0f) {
        CHECK(inf_up);  // a value beyond 65504 rounds up to infinity with some probability
        continue;
      }
      double const spacing = hi - lo;
      CHECK(spacing > 0);
      float const rne = which == 0 ? float(gx::bfloat16(f)) : float(gx::half(f));
      CHECK((rne == float(lo) || rne == float(hi)));
      // the mean is f within 5 standard deviations of a mean of n draws
      CHECK(std::fabs(sum / n - double(f)) <= 5 * 0.5 * spacing / std::sqrt(double(n)));
    }
  }
}

TEST_CASE("half-width tensors: assigning rounds each element, expressions read float") {
  auto const f = gx::randn<float>(gx::dims(37, 53), 4);  // odd extents: packs and tails
  // doc-snippet: half_width_tensors
  gx::tensor<gx::bfloat16, gx::shape<gx::dyn, gx::dyn>> b(gx::dims(37, 53));
  gx::tensor<gx::half, gx::shape<gx::dyn, gx::dyn>> h(gx::dims(37, 53));
  b = f * 300.0f;  // computed in float, each element rounded to nearest (ties to even)
  h = f * 300.0f;  // (beyond 65504: infinity)
  float const s = gx::value(gx::sum(b));  // expressions read bfloat16 and half as float
  gx::tensor<float, gx::shape<gx::dyn, gx::dyn>> back(gx::dims(37, 53));
  back = h;  // widening is exact
  // end doc-snippet
  CHECK(std::isfinite(s));
  CHECK(back(1, 2) == float(h(1, 2)));
  for (gx::index_t i = 0; i < 37; ++i)
    for (gx::index_t j = 0; j < 53; ++j) {
      REQUIRE(b(i, j).bits() == gx::bfloat16(f(i, j) * 300.0f).bits());
      REQUIRE(h(i, j).bits() == gx::half(f(i, j) * 300.0f).bits());
    }
  // read as float: value types, sums, a transposed (strided) read and a gather
  static_assert(std::is_same_v<gx::value_type_t<decltype(b.view() + 1.0f)>, float>);
  auto const wb = gx::eval(b.view() * 1.0f);
  double ref = 0;
  for (gx::index_t i = 0; i < 37; ++i)
    for (gx::index_t j = 0; j < 53; ++j) {
      CHECK(wb(i, j) == float(b(i, j)));
      ref += float(h(i, j));
    }
  CHECK(double(gx::value(gx::sum(gx::cast<double>(h.view())))) == doctest::Approx(ref).epsilon(1e-12));
  auto const t = gx::eval(gx::transpose(h.view()) + 0.0f);
  CHECK(t(5, 7) == float(h(7, 5)));
  CHECK(t(52, 36) == float(h(36, 52)));
  std::vector<int> idx{36, 0, 36, 2};
  auto const g = gx::eval(gx::gather<0>(b.view(), idx));
  for (gx::index_t j = 0; j < 53; ++j) {
    CHECK(g(0, j) == float(b(36, j)));
    CHECK(g(2, j) == float(b(36, j)));
    CHECK(g(3, j) == float(b(2, j)));
  }
  // a half-width tensor assigned from another one keeps its bits
  gx::tensor<gx::bfloat16, gx::shape<gx::dyn, gx::dyn>> b2(gx::dims(37, 53));
  b2 = b.view();
  CHECK(b2(3, 4).bits() == b(3, 4).bits());
}

TEST_CASE_TEMPLATE("half-width tensors: randn and uniform are the float fills rounded", H, gx::bfloat16, gx::half) {
  auto const s = gx::dims(33, 17);
  auto const rn = gx::randn<H, gx::col_major>(s, 5, 0.5f, 2.0f);
  auto const rf = gx::randn<float, gx::col_major>(s, 5, 0.5f, 2.0f);
  for (gx::index_t i = 0; i < 33; ++i)
    for (gx::index_t j = 0; j < 17; ++j) REQUIRE(rn(i, j).bits() == H(rf(i, j)).bits());
  // [lo, hi) holds after rounding; elsewhere the float fill's value rounded
  auto const un = gx::uniform<H>(s, 9, -1.0f, 1.0f);
  auto const uf = gx::uniform<float>(s, 9, -1.0f, 1.0f);
  for (gx::index_t i = 0; i < 33; ++i)
    for (gx::index_t j = 0; j < 17; ++j) {
      float const v = float(un(i, j));
      REQUIRE(v >= -1.0f);
      REQUIRE(v < 1.0f);
      if (float(H(uf(i, j))) < 1.0f) REQUIRE(un(i, j).bits() == H(uf(i, j)).bits());
      else REQUIRE(un(i, j).bits() == H(-1.0f).bits());
    }
  // an interval so narrow that values round to hi: they become lo
  auto const narrow = gx::uniform<H>(gx::dims(64), 3, 1.0f, 1.0009765625f);
  for (gx::index_t k = 0; k < 64; ++k) {
    REQUIRE(float(narrow(k)) >= 1.0f);
    REQUIRE(float(narrow(k)) < 1.0009765625f);
  }
}
