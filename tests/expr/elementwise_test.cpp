#include "testing.hpp"

#include <bit>
#include <cmath>
#include <cstdint>

namespace gx = gradix;
using gx::dyn;
using gx::shape;

using V = gx::tensor_view<float const, shape<dyn, 3>>;
static_assert(std::is_same_v<decltype(gx::exp(std::declval<V>())), gx::unary_node<gx::op::exp, V>>);
static_assert(std::is_same_v<gx::value_type_t<decltype(std::declval<V>() * 2.0)>, float>);
static_assert(std::is_same_v<gx::value_type_t<decltype(std::declval<gx::tensor_view<int, shape<3>>>() * 0.5)>, double>);
static_assert(std::is_same_v<gx::value_type_t<decltype(std::declval<gx::tensor_view<int, shape<3>>>() + std::declval<V>())>, float>);
static_assert(std::is_trivially_copyable_v<decltype(gx::tanh(std::declval<V>() * 2.0f + std::declval<V>()))>);

// The type of examples/readme.cpp's expression (docs/architecture.md shows this region).
TEST_CASE("elementwise: the README expression is this type") {
  auto a = gx::iota<float>(gx::dims(2, 3));
  auto b = gx::tensor<float, gx::shape<3>>{1, 10, 100};
  // doc-snippet: readme_type
  using E = decltype(gx::exp(-a) * b + 1.0f);
  static_assert(std::is_same_v<E,
      gx::binary_node<gx::op::add,
          gx::binary_node<gx::op::mul,
              gx::unary_node<gx::op::exp, gx::unary_node<gx::op::neg, gx::tensor_view<float, shape<dyn, dyn>>>>,
              gx::tensor_view<float, shape<3>>>,
          gx::scalar_node<float>>>);
  // end doc-snippet
  CHECK(gx::eval(gx::exp(-a) * b + 1.0f)(1, 2) == doctest::Approx(std::exp(-5.0) * 100 + 1));
}

TEST_CASE("elementwise: every function matches the scalar formula") {
  auto x = gx::uniform<double>(gx::dims(4, gx::fix<3>), 3, 0.1, 2.0);
  auto y = gx::uniform<double>(gx::dims(4, gx::fix<3>), 4, -1.0, 1.0);
  auto check = [&](auto e, auto f) {
    auto r = gx::eval(e);
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 3; ++j) CHECK(r(i, j) == doctest::Approx(f(x(i, j), y(i, j))).epsilon(1e-12));
  };
  check(x + y, [](double a, double b) { return a + b; });
  check(x - y, [](double a, double b) { return a - b; });
  check(x * y, [](double a, double b) { return a * b; });
  check(x / y, [](double a, double b) { return a / b; });
  check(-x, [](double a, double) { return -a; });
  check(gx::exp(y), [](double, double b) { return std::exp(b); });
  check(gx::log(x), [](double a, double) { return std::log(a); });
  check(gx::tanh(y), [](double, double b) { return std::tanh(b); });
  check(gx::sigmoid(y), [](double, double b) { return 1 / (1 + std::exp(-b)); });
  check(gx::relu(y), [](double, double b) { return b > 0 ? b : 0; });
  check(gx::sqrt(x), [](double a, double) { return std::sqrt(a); });
  check(gx::square(y), [](double, double b) { return b * b; });
  check(gx::abs(y), [](double, double b) { return std::abs(b); });
  check(gx::pow(x, y), [](double a, double b) { return std::pow(a, b); });
  check(gx::pow(x, 2.0), [](double a, double) { return a * a; });
  check(gx::pow(2.0, y), [](double, double b) { return std::pow(2.0, b); });
  check(gx::max(x, y), [](double a, double b) { return std::max(a, b); });
  check(gx::min(x, y), [](double a, double b) { return std::min(a, b); });
  check(gx::max(y, 0.25), [](double, double b) { return std::max(b, 0.25); });
  check(gx::min(0.5, x), [](double a, double) { return std::min(0.5, a); });
  check(2.0 - x * 3.0, [](double a, double) { return 2.0 - a * 3.0; });
  check(1.0 / x, [](double a, double) { return 1.0 / a; });
}

