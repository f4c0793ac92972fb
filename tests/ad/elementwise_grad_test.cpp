// Gradients of elementwise functions (unary functions, cast, gradix's float polynomials,
// softplus, clamp) against central differences in double precision; the operators are in
// elementwise_ops_grad_test.cpp.
#include "ad/configs.hpp"
#include "ad/numgrad.hpp"
#include "testing.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <vector>

namespace gx = gradix;
using gx::dyn;
using gx::shape;

namespace {

/// Flips the sign of every other element and keeps |x| in [0.2, 1]: away from the kinks of
/// relu and abs (and from max/min ties at 0).
template <class P>
void away_from_zero(P& p) {
  auto& t = p.value();
  for (gx::index_t k = 0; k < t.size(); ++k) {
    double& x = t.data()[k];
    x = (k % 2 ? -1.0 : 1.0) * (0.2 + 0.8 * std::abs(x));
  }
}

}  // namespace

TEST_CASE_TEMPLATE("elementwise: unary functions match central differences", C, GRADIX_AD_CONFIGS) {
  auto x = C::make(11);
  away_from_zero(x);
  auto w = C::values(12);  // a constant weight, so that gradients differ per element
  SUBCASE("neg") {
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(w * -p); }, x);
  }
  SUBCASE("exp") {
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(w * gx::exp(p)); }, x);
  }
  SUBCASE("log") {
    auto y = C::make(13, 0.3, 2.0);
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(w * gx::log(p)); }, y);
  }
  SUBCASE("tanh") {
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(w * gx::tanh(p)); }, x);
  }
  SUBCASE("sigmoid") {
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(w * gx::sigmoid(p)); }, x);
  }
  SUBCASE("expm1") {
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(w * gx::expm1(p)); }, x);
  }
  SUBCASE("log1p") {
    auto y = C::make(17, -0.7, 2.0);
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(w * gx::log1p(p)); }, y);
  }
  SUBCASE("sin") {
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(w * gx::sin(p * 3.0)); }, x);
  }
  SUBCASE("cos") {
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(w * gx::cos(p * 3.0)); }, x);
  }
  SUBCASE("relu") {
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(w * gx::relu(p)); }, x);
  }
  SUBCASE("softplus") {
    auto y = C::make(18, -6.0, 6.0);
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(w * gx::softplus(p)); }, y);
  }
  SUBCASE("log_sigmoid") {
    auto y = C::make(19, -6.0, 6.0);
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(w * gx::log_sigmoid(p)); }, y);
  }
  SUBCASE("clamp") {
    // |x| in [0.2, 1]: bounds at +-0.5 and 0.7 are away from every element
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(w * gx::clamp(p, -0.5, 0.7)); }, x);
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(w * gx::clamp(p * 3.0, -2.0, 1.5) * p); }, x);
  }
  SUBCASE("sqrt") {
    auto y = C::make(14, 0.3, 2.0);
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(w * gx::sqrt(p)); }, y);
  }
  SUBCASE("square") {
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(w * gx::square(p)); }, x);
  }
  SUBCASE("abs") {
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(w * gx::abs(p)); }, x);
  }
  SUBCASE("cast<double> (identity)") {
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(w * gx::cast<double>(p)); }, x);
  }
  SUBCASE("a chain of unary functions") {
    CHECK_NUMGRAD(
        [&](auto& p) {
          return gx::sum(w * gx::exp(gx::tanh(gx::sigmoid(p) * 2.0) - gx::square(p)));
        },
        x);
  }
  SUBCASE("mean of a function") {
    CHECK_NUMGRAD([&](auto& p) { return gx::mean(gx::sigmoid(p) * gx::tanh(p)); }, x);
  }
}

TEST_CASE("elementwise: cast<float> passes the gradient through (float tolerance)") {
  auto x = gx::param(gx::uniform<double>(shape<5, 3>{}, 15, -1.0, 1.0));
  auto w = gx::uniform<double>(shape<5, 3>{}, 16, -1.0, 1.0);
  gx::testing::numgrad_options o;
  o.h_rel = 1e-2;  // the function rounds to float: take a large step (it is linear)
  o.rtol = 1e-4;
  o.atol = 1e-5;
  CHECK_NUMGRAD([&](auto& p) { return gx::sum(w * gx::cast<float>(p)); }, x, o);
}

