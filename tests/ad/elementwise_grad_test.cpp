// Gradients of elementwise functions and operators, scalars on both sides, pow, max/min,
// broadcasting, against central differences in double precision.
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

TEST_CASE_TEMPLATE("elementwise: operators between a parameter and a tensor, either side", C,
                   GRADIX_AD_CONFIGS) {
  auto x = C::make(21);
  auto c = C::values(22);
  auto pos = C::values(23, 0.5, 2.0);  // divisors away from zero
  auto w = C::values(24);
  SUBCASE("p + c") {
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(w * gx::tanh(p + c)); }, x);
  }
  SUBCASE("c + p") {
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(w * gx::tanh(c + p)); }, x);
  }
  SUBCASE("p - c") {
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(w * gx::tanh(p - c)); }, x);
  }
  SUBCASE("c - p") {
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(w * gx::tanh(c - p)); }, x);
  }
  SUBCASE("p * c") {
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(w * gx::tanh(p * c)); }, x);
  }
  SUBCASE("c * p") {
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(w * gx::tanh(c * p)); }, x);
  }
  SUBCASE("p / c") {
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(w * gx::tanh(p / pos)); }, x);
  }
  SUBCASE("c / p") {
    auto y = C::make(25, 0.5, 2.0);
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(w * gx::tanh(c / p)); }, y);
  }
}

TEST_CASE_TEMPLATE("elementwise: one parameter on both sides of an operator", C,
                   GRADIX_AD_CONFIGS) {
  auto x = C::make(31, 0.5, 1.5);
  auto w = C::values(32);
  SUBCASE("p * p") {
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(w * (p * p)); }, x);
  }
  SUBCASE("p + p") {
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(w * (p + p)); }, x);
  }
  SUBCASE("p - p is 0") {
    auto g = gx::grad(gx::sum(w * (x - x)), x).to_dense();
    for (gx::index_t k = 0; k < g.size(); ++k) CHECK(g.data()[k] == 0.0);
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(w * (p - p)); }, x);
  }
  SUBCASE("p / (p + 2)") {
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(w * (p / (p + 2.0))); }, x);
  }
  SUBCASE("exp(p) * log(p) / sqrt(p)") {
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(w * (gx::exp(p) * gx::log(p) / gx::sqrt(p))); }, x);
  }
  SUBCASE("pow(p, p)") {
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(w * gx::pow(p, p)); }, x);
  }
}

TEST_CASE_TEMPLATE("elementwise: two parameters in one expression", C, GRADIX_AD_CONFIGS) {
  auto a = C::make(41);
  auto b = C::make(42, 0.5, 1.5);
  auto w = C::values(43);
  auto f = [&](auto& pa, auto& pb) { return gx::sum(w * gx::tanh(pa * pb + pa / pb)); };
  CHECK_NUMGRAD([&](auto& p) { return f(p, b); }, a);
  CHECK_NUMGRAD([&](auto& p) { return f(a, p); }, b);
  // grad with both parameters equals grad with each alone
  auto [ga, gb] = gx::grad(f(a, b), a, b);
  auto ga1 = gx::grad(f(a, b), a);
  auto gb1 = gx::grad(f(a, b), b);
  CHECK(gx::testing::same_bits(ga.to_dense(), ga1.to_dense()));
  CHECK(gx::testing::same_bits(gb.to_dense(), gb1.to_dense()));
}

TEST_CASE_TEMPLATE("elementwise: C++ scalars on both sides", C, GRADIX_AD_CONFIGS) {
  auto x = C::make(51, 0.5, 1.5);
  auto w = C::values(52);
  SUBCASE("p + s, s + p") {
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(w * gx::tanh(p + 0.25)); }, x);
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(w * gx::tanh(0.25 + p)); }, x);
  }
  SUBCASE("p - s, s - p") {
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(w * gx::tanh(p - 0.75)); }, x);
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(w * gx::tanh(0.75 - p)); }, x);
  }
  SUBCASE("p * s, s * p") {
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(w * gx::tanh(p * 2.5)); }, x);
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(w * gx::tanh(2.5 * p)); }, x);
  }
  SUBCASE("p / s, s / p") {
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(w * gx::tanh(p / 3.0)); }, x);
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(w * gx::tanh(3.0 / p)); }, x);
  }
  SUBCASE("integer scalars") {
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(w * (2 * p - p / 4 + 1)); }, x);
  }
}