TEST_CASE("elementwise: mixed element types and casts") {
  auto i = gx::arange<int>(6);
  auto f = gx::iota<float>(gx::dims(6));
  auto r = gx::eval(i + f);  // int + float -> float
  static_assert(std::is_same_v<decltype(r)::value_type, float>);
  CHECK(r(5) == 10.0f);
  auto h = gx::eval(i * 0.5);  // int expression with a double scalar -> double
  static_assert(std::is_same_v<decltype(h)::value_type, double>);
  CHECK(h(3) == 1.5);
  auto k = gx::eval(i / 2);  // integer division stays integral
  CHECK(k(5) == 2);
  auto c = gx::eval(gx::exp(gx::cast<double>(i)));
  CHECK(c(1) == doctest::Approx(std::exp(1.0)));
  auto m = gx::eval(gx::max(i, 3));
  CHECK(m(0) == 3);
  CHECK(m(5) == 5);
}

TEST_CASE("elementwise: assignment into tensors and views, aliasing at the same element") {
  auto x = gx::iota<float>(gx::dims(3, 5));
  gx::tensor<float, shape<dyn, 5>> out(gx::dims(3, 5));
  out = x * 2.0f;
  CHECK(out(2, 4) == 28.0f);
  gx::assign(out, out + 1.0f);  // reads only the element being written
  CHECK(out(2, 4) == 29.0f);
  gx::tensor<float, shape<dyn, 5>> wrong(gx::dims(4, 5));
  out(0, 0) = -1;
  CHECK_THROWS_WITH_AS(gx::assign(wrong, out * 1.0f),
                       doctest::Contains("destination shape [4, 5] differs from expression shape [3, 5]"),
                       gx::error);
  // a column-major destination is filled through its own contiguous axis
  gx::tensor<float, shape<dyn, 5>, gx::col_major> cm(gx::dims(3, 5));
  gx::assign(cm, x + 0.0f);
  CHECK(cm(1, 3) == x(1, 3));
  // a strided view as destination
  float buf[30] = {};
  auto sv = gx::strided_view(buf, gx::dims(3, 5), gx::array<gx::index_t, 2>{{10, 2}});
  gx::assign(sv, x);
  CHECK(buf[10 * 2 + 2 * 4] == x(2, 4));
  CHECK(buf[1] == 0.0f);
}

TEST_CASE("elementwise: layouts mix; eval keeps the leaves' layout") {
  auto a = gx::iota<double, gx::col_major>(gx::dims(17, 33));
  auto b = gx::iota<double>(gx::dims(17, 33));
  auto c = gx::eval(a * 2.0);
  static_assert(std::is_same_v<decltype(c)::layout_type, gx::col_major>);
  auto d = gx::eval(b - a);  // row-major first operand: row-major result
  static_assert(std::is_same_v<decltype(d)::layout_type, gx::row_major>);
  CHECK(gx::value(gx::max(gx::abs(d))) == 0.0);
  CHECK(c(16, 32) == 2.0 * (16 * 33 + 32));
}

TEST_CASE("elementwise: large tensors take the parallel path with the same result") {
  auto x = gx::uniform<float>(gx::dims(1000, 513), 11, -2.0f, 2.0f);
  gx::set_num_threads(1);
  auto a = gx::eval(gx::tanh(x) * x + gx::exp(-x));
  gx::set_num_threads(4);
  auto b = gx::eval(gx::tanh(x) * x + gx::exp(-x));
  gx::set_num_threads(gx::host::default_num_threads());
  CHECK_ALL_CLOSE(a, b, 0.0, 0.0);
  CHECK(a(999, 512) == doctest::Approx(std::tanh(x(999, 512)) * x(999, 512) + std::exp(-x(999, 512))));
}

