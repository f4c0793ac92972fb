#pragma once
/// \file
/// Reductions: sum, mean and max over all axes or over chosen compile-time axes (negative
/// axes count from the end), with or without keeping the reduced axes (as static extent 1,
/// so the result broadcasts back against the operand).

#include "gradix/config.hpp"
#include "gradix/core/error.hpp"
#include "gradix/core/shape.hpp"
#include "gradix/core/simd.hpp"
#include "gradix/expr/node.hpp"

#include <cstdint>
#include <limits>
#include <type_traits>

namespace gradix {

namespace op {
/// Reduction functors: identity and combine (used for lanes, blocks and partials alike).
struct sum_of {
  static constexpr char const* name = "sum";
  template <class T>
  GRADIX_HOST_DEVICE static constexpr T identity() { return T(0); }
  template <class T>
  GRADIX_HOST_DEVICE static constexpr T combine(T a, T b) { return a + b; }
  /// Neutral padding for partial SIMD packs: -0 (x + -0 == x for every x, -0 included).
  template <class T>
  GRADIX_HOST_DEVICE static constexpr T pad() {
    if constexpr (std::is_floating_point_v<T>) return -T(0);
    else return T(0);
  }
};
/// mean = sum / count (integer division for integer types)
struct mean_of : sum_of {
  static constexpr char const* name = "mean";
};
/// max; NaN propagates; ties: the first element in the reduction order.
struct max_of {
  static constexpr char const* name = "max";
  template <class T>
  GRADIX_HOST_DEVICE static constexpr T identity() {
    if constexpr (std::numeric_limits<T>::has_infinity) return -std::numeric_limits<T>::infinity();
    else return std::numeric_limits<T>::lowest();
  }
  template <class T>
  GRADIX_HOST_DEVICE static constexpr T combine(T a, T b) {
    return simd::lanewise([](auto x, auto y) { return (x >= y || x != x) ? x : y; }, a, b);
  }
  template <class T>
  GRADIX_HOST_DEVICE static constexpr T pad() { return identity<T>(); }
};
}  // namespace op

/// Tag: keep the reduced axes with extent 1 (`sum<1>(x, keep_dims)`).
struct keep_dims_t {
  explicit constexpr keep_dims_t() = default;
};
inline constexpr keep_dims_t keep_dims{};

using axis_mask = std::uint64_t;

namespace detail {

template <class S, axis_mask Mask, bool Keep>
struct reduced_shape {
  static constexpr std::size_t out_rank = [] {
    std::size_t n = 0;
    for (std::size_t j = 0; j < S::rank; ++j) n += Keep || !((Mask >> j) & 1);
    return n;
  }();
  struct holder {
    static constexpr array<index_t, out_rank> value = [] {
      array<index_t, out_rank> r{};
      std::size_t k = 0;
      for (std::size_t j = 0; j < S::rank; ++j) {
        bool red = (Mask >> j) & 1;
        if (red && !Keep) continue;
        r[k++] = red ? 1 : S::static_extents[j];
      }
      return r;
    }();
  };
  using type = shape_from_array_t<holder>;
};

}  // namespace detail

/// out[c] = Op over the reduced axes r of arg[c + r]     (mean divides the sum by the count)
/// shape:    shape of arg without the reduced axes (Keep: with extent 1 there)
/// backward: sum/mean: d_arg[c + r] = d_out[c] (mean: / count);
///           max: d_out[c] goes to the first arg-max, 0 elsewhere
template <class Op, class Arg, axis_mask Mask, bool Keep>
struct reduce_node {
  using is_gradix_expression = void;
  using value_type = value_type_t<Arg>;
  using shape_type = typename detail::reduced_shape<shape_of_t<Arg>, Mask, Keep>::type;
  using layout_type = layout_of_t<Arg>;
  using space_type = space_of_t<Arg>;
  static constexpr axis_mask mask = Mask;
  static constexpr bool keep = Keep;
  Arg arg_;
  shape_type shape_;
  GRADIX_HOST_DEVICE constexpr shape_type const& shape() const { return shape_; }
};

template <class E>
struct is_reduce_node : std::false_type {};
template <class Op, class Arg, axis_mask M, bool K>
struct is_reduce_node<reduce_node<Op, Arg, M, K>> : std::true_type {};

namespace detail {

/// Instantiated with the bad axis and the rank so that the compiler prints them.
template <int Axis, std::size_t Rank>
struct reduction_axis_out_of_range {
  static constexpr bool value = normalize_axis_v<Axis, Rank> < Rank;
  static_assert(value,
                "gradix: a reduction axis is out of range for the operand's rank (axes "
                "count from 0, or from -1 for the last); see "
                "reduction_axis_out_of_range<axis, rank>");
};

template <std::size_t R, int... Axes>
inline constexpr axis_mask axes_mask_v = [] {
  if constexpr (sizeof...(Axes) == 0) {
    return R == 0 ? axis_mask(0) : (R >= 64 ? ~axis_mask(0) : (axis_mask(1) << R) - 1);
  } else {
    return ((axis_mask(1) << normalize_axis_v<Axes, R>) | ...);
  }
}();

template <std::size_t R, int... Axes>
inline constexpr bool axes_distinct_v = [] {
  if constexpr (sizeof...(Axes) == 0) return true;
  else return std::size_t(__builtin_popcountll(axes_mask_v<R, Axes...>)) == sizeof...(Axes);
}();

template <int... Axes>
struct reduction_axes_repeated {
  static_assert(sizeof...(Axes) < 0, "gradix: a reduction names the same axis twice");
};

template <class Op, bool Keep, int... Axes, class A>
constexpr auto make_reduce(A a) {
  constexpr std::size_t R = shape_of_t<A>::rank;
  if constexpr (!(reduction_axis_out_of_range<Axes, R>::value && ...)) {
    return a;  // the static_assert has fired: stop here
  } else if constexpr (!axes_distinct_v<R, Axes...>) {
    (void)reduction_axes_repeated<Axes...>{};
    return a;
  } else {
    constexpr axis_mask M = axes_mask_v<R, Axes...>;
    using node = reduce_node<Op, A, M, Keep>;
    typename node::shape_type s{};
    auto sa = a.shape();
    std::size_t k = 0;
    for (std::size_t j = 0; j < R; ++j) {
      bool red = (M >> j) & 1;
      if (red && sa.extent(j) == 0 && !std::is_same_v<Op, op::sum_of>)
        fail("gradix::", Op::name, ": reduction over axis ", j, " of extent 0 (operand shape ",
             to_string(sa), ") has no value");
      if (red && !Keep) continue;
      s.set_extent(k++, red ? 1 : sa.extent(j));
    }
    return node{a, s};
  }
}

}  // namespace detail

#define GRADIX_REDUCTION(fn, Op)                                                          \
  template <int... Axes, class X>                                                         \
    requires(!scalar<X>)                                                                  \
  constexpr auto fn(X&& x) {                                                              \
    constexpr bool ok = operand<X>;                                                       \
    static_assert(ok, "gradix::" #fn ": the operand is not a gradix expression, tensor "  \
                      "or parameter");                                                    \
    if constexpr (ok)                                                                     \
      return detail::make_reduce<Op, false, Axes...>(detail::as_node(static_cast<X&&>(x))); \
    else                                                                                  \
      return scalar_node<float>{};                                                        \
  }                                                                                       \
  template <int... Axes, class X>                                                         \
    requires(!scalar<X>)                                                                  \
  constexpr auto fn(X&& x, keep_dims_t) {                                                 \
    constexpr bool ok = operand<X>;                                                       \
    static_assert(ok, "gradix::" #fn ": the operand is not a gradix expression, tensor "  \
                      "or parameter");                                                    \
    if constexpr (ok)                                                                     \
      return detail::make_reduce<Op, true, Axes...>(detail::as_node(static_cast<X&&>(x)));  \
    else                                                                                  \
      return scalar_node<float>{};                                                        \
  }
/// sum(x): all axes; sum<0, -1>(x): chosen axes; sum<1>(x, keep_dims): keep them as extent 1.
GRADIX_REDUCTION(sum, op::sum_of)
/// mean over all or chosen axes (throws gradix::error for an empty reduction).
GRADIX_REDUCTION(mean, op::mean_of)
/// max over all or chosen axes (throws gradix::error for an empty reduction).
/// Two operands (`max(a, b)`) is the elementwise maximum instead.
GRADIX_REDUCTION(max, op::max_of)
#undef GRADIX_REDUCTION

/// out[c] = the position along Axis of the first maximum of arg over that axis (a NaN wins:
///          the first NaN), as an index_t
/// shape:    shape of arg without Axis
/// backward: none (an integer); it is the arg-max that max<Axis>(arg)'s backward uses
template <class Arg, std::size_t Axis>
struct argmax_node {
  using is_gradix_expression = void;
  using value_type = index_t;
  using max_type = reduce_node<op::max_of, Arg, axis_mask(1) << Axis, false>;
  using shape_type = shape_of_t<max_type>;
  using layout_type = layout_of_t<Arg>;
  using space_type = space_of_t<Arg>;
  static constexpr std::size_t axis = Axis;
  Arg arg_;
  shape_type shape_;
  GRADIX_HOST_DEVICE constexpr shape_type const& shape() const { return shape_; }
  /// The max reduction whose first arg-max this is.
  GRADIX_HOST_DEVICE constexpr max_type max_node() const { return max_type{arg_, shape_}; }
};

template <class E>
struct is_argmax_node : std::false_type {};
template <class A, std::size_t Axis>
struct is_argmax_node<argmax_node<A, Axis>> : std::true_type {};

/// argmax<Axis>(x): the index of the first maximum along one axis (negative counts from the
/// end), an index_t expression of x's shape without that axis; gradix::error for an axis of
/// extent 0. Compare it with labels for an accuracy: `mean(cast<float>(argmax<1>(logits) ==
/// labels))`.
template <int Axis, class X>
  requires(!scalar<X>)
constexpr auto argmax(X&& x) {
  constexpr bool ok = operand<X>;
  static_assert(ok, "gradix::argmax: the operand is not a gradix expression, tensor or parameter");
  if constexpr (!ok) {
    return scalar_node<index_t>{};
  } else {
    auto a = detail::as_node(static_cast<X&&>(x));
    using A = decltype(a);
    constexpr std::size_t R = shape_of_t<A>::rank;
    if constexpr (!detail::reduction_axis_out_of_range<Axis, R>::value) {
      return scalar_node<index_t>{};  // the static_assert has fired: stop here
    } else {
      constexpr std::size_t Ax = normalize_axis_v<Axis, R>;
      if (a.shape().extent(Ax) == 0)
        detail::fail("gradix::argmax: axis ", Ax, " has extent 0 (operand shape ",
                     to_string(a.shape()), "): no maximum to point at");
      auto const m = detail::make_reduce<op::max_of, false, int(Ax)>(a);
      return argmax_node<A, Ax>{a, m.shape_};
    }
  }
}

}  // namespace gradix
