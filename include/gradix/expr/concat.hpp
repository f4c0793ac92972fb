#pragma once
/// \file
/// Joining along an axis: concat<Axis>(a, b, ...) (an existing axis grows), stack<Axis>(a,
/// b, ...) (a new axis, one position per operand).
///
///   concat_node<L, R, Axis>   out[c] = lhs[c]           where c[Axis] < n_lhs
///                                      rhs[c - n_lhs]   otherwise (shifted along Axis)
///
/// More operands nest to the left: concat(a, b, c) is concat(concat(a, b), c). The save
/// transform keeps every concat's value in a buffer (the operands are copied into it once
/// per call; a consumer reads it without a branch per element), and its backward reads the
/// adjoint from a buffer of the result's shape: the adjoint itself where it is one (the
/// adjoint buffer of a product that reads the concat), else the concat's own, filled by one
/// kernel first. Each operand then receives its block of that buffer (a strided view), read
/// once: the backward costs a copy of the result, as the forward does.

#include "gradix/config.hpp"
#include "gradix/core/array.hpp"
#include "gradix/core/error.hpp"
#include "gradix/core/shape.hpp"
#include "gradix/expr/node.hpp"
#include "gradix/expr/reduce.hpp"
#include "gradix/expr/view.hpp"

#include <type_traits>