TEST_CASE_TEMPLATE("elementwise: pow with parameters and scalars as base and exponent", C,
                   GRADIX_AD_CONFIGS) {
  auto x = C::make(61, 0.5, 1.5);
  auto e = C::values(62, -1.5, 2.5);
  auto base = C::values(63, 0.5, 2.0);
  auto w = C::values(64);
  SUBCASE("pow(p, tensor)") {
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(w * gx::pow(p, e)); }, x);
  }
  SUBCASE("pow(tensor, p)") {
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(w * gx::pow(base, p)); }, x);
  }
  SUBCASE("pow(p, scalar)") {
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(w * gx::pow(p, 2.5)); }, x);
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(w * gx::pow(p, -0.5)); }, x);
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(w * gx::pow(p, 3)); }, x);
  }
  SUBCASE("pow(scalar, p)") {
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(w * gx::pow(1.7, p)); }, x);
  }
  SUBCASE("pow of an expression") {
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(w * gx::pow(gx::sigmoid(p) + 0.5, gx::tanh(p))); },
                  x);
  }
}

TEST_CASE_TEMPLATE("elementwise: max and min (no ties)", C, GRADIX_AD_CONFIGS) {
  auto x = C::make(71);
  away_from_zero(x);
  auto w = C::values(72);
  // c differs from x by +-0.3 in a checkerboard: each side wins somewhere, never a tie
  auto c = C::values(73);
  for (gx::index_t k = 0; k < c.size(); ++k)
    c.data()[k] = x.value().data()[k] + (k % 3 ? 0.3 : -0.3);
  SUBCASE("max(p, c), max(c, p)") {
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(w * gx::max(p, c)); }, x);
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(w * gx::max(c, p)); }, x);
  }
  SUBCASE("min(p, c), min(c, p)") {
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(w * gx::min(p, c)); }, x);
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(w * gx::min(c, p)); }, x);
  }
  SUBCASE("with scalars") {
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(w * gx::max(p, 0.1)); }, x);
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(w * gx::min(0.1, p)); }, x);
  }
  SUBCASE("max(p, f(p))") {
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(w * gx::max(p, 0.5 * gx::exp(p) - 0.45)); }, x);
  }
}

TEST_CASE("elementwise: pow of a negative base with integer exponents; integer constants") {
  auto x = gx::param(gx::uniform<double>(gx::dims(4, 3), 17, -1.5, -0.5));
  auto w = gx::uniform<double>(gx::dims(4, 3), 18, -1.0, 1.0);
  CHECK_NUMGRAD([&](auto& p) { return gx::sum(w * gx::pow(p, 3.0)); }, x);
  CHECK_NUMGRAD([&](auto& p) { return gx::sum(w * gx::pow(p, 2)); }, x);
  CHECK_NUMGRAD([&](auto& p) { return gx::sum(w * gx::pow(p, -2.0)); }, x);
  // integer tensors enter through cast and get no gradient of their own
  auto k = gx::iota<int>(gx::dims(4, 3));
  CHECK_NUMGRAD(
      [&](auto& p) {
        return gx::sum(gx::tanh(p * gx::cast<double>(k)) + gx::cast<double>(k * 2) / p);
      },
      x);
}

TEST_CASE("elementwise: a float parameter in a double expression (mixed precision)") {
  auto x = gx::param(gx::uniform<float>(gx::dims(4, 3), 19, 0.5f, 1.5f), gx::sparse_grad<1>);
  auto w = gx::uniform<double>(gx::dims(4, 3), 20, -1.0, 1.0);
  gx::testing::numgrad_options o;
  o.h_rel = 1e-3;  // representable steps in float; the function is evaluated in double
  o.rtol = 1e-5;
  o.atol = 1e-6;
  CHECK_NUMGRAD([&](auto& p) { return gx::sum(w * gx::log(p) * p); }, x, o);
  CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::exp(w / p)); }, x, o);
}

