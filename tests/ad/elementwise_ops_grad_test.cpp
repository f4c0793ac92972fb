// Gradients of elementwise operators: a parameter and a tensor, parameters on both sides,
// scalars, pow, max/min, broadcasting, against central differences in double precision.
// (Split from elementwise_grad_test.cpp, which has the functions, so that each file compiles
// in moderate time.)
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
