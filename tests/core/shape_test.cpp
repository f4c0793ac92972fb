#include "testing.hpp"

namespace gx = gradix;
using gx::dyn;
using gx::shape;

static_assert(gx::rank_v<shape<3, 4>> == 2);
static_assert(gx::size_v<shape<3, 4>> == 12);
static_assert(gx::size_v<shape<dyn, 4>> == dyn);
static_assert(std::is_empty_v<shape<3, 4>>);
static_assert(sizeof(shape<dyn, 64>) == sizeof(gx::index_t));
static_assert(std::is_trivially_copyable_v<shape<dyn, 64>>);
static_assert(std::is_same_v<gx::broadcast_shape_t<shape<3, 4>, shape<4>>, shape<3, 4>>);
static_assert(std::is_same_v<gx::broadcast_shape_t<shape<3, 1>, shape<1, 5>>, shape<3, 5>>);
static_assert(std::is_same_v<gx::broadcast_shape_t<shape<dyn, 4>, shape<1, 4>>, shape<dyn, 4>>);
static_assert(std::is_same_v<gx::broadcast_shape_t<shape<dyn>, shape<5>>, shape<5>>);
static_assert(std::is_same_v<gx::broadcast_shape_t<shape<1>, shape<dyn>>, shape<dyn>>);
static_assert(std::is_same_v<gx::broadcast_shape_t<shape<>, shape<2, 3>>, shape<2, 3>>);
static_assert(!gx::broadcastable_v<shape<3, 4>, shape<5>>);
static_assert(gx::normalize_axis_v<-1, 3> == 2);
static_assert(gx::normalize_axis_v<3, 3> == 3);  // invalid -> rank
static_assert(std::is_same_v<decltype(gx::dims(3, gx::fix<4>)), shape<dyn, 4>>);
static_assert(std::is_same_v<decltype(gx::dims(gx::fix<2>, gx::fix<4>)), shape<2, 4>>);
static_assert(gx::dims(3, gx::fix<4>).size() == 12);

TEST_CASE("shape: extents, size and equality") {
  auto s = gx::dims(5, gx::fix<3>);
  CHECK(s.extent(0) == 5);
  CHECK(s.extent(1) == 3);
  CHECK(s.extent<1>() == 3);
  CHECK(s.size() == 15);
  CHECK(s == shape<5, 3>{});
  CHECK_FALSE(s == gx::dims(5, 4));
  CHECK(gx::to_string(s) == "[5, 3]");
  CHECK(gx::to_string(shape<>{}) == "[]");
}

TEST_CASE("shape: dims rejects negative extents, shape_cast checks static extents") {
  CHECK_THROWS_AS(gx::dims(3, -1), gx::error);
  CHECK_NOTHROW((gx::shape_cast<shape<dyn, 4>>(gx::dims(7, 4))));
  CHECK_THROWS_WITH_AS((gx::shape_cast<shape<dyn, 4>>(gx::dims(7, 5), "gradix::tensor")),
                       doctest::Contains("extent 5 of axis 1 does not match static extent 4"),
                       gx::error);
}
