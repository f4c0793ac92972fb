// gx::gradcheck (api/gradcheck.hpp): passes on correct gradients (elementwise, reductions,
// gather with repeated indices, views, sparse and dense storage, several parameters of mixed
// element types and ranks), the random-direction mode, and fails with the right fields and
// text on a deliberately wrong derivative (a test-only op).
#include <gradix/gradix.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "wrong_ops.hpp"

namespace gx = gradix;
using gx::testing::square_half_derivative;
using gx::testing::square_wrong_at_2;
using gx::dyn;
using gx::shape;

namespace {

template <class X>
auto square_wrong(X const& x) {
  return gx::unary<square_wrong_at_2>(x);
}

/// Bit-exact equality of two tensors of the same type.
template <class A>
bool same_bits(A const& a, A const& b) {
  return a.shape() == b.shape() &&
         std::memcmp(a.data(), b.data(), std::size_t(a.size()) * sizeof(*a.data())) == 0;
}

}  // namespace

// --- the public types

static_assert(gx::gradcheck_default_tolerance<float>.rtol == 1e-3);
static_assert(gx::gradcheck_default_tolerance<float>.atol == 1e-5);
static_assert(gx::gradcheck_default_tolerance<double>.rtol == 1e-6);
static_assert(gx::gradcheck_default_tolerance<double>.atol == 1e-8);
static_assert(std::is_trivially_copyable_v<gx::gradcheck_result<3>>);
static_assert(gx::gradcheck_result<1>{}.ok());
static_assert(gx::gradcheck_options{.rtol = 0.5}.rtol.value() == 0.5);
static_assert(!gx::gradcheck_options{}.atol.has_value());
// the random directions are a pure function of (seed, direction, element), in [-1, 1)
static_assert(gx::detail::gc_direction(7, 2, 11) == gx::detail::gc_direction(7, 2, 11));
static_assert(gx::detail::gc_direction(7, 2, 11) != gx::detail::gc_direction(7, 3, 11));
static_assert(gx::detail::gc_direction(7, 2, 11) >= -1.0 && gx::detail::gc_direction(7, 2, 11) < 1.0);

// --- correct gradients pass

TEST_CASE("gradcheck: elementwise functions, float and double, static and dynamic, both layouts") {
  auto xf = gx::param(gx::uniform<float>(gx::dims(3, 4), 1, 0.2f, 1.5f));
  auto xd = gx::param(gx::uniform<double, gx::col_major>(shape<3, 4>{}, 2, 0.2, 1.5));
  auto check = [](auto const& x) {
    auto r = gx::gradcheck(
        [](auto const& p) {
          return gx::sum(gx::exp(p) * gx::tanh(p) + gx::log(p) / gx::sqrt(p) + gx::sigmoid(-p) +
                         gx::pow(p, 1.5) - gx::square(p) * 0.5);
        },
        x);
    CHECK_MESSAGE(r.ok(), r);
    CHECK(r.mode == gx::gradcheck_mode::elements);
    CHECK(r.checked == 12);
    CHECK(r.failures == 0);
    CHECK(r.parameters == 1);
    CHECK(r.parameter == 0);  // the worst comparison is reported on success too
    CHECK(r.rank == 2);
    CHECK(r.error <= r.tolerance);
  };
  check(xf);
  check(xd);
}

TEST_CASE("gradcheck: reductions (sum over an axis, mean, max, keep_dims broadcast)") {
  auto x = gx::param(gx::uniform<float>(gx::dims(4, 5), 3, -1.f, 1.f));
  auto w = gx::uniform<float>(gx::dims(5), 4, -1.f, 1.f);  // a float constant in f
  auto r1 = gx::gradcheck([&](auto const& p) { return gx::sum(gx::square(gx::sum<0>(p) * w)); }, x);
  CHECK_MESSAGE(r1.ok(), r1);
  auto r2 = gx::gradcheck(
      [](auto const& p) { return gx::mean(gx::exp(p - gx::max<1>(p, gx::keep_dims))) + gx::max(p); }, x);
  CHECK_MESSAGE(r2.ok(), r2);
  CHECK(r2.checked == 20);
}

