#include "testing.hpp"

#include <cmath>

namespace gx = gradix;
namespace md = gx::math::detail;

// The constant-evaluation paths are usable at compile time...
static_assert(gx::math::exp(0.0) == 1.0);
static_assert(gx::math::log(1.0) == 0.0);
static_assert(gx::math::sqrt(4.0) == 2.0);
static_assert(gx::math::tanh(0.0) == 0.0);

// ...and accurate: compare them with the platform's functions at run time.
static double ulps(double a, double b) {
  if (a == b) return 0;
  return std::abs(a - b) / (std::nextafter(std::abs(b), INFINITY) - std::abs(b));
}

TEST_CASE("math: constant-evaluation functions agree with libm to a few ulp") {
  double worst = 0;
  for (double x = -30; x <= 30; x += 0.0137) {
    worst = std::max(worst, ulps(md::cexp(x), std::exp(x)));
    worst = std::max(worst, ulps(md::ctanh(x), std::tanh(x)));
    double p = std::abs(x) + 1e-3;
    worst = std::max(worst, ulps(md::clog(p), std::log(p)));
    worst = std::max(worst, ulps(md::csqrt(p), std::sqrt(p)));
    worst = std::max(worst, ulps(md::cexpm1(x / 40), std::expm1(x / 40)));
  }
  for (double u = 0; u < 1; u += 0.00731)
    CHECK(std::abs(md::ccos_turns(u) - std::cos(2 * M_PI * u)) < 1e-15);
  CHECK(worst <= 8);
  CHECK(md::cexp(1000.0) == INFINITY);
  CHECK(md::cexp(-1000.0) == 0.0);
  CHECK(std::isnan(md::clog(-1.0)));
  CHECK(md::clog(0.0) == -INFINITY);
  CHECK(ulps(md::clog(1e-310), std::log(1e-310)) < 4);
}
