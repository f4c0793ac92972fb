// Gradients of reductions (sum, mean, max; over all axes and chosen axes; with and without
// keep_dims; negative axes; rank 3; reductions inside expressions) against central
// differences in double precision.
#include "ad/configs.hpp"
#include "ad/numgrad.hpp"
#include "testing.hpp"

#include <cmath>

namespace gx = gradix;
using gx::dyn;
using gx::shape;

TEST_CASE_TEMPLATE("reduce: sum, mean, max over all elements", C, GRADIX_AD_CONFIGS) {
  auto x = C::make(201);
  auto w = C::values(202);
  SUBCASE("sum") {
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(w * gx::tanh(p)); }, x);
  }
  SUBCASE("mean") {
    CHECK_NUMGRAD([&](auto& p) { return gx::mean(w * gx::tanh(p)); }, x);
  }
  SUBCASE("max") {
    CHECK_NUMGRAD([&](auto& p) { return gx::max(w * gx::tanh(p)); }, x);
    // the gradient of max(p) is one-hot at the arg-max
    auto g = gx::grad(gx::max(x), x).to_dense();
    double m = gx::value(gx::max(x));
    int ones = 0;
    for (gx::index_t k = 0; k < g.size(); ++k) {
      if (g.data()[k] == 1.0) {
        ++ones;
        CHECK(x.value().data()[k] == m);
      } else {
        CHECK(g.data()[k] == 0.0);
      }
    }
    CHECK(ones == 1);
  }
  SUBCASE("sum of a sum is the plain sum") {
    auto g = gx::grad(gx::sum(gx::sum<0>(x)), x).to_dense();
    for (gx::index_t k = 0; k < g.size(); ++k) CHECK(g.data()[k] == 1.0);
  }
  SUBCASE("a scalar reduction inside an expression") {
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(w * gx::tanh(p * gx::mean(p))); }, x);
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(w * (p - gx::max(p))); }, x);
  }
}

TEST_CASE_TEMPLATE("reduce: over one axis, with and without keep_dims", C, GRADIX_AD_CONFIGS) {
  auto x = C::make(211);
  SUBCASE("sum<0>") {
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::tanh(gx::sum<0>(p))); }, x);
  }
  SUBCASE("sum<1>") {
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::tanh(gx::sum<1>(p))); }, x);
  }
  SUBCASE("sum<-1>") {
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::tanh(gx::sum<-1>(p))); }, x);
  }
  SUBCASE("sum<0> keep_dims") {
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::tanh(gx::sum<0>(p, gx::keep_dims))); }, x);
  }
  SUBCASE("sum<1> keep_dims") {
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::tanh(gx::sum<1>(p, gx::keep_dims))); }, x);
  }
  SUBCASE("mean<0>") {
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::exp(gx::mean<0>(p))); }, x);
  }
  SUBCASE("mean<1>") {
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::exp(gx::mean<1>(p))); }, x);
  }
  SUBCASE("mean<0> keep_dims") {
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::exp(gx::mean<0>(p, gx::keep_dims))); }, x);
  }
  SUBCASE("mean<1> keep_dims") {
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::exp(gx::mean<1>(p, gx::keep_dims))); }, x);
  }
  SUBCASE("max<0>") {
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::exp(gx::max<0>(p))); }, x);
  }
  SUBCASE("max<1>") {
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::exp(gx::max<1>(p))); }, x);
  }
  SUBCASE("max<0> keep_dims") {
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::exp(gx::max<0>(p, gx::keep_dims))); }, x);
  }
  SUBCASE("max<1> keep_dims") {
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::exp(gx::max<1>(p, gx::keep_dims))); }, x);
  }
  SUBCASE("sum<0, 1> and mean<0, 1> keep_dims") {
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::exp(gx::sum<0, 1>(p))); }, x);
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::exp(gx::mean<0, 1>(p, gx::keep_dims))); }, x);
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::exp(gx::max<0, 1>(p, gx::keep_dims))); }, x);
  }
}

TEST_CASE_TEMPLATE("reduce: reductions broadcast back against their operand", C,
                   GRADIX_AD_CONFIGS) {
  auto x = C::make(221);
  auto w = C::values(222);
  SUBCASE("variance along each axis") {
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::square(p - gx::mean<0>(p, gx::keep_dims))); },
                  x);
    CHECK_NUMGRAD(
        [&](auto& p) { return gx::sum(w * gx::square(p - gx::mean<1>(p, gx::keep_dims))); }, x);
  }
  SUBCASE("log-softmax along axis 1 (max-shifted)") {
    CHECK_NUMGRAD(
        [&](auto& p) {
          return gx::sum(
              w * (p - gx::max<1>(p, gx::keep_dims) -
                   gx::log(gx::sum<1>(gx::exp(p - gx::max<1>(p, gx::keep_dims)), gx::keep_dims))));
        },
        x);
  }
  SUBCASE("softmax along axis 0") {
    CHECK_NUMGRAD(
        [&](auto& p) {
          return gx::sum(w * gx::exp(p - gx::max<0>(p, gx::keep_dims)) /
                         gx::sum<0>(gx::exp(p - gx::max<0>(p, gx::keep_dims)), gx::keep_dims));
        },
        x);
  }
  SUBCASE("a reduction whose adjoint depends on its value") {
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::square(gx::sum<1>(p))); }, x);
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::square(gx::sum<0>(p)) * gx::max<0>(p)); }, x);
  }
  SUBCASE("a reduction of a reduction") {
    CHECK_NUMGRAD([&](auto& p) { return gx::max(gx::sum<1>(gx::tanh(p))); }, x);
    CHECK_NUMGRAD([&](auto& p) { return gx::mean(gx::max<1>(p) * gx::mean<1>(p)); }, x);
  }
}

