#include "testing.hpp"

#include <sstream>
#include <vector>

namespace gx = gradix;
using gx::dyn;
using gx::shape;

// Small static shapes are literal types stored inline; large ones use the heap.
static_assert(gx::tensor<float, shape<3, 4>>::stores_inline);
static_assert(!gx::tensor<float, shape<64, 64>>::stores_inline);  // 16 KiB > 4 KiB
static_assert(!gx::tensor<float, shape<dyn, 4>>::stores_inline);
static_assert(std::is_trivially_copyable_v<gx::tensor_view<float const, shape<dyn, 4>>>);
static_assert(gx::expression<gx::tensor_view<float, shape<3>>>);
static_assert(!gx::expression<gx::tensor<float, shape<3>>>);
static_assert(gx::operand<gx::tensor<float, shape<3>>&>);
static_assert(gx::tensor<int, shape<2, 2>>{1, 2, 3, 4}(1, 0) == 3);

TEST_CASE("tensor: construction from extents zero-fills; from values in logical order") {
  gx::tensor<float, shape<dyn, 3>> t(gx::dims(2, 3));
  CHECK(t.size() == 6);
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j) CHECK(t(i, j) == 0.0f);
  gx::tensor<double, shape<2, 3>, gx::col_major> c({1, 2, 3, 4, 5, 6});
  CHECK(c(0, 2) == 3);
  CHECK(c(1, 0) == 4);
  CHECK(c.data()[1] == 4);  // column-major storage: (1, 0) follows (0, 0)
  std::vector<int> v{1, 2, 3, 4};
  gx::tensor<int, shape<dyn, dyn>> d(gx::dims(2, 2), std::span<int const>(v));
  CHECK(d(1, 1) == 4);
  CHECK_THROWS_WITH_AS((gx::tensor<int, shape<dyn>>(gx::dims(3), {1, 2})),
                       doctest::Contains("2 values given for shape [3]"), gx::error);
  CHECK_THROWS_AS((gx::tensor<float, shape<dyn, 3>>(gx::dims(2, 4))), gx::error);
}

TEST_CASE("tensor: copies are deep, moves steal, at() checks bounds") {
  auto a = gx::iota<float>(gx::dims(2, 3));
  auto b = a;
  b(0, 0) = 42;
  CHECK(a(0, 0) == 0);
  auto p = a.data();
  auto m = std::move(a);
  CHECK(m.data() == p);
  CHECK(m.at(1, 2) == 5);
  CHECK_THROWS_WITH_AS(m.at(2, 0), doctest::Contains("index 2 is out of range for axis 0 of extent 2"),
                       gx::error);
  CHECK(reinterpret_cast<std::uintptr_t>(m.data()) % gx::buffer_alignment == 0);
}

TEST_CASE("tensor: views over external memory with layouts and strides") {
  float buf[6] = {0, 1, 2, 3, 4, 5};
  auto r = gx::view(buf, gx::dims(2, 3));
  auto c = gx::view<gx::col_major>(buf, gx::dims(2, 3));
  CHECK(r(1, 0) == 3);
  CHECK(c(1, 0) == 1);
  CHECK(c(0, 1) == 2);
  auto s = gx::strided_view(buf, gx::dims(3), gx::array<gx::index_t, 1>{{2}});
  CHECK(s(2) == 4);
  auto t = gx::eval(s * 1.0f);
  CHECK(t(1) == 2);
  r(0, 0) = 7;
  CHECK(buf[0] == 7);
}

TEST_CASE("tensor: fills") {
  auto z = gx::zeros<double>(gx::dims(2, 2));
  auto o = gx::ones<float, gx::col_major>(gx::dims(2, 3));
  auto f = gx::full<int>(shape<2>{}, 7);
  CHECK(z(1, 1) == 0);
  CHECK(o(1, 2) == 1);
  CHECK(f(1) == 7);
  auto a = gx::arange<int>(5);
  CHECK(a.size() == 5);
  CHECK(a(4) == 4);
  auto b = gx::arange<double>(1.0, 2.0, 0.25);
  CHECK(b.size() == 4);
  CHECK(b(3) == doctest::Approx(1.75));
  auto n = gx::arange<int>(5, 0, -2);
  CHECK(n.size() == 3);
  CHECK(n(2) == 1);
  CHECK_THROWS_AS(gx::arange<int>(0, 5, 0), gx::error);
  auto i = gx::iota<float, gx::col_major>(gx::dims(2, 3));
  CHECK(i(1, 2) == 5);  // logical row-major index, whatever the layout
}

TEST_CASE("tensor: printing") {
  gx::tensor<int, shape<2, 3>> t{0, 1, 2, 3, 4, 5};
  std::ostringstream os;
  os << t;
  CHECK(os.str() == "tensor<int32, [2, 3], row_major>\n[[0, 1, 2],\n [3, 4, 5]]");
  auto big = gx::iota<int>(gx::dims(10));
  std::ostringstream os2;
  os2 << big;
  CHECK(os2.str() == "tensor<int32, [10], row_major>\n[0, 1, 2, ..., 7, 8, 9]");
}
