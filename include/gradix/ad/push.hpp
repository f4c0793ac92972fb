#pragma once
/// \file
/// Backward rules: a compile-time recursion over the expression type that pushes a mapped
/// adjoint (domain D, value expression v over D, map m: D -> this node's coordinates) from
/// the root down to the parameters. Nothing is computed here: each rule builds the adjoint
/// its operands receive, and every parameter leaf yields one *use* (an update kernel:
/// "for every d in D, add v(d) to the gradient at m(d)").
///
///   elementwise   v * (local derivative at m(d)); broadcasts compose a projection
///   sum / mean    D grows by the reduced axes (v does not depend on them); mean scales
///   max           the reduced axes map to the first arg-max
///   index / view  m is composed with the node's own coordinate map
///   constants, detach, integer-valued sub-expressions: no use

#include "gradix/ad/kernel.hpp"
#include "gradix/ad/map.hpp"
#include "gradix/ad/value.hpp"
#include "gradix/config.hpp"
#include "gradix/core/tuple.hpp"
#include "gradix/expr/elementwise.hpp"
#include "gradix/expr/index.hpp"
#include "gradix/expr/param.hpp"
#include "gradix/expr/reduce.hpp"
#include "gradix/expr/view.hpp"

#include <type_traits>

namespace gradix::ad {

namespace detail {
template <class D, class SA, std::uint64_t Mask>
struct grown_domain {
  static constexpr std::size_t nred = std::size_t(__builtin_popcountll(Mask));
  struct holder {
    static constexpr array<index_t, D::rank + nred> value = [] {
      array<index_t, D::rank + nred> r{};
      for (std::size_t j = 0; j < D::rank; ++j) r[j] = D::static_extents[j];
      std::size_t k = D::rank;
      for (std::size_t j = 0; j < SA::rank; ++j)
        if ((Mask >> j) & 1) r[k++] = SA::static_extents[j];
      return r;
    }();
  };
  using type = gradix::detail::shape_from_array_t<holder>;
};

template <class E>
inline constexpr bool differentiable_v = std::is_floating_point_v<value_type_t<E>>;
}  // namespace detail

// Every overload is declared before the first definition: an elementwise node pushes into its
// operands by unqualified call, and with a seed (a plain view) and an empty map none of the
// arguments is in this namespace, so argument-dependent lookup would not find an overload
// declared further down (a rank-0 reduction under `+` with backward(e, seed)).
template <class Op, class A, class D, class V, class M>
constexpr auto push(unary_node<Op, A> const& n, D const& dom, V const& v, M const& m);
template <class Op, class L, class R, class D, class V, class M>
constexpr auto push(binary_node<Op, L, R> const& n, D const& dom, V const& v, M const& m);
template <class Op, class A, std::uint64_t Mask, bool Keep, class D, class V, class M>
constexpr auto push(reduce_node<Op, A, Mask, Keep> const& n, D const& dom, V const& v, M const& m);
template <class A, std::size_t Axis, class Idx, class D, class V, class M>
constexpr auto push(index_node<A, Axis, Idx> const& n, D const& dom, V const& v, M const& m);
template <class A, std::size_t... P, class D, class V, class M>
constexpr auto push(permute_node<A, P...> const& n, D const& dom, V const& v, M const& m);
template <class A, std::size_t Axis, class D, class V, class M>
constexpr auto push(unsqueeze_node<A, Axis> const& n, D const& dom, V const& v, M const& m);
template <class A, class S, class D, class V, class M>
constexpr auto push(broadcast_node<A, S> const& n, D const& dom, V const& v, M const& m);
template <class A, class S, class D, class V, class M>
constexpr auto push(reshape_node<A, S> const& n, D const& dom, V const& v, M const& m);

// Leaves and stops.
template <class T, class S, class L, class Sp, class D, class V, class M>
constexpr tuple<> push(tensor_view<T, S, L, Sp> const&, D const&, V const&, M const&) {
  return {};
}
template <class T, class D, class V, class M>
constexpr tuple<> push(scalar_node<T> const&, D const&, V const&, M const&) {
  return {};
}
template <class A, class D, class V, class M>
constexpr tuple<> push(detach_node<A> const&, D const&, V const&, M const&) {
  return {};
}
template <class View, class G, class D, class V, class M>
constexpr auto push(param_node<View, G> const& p, D const& dom, V const& v, M const& m) {
  if constexpr (!std::is_floating_point_v<typename View::value_type>) return tuple<>{};
  else return make_tuple(use<D, V, M, G>{dom, v, m, p.grad_});
}

// Elementwise.
template <class Op, class A, class D, class V, class M>
constexpr auto push(unary_node<Op, A> const& n, D const& dom, V const& v, M const& m) {
  if constexpr (!detail::differentiable_v<A> || !detail::differentiable_v<unary_node<Op, A>>) {
    return tuple<>{};
  } else if constexpr (std::is_same_v<Op, op::neg>) {
    return push(n.arg_, dom, neg_v(v), m);
  } else if constexpr (requires { typename Op::result_type; }) {  // cast
    return push(n.arg_, dom, v, m);
  } else {
    return push(n.arg_, dom, mul_v(v, at_map_node<unary_deriv_node<Op, A>, M, D>{{n.arg_}, m, dom}), m);
  }
}

template <class Op, class L, class R, class D, class V, class M>
constexpr auto push(binary_node<Op, L, R> const& n, D const& dom, V const& v, M const& m) {
  auto ml = compose_broadcast<shape_of_t<L>>(m);
  auto mr = compose_broadcast<shape_of_t<R>>(m);
  auto left = [&] {
    if constexpr (!detail::differentiable_v<L>) return tuple<>{};
    else if constexpr (std::is_same_v<Op, op::add> || std::is_same_v<Op, op::sub>)
      return push(n.lhs_, dom, v, ml);
    else if constexpr (std::is_same_v<Op, op::mul>)
      return push(n.lhs_, dom, mul_v(v, at_map_node<R, decltype(mr), D>{n.rhs_, mr, dom}), ml);
    else
      return push(n.lhs_, dom,
                  mul_v(v, at_map_node<binary_deriv_node<Op, L, R, 0>, M, D>{{n}, m, dom}), ml);
  }();
  auto right = [&] {
    if constexpr (!detail::differentiable_v<R>) return tuple<>{};
    else if constexpr (std::is_same_v<Op, op::add>)
      return push(n.rhs_, dom, v, mr);
    else if constexpr (std::is_same_v<Op, op::sub>)
      return push(n.rhs_, dom, neg_v(v), mr);
    else if constexpr (std::is_same_v<Op, op::mul>)
      return push(n.rhs_, dom, mul_v(v, at_map_node<L, decltype(ml), D>{n.lhs_, ml, dom}), mr);
    else
      return push(n.rhs_, dom,
                  mul_v(v, at_map_node<binary_deriv_node<Op, L, R, 1>, M, D>{{n}, m, dom}), mr);
  }();
  if constexpr (std::is_same_v<Op, op::add> && decltype(left)::size == 1 &&
                decltype(right)::size == 1) {
    using UL = std::remove_cvref_t<decltype(get<0>(left))>;
    using UR = std::remove_cvref_t<decltype(get<0>(right))>;
    if constexpr (fusable_v<UL, UR>) return make_tuple(fused_use<UL, UR>{get<0>(left), get<0>(right)});
    else return tuple_cat(left, right);
  } else {
    return tuple_cat(left, right);
  }
}

// Reductions.
template <class Op, class A, std::uint64_t Mask, bool Keep, class D, class V, class M>
constexpr auto push(reduce_node<Op, A, Mask, Keep> const& n, D const& dom, V const& v, M const& m) {
  using SA = shape_of_t<A>;
  if constexpr (!detail::differentiable_v<A>) {
    return tuple<>{};
  } else if constexpr (std::is_same_v<Op, op::max_of>) {
    return push(n.arg_, dom, v, compose_argmax<Mask, Keep, SA::rank>(n, m));
  } else {
    using D2 = typename detail::grown_domain<D, SA, Mask>::type;
    D2 dom2{};
    for (std::size_t j = 0; j < D::rank; ++j) dom2.set_extent(j, dom.extent(j));
    index_t count = 1;
    for (std::size_t j = 0, k = D::rank; j < SA::rank; ++j)
      if ((Mask >> j) & 1) {
        dom2.set_extent(k++, n.arg_.shape().extent(j));
        count *= n.arg_.shape().extent(j);
      }
    auto m2 = compose_reduce<Mask, Keep, SA::rank, D::rank>(m);
    auto v2 = extend_v(v, dom2);
    if constexpr (std::is_same_v<Op, op::mean_of>)
      return push(n.arg_, dom2, scale_v(v2, value_type_t<A>(1) / value_type_t<A>(count)), m2);
    else
      return push(n.arg_, dom2, v2, m2);
  }
}

// Index and view nodes.
template <class A, std::size_t Axis, class Idx, class D, class V, class M>
constexpr auto push(index_node<A, Axis, Idx> const& n, D const& dom, V const& v, M const& m) {
  return push(n.arg_, dom, v, compose_index<Axis, Idx, shape_of_t<A>::rank>(m, n.idx_));
}
template <class A, std::size_t... P, class D, class V, class M>
constexpr auto push(permute_node<A, P...> const& n, D const& dom, V const& v, M const& m) {
  return push(n.arg_, dom, v, compose_permute<P...>(m));
}
template <class A, std::size_t Axis, class D, class V, class M>
constexpr auto push(unsqueeze_node<A, Axis> const& n, D const& dom, V const& v, M const& m) {
  return push(n.arg_, dom, v, compose_unsqueeze<Axis>(m));
}
template <class A, class S, class D, class V, class M>
constexpr auto push(broadcast_node<A, S> const& n, D const& dom, V const& v, M const& m) {
  return push(n.arg_, dom, v, compose_broadcast<shape_of_t<A>>(m));
}
template <class A, class S, class D, class V, class M>
constexpr auto push(reshape_node<A, S> const& n, D const& dom, V const& v, M const& m) {
  return push(n.arg_, dom, v,
              compose_reshape<shape_of_t<A>::rank, S::rank>(m, n.shape_.extents(),
                                                            n.arg_.shape().extents()));
}

}  // namespace gradix::ad
