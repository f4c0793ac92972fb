#pragma once
/// \file
/// The nodes of index operations whose positions are tensors of the operand's rank:
/// take_along_node (one position per output element along one axis, as torch.gather or
/// numpy's take_along_axis) and one_hot_node (a 0/1 row per index). Their builders,
/// take_along and one_hot, are in api/take.hpp: take_along checks host positions when it is
/// built, with their evaluator.

#include "gradix/config.hpp"
#include "gradix/core/error.hpp"
#include "gradix/core/shape.hpp"
#include "gradix/expr/node.hpp"
#include "gradix/expr/reduce.hpp"

#include <string>
#include <type_traits>

namespace gradix {

/// out[c] = arg[c with coordinate Axis replaced by pos[c]]
/// shape:    shape of pos (arg's rank; every axis but Axis of arg's extent)
/// backward: d_arg[c with pos[c] on Axis] += d_out[c] (a scatter-add: repeated positions add)
template <class Arg, class Pos, std::size_t Axis>
struct take_along_node {
  using is_gradix_expression = void;
  using value_type = value_type_t<Arg>;
  using shape_type = shape_of_t<Pos>;
  using layout_type = layout_of_t<Arg>;
  using space_type = detail::common_space_t<space_of_t<Arg>, space_of_t<Pos>>;
  static constexpr std::size_t axis = Axis;
  Arg arg_;
  Pos pos_;
  shape_type shape_;
  GRADIX_HOST_DEVICE constexpr shape_type const& shape() const { return shape_; }
};

/// out[c, k] = pos[c] == k ? 1 : 0   (a position outside [0, n) gives a row of zeros)
/// shape:    shape of pos, then n
/// backward: none (pos is an integer)
template <class T, class Pos, class Shape>
struct one_hot_node {
  using is_gradix_expression = void;
  using value_type = T;
  using shape_type = Shape;
  using layout_type = row_major;
  using space_type = space_of_t<Pos>;
  Pos pos_;
  shape_type shape_;
  GRADIX_HOST_DEVICE constexpr shape_type const& shape() const { return shape_; }
};

namespace detail {
/// S with one more axis of static extent E (dyn: dynamic).
template <class S, index_t E>
struct appended_shape {
  struct holder {
    static constexpr array<index_t, S::rank + 1> value = [] {
      array<index_t, S::rank + 1> r{};
      for (std::size_t j = 0; j < S::rank; ++j) r[j] = S::static_extents[j];
      r[S::rank] = E;
      return r;
    }();
  };
  using type = shape_from_array_t<holder>;
};
}  // namespace detail

}  // namespace gradix
