// User functors (docs/ops.md, "Your own functions"): a functor written for scalars is lifted
// to SIMD packs lane by lane, and its results have the bits of the plain scalar calls in
// packs and tails alike; a functor with a pack overload gets whole packs; gradients use the
// functor's derivative (checked against central differences in double precision).
#include "ad/numgrad.hpp"
#include "testing.hpp"

#include <atomic>
#include <cmath>
#include <vector>

namespace gx = gradix;
using gx::dyn;
using gx::shape;
using gx::testing::bits_of;

namespace {
// softsign, written for float only: x / (1 + |x|); d/dx = 1 / (1 + |x|)^2 (docs/ops.md shows it)
// doc-snippet: softsign
struct softsign {
  static constexpr char const* name = "softsign";
  static float value(float x) { return x / (1.f + std::fabs(x)); }
  static float d_arg(float x, float) { return 1.f / ((1.f + std::fabs(x)) * (1.f + std::fabs(x))); }
};
// end doc-snippet
// the same for double (the gradient test)
struct softsign_d {
  static constexpr char const* name = "softsign";
  static double value(double x) { return x / (1.0 + std::fabs(x)); }
  static double d_arg(double x, double) { return 1.0 / ((1.0 + std::fabs(x)) * (1.0 + std::fabs(x))); }
};
// a binary functor for scalars: hypot-like sqrt(a^2 + b^2)
struct norm2 {
  static constexpr char const* name = "norm2";
  static double value(double a, double b) { return std::sqrt(a * a + b * b); }
  static double d_lhs(double a, double, double y) { return a / y; }
  static double d_rhs(double, double b, double y) { return b / y; }
};
// scalar and pack overloads: gradix passes packs (counted)
std::atomic<long> pack_calls{0}, scalar_calls{0};
struct twice {
  static constexpr char const* name = "twice";
  static float value(float x) {
    ++scalar_calls;
    return 2.f * x;
  }
  template <class V>
    requires gx::simd::vector_ext<V>
  static V value(V x) {
    ++pack_calls;
    return x + x;
  }
};
static_assert(gx::op::scalar_only_v<softsign>);
static_assert(!gx::op::scalar_only_v<twice>);
static_assert(!gx::op::scalar_only_v<gx::op::exp>);  // gradix's own functors take packs
}  // namespace

TEST_CASE("user functors: a scalar-only functor is lifted to packs, with the bits of scalar calls") {
  for (gx::index_t n : {gx::index_t(1), gx::index_t(7), gx::index_t(19), gx::index_t(1000)}) {
    CAPTURE(n);
    auto x = gx::uniform<float>(gx::dims(n), 3, -5.f, 5.f);
    auto y = gx::eval(gx::unary<softsign>(x) * 3.f);
    for (gx::index_t k = 0; k < n; ++k) CHECK(bits_of(y(k)) == bits_of(softsign::value(x(k)) * 3.f));
    auto xd = gx::uniform<double>(gx::dims(n), 4, -5.0, 5.0);
    auto z = gx::eval(gx::binary<norm2>(xd, 2.0));
    for (gx::index_t k = 0; k < n; ++k) CHECK(bits_of(z(k)) == bits_of(norm2::value(xd(k), 2.0)));
  }
  // the result keeps the operand's element type
  static_assert(std::is_same_v<gx::value_type_t<decltype(gx::unary<softsign>(std::declval<gx::tensor<float, shape<dyn>>&>()))>, float>);
}

TEST_CASE("user functors: a pack overload gets whole packs") {
  auto x = gx::uniform<float>(gx::dims(gx::index_t(1024)), 5, -1.f, 1.f);
  pack_calls = 0;
  scalar_calls = 0;
  auto y = gx::eval(gx::unary<twice>(x));
  for (gx::index_t k = 0; k < 1024; ++k) CHECK(y(k) == 2.f * x(k));
  if (gx::simd::enabled) CHECK(pack_calls.load() > 0);
  CHECK(scalar_calls.load() < 1024);
}

TEST_CASE("user functors: gradients through a lifted functor match central differences") {
  auto x = gx::param(gx::uniform<double>(gx::dims(gx::index_t(37)), 6, -3.0, 3.0));
  auto w = gx::uniform<double>(gx::dims(gx::index_t(37)), 7, -1.0, 1.0);
  CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::unary<softsign_d>(p * 2.0) * w); }, x);
  CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::binary<norm2>(p, w + 2.0) * w); }, x);
  CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::binary<norm2>(p * 0.5, p + 1.0)); }, x);
}