TEST_CASE("elementwise: subgradients at the kinks are the documented ones") {
  auto x = gx::param(gx::tensor<double, shape<4>>{0.0, 1.0, -1.0, 0.0});
  auto c = gx::tensor<double, shape<4>>{0.0, 0.5, 2.0, 1.0};
  auto g = gx::grad(gx::sum(gx::relu(x)), x).to_dense();
  CHECK(g(0) == 0.0);  // relu'(0) = 0
  CHECK(g(1) == 1.0);
  CHECK(g(2) == 0.0);
  g = gx::grad(gx::sum(gx::abs(x)), x).to_dense();
  CHECK(g(0) == 0.0);  // abs'(0) = 0
  CHECK(g(1) == 1.0);
  CHECK(g(2) == -1.0);
  g = gx::grad(gx::sum(gx::max(x, c)), x).to_dense();
  CHECK(g(0) == 1.0);  // tie: the first operand
  CHECK(g(1) == 1.0);
  CHECK(g(2) == 0.0);
  g = gx::grad(gx::sum(gx::max(c, x)), x).to_dense();
  CHECK(g(0) == 0.0);                                  // tie: the first operand (c)
  g = gx::grad(gx::sum(gx::max(x, x)), x).to_dense();  // a tie with itself: 1 + 0
  for (int j = 0; j < 4; ++j) CHECK(g(j) == 1.0);
  g = gx::grad(gx::sum(gx::min(x * 1.0, x)), x).to_dense();
  for (int j = 0; j < 4; ++j) CHECK(g(j) == 1.0);
  g = gx::grad(gx::sum(gx::min(x, c)), x).to_dense();
  CHECK(g(0) == 1.0);
  CHECK(g(3) == 1.0);
  CHECK(g(1) == 0.0);
}

// ---- broadcasting: the parameter is the broadcast operand, the gradient sums over the
// broadcast axes

TEST_CASE("elementwise broadcast: a rank-1 parameter against a matrix (static and dynamic rows)") {
  auto b = gx::param(gx::uniform<double>(shape<3>{}, 81, -1.0, 1.0));
  auto ms = gx::uniform<double>(shape<5, 3>{}, 82, -1.0, 1.0);
  auto md = gx::uniform<double>(gx::dims(5, gx::fix<3>), 82, -1.0, 1.0);
  auto mc = gx::uniform<double, gx::col_major>(gx::dims(5, gx::fix<3>), 82, -1.0, 1.0);
  CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::tanh(ms * p + p)); }, b);
  CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::tanh(p * md - p)); }, b);
  CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::tanh(mc / (p + 2.0))); }, b);
  // summing a broadcast multiplies by the extent
  auto g = gx::grad(gx::sum(md + b), b).to_dense();
  for (int j = 0; j < 3; ++j) CHECK(g(j) == 5.0);
}

TEST_CASE("elementwise broadcast: parameters of static extent 1 (rows, columns, outer product)") {
  auto r = gx::param(gx::uniform<double>(shape<1, 3>{}, 91, -1.0, 1.0));
  auto cd = gx::param(gx::uniform<double>(shape<5, 1>{}, 92, -1.0, 1.0), gx::sparse_grad<0>);
  auto cc = gx::param(gx::uniform<double, gx::col_major>(shape<5, 1>{}, 93, -1.0, 1.0));
  auto m = gx::uniform<double>(gx::dims(5, gx::fix<3>), 94, -1.0, 1.0);
  CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::sigmoid(m * p)); }, r);
  CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::sigmoid(m * p)); }, cd);
  CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::sigmoid(p - m)); }, cc);
  // outer product of two parameters: each sums over the other's axis
  CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::tanh(p * cd) * m); }, r);
  CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::tanh(r * p) * m); }, cd);
  // a scalar-shaped parameter (rank 0) broadcast against everything
  auto s = gx::param(gx::tensor<double, shape<>>{0.3});
  CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::tanh(p * m + r)); }, s);
  auto g = gx::grad(gx::sum(m * 0.0 + s), s).to_dense();
  CHECK(g() == 15.0);
}

TEST_CASE("elementwise broadcast: a matrix parameter against a rank-3 constant (leading axis)") {
  auto x =
      gx::param(gx::uniform<double>(gx::dims(4, gx::fix<3>), 101, -1.0, 1.0), gx::sparse_grad<1>);
  auto t = gx::uniform<double>(gx::dims(2, 4, 3), 102, -1.0, 1.0);
  CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::exp(t * p) * t); }, x);
  auto y = gx::param(gx::uniform<double>(shape<2, 1, 3>{}, 103, -1.0, 1.0));
  CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::exp(t * p) + t); }, y);
}
