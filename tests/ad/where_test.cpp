// Comparisons (0/1 masks) and where(mask, a, b): values bit for bit (NaN, infinities and
// signed zeros on the side not taken never leak), element types, broadcasting, errors, and
// gradients against central differences in double precision and against the hand formula.
#include "ad/configs.hpp"
#include "ad/numgrad.hpp"
#include "testing.hpp"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

namespace gx = gradix;
using gx::dyn;
using gx::shape;
using gx::testing::bits_of;

namespace {
using TF = gx::tensor<float, shape<dyn>>;
using TD = gx::tensor<double, shape<dyn>>;
using TI = gx::tensor<std::int32_t, shape<dyn>>;

// element types: a comparison gives its operands' promoted type; where the promotion of a
// and b (and the mask)
static_assert(std::is_same_v<gx::value_type_t<decltype(std::declval<TF&>() < std::declval<TF&>())>, float>);
static_assert(std::is_same_v<gx::value_type_t<decltype(std::declval<TF&>() > 0)>, float>);
static_assert(std::is_same_v<gx::value_type_t<decltype(0.5f <= std::declval<TD&>())>, double>);
static_assert(std::is_same_v<gx::value_type_t<decltype(std::declval<TI&>() == 3)>, std::int32_t>);
static_assert(std::is_same_v<gx::value_type_t<decltype(std::declval<TI&>() != std::declval<TF&>())>, float>);
static_assert(std::is_same_v<gx::value_type_t<decltype(gx::where(std::declval<TF&>() > 0, std::declval<TF&>(), 0))>, float>);
static_assert(std::is_same_v<gx::value_type_t<decltype(gx::where(std::declval<TI&>() > 0, std::declval<TF&>(), 1.5f))>, float>);
static_assert(std::is_same_v<gx::value_type_t<decltype(gx::where(std::declval<TI&>() > 0, 2, 1))>, std::int32_t>);
// no gradient flows through a comparison, nor into a mask: sum(x > 0) plans no kernel
static_assert(gx::backward_plan_t<decltype(gx::sum(std::declval<gx::parameter<double, shape<dyn>>&>() > 0.0))>::size == 0);
static_assert(gx::backward_plan_t<decltype(gx::sum(gx::where(std::declval<gx::parameter<double, shape<dyn>>&>(), 1.0, 2.0)))>::size == 0);
}  // namespace

TEST_CASE("comparisons: 0/1 masks, NaN compares unequal, ties, integers, scalars on either side") {
  float const nan = std::numeric_limits<float>::quiet_NaN();
  float const inf = std::numeric_limits<float>::infinity();
  // 19 elements: two packs and a tail on every build
  std::vector<float> av = {1, 2, 3, nan, -inf, inf, 0.f, -0.f, 5, -5, 1e-30f, 7, 7, nan, 2, 3, 4, -1, 0};
  std::vector<float> bv = {1, 3, 2, 1, -inf, 0, -0.f, 0.f, 5, 5, 0, 8, 6, nan, 2, 2, 5, -1, nan};
  TF a(gx::dims(gx::index_t(av.size()))), b(gx::dims(gx::index_t(bv.size())));
  std::memcpy(a.data(), av.data(), av.size() * sizeof(float));
  std::memcpy(b.data(), bv.data(), bv.size() * sizeof(float));
  auto lt = gx::eval(a < b), le = gx::eval(a <= b), gt = gx::eval(a > b), ge = gx::eval(a >= b);
  auto eq = gx::eval(a == b), ne = gx::eval(a != b);
  for (std::size_t k = 0; k < av.size(); ++k) {
    CAPTURE(k);
    float x = av[k], y = bv[k];
    CHECK(bits_of(lt(gx::index_t(k))) == bits_of(x < y ? 1.f : 0.f));
    CHECK(bits_of(le(gx::index_t(k))) == bits_of(x <= y ? 1.f : 0.f));
    CHECK(bits_of(gt(gx::index_t(k))) == bits_of(x > y ? 1.f : 0.f));
    CHECK(bits_of(ge(gx::index_t(k))) == bits_of(x >= y ? 1.f : 0.f));
    CHECK(bits_of(eq(gx::index_t(k))) == bits_of(x == y ? 1.f : 0.f));
    CHECK(bits_of(ne(gx::index_t(k))) == bits_of(x != y ? 1.f : 0.f));
  }
  // a scalar on either side
  auto s1 = gx::eval(0.f < a), s2 = gx::eval(a >= 2);
  for (std::size_t k = 0; k < av.size(); ++k) {
    CHECK(s1(gx::index_t(k)) == (0.f < av[k] ? 1.f : 0.f));
    CHECK(s2(gx::index_t(k)) == (av[k] >= 2 ? 1.f : 0.f));
  }
  // integers: an accuracy count
  TI pred(gx::dims(5)), label(gx::dims(5));
  for (int k = 0; k < 5; ++k) {
    pred(k) = k % 3;
    label(k) = k % 2;
  }
  CHECK(gx::value(gx::sum(pred == label)) == 2);  // pred 0 1 2 0 1, label 0 1 0 1 0
  CHECK(gx::value(gx::mean(gx::cast<float>(pred == label))) == doctest::Approx(0.4));
  // broadcasting, with the result's shape
  gx::tensor<float, shape<3, 1>> col{0.f, 1.f, 2.f};
  gx::tensor<float, shape<4>> row{0.5f, 1.5f, 1.f, -1.f};
  auto m = gx::eval(col > row);
  static_assert(std::is_same_v<gx::shape_of_t<decltype(m)>, shape<3, 4>>);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j) CHECK(m(i, j) == (col(i, 0) > row(j) ? 1.f : 0.f));
}