TEST_CASE("elementwise: float functions (gradix's own polynomials) match central differences") {
  // float parameters and float arithmetic: values and derivatives come from core/vmath.hpp.
  // The step is large (the function rounds to float), the tolerance float-sized.
  auto x = gx::param(gx::uniform<float>(gx::dims(7, 5), 51, -3.0f, 3.0f));
  auto xp = gx::param(gx::uniform<float>(gx::dims(7, 5), 52, 0.2f, 3.0f));
  auto w = gx::uniform<float>(gx::dims(7, 5), 53, -1.0f, 1.0f);
  gx::testing::numgrad_options o;
  o.h_rel = 1e-2;
  o.rtol = 2e-3;
  o.atol = 1e-3;
  CHECK_NUMGRAD([&](auto& p) { return gx::sum(w * gx::exp(p)); }, x, o);
  CHECK_NUMGRAD([&](auto& p) { return gx::sum(w * gx::log(p)); }, xp, o);
  CHECK_NUMGRAD([&](auto& p) { return gx::sum(w * gx::tanh(p)); }, x, o);
  CHECK_NUMGRAD([&](auto& p) { return gx::sum(w * gx::sigmoid(p)); }, x, o);
  CHECK_NUMGRAD([&](auto& p) { return gx::sum(w * gx::expm1(p)); }, x, o);
  CHECK_NUMGRAD([&](auto& p) { return gx::sum(w * gx::log1p(p)); }, xp, o);
  CHECK_NUMGRAD([&](auto& p) { return gx::sum(w * gx::sin(p)); }, x, o);
  CHECK_NUMGRAD([&](auto& p) { return gx::sum(w * gx::cos(p)); }, x, o);
  CHECK_NUMGRAD([&](auto& p) { return gx::sum(w * gx::softplus(p)); }, x, o);
  CHECK_NUMGRAD([&](auto& p) { return gx::sum(w * gx::log_sigmoid(p)); }, x, o);
}

TEST_CASE("elementwise: a float gradient has the same bits in a full pack and in a loop tail") {
  // d sum(f(x)) / dx = 1 * f'(x): backward writes op::<f>::d_arg(x, f(x)) itself at every
  // element, whether the element falls in a whole SIMD pack or in the tail (rows of 37).
  auto x = gx::param(gx::uniform<float>(gx::dims(3, 37), 54, -8.0f, 8.0f));
  auto xp = gx::param(gx::uniform<float>(gx::dims(3, 37), 55, 0.01f, 8.0f));
  auto check = [](auto& p, auto e, auto op) {
    using Op = decltype(op);
    auto g = gx::grad(gx::sum(e), p).to_dense();
    long bad = 0, first = -1;
    for (gx::index_t k = 0; k < g.size(); ++k) {
      float v = p.value().data()[k];
      float want = Op::d_arg(v, Op::value(v));
      if (std::bit_cast<std::uint32_t>(g.data()[k]) != std::bit_cast<std::uint32_t>(want)) {
        if (first < 0) first = long(k);
        ++bad;
      }
    }
    CAPTURE(Op::name);
    CAPTURE(first);
    CHECK(bad == 0);
  };
  check(x, gx::exp(x), gx::op::exp{});
  check(xp, gx::log(xp), gx::op::log{});
  check(x, gx::tanh(x), gx::op::tanh{});
  check(x, gx::sigmoid(x), gx::op::sigmoid{});
  check(x, gx::expm1(x), gx::op::expm1{});
  check(xp, gx::log1p(xp), gx::op::log1p{});
  check(x, gx::sin(x), gx::op::sin{});
  check(x, gx::cos(x), gx::op::cos{});
  check(x, gx::softplus(x), gx::op::softplus{});
  check(x, gx::log_sigmoid(x), gx::op::log_sigmoid{});
}

