#pragma once
/// \file
/// View operations: permute / transpose, unsqueeze (a new axis of static extent 1), reshape
/// (a lazy remap in logical row-major order), broadcast_to.

#include "gradix/config.hpp"
#include "gradix/core/error.hpp"
#include "gradix/core/shape.hpp"
#include "gradix/expr/elementwise.hpp"
#include "gradix/expr/index.hpp"
#include "gradix/expr/node.hpp"

#include <type_traits>

namespace gradix {

namespace detail {
template <class S, std::size_t... P>
struct permuted_shape {
  struct holder {
    static constexpr array<index_t, sizeof...(P)> value{{S::static_extents[P]...}};
  };
  using type = shape_from_array_t<holder>;
};
template <std::size_t U, std::size_t... P>
inline constexpr std::size_t position_of_v = [] {
  std::size_t ps[] = {P...};
  for (std::size_t k = 0; k < sizeof...(P); ++k)
    if (ps[k] == U) return k;
  return std::size_t(0);
}();
}  // namespace detail

/// out[c_0, ..., c_{R-1}] = arg[a] with a[P_k] = c_k   (output axis k is operand axis P_k)
/// shape:    extent k = arg extent P_k
/// backward: d_arg[a] += d_out[c] (a bijection)
template <class Arg, std::size_t... P>
struct permute_node {
  using is_gradix_expression = void;
  using value_type = value_type_t<Arg>;
  using shape_type = typename detail::permuted_shape<shape_of_t<Arg>, P...>::type;
  using layout_type = axis_layout<detail::position_of_v<
      layout_of_t<Arg>::template unit_axis<sizeof...(P)>, P...>>;
  using space_type = space_of_t<Arg>;
  static constexpr array<std::size_t, sizeof...(P)> perm{{P...}};
  Arg arg_;
  shape_type shape_;
  GRADIX_HOST_DEVICE constexpr shape_type const& shape() const { return shape_; }
};

/// out[c] = arg[c without axis Axis]   (the new axis has static extent 1, so it broadcasts)
/// backward: d_arg[a] += d_out[a with 0 inserted at Axis]
template <class Arg, std::size_t Axis>
struct unsqueeze_node {
  using is_gradix_expression = void;
  using value_type = value_type_t<Arg>;
  struct holder {
    static constexpr array<index_t, shape_of_t<Arg>::rank + 1> value = [] {
      array<index_t, shape_of_t<Arg>::rank + 1> r{};
      for (std::size_t j = 0, k = 0; j <= shape_of_t<Arg>::rank; ++j)
        r[j] = j == Axis ? 1 : shape_of_t<Arg>::static_extents[k++];
      return r;
    }();
  };
  using shape_type = detail::shape_from_array_t<holder>;
  static constexpr std::size_t arg_unit = layout_of_t<Arg>::template unit_axis<shape_of_t<Arg>::rank>;
  using layout_type = axis_layout<(arg_unit >= Axis ? arg_unit + 1 : arg_unit)>;
  using space_type = space_of_t<Arg>;
  Arg arg_;
  shape_type shape_;
  GRADIX_HOST_DEVICE constexpr shape_type const& shape() const { return shape_; }
};

/// out[c] = arg[unravel_arg(ravel_out(c))]   (both in logical row-major order, whatever the
///           storage layout; a row-major view is reshaped without a node)
/// shape:    Shape (same number of elements, checked)
/// backward: d_arg[a] += d_out[unravel_out(ravel_arg(a))]
template <class Arg, class Shape>
struct reshape_node {
  using is_gradix_expression = void;
  using value_type = value_type_t<Arg>;
  using shape_type = Shape;
  using layout_type = row_major;
  using space_type = space_of_t<Arg>;
  Arg arg_;
  shape_type shape_;
  GRADIX_HOST_DEVICE constexpr shape_type const& shape() const { return shape_; }
};

template <class N>
struct is_reshape_node : std::false_type {};
template <class A, class S>
struct is_reshape_node<reshape_node<A, S>> : std::true_type {};
/// A reshape whose value a call keeps in a buffer (the save transform, ad/save.hpp): one of a
/// floating-point operand that is not a tensor or parameter (a reshape of those is a view, or
/// reads the operand's memory directly). Like PyTorch's copy of a non-contiguous tensor
/// before a view: the copy costs one pass, and then backward can read the adjoint of the
/// operand as the same buffer with the operand's shape, instead of composing a map with a
/// division per element (docs/ad.md, "Reshapes").
template <class N>
struct is_kept_reshape : std::false_type {};
template <class A, class S>
  requires(std::is_floating_point_v<value_type_t<A>> && !is_view_v<A> &&
           !requires {
             typename A::view_type;  // a parameter node
             typename A::grad_type;
           })
struct is_kept_reshape<reshape_node<A, S>> : std::true_type {};

/// out[c] = arg[c'] with c' = c without the leading axes arg lacks, 0 on arg's axes of
///           static extent 1 (the broadcast rule of elementwise operations)
/// backward: d_arg[c'] += sum of d_out over the broadcast axes
template <class Arg, class Shape>
struct broadcast_node {
  using is_gradix_expression = void;
  using value_type = value_type_t<Arg>;
  using shape_type = Shape;
  using layout_type = layout_of_t<Arg>;
  using space_type = space_of_t<Arg>;
  Arg arg_;
  shape_type shape_;
  GRADIX_HOST_DEVICE constexpr shape_type const& shape() const { return shape_; }
};

namespace detail {
template <std::size_t R, std::size_t... P>
inline constexpr bool is_permutation_v = [] {
  if (sizeof...(P) != R) return false;
  bool seen[R > 0 ? R : 1] = {};
  for (std::size_t p : {P...}) {
    if (p >= R || seen[p]) return false;
    seen[p] = true;
  }
  return true;
}();
template <std::size_t R, std::size_t... P>
struct not_a_permutation {
  static constexpr bool value = is_permutation_v<R, P...>;
  static_assert(value, "gradix::permute: the axes must be a permutation of 0 .. rank-1; see "
                       "not_a_permutation<rank, axes...>");
};
}  // namespace detail

/// Permutes axes: output axis k is operand axis P_k (`permute<1, 0>(m)` transposes).
template <std::size_t... P, operand X>
constexpr auto permute(X&& x) {
  auto a = detail::as_node(static_cast<X&&>(x));
  using A = decltype(a);
  if constexpr (!detail::not_a_permutation<shape_of_t<A>::rank, P...>::value) {
    return a;
  } else {
    using node = permute_node<A, P...>;
    typename node::shape_type s{};
    std::size_t k = 0;
    ((s.set_extent(k++, a.shape().extent(P))), ...);
    return node{a, s};
  }
}
/// Reverses the axes (rank 2: the matrix transpose).
template <operand X>
constexpr auto transpose(X&& x) {
  constexpr std::size_t R = shape_of_t<detail::node_t<X>>::rank;
  return [&]<std::size_t... I>(std::index_sequence<I...>) {
    return permute<(R - 1 - I)...>(static_cast<X&&>(x));
  }(std::make_index_sequence<R>{});
}

/// Inserts a new axis of static extent 1 before axis Axis (Axis = rank appends; -1 too).
template <int Axis, operand X>
constexpr auto unsqueeze(X&& x) {
  auto a = detail::as_node(static_cast<X&&>(x));
  using A = decltype(a);
  constexpr std::size_t R = shape_of_t<A>::rank;
  if constexpr (!detail::index_axis_out_of_range<Axis, R + 1>::value) {
    return a;
  } else {
    constexpr std::size_t Ax = normalize_axis_v<Axis, R + 1>;
    using node = unsqueeze_node<A, Ax>;
    typename node::shape_type s{};
    for (std::size_t j = 0, k = 0; j <= R; ++j)
      s.set_extent(j, j == Ax ? 1 : a.shape().extent(k++));
    return node{a, s};
  }
}

/// Reshapes to `s` (same element count: gradix::error otherwise), in logical row-major order.
template <operand X, index_t... E>
constexpr auto reshape(X&& x, shape<E...> s) {
  auto a = detail::as_node(static_cast<X&&>(x));
  using A = decltype(a);
  constexpr index_t na = size_v<shape_of_t<A>>, nb = size_v<shape<E...>>;
  static_assert(na == dyn || nb == dyn || na == nb,
                "gradix::reshape: the static shapes have different element counts");
  if (a.shape().size() != detail::checked_size(s, "gradix::reshape"))
    detail::fail("gradix::reshape: cannot reshape ", to_string(a.shape()), " (", a.shape().size(),
                 " elements) to ", to_string(s), " (", s.size(), " elements)");
  if constexpr (is_view_v<A> && std::is_same_v<layout_of_t<A>, row_major>) {
    using T = typename A::element_type;
    tensor_view<T, shape<E...>, row_major, space_of_t<A>> r(a.data(), s);
#if defined(GRADIX_CHECK_LIFETIMES)
    r.gen_ = a.gen_;
#endif
    return r;
  } else {
    return reshape_node<A, shape<E...>>{a, s};
  }
}

/// Broadcasts to shape `s` by the elementwise rule (missing leading axes and axes of static
/// extent 1 broadcast; other extents must match: gradix::error naming both shapes).
template <operand X, index_t... E>
constexpr auto broadcast_to(X&& x, shape<E...> s) {
  auto a = detail::as_node(static_cast<X&&>(x));
  using A = decltype(a);
  using SA = shape_of_t<A>;
  using S = shape<E...>;
  static_assert(SA::rank <= S::rank, "gradix::broadcast_to: the target has fewer axes");
  constexpr bool ok = [] {
    if constexpr (SA::rank > S::rank) return false;
    else {
      for (std::size_t j = 0; j < SA::rank; ++j) {
        index_t ea = SA::static_extents[j], eb = S::static_extents[j + S::rank - SA::rank];
        if (ea != 1 && ea != dyn && eb != dyn && ea != eb) return false;
      }
      return true;
    }
  }();
  static_assert(ok, "gradix::broadcast_to: a static extent differs from the target's and is not 1");
  if constexpr (SA::rank <= S::rank && ok) {
    constexpr std::size_t off = S::rank - SA::rank;
    for (std::size_t j = 0; j < SA::rank; ++j) {
      if (SA::static_extents[j] == 1) continue;
      if (a.shape().extent(j) != s.extent(j + off))
        detail::fail("gradix::broadcast_to: cannot broadcast ", to_string(a.shape()), " to ",
                     to_string(s), " (axis ", j, ": ", a.shape().extent(j), " vs ",
                     s.extent(j + off), "; only an axis of static extent 1 broadcasts)");
    }
    return broadcast_node<A, S>{a, s};
  } else {
    return a;
  }
}

}  // namespace gradix