TEST_CASE("gradcheck: gather with repeated indices, dense and sparse storage") {
  std::vector<int> idx{0, 2, 2, 5, 2, 0};
  auto table = gx::uniform<double>(gx::dims(3, 7), 5, -1.0, 1.0);
  auto dense = gx::param(table);
  auto sparse = gx::param(table, gx::sparse_grad<1>);
  auto f = [&](auto const& p) { return gx::sum(gx::square(p(gx::all, gx::indices(idx))) * 1.5); };
  auto rd = gx::gradcheck(f, dense);
  CHECK_MESSAGE(rd.ok(), rd);
  auto rs = gx::gradcheck(f, sparse);
  CHECK_MESSAGE(rs.ok(), rs);
  CHECK(rs.checked == 21);  // every element, the slices never written (1, 3, 4, 6) included
  // the sparse storage holds only the written slices: the others read as exact zeros and
  // pass because their numeric derivative is ~0
  auto g = gx::grad(f(sparse), sparse);
  CHECK(g.size() == 3);
  CHECK(g.find(4) == -1);
}

TEST_CASE("gradcheck: sparse storage along axis 0, column-major, at() and a range") {
  auto E = gx::param(gx::uniform<float, gx::col_major>(gx::dims(6, 4), 6, -1.f, 1.f), gx::sparse_grad<0>);
  std::vector<std::int64_t> rows{4, 1, 4};
  auto r = gx::gradcheck(
      [&](auto const& p) {
        return gx::sum(gx::tanh(p(gx::indices(rows), gx::all)) * p(gx::at(2), gx::all)) +
               gx::sum(p(gx::range(0, 6, 2), gx::range(1, 3)));
      },
      E);
  CHECK_MESSAGE(r.ok(), r);
  CHECK(r.checked == 24);
}

TEST_CASE("gradcheck: several parameters of mixed ranks, element types and storage") {
  auto x = gx::param(gx::uniform<float>(gx::dims(4, 3), 7, -1.f, 1.f), gx::sparse_grad<0>);
  auto y = gx::param(gx::uniform<double>(shape<3>{}, 8, -1.0, 1.0));
  auto s = gx::param(gx::tensor<double, shape<>>{0.7});
  auto unused = gx::param(gx::uniform<float>(shape<2, 2, 2>{}, 9, -1.f, 1.f));
  auto r = gx::gradcheck(
      [](auto const& a, auto const& b, auto const& c, auto const&) {
        return gx::sum(a * gx::exp(b) * c) + gx::sum(gx::index(gx::transpose(a), gx::all, gx::at(1)));
      },
      x, y, s, unused);
  CHECK_MESSAGE(r.ok(), r);
  static_assert(std::is_same_v<decltype(r), gx::gradcheck_result<3>>);  // the largest rank
  CHECK(r.parameters == 4);
  CHECK(r.checked == 12 + 3 + 1 + 8);
}

TEST_CASE("gradcheck: the parameters' values and gradients are left unchanged") {
  auto x = gx::param(gx::uniform<float>(gx::dims(3, 4), 10, -1.f, 1.f), gx::sparse_grad<1>);
  auto y = gx::param(gx::uniform<float>(gx::dims(4), 11, -1.f, 1.f));
  auto f = [](auto const& a, auto const& b) { return gx::sum(a * b); };
  gx::backward(f(x, y));  // something in the gradients
  auto xv = x.value();
  auto yv = y.value();
  auto xg = x.grad().to_dense();
  auto yg = y.grad().to_dense();
  auto r = gx::gradcheck(f, x, y);
  CHECK(r.ok());
  CHECK(same_bits(x.value(), xv));
  CHECK(same_bits(y.value(), yv));
  CHECK(same_bits(x.grad().to_dense(), xg));
  CHECK(same_bits(y.grad().to_dense(), yg));
  CHECK(x.grad().size() == 4);
}

TEST_CASE("gradcheck: a parameter given twice throws, as grad does") {
  auto x = gx::param(gx::uniform<float>(gx::dims(3), 12));
  CHECK_THROWS_AS(gx::gradcheck([](auto const& a, auto const& b) { return gx::sum(a * b); }, x, x),
                  gx::error);
}

// --- the random-direction mode

