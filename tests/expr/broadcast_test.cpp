#include "testing.hpp"

namespace gx = gradix;
using gx::dyn;
using gx::shape;

TEST_CASE("broadcast: static extent 1 and missing leading axes broadcast") {
  auto m = gx::iota<float>(gx::dims(3, gx::fix<4>));
  gx::tensor<float, shape<4>> row{1, 2, 3, 4};
  gx::tensor<float, shape<3, 1>> col{10, 20, 30};
  auto r = gx::eval(m + row);
  CHECK(r(2, 3) == 11 + 4);
  auto c = gx::eval(m * col);
  static_assert(std::is_same_v<gx::shape_of_t<decltype(m * col)>, shape<3, 4>>);
  CHECK(c(1, 2) == 6 * 20);
  auto outer = gx::eval(col * row);  // 3 x 1 against 4 -> 3 x 4
  CHECK(outer(2, 3) == 30 * 4);
  auto s = gx::eval(2.0f * m);
  CHECK(s(1, 1) == 10);
}

TEST_CASE("broadcast: dynamic extents must match at run time, named in the error") {
  auto a = gx::zeros<float>(gx::dims(3, 4));
  auto b = gx::zeros<float>(gx::dims(3, 5));
  auto one = gx::zeros<float>(gx::dims(1, 4));  // a dynamic extent of 1 does not broadcast
  CHECK_THROWS_WITH_AS(a + b,
                       doctest::Contains("gradix::operator+: shapes [3, 4] and [3, 5] do not match at axis 1"),
                       gx::error);
  CHECK_THROWS_WITH_AS(gx::max(a, one), doctest::Contains("gradix::max: shapes [3, 4] and [1, 4]"),
                       gx::error);
  gx::tensor<float, shape<1, 4>> stat_one;
  CHECK_NOTHROW(a + stat_one);
}

TEST_CASE("broadcast: a broadcast operand is read once per row (invariant inner loop)") {
  auto m = gx::iota<double, gx::col_major>(gx::dims(5, 7));
  gx::tensor<double, shape<1, 7>> w;
  for (int j = 0; j < 7; ++j) w(0, j) = j;
  auto r = gx::eval(m - w);
  for (int i = 0; i < 5; ++i)
    for (int j = 0; j < 7; ++j) CHECK(r(i, j) == m(i, j) - j);
}
