// gx::gradcheck in constant evaluation: static shapes, dense and sparse storage, float and
// double parameters, both modes, and a wrong derivative detected at compile time; the same
// checks at run time give the same results. (Per op family: gradcheck_ops_test.cpp.)
#include <gradix/gradix.hpp>

#include <doctest/doctest.h>

#include <vector>

#include "wrong_ops.hpp"

namespace gx = gradix;
using gx::testing::square_half_derivative;
using gx::shape;

namespace {

constexpr gx::tensor<double, shape<2, 3>> x0{0.5, 1, 1.5, 2, 2.5, 3};
constexpr gx::tensor<float, shape<3>> y0{0.1f, -0.2f, 0.3f};

constexpr auto two_parameters(gx::gradcheck_options o = {}) {
  auto x = gx::param(x0);
  auto y = gx::param(y0, gx::sparse_grad<0>);
  std::vector<int> idx{2, 0, 2};
  return gx::gradcheck(
      [&](auto const& a, auto const& b) {
        return gx::sum(a * gx::exp(b)) + gx::sum(gx::tanh(b(gx::indices(idx))));
      },
      o, x, y);
}

constexpr auto wrong_derivative() {
  auto x = gx::param(x0, gx::sparse_grad<1>);
  return gx::gradcheck([](auto const& a) { return gx::sum(gx::unary<square_half_derivative>(a)); }, x);
}

}  // namespace

static_assert(two_parameters().ok());
static_assert(two_parameters().checked == 9);
static_assert(two_parameters({.mode = gx::gradcheck_mode::directions}).ok());
static_assert(two_parameters({.mode = gx::gradcheck_mode::directions}).checked == 4);
static_assert(!wrong_derivative().ok());
static_assert(wrong_derivative().failures == 6);
static_assert(wrong_derivative().parameter == 0);
// the worst element: the largest |x| (error |x|, tolerance about 2|x| rtol)
static_assert(wrong_derivative().index[0] == 1 && wrong_derivative().index[1] == 2);
static_assert(wrong_derivative().analytic == 3);

TEST_CASE("gradcheck: constant evaluation and run time agree") {
  constexpr auto ct = two_parameters();
  auto rt = two_parameters();
  CHECK(rt.ok());
  CHECK(rt.parameter == ct.parameter);
  CHECK(rt.index == ct.index);
  CHECK(rt.analytic == doctest::Approx(ct.analytic).epsilon(1e-6));
  CHECK(rt.numeric == doctest::Approx(ct.numeric).epsilon(1e-6));
  constexpr auto cw = wrong_derivative();
  auto rw = wrong_derivative();
  CHECK(gx::to_string(rw) == gx::to_string(cw));
}