TEST_CASE("gradcheck: large parameters switch to random directions") {
  auto E = gx::param(gx::uniform<float>(gx::dims(64, 3000), 13, -1.f, 1.f), gx::sparse_grad<1>);
  auto b = gx::param(gx::uniform<float>(gx::dims(64), 14, -1.f, 1.f));
  std::vector<int> idx;
  for (int k = 0; k < 500; ++k) idx.push_back((k * 37) % 1200);  // repeats
  auto f = [&](auto const& e, auto const& bias) {
    return gx::sum(gx::tanh(e(gx::all, gx::indices(idx)) + gx::unsqueeze<1>(bias)));
  };
  auto r = gx::gradcheck(f, E, b);
  CHECK_MESSAGE(r.ok(), r);
  CHECK(r.mode == gx::gradcheck_mode::directions);
  CHECK(r.checked == gx::gradcheck_options{}.directions);
  CHECK(r.parameter == -1);
  CHECK(r.direction >= 0);

  auto r7 = gx::gradcheck(f, {.directions = 7, .seed = 42}, E, b);
  CHECK_MESSAGE(r7.ok(), r7);
  CHECK(r7.checked == 7);
  // the same seed gives the same directions, another seed others
  auto again = gx::gradcheck(f, {.directions = 7, .seed = 42}, E, b);
  CHECK(again.direction == r7.direction);
  CHECK(again.analytic == r7.analytic);
  auto other = gx::gradcheck(f, {.directions = 7, .seed = 43}, E, b);
  CHECK(other.analytic != r7.analytic);
  // elements mode can be forced (and directions mode on small tensors)
  auto small = gx::param(gx::uniform<double>(gx::dims(5), 15));
  auto g = [](auto const& p) { return gx::sum(gx::exp(p)); };
  CHECK(gx::gradcheck(g, {.mode = gx::gradcheck_mode::directions}, small).mode ==
        gx::gradcheck_mode::directions);
  CHECK(gx::gradcheck(g, {.max_elements = 4}, small).mode == gx::gradcheck_mode::directions);
  CHECK(gx::gradcheck(g, {.max_elements = 5}, small).mode == gx::gradcheck_mode::elements);
}

// --- a wrong gradient fails, with the right fields

TEST_CASE("gradcheck: a wrong derivative is reported with its parameter, index and values") {
  auto a = gx::param(gx::uniform<float>(gx::dims(2, 2), 16, -1.f, 1.f));
  // b[1, 2] == 2: the test op's derivative is wrong there only (0 instead of 4)
  auto b = gx::param(gx::tensor<float, shape<2, 3>>{0.5f, -1.f, 0.25f, 1.5f, 0.75f, 2.f}, gx::sparse_grad<0>);
  auto f = [](auto const& p, auto const& q) { return gx::sum(p) + gx::sum(square_wrong(q)); };
  auto r = gx::gradcheck(f, a, b);
  CHECK_FALSE(r.ok());
  CHECK(r.mode == gx::gradcheck_mode::elements);
  CHECK(r.checked == 10);
  CHECK(r.failures == 1);
  CHECK(r.parameter == 1);
  CHECK(r.rank == 2);
  CHECK(r.index[0] == 1);
  CHECK(r.index[1] == 2);
  CHECK(r.element == 5);
  CHECK(r.analytic == 0.0);
  CHECK(r.numeric == doctest::Approx(4.0).epsilon(1e-6));
  CHECK(r.error == doctest::Approx(4.0).epsilon(1e-6));
  CHECK(r.tolerance == doctest::Approx(1e-5 + 1e-3 * 4.0).epsilon(1e-3));
  CHECK(r.rtol == 1e-3);
  CHECK(r.atol == 1e-5);

  std::string text = gx::to_string(r);
  std::ostringstream os;
  os << r;
  CHECK(os.str() == text);
  // docs/gradcheck.md shows this line (tests/docs/docs_sync.py finds it here)
  CHECK(text.rfind("gradcheck FAILED: 1 of 10 elements of 2 parameters; worst: parameter 1 at [1, 2]: analytic 0 vs numeric 4 (error 4, tolerance 0.0040", 0) == 0);

  // the same in double (a double parameter gets the tight tolerances)
  auto bd = gx::param(gx::tensor<double, shape<6>>{0.5, 2.0, 0.25, 1.5, 0.75, 2.5});
  auto rd = gx::gradcheck([](auto const& q) { return gx::sum(square_wrong(q)); }, bd);
  CHECK_FALSE(rd.ok());
  CHECK(rd.parameter == 0);
  CHECK(rd.rank == 1);
  CHECK(rd.index[0] == 1);
  CHECK(rd.tolerance == doctest::Approx(1e-8 + 1e-6 * 4.0).epsilon(1e-2));
}