TEST_CASE("elementwise: softplus and log_sigmoid are stable at both ends and accurate in float") {
  // against log1p(exp(x)) and -log1p(exp(-x)) in double, over [-100, 100] and the ends
  std::vector<float> xs;
  for (int k = -4000; k <= 4000; ++k) xs.push_back(float(k) * 0.025f);
  for (float v : {-1e30f, -3e4f, -700.f, 87.f, 89.f, 700.f, 3e4f, 1e30f}) xs.push_back(v);
  auto x = gx::tensor<float, gx::shape<gx::dyn>>(gx::dims(gx::index_t(xs.size())));
  for (std::size_t k = 0; k < xs.size(); ++k) x.data()[k] = xs[k];
  auto sp = gx::eval(gx::softplus(x));
  auto ls = gx::eval(gx::log_sigmoid(x));
  double worst_sp = 0, worst_ls = 0;
  for (std::size_t k = 0; k < xs.size(); ++k) {
    double v = xs[k];
    double want_sp = v > 0 ? v + std::log1p(std::exp(-v)) : std::log1p(std::exp(v));
    double want_ls = v < 0 ? v - std::log1p(std::exp(v)) : -std::log1p(std::exp(-v));
    double got_sp = sp.data()[k], got_ls = ls.data()[k];
    REQUIRE(std::isfinite(got_sp));
    REQUIRE(std::isfinite(got_ls));
    // relative error, with the float denormal range as the absolute floor
    auto err = [](double got, double want) {
      return std::abs(got - want) / std::max(std::abs(want), 1e-37);
    };
    worst_sp = std::max(worst_sp, err(got_sp, want_sp));
    worst_ls = std::max(worst_ls, err(got_ls, want_ls));
  }
  CHECK(worst_sp < 4e-7);  // about 3 ulp: exp and log1p each within 1-2 ulp, one addition
  CHECK(worst_ls < 4e-7);
  // the ends: no overflow, no loss
  auto e = gx::tensor<double, gx::shape<4>>{-800.0, -40.0, 40.0, 800.0};
  auto spe = gx::eval(gx::softplus(e));
  auto lse = gx::eval(gx::log_sigmoid(e));
  CHECK(spe.data()[0] == 0.0);
  CHECK(spe.data()[1] == doctest::Approx(std::exp(-40.0)).epsilon(1e-12));
  CHECK(spe.data()[3] == 800.0);
  CHECK(lse.data()[0] == -800.0);
  CHECK(lse.data()[2] == doctest::Approx(-std::exp(-40.0)).epsilon(1e-12));
  CHECK(lse.data()[3] == 0.0);
  // NaN propagates; clamp too
  auto n = gx::tensor<float, gx::shape<2>>{std::nanf(""), 1.0f};
  CHECK(std::isnan(gx::eval(gx::softplus(n)).data()[0]));
  CHECK(std::isnan(gx::eval(gx::log_sigmoid(n)).data()[0]));
  CHECK(std::isnan(gx::eval(gx::clamp(n, 0.0f, 0.5f)).data()[0]));
  CHECK(gx::eval(gx::clamp(n, 0.0f, 0.5f)).data()[1] == 0.5f);
}

TEST_CASE("elementwise: clamp's gradient is 1 on the closed interval, 0 outside, and reaches tensor bounds") {
  auto x = gx::param(gx::tensor<double, gx::shape<6>>{-2.0, -1.0, -0.5, 0.5, 1.0, 2.0});
  auto g = gx::grad(gx::sum(gx::clamp(x, -1.0, 1.0)), x).to_dense();
  double want[] = {0, 1, 1, 1, 1, 0};
  for (int k = 0; k < 6; ++k) CHECK(g.data()[k] == want[k]);
  // lo > hi: the result is hi everywhere, no gradient to x
  auto v = gx::eval(gx::clamp(x.value(), 1.0, -1.0));
  for (int k = 0; k < 6; ++k) CHECK(v.data()[k] == -1.0);
  // tensor bounds get the gradient where they bind
  auto lo = gx::param(gx::tensor<double, gx::shape<6>>{-1.5, -1.5, 0.0, 0.0, 0.0, 0.0});
  auto gl = gx::grad(gx::sum(gx::clamp(x.value(), lo, 1.5)), lo).to_dense();
  double want_l[] = {1, 0, 1, 0, 0, 0};
  for (int k = 0; k < 6; ++k) CHECK(gl.data()[k] == want_l[k]);
}