TEST_CASE("where: the bits of the side taken; NaN, infinities and -0 on the other side never leak") {
  float const nan = std::numeric_limits<float>::quiet_NaN();
  float const inf = std::numeric_limits<float>::infinity();
  for (gx::index_t n : {gx::index_t(1), gx::index_t(7), gx::index_t(8), gx::index_t(19), gx::index_t(1000)}) {
    CAPTURE(n);
    TF m(gx::dims(n)), a(gx::dims(n)), b(gx::dims(n));
    float const specials[] = {nan, -nan, inf, -inf, 0.f, -0.f, 1e-40f, -3.5f, 2.f};
    for (gx::index_t k = 0; k < n; ++k) {
      m(k) = (k % 3 == 0) ? 0.f : (k % 3 == 1 ? 1.f : -0.f);  // -0 does not select
      a(k) = specials[k % 9];
      b(k) = specials[(k + 4) % 9];
    }
    auto r = gx::eval(gx::where(m, a, b));
    for (gx::index_t k = 0; k < n; ++k) {
      CAPTURE(k);
      float want = m(k) != 0.f ? a(k) : b(k);
      CHECK(bits_of(r(k)) == bits_of(want));
    }
    // a NaN mask selects (it is nonzero)
    m(0) = nan;
    CHECK(bits_of(gx::eval(gx::where(m, a, b))(0)) == bits_of(a(0)));
  }
  // the classic: log where positive, no NaN from the side not taken
  gx::tensor<float, shape<4>> x{-1.f, 0.f, 1.f, 2.f};
  auto y = gx::eval(gx::where(x > 0, gx::log(x), 0.f));
  CHECK(bits_of(y(0)) == bits_of(0.f));
  CHECK(bits_of(y(1)) == bits_of(0.f));
  CHECK(y(3) == doctest::Approx(std::log(2.0)));
}

TEST_CASE("where: scalars, broadcasting and the shape check name the operation") {
  gx::tensor<float, shape<3, 1>> m{1.f, 0.f, 1.f};
  gx::tensor<float, shape<4>> a{1.f, 2.f, 3.f, 4.f};
  auto r = gx::eval(gx::where(m, a, -1.f));
  static_assert(std::is_same_v<gx::shape_of_t<decltype(r)>, shape<3, 4>>);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j) CHECK(r(i, j) == (m(i, 0) != 0.f ? a(j) : -1.f));
  auto r2 = gx::eval(gx::where(a > 2.5f, 1.f, 0.f));
  CHECK(r2(0) == 0.f);
  CHECK(r2(3) == 1.f);
  TF p(gx::dims(3)), q(gx::dims(4));
  CHECK_THROWS_WITH_AS((void)gx::where(p > 0, p, q), doctest::Contains("gradix::where: shapes [3] and [4]"),
                       gx::error);
}

TEST_CASE_TEMPLATE("where: gradients match central differences and the hand formula", C, GRADIX_AD_CONFIGS) {
  auto x = C::make(21);
  auto w = C::values(22);
  // the mask is away from its threshold at every element: |x| in [0.2, 1]
  auto& t = x.value();
  for (gx::index_t k = 0; k < t.size(); ++k) {
    double& v = t.data()[k];
    v = (k % 2 ? -1.0 : 1.0) * (0.2 + 0.8 * std::abs(v));
  }
  SUBCASE("both sides from one parameter") {
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(w * gx::where(p > 0.0, gx::sin(p * 2.0), p * p)); }, x);
  }
  SUBCASE("leaky relu") {
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(w * gx::where(p > 0.0, p, p * 0.01)); }, x);
  }
  SUBCASE("a mask from another expression, a scalar side") {
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::where(w < 0.0, gx::exp(p), 3.0) * p); }, x);
  }
  SUBCASE("a mask times an expression") {
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(w * p * (p < 0.5)); }, x);
  }
}

TEST_CASE("where: d/da is 1 where the mask selects and 0 elsewhere; the mask gets nothing") {
  auto x = gx::param(gx::tensor<double, shape<6>>{-2.0, -1.0, -0.5, 0.5, 1.0, 2.0});
  auto y = gx::param(gx::tensor<double, shape<6>>{1, 2, 3, 4, 5, 6});
  // d/dx sum(where(x > 0, x^2, 3 x)) = 2x where x > 0, else 3; d/dy = 0 (the mask reads y)
  auto [gx_, gy_] = gx::grad(gx::sum(gx::where(x > 0.0, x * x, x * 3.0) + gx::where(y - 3.0, 0.0, 1.0)), x, y);
  auto g = gx_.to_dense();
  double want[] = {3, 3, 3, 1, 2, 4};
  for (int k = 0; k < 6; ++k) CHECK(g.data()[k] == want[k]);
  auto h = gy_.to_dense();
  for (int k = 0; k < 6; ++k) CHECK(h.data()[k] == 0.0);
}