TEST_CASE("gradcheck: the default tolerances are those of the least precise element type") {
  auto xd = gx::param(gx::uniform<double>(gx::dims(2, 3), 19));
  auto yd = gx::param(gx::uniform<double>(gx::dims(3), 20));
  auto yf = gx::param(gx::uniform<float>(gx::dims(3), 20));
  auto f = [](auto const& a, auto const& b) { return gx::sum(a * gx::exp(b)); };
  auto dd = gx::gradcheck(f, xd, yd);
  CHECK(dd.ok());
  CHECK(dd.rtol == 1e-6);
  CHECK(dd.atol == 1e-8);
  auto df = gx::gradcheck(f, xd, yf);  // x's gradient exp(y) is computed in float
  CHECK(df.ok());
  CHECK(df.rtol == 1e-3);
  CHECK(df.atol == 1e-5);
  // f's own element type counts too: a cast to float (which also makes the numeric side
  // float: f(x + h) rounds x + h to float, so the step must be far above float's epsilon)
  auto c = gx::gradcheck([](auto const& a) { return gx::sum(gx::cast<float>(a) * 2.0f); },
                         {.step = 1e-3}, xd);
  CHECK(c.ok());
  CHECK(c.rtol == 1e-3);
  auto given = gx::gradcheck(f, {.rtol = 1e-4, .atol = 1e-7}, xd, yf);
  CHECK(given.rtol == 1e-4);
  CHECK(given.atol == 1e-7);
}

TEST_CASE("gradcheck: options override the tolerances") {
  auto x = gx::param(gx::uniform<float>(gx::dims(3, 2), 17, 0.5f, 1.f));
  auto f = [](auto const& p) { return gx::sum(gx::unary<square_half_derivative>(p)); };
  auto r = gx::gradcheck(f, x);
  CHECK_FALSE(r.ok());
  CHECK(r.failures == 6);
  // error |x - 2x| = |x| against rtol * 2|x|: passes with rtol above 1/2
  CHECK(gx::gradcheck(f, {.rtol = 0.6}, x).ok());
  CHECK_FALSE(gx::gradcheck(f, {.rtol = 0.4}, x).ok());
  CHECK(gx::gradcheck(f, {.atol = 1.0}, x).ok());
}

TEST_CASE("gradcheck: a wrong derivative fails in the random-direction mode too") {
  auto x = gx::param(gx::uniform<float>(gx::dims(40, 50), 18, 0.5f, 1.f), gx::sparse_grad<1>);
  auto r = gx::gradcheck([](auto const& p) { return gx::sum(gx::unary<square_half_derivative>(p)); }, x);
  CHECK_FALSE(r.ok());
  CHECK(r.mode == gx::gradcheck_mode::directions);
  CHECK(r.failures == r.checked);
  CHECK(r.parameter == -1);
  CHECK(r.numeric == doctest::Approx(2 * r.analytic).epsilon(1e-3));
  std::string text = gx::to_string(r);
  CHECK(text.rfind("gradcheck FAILED: 4 of 4 random directions of 1 parameter; worst: direction ", 0) == 0);
  CHECK(text.find("<grad, v> ") != std::string::npos);
}

TEST_CASE("gradcheck: random directions find one wrong element of a large double tensor") {
  auto t = gx::uniform<double>(gx::dims(200, 500), 21, -1.0, 1.0);
  t(123, 456) = 2.0;  // the test op's derivative is wrong there only: 0 instead of 4
  auto x = gx::param(std::move(t), gx::sparse_grad<0>);
  auto f = [](auto const& p) { return gx::sum(square_wrong(p)); };
  auto r = gx::gradcheck(f, x);
  CHECK(r.mode == gx::gradcheck_mode::directions);
  CHECK_FALSE(r.ok());
  CHECK(r.error == doctest::Approx(4.0 * std::abs(gx::detail::gc_direction(0, r.direction, 123 * 500 + 456)))
                       .epsilon(1e-4));
  // without the wrong element it passes
  auto u = gx::param(gx::uniform<double>(gx::dims(200, 500), 21, -1.0, 1.0), gx::sparse_grad<0>);
  auto ru = gx::gradcheck(f, u);
  CHECK_MESSAGE(ru.ok(), ru);
}
