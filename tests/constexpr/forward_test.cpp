// eval and value of static-shape expressions in constant evaluation.
#include "testing.hpp"

namespace gx = gradix;
using gx::shape;

constexpr gx::tensor<double, shape<2, 3>> a{1, 2, 3, 4, 5, 6};
constexpr gx::tensor<double, shape<3>> w{0.5, -1, 2};

static_assert(gx::value(gx::sum(a)) == 21);
static_assert(gx::value(gx::max(a * w)) == 12);
static_assert(gx::eval(a * w + 1.0)(1, 2) == 13);
static_assert(gx::eval(gx::sum<0>(a))(2) == 9);
static_assert(gx::eval(gx::mean<1>(a, gx::keep_dims))(1, 0) == 5);
static_assert(gx::value(gx::sum(gx::relu(a - 3.0))) == 6);
static_assert(gx::eval(gx::abs(-a))(0, 0) == 1);
// elementary functions have their own constant-evaluation paths
constexpr double e1 = gx::value(gx::sum(gx::exp(a - a)));
static_assert(e1 == 6);
constexpr double l = gx::eval(gx::log(gx::exp(a)))(1, 1);
static_assert(l > 5 - 1e-12 && l < 5 + 1e-12);
constexpr double th = gx::value(gx::max(gx::tanh(a)));
static_assert(th > 0.99998 && th < 1.0);
constexpr gx::tensor<float, shape<2>> zero2{0, 0};
constexpr float sg = gx::value(gx::sum(gx::sigmoid(zero2)));
static_assert(sg == 1.0f);
static_assert(gx::eval(gx::sqrt(a * a))(1, 2) == 6);
static_assert(gx::eval(gx::pow(a, 2.0))(0, 2) > 9 - 1e-12);
static_assert(gx::eval(gx::square(a))(0, 2) == 9);
static_assert(gx::eval(gx::min(a, 2.0))(1, 2) == 2);
constexpr auto r = gx::randn<double>(shape<2, 2>{}, 3);
static_assert(r(0, 0) != r(0, 1));

TEST_CASE("constexpr: compile-time results equal run-time results") {
  gx::tensor<double, shape<2, 3>> ra = a;
  CHECK(gx::value(gx::sum(gx::exp(ra - ra))) == e1);
  CHECK(gx::eval(gx::log(gx::exp(ra)))(1, 1) == doctest::Approx(l).epsilon(1e-15));
  auto rr = gx::randn<double>(shape<2, 2>{}, 3);
  CHECK(rr(1, 1) == r(1, 1));
}
