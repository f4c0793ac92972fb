#include "testing.hpp"

#include <cmath>

namespace gx = gradix;
using gx::dyn;
using gx::shape;

using V = gx::tensor_view<float const, shape<dyn, 3>>;
static_assert(std::is_same_v<decltype(gx::exp(std::declval<V>())), gx::unary_node<gx::op::exp, V>>);
static_assert(std::is_same_v<gx::value_type_t<decltype(std::declval<V>() * 2.0)>, float>);
static_assert(std::is_same_v<gx::value_type_t<decltype(std::declval<gx::tensor_view<int, shape<3>>>() * 0.5)>, double>);
static_assert(std::is_same_v<gx::value_type_t<decltype(std::declval<gx::tensor_view<int, shape<3>>>() + std::declval<V>())>, float>);
static_assert(std::is_trivially_copyable_v<decltype(gx::tanh(std::declval<V>() * 2.0f + std::declval<V>()))>);

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
