// The coordinate algebra (core/coords.hpp): unravel, the odometer step and the mixed-radix
// advance agree with each other and with a plain row-major count, on every subset of axes.
#include "gradix/core/coords.hpp"

#include <doctest/doctest.h>

#include <cstdint>
#include <vector>

namespace {
using gradix::array;
using gradix::coord;
using gradix::index_t;
namespace coords = gradix::coords;

// Type-level and constant-evaluated facts: a regression breaks the build.
static_assert(coords::all_axes<0> == 0);
static_assert(coords::all_axes<3> == 0b111);
static_assert(coords::all_but<3>(1) == 0b101);
static_assert(coords::count(array<index_t, 3>{{2, 3, 4}}) == 24);
static_assert(coords::count(array<index_t, 3>{{2, 3, 4}}, 0b101) == 8);
static_assert(coords::count(array<index_t, 3>{{2, 3, 4}}, 0) == 1);
static_assert(coords::unravel(array<index_t, 3>{{2, 3, 4}}, 23) == coord<3>{{1, 2, 3}});
static_assert(coords::unravel(array<index_t, 3>{{2, 3, 4}}, 5) == coord<3>{{0, 1, 1}});
// masked: axes 0 and 2 only (extents 2 and 4), the middle coordinate untouched (0)
static_assert(coords::unravel(array<index_t, 3>{{2, 3, 4}}, 0b101, 5) == coord<3>{{1, 0, 1}});
// col_major: the first axis fastest
static_assert(coords::unravel_in<gradix::col_major>(array<index_t, 3>{{2, 3, 4}}, 5) == coord<3>{{1, 2, 0}});
static_assert(coords::unravel_in<gradix::row_major>(array<index_t, 3>{{2, 3, 4}}, 5) == coord<3>{{0, 1, 1}});

constexpr bool odometer_wraps() {
  array<index_t, 2> ext{{2, 2}};
  coord<2> c{{1, 1}};
  bool const more = coords::next(c, ext);
  return !more && c == coord<2>{{0, 0}};
}
static_assert(odometer_wraps());

// Flat row-major index of c over the axes of mask (axis F first when it is one of them).
template <int F, std::size_t R>
index_t flat(coord<R> const& c, array<index_t, R> const& ext, std::uint64_t mask) {
  index_t k = 0;
  for (std::size_t j = 0; j < R; ++j)
    if (((mask >> j) & 1) && int(j) != F) k = k * ext[j] + c[j];
  if constexpr (F >= 0 && std::size_t(F) < R) {
    if ((mask >> F) & 1) k = k * ext[std::size_t(F)] + c[std::size_t(F)];
  }
  return k;
}
}  // namespace

TEST_CASE("coords: the odometer visits unravel's order on every subset of axes") {
  array<index_t, 4> const ext{{3, 1, 4, 2}};
  for (std::uint64_t mask = 0; mask < 16; ++mask) {
    index_t const n = coords::count(ext, mask);
    coord<4> c{{0, 0, 0, 0}};
    for (index_t k = 0; k < n; ++k) {
      coord<4> u{{0, 0, 0, 0}};
      coords::unravel_axes(u, ext, mask, k);
      CHECK(u == c);
      CHECK(flat<-1>(c, ext, mask) == k);
      bool const more = coords::next(c, ext, mask);
      CHECK(more == (k + 1 < n));
    }
    CHECK(c == coord<4>{{0, 0, 0, 0}});  // wrapped back to the first point
  }
}

TEST_CASE("coords: an axis named fastest comes first, compose splits two index spaces") {
  array<index_t, 3> const ext{{3, 4, 5}};
  constexpr std::uint64_t mask = 0b011;  // axes 0 and 1 reduced, axis 2 kept
  for (index_t o = 0; o < 5; ++o)
    for (index_t r = 0; r < 12; ++r) {
      coord<3> const c = coords::compose<0>(ext, mask, o, r);
      CHECK(c[2] == o);
      CHECK(flat<0>(c, ext, mask) == r);
      CHECK(c[0] == r % 3);  // axis 0 fastest
    }
}

TEST_CASE("coords: advance adds a fixed offset as a mixed-radix number, in the fast order") {
  array<index_t, 4> const ext{{3, 2, 5, 4}};
  constexpr std::uint64_t mask = 0b1101;
  index_t const n = coords::count(ext, mask);
  for (index_t s = 0; s < n; ++s) {
    coord<4> step{};
    coords::unravel_axes_fast<2>(step, ext, mask, s);
    for (index_t k = 0; k + s < n; ++k) {
      coord<4> c{{0, 1, 0, 0}};
      coords::unravel_axes_fast<2>(c, ext, mask, k);
      coords::advance<2>(c, ext, mask, step);
      CHECK(flat<2>(c, ext, mask) == k + s);
      CHECK(c[1] == 1);  // an axis outside the mask is left alone
    }
  }
}
