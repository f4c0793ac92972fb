#pragma once
/// \file
/// What an expression is, its traits, and how builders turn their arguments into nodes.
///
/// Every node is plain data: its children by value, its result shape, nothing else. A node
/// declares `is_gradix_expression`, `value_type`, `shape_type`, `layout_type` (whose
/// contiguous axis loops put innermost) and `space_type`, and has `shape()`.

#include "gradix/config.hpp"
#include "gradix/core/dtype.hpp"
#include "gradix/core/layout.hpp"
#include "gradix/core/shape.hpp"
#include "gradix/core/tensor.hpp"
#include "gradix/core/view.hpp"

#include <type_traits>

namespace gradix {

/// A gradix expression node (a view, a scalar, or an operation on expressions).
template <class E>
concept expression = requires { typename std::remove_cvref_t<E>::is_gradix_expression; };

template <class E>
using value_type_t = typename std::remove_cvref_t<E>::value_type;
template <class E>
using shape_of_t = typename std::remove_cvref_t<E>::shape_type;
template <class E>
using layout_of_t = typename std::remove_cvref_t<E>::layout_type;
template <class E>
using space_of_t = typename std::remove_cvref_t<E>::space_type;

/// A parameter object (see api/param.hpp): in expressions, a leaf that receives gradients.
template <class X>
concept parameter_object = requires { typename std::remove_cvref_t<X>::is_gradix_param; };

/// Something a builder accepts as a tensor operand: an expression, a tensor or a parameter
/// (an lvalue becomes a view of it; a temporary is refused with a message).
template <class X>
concept operand = expression<X> || is_tensor_v<std::remove_cvref_t<X>> || parameter_object<X>;

/// A C++ scalar that combines with an expression (`x * 2.0f`).
template <class X>
concept scalar = element<std::remove_cvref_t<X>>;

/// Layout marker of nodes without a preferred contiguous axis (scalars).
struct any_layout {
  template <std::size_t R>
  static constexpr std::size_t unit_axis = R == 0 ? 0 : R - 1;
};

/// A C++ scalar inside an expression: rank 0, broadcasts against anything.
/// out = value
template <class T>
struct scalar_node {
  using is_gradix_expression = void;
  using value_type = T;
  using shape_type = ::gradix::shape<>;
  using layout_type = any_layout;
  using space_type = void;  // valid in any memory space
  T value_;
  GRADIX_HOST_DEVICE constexpr shape_type shape() const { return {}; }
};

namespace detail {

/// An operand as a node: a view for a tensor lvalue, the node itself for an expression.
template <class X>
constexpr auto as_node(X&& x) {
  using D = std::remove_cvref_t<X>;
  if constexpr (is_tensor_v<D>) {
    static_assert(std::is_lvalue_reference_v<X>,
                  "gradix: a temporary tensor cannot be used in an expression (the expression "
                  "would keep a view of it after it is destroyed); store it in a variable first");
    return x.view();
  } else if constexpr (parameter_object<X>) {
    static_assert(std::is_lvalue_reference_v<X>,
                  "gradix: a temporary parameter cannot be used in an expression (the expression "
                  "would point at its gradient storage after it is destroyed)");
    return x.node();
  } else {
    return D(x);
  }
}

template <class X>
using node_t = decltype(as_node(std::declval<X>()));

/// The common memory space of two nodes (void = any space).
template <class A, class B>
using common_space_t = std::conditional_t<std::is_void_v<A>, B, A>;
template <class A, class B>
inline constexpr bool spaces_compatible_v =
    std::is_void_v<A> || std::is_void_v<B> || std::is_same_v<A, B>;

/// Layout of a node combining two operands: the layout of the operand whose rank is the
/// result's (the first one on a tie), ignoring scalars.
template <class A, class B>
using combined_layout_t = std::conditional_t<
    std::is_same_v<layout_of_t<A>, any_layout>, layout_of_t<B>,
    std::conditional_t<std::is_same_v<layout_of_t<B>, any_layout> ||
                           shape_of_t<A>::rank >= shape_of_t<B>::rank,
                       layout_of_t<A>, layout_of_t<B>>>;

}  // namespace detail
}  // namespace gradix
