// Views of std::span and of mdspan-like types (include/gradix/interop/span.hpp): the same
// memory, the right extents and strides, static extents kept, mismatches named. std::mdspan
// itself is tested where the standard library has it (C++23); everywhere, a small type with
// its interface stands in (row-major, column-major and strided mappings).
#include <gradix/gradix.hpp>

#include <doctest/doctest.h>

#include <array>
#include <cstddef>
#include <span>
#include <string>
#include <vector>
#if __has_include(<mdspan>)
#include <mdspan>
#endif

namespace gx = gradix;
using gx::dyn;

namespace {
/// mdspan's interface over a pointer, two extents (the first static when E0 is not
/// dynamic_extent) and explicit strides.
template <class T, std::size_t E0>
struct mini_mdspan {
  T* p;
  std::size_t ext[2];
  std::size_t str[2];
  T* data_handle() const { return p; }
  static constexpr std::size_t rank() { return 2; }
  static constexpr std::size_t static_extent(std::size_t k) { return k == 0 ? E0 : std::dynamic_extent; }
  std::size_t extent(std::size_t k) const { return ext[k]; }
  std::size_t stride(std::size_t k) const { return str[k]; }
};
}  // namespace

static_assert(gx::mdspan_like<mini_mdspan<float, 3>>);
static_assert(!gx::mdspan_like<std::vector<float>>);
static_assert(std::is_same_v<decltype(gx::view(std::declval<mini_mdspan<float, 3> const&>())),
                             gx::tensor_view<float, gx::shape<3, dyn>, gx::strided>>);
static_assert(std::is_same_v<decltype(gx::view(std::declval<std::span<double const, 5>>())), gx::tensor_view<double const, gx::shape<5>>>);

TEST_CASE("span: rank-1 views and shaped views of the same memory") {
  std::vector<float> v{1, 2, 3, 4, 5, 6};
  auto a = gx::view(std::span(v));
  CHECK(a.data() == v.data());
  CHECK(a.shape().extent(0) == 6);
  CHECK(gx::value(gx::sum(a)) == 21.0f);
  auto m = gx::view(std::span(v), gx::dims(2, 3));
  CHECK(m(1, 0) == 4.0f);
  auto c = gx::view<gx::col_major>(std::span(v), gx::dims(2, 3));
  CHECK(c(1, 0) == 2.0f);
  gx::assign(m, m * 10.0f);  // written through: the vector's elements
  CHECK(v[5] == 60.0f);
  std::array<double, 4> fixed{1, 2, 3, 4};
  auto f = gx::view(std::span<double const, 4>(fixed));
  CHECK(gx::value(gx::sum(f)) == 10.0);
  std::string msg;
  try {
    (void)gx::view(std::span(v), gx::dims(4, 2));
  } catch (gx::error const& e) {
    msg = e.what();
  }
  CHECK(msg == "gradix::view: a span of 6 elements viewed as shape [4, 2] (8 elements)");
}

TEST_CASE("mdspan: row-major, column-major and strided mappings come out as their strides say") {
  std::vector<int> data(24);
  for (int k = 0; k < 24; ++k) data[std::size_t(k)] = k;
  mini_mdspan<int, 3> right{data.data(), {3, 4}, {4, 1}};   // layout_right
  mini_mdspan<int, 3> left{data.data(), {3, 4}, {1, 3}};    // layout_left
  mini_mdspan<int, std::dynamic_extent> every_other{data.data() + 1, {3, 4}, {8, 2}};  // layout_stride
  auto r = gx::view(right);
  auto l = gx::view(left);
  auto s = gx::view(every_other);
  for (gx::index_t i = 0; i < 3; ++i)
    for (gx::index_t j = 0; j < 4; ++j) {
      CHECK(r(i, j) == data[std::size_t(i * 4 + j)]);
      CHECK(l(i, j) == data[std::size_t(i + j * 3)]);
      CHECK(s(i, j) == data[std::size_t(1 + i * 8 + j * 2)]);
    }
  CHECK(r.data() == data.data());
  CHECK(gx::value(gx::sum(s)) == [&] {
    int t = 0;
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 4; ++j) t += data[std::size_t(1 + i * 8 + j * 2)];
    return t;
  }());
}

#if defined(__cpp_lib_mdspan)
TEST_CASE("std::mdspan: layout_right, layout_left and layout_stride") {
  std::vector<double> data(12);
  for (int k = 0; k < 12; ++k) data[std::size_t(k)] = k;
  std::mdspan<double, std::extents<std::size_t, 3, std::dynamic_extent>> right(data.data(), 4);
  auto r = gx::view(right);
  static_assert(std::is_same_v<decltype(r), gx::tensor_view<double, gx::shape<3, dyn>, gx::strided>>);
  CHECK(r(2, 3) == 11.0);
  std::mdspan<double, std::dextents<std::size_t, 2>, std::layout_left> left(data.data(), 3, 4);
  CHECK(gx::view(left)(2, 3) == 11.0);
  CHECK(gx::view(left)(1, 0) == 1.0);
}
#endif
