#pragma once
/// \file
/// The coordinate algebra every backend walks with, written once for host and device: the
/// unravel of a flat index into a coordinate, the odometer step to the next coordinate, and
/// the mixed-radix advance by a fixed offset. Each works over a subset of the axes (a mask:
/// bit j is axis j; the other coordinates are left as they are), in row-major order (the last
/// axis of the subset fastest) unless an axis is named fastest.
///
/// Precondition everywhere: a flat index k is below the product of the extents of its axes,
/// so no extent of those axes is zero (no division by zero is guarded; a loop over an empty
/// domain runs no iteration and calls nothing).
///
/// Users: host loops (backend/host: assign, plain uses), the grid's kernels (launch, assign,
/// kept values, reductions, write maps, validation), the device optimizer steps, the sparse
/// slice walks (grad/storage.hpp, training/slices.hpp), the arg-max evaluators, the finite
/// check, and core/tensor.hpp's element walks.

#include "gradix/config.hpp"
#include "gradix/core/array.hpp"
#include "gradix/core/layout.hpp"

#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace gradix::coords {

/// The mask of all R axes.
template <std::size_t R>
inline constexpr std::uint64_t all_axes = R >= 64 ? ~std::uint64_t(0) : (std::uint64_t(1) << R) - 1;

/// The mask of every axis but A.
template <std::size_t R>
GRADIX_HOST_DEVICE constexpr std::uint64_t all_but(std::size_t a) {
  return all_axes<R> & ~(std::uint64_t(1) << a);
}

/// The number of points over the axes in mask (1 for no axis).
template <std::size_t R>
GRADIX_HOST_DEVICE constexpr index_t count(array<index_t, R> const& ext, std::uint64_t mask = all_axes<R>) {
  index_t n = 1;
  for (std::size_t j = 0; j < R; ++j)
    if ((mask >> j) & 1) n *= ext[j];
  return n;
}

/// Sets the coordinates of c on the axes in mask to the k-th point of their row-major
/// odometer (the last axis of mask fastest).
template <std::size_t R>
GRADIX_HOST_DEVICE constexpr void unravel_axes(coord<R>& c, array<index_t, R> const& ext, std::uint64_t mask, index_t k) {
  for (std::size_t j = R; j-- > 0;) {
    if (!((mask >> j) & 1)) continue;
    c[j] = k % ext[j];
    k /= ext[j];
  }
}

/// unravel_axes with axis F fastest (when F >= 0, F < R and F is in mask), then the others of
/// mask in row-major order: on a device, threads next to each other then reach elements next
/// to each other along F.
template <int F, std::size_t R>
GRADIX_HOST_DEVICE constexpr void unravel_axes_fast(coord<R>& c, array<index_t, R> const& ext, std::uint64_t mask, index_t k) {
  if constexpr (F >= 0 && std::size_t(F) < R) {
    if ((mask >> F) & 1) {
      c[F] = k % ext[F];
      k /= ext[F];
      mask &= ~(std::uint64_t(1) << F);
    }
  }
  unravel_axes(c, ext, mask, k);
}

/// The coordinate of flat row-major index k over the axes in mask (the others 0).
template <std::size_t R>
GRADIX_HOST_DEVICE constexpr coord<R> unravel(array<index_t, R> const& ext, std::uint64_t mask, index_t k) {
  coord<R> c{};
  unravel_axes(c, ext, mask, k);
  return c;
}
/// The coordinate of flat row-major index k over all axes.
template <std::size_t R>
GRADIX_HOST_DEVICE constexpr coord<R> unravel(array<index_t, R> const& ext, index_t k) {
  return unravel(ext, all_axes<R>, k);
}

/// The coordinate of flat index k in Layout's element order: row_major's (and strided's)
/// last axis fastest, col_major's first.
template <class Layout, std::size_t R>
GRADIX_HOST_DEVICE constexpr coord<R> unravel_in(array<index_t, R> const& ext, index_t k) {
  coord<R> c{};
  if constexpr (std::is_same_v<Layout, col_major>) {
    for (std::size_t j = 0; j < R; ++j) {
      c[j] = k % ext[j];
      k /= ext[j];
    }
  } else {
    unravel_axes(c, ext, all_axes<R>, k);
  }
  return c;
}

/// The coordinate from two flat indices over complementary axes: r over the axes in mask
/// (axis F fastest, as unravel_axes_fast), o over the others (row-major). A reduction's
/// operand coordinate from its output index o and its reduced index r.
template <int F, std::size_t R>
GRADIX_HOST_DEVICE constexpr coord<R> compose(array<index_t, R> const& ext, std::uint64_t mask, index_t o, index_t r) {
  coord<R> c{};
  unravel_axes_fast<F>(c, ext, mask, r);
  unravel_axes(c, ext, all_axes<R> & ~mask, o);
  return c;
}

/// The odometer step: c becomes the next point over the axes in mask (row-major order).
/// Returns false when c wrapped around to the first point (those coordinates all 0).
template <std::size_t R>
GRADIX_HOST_DEVICE GRADIX_ALWAYS_INLINE constexpr bool next(coord<R>& c, array<index_t, R> const& ext,
                                                            std::uint64_t mask = all_axes<R>) {
  for (std::size_t j = R; j-- > 0;) {
    if (!((mask >> j) & 1)) continue;
    if (++c[j] < ext[j]) return true;
    c[j] = 0;
  }
  return false;
}

/// c += the offset whose coordinates over the axes in mask are step: a mixed-radix addition
/// in unravel_axes_fast<F>'s order (step[j] < ext[j]); a carry out of the slowest axis is
/// dropped (the point is then past the end, and the caller does not read it).
template <int F, std::size_t R>
GRADIX_HOST_DEVICE constexpr void advance(coord<R>& c, array<index_t, R> const& ext, std::uint64_t mask, coord<R> const& step) {
  index_t carry = 0;
  auto const digit = [&](std::size_t j) {
    index_t const v = c[j] + step[j] + carry;
    carry = v >= ext[j] ? 1 : 0;
    c[j] = carry ? v - ext[j] : v;
  };
  constexpr bool fast = F >= 0 && std::size_t(F) < R;
  if constexpr (fast) {
    if ((mask >> F) & 1) digit(std::size_t(F));
  }
  for (std::size_t j = R; j-- > 0;)
    if ((!fast || j != std::size_t(F)) && ((mask >> j) & 1)) digit(j);
}

}  // namespace gradix::coords
