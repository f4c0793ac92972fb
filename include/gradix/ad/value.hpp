#pragma once
/// \file
/// Value expressions of mapped adjoints: gradix expressions over the adjoint's domain D,
/// built at compile time by the backward rules and evaluated on the fly by update kernels.
///
///   one_node<T, D>              the seed 1 (a type: 1 * v simplifies to v)
///   at_map_node<Sub, M, D>      forward sub-expression Sub recomputed at M(d)
///   extend_node<V, D2>          v over a larger domain (a reduction added axes it ignores)
///   path_deriv_node<Top, Path>  d Top / d X for the node X that Path reaches from Top
///                               (an elementwise region, differentiated in one pass)
/// and the ordinary elementwise nodes (mul, neg) to combine them.

#include "gradix/ad/map.hpp"
#include "gradix/config.hpp"
#include "gradix/core/shape.hpp"
#include "gradix/expr/elementwise.hpp"
#include "gradix/expr/node.hpp"

#include <type_traits>

namespace gradix::ad {

template <class T, class D>
struct one_node {
  using is_gradix_expression = void;
  using value_type = T;
  using shape_type = D;
  using layout_type = any_layout;
  using space_type = void;
  D dom_;
  GRADIX_HOST_DEVICE constexpr D const& shape() const { return dom_; }
};

template <class Sub, class Map, class D>
struct at_map_node {
  using is_gradix_expression = void;
  using value_type = value_type_t<Sub>;
  using shape_type = D;
  using layout_type = any_layout;
  using space_type = space_of_t<Sub>;
  Sub sub_;
  Map map_;
  D dom_;
  GRADIX_HOST_DEVICE constexpr D const& shape() const { return dom_; }
};

template <class V, class D>
struct extend_node {
  using is_gradix_expression = void;
  using value_type = value_type_t<V>;
  using shape_type = D;
  using layout_type = any_layout;
  using space_type = space_of_t<V>;
  V v_;
  D dom_;
  GRADIX_HOST_DEVICE constexpr D const& shape() const { return dom_; }
};

/// A path from a node down through unary and binary nodes: the operand taken at each step
/// (0: the argument or left operand, 1: the right operand).
template <std::size_t... S>
struct path {};

/// A list of paths from one region's top (the targets of an ad::multi_use).
template <class... P>
struct path_list {
  static constexpr std::size_t size = sizeof...(P);
};

/// How a node's value changes with one operand (its local partial derivative), by kind:
///   plus_one / minus_one   a constant (+, -, negation, a cast): nothing to evaluate
///   sibling                reads only the other operand (the product, the left side of /)
///   general                reads the operand itself or the node's value (tanh, exp, max...)
/// none: no gradient flows into that operand (a comparison's operands, a selection's mask).
enum class partial_kind { plus_one, minus_one, sibling, general, none };

template <class Node, std::size_t Side>
struct partial_of {
  static constexpr partial_kind value = partial_kind::general;
};
template <class Op, class A>
struct partial_of<unary_node<Op, A>, 0> {
  static constexpr partial_kind value =
      std::is_same_v<Op, op::neg>                ? partial_kind::minus_one
      : requires { typename Op::result_type; }   ? partial_kind::plus_one  // a cast
                                                 : partial_kind::general;
};
template <class Op, std::size_t Side>
inline constexpr bool no_partial_v = [] {
  if constexpr (Side == 0 && requires { Op::no_partial_lhs; }) return bool(Op::no_partial_lhs);
  else if constexpr (Side == 1 && requires { Op::no_partial_rhs; }) return bool(Op::no_partial_rhs);
  else return false;
}();
template <class Op, class L, class R, std::size_t Side>
struct partial_of<binary_node<Op, L, R>, Side> {
  static constexpr partial_kind value =
      no_partial_v<Op, Side> ? partial_kind::none
      : std::is_same_v<Op, op::add> || (std::is_same_v<Op, op::sub> && Side == 0)
          ? partial_kind::plus_one
      : std::is_same_v<Op, op::sub> ? partial_kind::minus_one
      : std::is_same_v<Op, op::mul> || (std::is_same_v<Op, op::div> && Side == 0)
          ? partial_kind::sibling
          : partial_kind::general;
};
template <class Node, std::size_t Side>
inline constexpr partial_kind partial_of_v = partial_of<Node, Side>::value;
template <class Node, std::size_t Side>
inline constexpr bool constant_partial_v = partial_of_v<Node, Side> == partial_kind::plus_one ||
                                           partial_of_v<Node, Side> == partial_kind::minus_one ||
                                           partial_of_v<Node, Side> == partial_kind::none;

/// The operand of Node taken by step Side of a path.
template <class Node, std::size_t Side>
struct path_child;
template <class Op, class A>
struct path_child<unary_node<Op, A>, 0> {
  using type = A;
};
template <class Op, class L, class R>
struct path_child<binary_node<Op, L, R>, 0> {
  using type = L;
};
template <class Op, class L, class R>
struct path_child<binary_node<Op, L, R>, 1> {
  using type = R;
};

/// d Top / d X at Top's coordinates, where X is the node Path reaches from Top (through unary
/// and binary nodes). Its evaluator computes, per element, the values along the path once
/// (bottom-up, only those a partial or a later value needs) and multiplies the local
/// partials on the way: a region of depth k costs O(k) per element, not O(k^2).
template <class Top, class Path>
struct path_deriv_node {
  using is_gradix_expression = void;
  using value_type = value_type_t<Top>;
  using shape_type = shape_of_t<Top>;
  using layout_type = layout_of_t<Top>;
  using space_type = space_of_t<Top>;
  Top top_;
  GRADIX_HOST_DEVICE constexpr shape_type shape() const { return top_.shape(); }
};

template <class V>
struct is_one : std::false_type {};
template <class T, class D>
struct is_one<one_node<T, D>> : std::true_type {};

/// v * w over the same domain, with 1 * w = w.
template <class V, class W>
constexpr auto mul_v(V const& v, W const& w) {
  if constexpr (is_one<V>::value) return w;
  else if constexpr (is_one<W>::value) return v;
  else return binary_node<op::mul, V, W>{v, w, v.shape()};
}
template <class V>
constexpr auto neg_v(V const& v) {
  return unary_node<op::neg, V>{v};
}
/// v * s for a run-time scalar s.
template <class V, class S>
constexpr auto scale_v(V const& v, S s) {
  using T = value_type_t<V>;
  return binary_node<op::mul, V, scalar_node<T>>{v, scalar_node<T>{T(s)}, v.shape()};
}
/// v over the larger domain d2 (the first axes are v's own).
template <class V, class D2>
constexpr auto extend_v(V const& v, D2 const& d2) {
  if constexpr (is_one<V>::value) return one_node<value_type_t<V>, D2>{d2};
  else return extend_node<V, D2>{v, d2};
}

// ---------------------------------------------------------------------------------------
// Which domain axes a value expression depends on (conservative; types only)

template <class V, std::size_t J>
struct value_depends : std::true_type {};  // unknown leaves (a seed view): assume yes
template <class T, class D, std::size_t J>
struct value_depends<one_node<T, D>, J> : std::false_type {};
template <class T, std::size_t J>
struct value_depends<scalar_node<T>, J> : std::false_type {};
template <class Sub, class Map, class D, std::size_t J>
struct value_depends<at_map_node<Sub, Map, D>, J> : depends<Map, J> {};
template <class V, class D, std::size_t J>
struct value_depends<extend_node<V, D>, J>
    : std::bool_constant<(J < shape_of_t<V>::rank) && value_depends<V, (J < shape_of_t<V>::rank ? J : 0)>::value> {};
template <class Op, class A, std::size_t J>
struct value_depends<unary_node<Op, A>, J> : value_depends<A, J> {};
template <class Op, class A, class B, std::size_t J>
struct value_depends<binary_node<Op, A, B>, J>
    : std::bool_constant<value_depends<A, J>::value || value_depends<B, J>::value> {};
template <class V, std::size_t J>
inline constexpr bool value_depends_v = value_depends<V, J>::value;

/// Does V depend on any domain axis in Mask (of a rank-RD domain)?
template <class V, std::uint64_t Mask, std::size_t RD>
inline constexpr bool value_depends_any_v = [] {
  return [&]<std::size_t... J>(std::index_sequence<J...>) {
    return ((((Mask >> J) & 1) && value_depends_v<V, J>) || ...);
  }(std::make_index_sequence<RD>{});
}();

}  // namespace gradix::ad