namespace gradix {

/// out[c] = c[Axis] < n_lhs ? lhs[c] : rhs[c shifted by -n_lhs along Axis]
/// shape:    lhs's, with extent n_lhs + n_rhs along Axis
/// backward: d_lhs = d_out's first n_lhs positions along Axis, d_rhs the rest
template <class L, class R, std::size_t Axis>
struct concat_node {
  using is_gradix_expression = void;
  using value_type = value_type_t<L>;
  struct holder {
    static constexpr array<index_t, shape_of_t<L>::rank> value = [] {
      using SL = shape_of_t<L>;
      using SR = shape_of_t<R>;
      array<index_t, SL::rank> r{};
      for (std::size_t j = 0; j < SL::rank; ++j) {
        index_t const a = SL::static_extents[j], b = SR::static_extents[j];
        if (j == Axis) r[j] = (a == dyn || b == dyn) ? dyn : a + b;
        else r[j] = a != dyn ? a : b;
      }
      return r;
    }();
  };
  using shape_type = detail::shape_from_array_t<holder>;
  using layout_type = row_major;
  using space_type = std::conditional_t<std::is_void_v<space_of_t<L>>, space_of_t<R>, space_of_t<L>>;
  static constexpr std::size_t axis = Axis;
  L lhs_;
  R rhs_;
  shape_type shape_;
  GRADIX_HOST_DEVICE constexpr shape_type const& shape() const { return shape_; }
  /// The extent of lhs along Axis: where rhs starts.
  GRADIX_HOST_DEVICE constexpr index_t split() const { return lhs_.shape().extent(Axis); }
};
template <class N>
struct is_concat_node : std::false_type {};
template <class L, class R, std::size_t Axis>
struct is_concat_node<concat_node<L, R, Axis>> : std::true_type {};

namespace detail {
/// Whether static extents of SA and SB disagree on an axis other than Axis.
template <class SA, class SB, std::size_t Axis>
inline constexpr bool concat_static_mismatch_v = [] {
  if constexpr (SA::rank != SB::rank) {
    return false;  // reported as a rank mismatch
  } else {
    for (std::size_t j = 0; j < SA::rank; ++j)
      if (j != Axis && SA::static_extents[j] != dyn && SB::static_extents[j] != dyn &&
          SA::static_extents[j] != SB::static_extents[j])
        return true;
    return false;
  }
}();

template <std::size_t Ax, class A, class B>
constexpr auto concat2(A const& a, B const& b, char const* op) {
  using SA = shape_of_t<A>;
  using N = concat_node<A, B, Ax>;
  typename N::shape_type s{};
  for (std::size_t j = 0; j < SA::rank; ++j) {
    index_t const ea = a.shape().extent(j), eb = b.shape().extent(j);
    if (j != Ax && ea != eb)
      fail(op, ": operands of shapes ", to_string(a.shape()), " and ", to_string(b.shape()), " differ at axis ",
           j, " (extent ", ea, " against ", eb, "); they may differ only at axis ", Ax, ", the joined one");
    s.set_extent(j, j == Ax ? ea + eb : ea);
  }
  return N{a, b, s};
}
template <std::size_t Ax, class A>
constexpr auto concat_fold(char const*, A const& a) {
  return a;
}
template <std::size_t Ax, class A, class B, class... More>
constexpr auto concat_fold(char const* op, A const& a, B const& b, More const&... more) {
  return concat_fold<Ax>(op, concat2<Ax>(a, b, op), more...);
}

template <int Axis, class... N>
constexpr bool concat_operands_ok() {
  using F = std::tuple_element_t<0, std::tuple<N...>>;
  constexpr std::size_t R = shape_of_t<F>::rank;
  static_assert(((shape_of_t<N>::rank == R) && ...), "gradix::concat: every operand must have the same rank");
  static_assert(((std::is_same_v<value_type_t<N>, value_type_t<F>>) && ...),
                "gradix::concat: every operand must have the same element type (cast<T>(x) converts one)");
  static_assert(R > 0, "gradix::concat: rank-0 operands have no axis to join along (stack joins along a new one)");
  static_assert(R == 0 || normalize_axis_v<Axis, R> < R, "gradix::concat: the axis is out of range for the operands' rank");
  if constexpr (((shape_of_t<N>::rank == R) && ...) && R > 0 && normalize_axis_v<Axis, R> < R) {
    constexpr std::size_t Ax = normalize_axis_v<Axis, R>;
    static_assert(!(concat_static_mismatch_v<shape_of_t<F>, shape_of_t<N>, Ax> || ...),
                  "gradix::concat: the operands' static extents differ at an axis other than the joined one");
    return ((std::is_same_v<value_type_t<N>, value_type_t<F>>) && ...) &&
           !(concat_static_mismatch_v<shape_of_t<F>, shape_of_t<N>, Ax> || ...);
  } else {
    return false;
  }
}
}  // namespace detail

/// concat<Axis>(a, b, ...): the operands one after another along Axis (negative counts from
/// the end). They have one rank and one element type, and equal extents on every other axis
/// (checked statically where static, else gradix::error naming both shapes and the axis).
/// Gradient: each operand receives its block of the result's adjoint.
template <int Axis, operand A, operand B, operand... More>
constexpr auto concat(A&& a, B&& b, More&&... more) {
  if constexpr (!detail::concat_operands_ok<Axis, detail::node_t<A>, detail::node_t<B>, detail::node_t<More>...>()) {
    return detail::as_node(static_cast<A&&>(a));  // a static_assert has fired: stop here
  } else {
    constexpr std::size_t Ax = normalize_axis_v<Axis, shape_of_t<detail::node_t<A>>::rank>;
    return detail::concat_fold<Ax>("gradix::concat", detail::as_node(static_cast<A&&>(a)),
                                   detail::as_node(static_cast<B&&>(b)), detail::as_node(static_cast<More&&>(more))...);
  }
}

/// stack<Axis>(a, b, ...): the operands side by side along a new axis at position Axis of the
/// result (negative counts from the end of the result's axes), of static extent the operand
/// count. The operands have one shape and one element type. Gradient: each operand receives
/// its slice of the result's adjoint.
template <int Axis, operand A, operand B, operand... More>
constexpr auto stack(A&& a, B&& b, More&&... more) {
  using F = detail::node_t<A>;
  constexpr std::size_t R = shape_of_t<F>::rank + 1;
  static_assert(normalize_axis_v<Axis, R> < R, "gradix::stack: the axis is out of range for the result's rank");
  static_assert((shape_of_t<detail::node_t<B>>::rank + 1 == R) && ((shape_of_t<detail::node_t<More>>::rank + 1 == R) && ...),
                "gradix::stack: every operand must have the same rank");
  static_assert(std::is_same_v<value_type_t<detail::node_t<B>>, value_type_t<F>> &&
                    ((std::is_same_v<value_type_t<detail::node_t<More>>, value_type_t<F>>) && ...),
                "gradix::stack: every operand must have the same element type (cast<T>(x) converts one)");
  static_assert(!(detail::concat_static_mismatch_v<shape_of_t<F>, shape_of_t<detail::node_t<B>>, R> ||
                  (detail::concat_static_mismatch_v<shape_of_t<F>, shape_of_t<detail::node_t<More>>, R> || ...)),
                "gradix::stack: the operands' static extents differ (stacked operands have one shape)");
  constexpr std::size_t Ax = normalize_axis_v<Axis, R> < R ? normalize_axis_v<Axis, R> : 0;
  auto up = [](auto&& x) {
    auto n = detail::as_node(static_cast<decltype(x)&&>(x));
    using X = decltype(n);
    if constexpr (shape_of_t<X>::rank + 1 != R) {
      return n;  // concat's rank check reports it
    } else {
      using U = unsqueeze_node<X, Ax>;
      typename U::shape_type s{};
      for (std::size_t j = 0, k = 0; j < R; ++j) s.set_extent(j, j == Ax ? 1 : n.shape().extent(k++));
      return U{n, s};
    }
  };
  if constexpr (!detail::concat_operands_ok<int(Ax), decltype(up(static_cast<A&&>(a))), decltype(up(static_cast<B&&>(b))),
                                            decltype(up(static_cast<More&&>(more)))...>()) {
    return up(static_cast<A&&>(a));  // a static_assert has fired: stop here
  } else {
    return detail::concat_fold<Ax>("gradix::stack", up(static_cast<A&&>(a)), up(static_cast<B&&>(b)),
                                   up(static_cast<More&&>(more))...);
  }
}

}  // namespace gradix
