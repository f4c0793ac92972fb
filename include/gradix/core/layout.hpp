#pragma once
/// \file
/// Layouts and memory spaces. A layout names which axis is contiguous: it travels through
/// expressions so loops put that axis innermost.

#include "gradix/config.hpp"
#include "gradix/core/array.hpp"

#include <cstddef>
#include <type_traits>

namespace gradix {

/// C order: the last axis is contiguous.
struct row_major {
  template <std::size_t R>
  static constexpr std::size_t unit_axis = R == 0 ? 0 : R - 1;
};
/// Fortran order: the first axis is contiguous.
struct col_major {
  template <std::size_t R>
  static constexpr std::size_t unit_axis = 0;
};
/// Arbitrary strides (views over external memory). Loops treat it like row-major order,
/// but no stride is known to be 1 at compile time.
struct strided {
  template <std::size_t R>
  static constexpr std::size_t unit_axis = R == 0 ? 0 : R - 1;
};

/// Layout of an expression whose contiguous axis is K (after a permutation or a dropped
/// axis); only expressions have it, never storage.
template <std::size_t K>
struct axis_layout {
  template <std::size_t R>
  static constexpr std::size_t unit_axis = K < R ? K : (R == 0 ? 0 : R - 1);
};

template <class L>
inline constexpr bool is_layout_v =
    std::is_same_v<L, row_major> || std::is_same_v<L, col_major> || std::is_same_v<L, strided>;

/// Whether axis A of a rank-R tensor of layout L has stride 1, known at compile time.
template <class L, std::size_t R, std::size_t A>
inline constexpr bool unit_stride_v = !std::is_same_v<L, strided> && L::template unit_axis<R> == A;

/// Contiguous strides of a layout for the given extents.
template <class L, std::size_t R>
GRADIX_HOST_DEVICE constexpr array<index_t, R> contiguous_strides(array<index_t, R> const& ext) {
  array<index_t, R> s{};
  if constexpr (R > 0) {
    index_t acc = 1;
    if constexpr (std::is_same_v<L, col_major>) {
      for (std::size_t i = 0; i < R; ++i) {
        s[i] = acc;
        acc *= ext[i];
      }
    } else {
      for (std::size_t i = R; i-- > 0;) {
        s[i] = acc;
        acc *= ext[i];
      }
    }
  }
  return s;
}

/// Memory spaces: where a view's data lives.
struct host_space {};
struct cuda_space {};

}  // namespace gradix