TEST_CASE("elementwise: new functions match the scalar formula (double and float)") {
  auto x = gx::uniform<double>(gx::dims(4, gx::fix<3>), 5, -0.9, 3.0);
  auto r1 = gx::eval(gx::expm1(x)), r2 = gx::eval(gx::log1p(x)), r3 = gx::eval(gx::sin(x * 7.0)),
       r4 = gx::eval(gx::cos(x * 7.0));
  auto xf = gx::eval(gx::cast<float>(x));
  auto f1 = gx::eval(gx::expm1(xf)), f2 = gx::eval(gx::log1p(xf)), f3 = gx::eval(gx::sin(xf * 7.0f)),
       f4 = gx::eval(gx::cos(xf * 7.0f));
  static_assert(std::is_same_v<decltype(f3)::value_type, float>);
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 3; ++j) {
      double a = x(i, j), af = xf(i, j);
      CHECK(r1(i, j) == doctest::Approx(std::expm1(a)).epsilon(1e-12));
      CHECK(r2(i, j) == doctest::Approx(std::log1p(a)).epsilon(1e-12));
      CHECK(r3(i, j) == doctest::Approx(std::sin(a * 7.0)).epsilon(1e-12));
      CHECK(r4(i, j) == doctest::Approx(std::cos(a * 7.0)).epsilon(1e-12));
      // float: gradix's own polynomials (core/vmath.hpp), within their stated ulp bounds
      CHECK(f1(i, j) == doctest::Approx(std::expm1(af)).epsilon(2e-7));
      CHECK(f2(i, j) == doctest::Approx(std::log1p(af)).epsilon(2e-7));
      double s7 = double(float(af * 7.0));  // the float product the expression computes
      CHECK(f3(i, j) == doctest::Approx(std::sin(s7)).epsilon(2e-7).scale(1e-7));
      CHECK(f4(i, j) == doctest::Approx(std::cos(s7)).epsilon(2e-7).scale(1e-7));
    }
  // small arguments keep their digits: expm1(x) / x and log1p(x) / x tend to 1
  gx::tensor<float, shape<3>> tiny{1e-10f, -3e-8f, 2e-30f};
  auto e = gx::eval(gx::expm1(tiny)), l = gx::eval(gx::log1p(tiny));
  for (int i = 0; i < 3; ++i) {
    CHECK(e(i) == tiny(i));
    CHECK(l(i) == tiny(i));
  }
}

namespace {
std::uint32_t float_bits(float v) { return std::bit_cast<std::uint32_t>(v); }
}  // namespace

TEST_CASE("elementwise: a float function gives the same bits in a full pack and in a loop tail") {
  // gradix's float functions (core/vmath.hpp) run one polynomial on every path: an element
  // evaluated in a whole SIMD pack, in the scalar loop tail, or by op::<f>::value on a scalar
  // gets the same bits. 1,003 elements and rows of 37: neither is a multiple of a pack width,
  // so each run ends in a tail. Arguments cover every branch (small and large |x|, both signs).
  auto x = gx::uniform<float>(gx::dims(1003), 41, -12.0f, 12.0f);
  auto pos = gx::uniform<float>(gx::dims(1003), 42, 0.0f, 40.0f);  // log's domain
  auto m = gx::uniform<float>(gx::dims(5, 37), 43, -30.0f, 30.0f);
  auto mpos = gx::uniform<float>(gx::dims(5, 37), 44, -0.99f, 30.0f);  // log1p's domain
  auto mc = gx::uniform<float, gx::col_major>(gx::dims(37, 5), 45, -30.0f, 30.0f);
  auto mcpos = gx::eval(gx::abs(mc));
  auto same_bits = [](auto const& out, auto const& in, auto op) {
    using Op = decltype(op);
    long bad = 0, first = -1;
    for (gx::index_t k = 0; k < in.size(); ++k) {
      float want = Op::value(in.data()[k]);
      float got = out.data()[k];
      if (float_bits(got) != float_bits(want) && !(want != want && got != got)) {
        if (first < 0) first = long(k);
        ++bad;
      }
    }
    CAPTURE(Op::name);
    CAPTURE(first);
    CHECK(bad == 0);
  };
  auto all = [&](auto const& a, auto const& p) {
    same_bits(gx::eval(gx::exp(a)), a, gx::op::exp{});
    same_bits(gx::eval(gx::log(p)), p, gx::op::log{});
    same_bits(gx::eval(gx::tanh(a)), a, gx::op::tanh{});
    same_bits(gx::eval(gx::sigmoid(a)), a, gx::op::sigmoid{});
    same_bits(gx::eval(gx::expm1(a)), a, gx::op::expm1{});
    same_bits(gx::eval(gx::log1p(p)), p, gx::op::log1p{});
    same_bits(gx::eval(gx::sin(a)), a, gx::op::sin{});
    same_bits(gx::eval(gx::cos(a)), a, gx::op::cos{});
  };
  SUBCASE("1,003 elements") { all(x, pos); }
  SUBCASE("5 x 37, row-major") { all(m, mpos); }
  SUBCASE("37 x 5, column-major") { all(mc, mcpos); }
}