TEST_CASE("reduce: rank 3, several axes, negative axes, keep_dims (row- and column-major)") {
  auto xr = gx::param(gx::uniform<double>(gx::dims(3, gx::fix<4>, 2), 231, -1.0, 1.0));
  auto xc = gx::param(gx::uniform<double, gx::col_major>(shape<3, 4, 2>{}, 232, -1.0, 1.0),
                      gx::sparse_grad<1>);
  auto check = [&](auto& x) {
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::tanh(gx::sum<0, -1>(p))); }, x);
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::tanh(gx::sum<0, -1>(p, gx::keep_dims) * p)); },
                  x);
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::exp(gx::mean<0, 2>(p))); }, x);
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::exp(gx::mean<1>(p, gx::keep_dims) - p)); }, x);
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::exp(gx::max<1>(p, gx::keep_dims))); }, x);
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::exp(gx::max<-1, 0>(p))); }, x);
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::sum<0>(gx::tanh(gx::sum<1>(p)))); }, x);
    CHECK_NUMGRAD([&](auto& p) { return gx::mean(gx::square(p)); }, x);
  };
  SUBCASE("row-major, dynamic extents, dense") { check(xr); }
  SUBCASE("column-major, static extents, sparse along axis 1") { check(xc); }
}

TEST_CASE("reduce: reductions of gathers") {
  auto x =
      gx::param(gx::uniform<double>(gx::dims(5, gx::fix<3>), 261, -1.0, 1.0), gx::sparse_grad<0>);
  std::vector<int> rows{4, 1, 4, 0};
  std::vector<int> cols{2, 0, 2};
  CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::exp(gx::max<1>(gx::gather<0>(p, rows)))); }, x);
  CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::exp(gx::sum<0>(gx::gather<1>(p, cols)))); }, x);
  CHECK_NUMGRAD(
      [&](auto& p) {
        return gx::sum(gx::tanh(gx::mean<1>(gx::gather<1>(p, cols), gx::keep_dims) * p));
      },
      x);
  CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::exp(gx::max<1>(gx::gather<1>(p, cols)))); }, x);
  CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::exp(gx::max<0>(gx::gather<0>(p, rows)))); }, x);
  CHECK_NUMGRAD([&](auto& p) { return gx::max(gx::gather<0>(p, rows)); }, x);
}

TEST_CASE("reduce: max routes the gradient to the first arg-max on ties") {
  auto x = gx::param(gx::tensor<double, shape<2, 4>>{1.0, 3.0, 3.0, 2.0,  //
                                                     5.0, 5.0, 5.0, 5.0});
  auto g = gx::grad(gx::sum(gx::max<1>(x)), x).to_dense();
  double want[2][4] = {{0, 1, 0, 0}, {1, 0, 0, 0}};
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 4; ++j) CHECK_MESSAGE(g(i, j) == want[i][j], "at ", i, ", ", j);
  auto g0 = gx::grad(gx::sum(gx::max<0>(x)), x).to_dense();
  double want0[2][4] = {{0, 0, 0, 0}, {1, 1, 1, 1}};
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 4; ++j) CHECK_MESSAGE(g0(i, j) == want0[i][j], "at ", i, ", ", j);
  auto ga = gx::grad(gx::max(x), x).to_dense();
  CHECK(ga(1, 0) == 1.0);
  CHECK(gx::value(gx::sum(ga)) == 1.0);
}

TEST_CASE("reduce: mean of a column-major matrix over each axis scales by the count") {
  auto x = gx::param(gx::uniform<double, gx::col_major>(gx::dims(4, 6), 241, -1.0, 1.0),
                     gx::sparse_grad<0>);
  auto g = gx::grad(gx::sum(gx::mean<1>(x)), x).to_dense();
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 6; ++j) CHECK(g(i, j) == doctest::Approx(1.0 / 6).epsilon(1e-15));
  g = gx::grad(gx::sum(gx::mean<0>(x, gx::keep_dims)), x).to_dense();
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 6; ++j) CHECK(g(i, j) == doctest::Approx(1.0 / 4).epsilon(1e-15));
}

TEST_CASE("reduce: backward with a seed for a non-scalar reduction") {
  auto x = gx::param(gx::uniform<double>(gx::dims(5, gx::fix<3>), 251, -1.0, 1.0));
  auto s1 = gx::uniform<double>(gx::dims(5), 252, -1.0, 1.0);
  CHECK_NUMGRAD_SEEDED([&](auto& p) { return gx::sum<1>(gx::tanh(p)); }, x, s1);
  auto s0 = gx::uniform<double>(shape<1, 3>{}, 253, -1.0, 1.0);
  CHECK_NUMGRAD_SEEDED([&](auto& p) { return gx::max<0>(gx::exp(p), gx::keep_dims); }, x, s0);
  auto s2 = gx::uniform<double>(gx::dims(5, gx::fix<1>), 254, -1.0, 1.0);
  CHECK_NUMGRAD_SEEDED([&](auto& p) { return gx::mean<1>(gx::square(p), gx::keep_dims); }, x, s2);
}

TEST_CASE("reduce: gradients of reductions over empty parameters are empty") {
  auto x = gx::param(gx::zeros<double>(gx::dims(0, 3)));
  auto g = gx::grad(gx::sum(gx::exp(x)), x).to_dense();
  CHECK(g.size() == 0);
  CHECK(gx::backward(gx::sum(x)) == 0.0);
  auto y = gx::param(gx::zeros<double>(gx::dims(0, 3)), gx::sparse_grad<0>);
  auto gs = gx::grad(gx::sum(gx::sum<1>(y)), y);
  CHECK(gs.size() == 0);
}
