#pragma once
/// \file
/// Value expressions of mapped adjoints: gradix expressions over the adjoint's domain D,
/// built at compile time by the backward rules and evaluated on the fly by update kernels.
///
///   one_node<T, D>              the seed 1 (a type: 1 * v simplifies to v)
///   at_map_node<Sub, M, D>      forward sub-expression Sub recomputed at M(d)
///   extend_node<V, D2>          v over a larger domain (a reduction added axes it ignores)
///   unary_deriv_node<Op, A>     Op'(a) at the node's own coordinates (a forward node)
///   binary_deriv_node<Op,L,R,S> dOp/d(lhs or rhs) at the node's own coordinates
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

template <class Op, class Arg>
struct unary_deriv_node {
  using is_gradix_expression = void;
  using value_type = value_type_t<Arg>;
  using shape_type = shape_of_t<Arg>;
  using layout_type = layout_of_t<Arg>;
  using space_type = space_of_t<Arg>;
  Arg arg_;
  GRADIX_HOST_DEVICE constexpr shape_type shape() const { return arg_.shape(); }
};

template <class Op, class Lhs, class Rhs, int Side>
struct binary_deriv_node {
  using is_gradix_expression = void;
  using node_type = binary_node<Op, Lhs, Rhs>;
  using value_type = typename node_type::value_type;
  using shape_type = typename node_type::shape_type;
  using layout_type = typename node_type::layout_type;
  using space_type = typename node_type::space_type;
  node_type node_;
  GRADIX_HOST_DEVICE constexpr shape_type const& shape() const { return node_.shape(); }
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
