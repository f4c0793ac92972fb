#pragma once
/// \file
/// Backward rules: a compile-time recursion over the expression type that pushes a mapped
/// adjoint (domain D, value expression v over D, map m: D -> this node's coordinates) from
/// the root down to the parameters. Nothing is computed here: each rule builds the adjoint
/// its operands receive, and every parameter leaf yields one *use* (an update kernel:
/// "for every d in D, add v(d) to the gradient at m(d)").
///
///   elementwise   a region of unary/binary nodes is differentiated as a whole: v is held
///                 *pending* (v0, the region's top node, the path taken) while the push
///                 descends, and settles into v0 * d top / d node (one path_deriv_node,
///                 O(depth) per element) where the region ends; constant partials (+, -,
///                 casts) and products by a sibling outside a region stay plain factors;
///                 broadcasts compose a projection
///   sum / mean    D grows by the reduced axes (v does not depend on them); mean scales
///   max           the reduced axes map to the first arg-max
///   index / view  m is composed with the node's own coordinate map
///   constants, detach, integer-valued sub-expressions: no use
///
/// The region machinery (pending adjoints, settle, group_region, light copies) is
/// ad/region.hpp; the rules are here, every overload declared before the first definition.

#include "gradix/ad/kernel.hpp"
#include "gradix/ad/map.hpp"
#include "gradix/ad/product.hpp"
#include "gradix/ad/region.hpp"
#include "gradix/ad/save.hpp"
#include "gradix/ad/value.hpp"
#include "gradix/config.hpp"
#include "gradix/core/tuple.hpp"
#include "gradix/expr/elementwise.hpp"
#include "gradix/expr/index.hpp"
#include "gradix/expr/let.hpp"
#include "gradix/expr/bag.hpp"
#include "gradix/expr/concat.hpp"
#include "gradix/expr/matmul.hpp"
#include "gradix/expr/param.hpp"
#include "gradix/expr/pattern.hpp"
#include "gradix/expr/rebuild.hpp"
#include "gradix/expr/reduce.hpp"
#include "gradix/expr/saved.hpp"
#include "gradix/expr/row.hpp"
#include "gradix/expr/take.hpp"
#include "gradix/expr/view.hpp"

#include <tuple>
#include <type_traits>

namespace gradix::detail {
/// The gradient targets of a grad() call running on this thread (api/backward.hpp): a
/// parameter's storage from[k] is written as to[k]; any other parameter is not written
/// (grad()), or written as usual when keep_others (a backward with a fused optimizer step,
/// training/fused.hpp: only the optimizer's parameters are redirected).
struct grad_redirect {
  void const* const* from;
  void* const* to;
  std::size_t n;
  bool keep_others = false;
};
[[gnu::noinline]] inline grad_redirect const*& current_grad_redirect() {
  thread_local grad_redirect const* r = nullptr;
  return r;
}
/// The storage a use of the parameter whose gradient is g writes: g itself, or in a grad()
/// call its returned storage (null for the parameters it does not want). Plans are built
/// where they run (ad/product.hpp), so grad() redirects where uses are made, on the
/// calling thread. (In constant evaluation grad() rewrites the expression instead.)
template <class G>
constexpr G* redirect_target(G* g) {
  if (std::is_constant_evaluated()) return g;
  grad_redirect const* r = current_grad_redirect();
  if (!r) return g;
  for (std::size_t k = 0; k < r->n; ++k)
    if (r->from[k] == static_cast<void const*>(g)) return static_cast<G*>(r->to[k]);
  return r->keep_others ? g : nullptr;
}
}  // namespace gradix::detail

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

namespace detail {
/// A kept segment sum's operand plan from gv, the adjoint of its result read at the identity
/// (defined at the end, with the plans elements build where they run).
template <class SN, class GV>
constexpr auto segment_scatter(SN const& n, GV const& gv);
template <class X, class T>
constexpr auto product_operand_plan(X const& x, T const* g);
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
template <class A, class P, std::size_t Axis, class D, class V, class M>
constexpr auto push(take_along_node<A, P, Axis> const& n, D const& dom, V const& v, M const& m);
template <class A, std::size_t... P, class D, class V, class M>
constexpr auto push(permute_node<A, P...> const& n, D const& dom, V const& v, M const& m);
template <class A, std::size_t Axis, class D, class V, class M>
constexpr auto push(unsqueeze_node<A, Axis> const& n, D const& dom, V const& v, M const& m);
template <class A, class S, class D, class V, class M>
constexpr auto push(broadcast_node<A, S> const& n, D const& dom, V const& v, M const& m);
template <class A, class S, class D, class V, class M>
constexpr auto push(reshape_node<A, S> const& n, D const& dom, V const& v, M const& m);
template <class A, class D, class V, class M>
constexpr auto push(save_mark_node<A> const& n, D const& dom, V const& v, M const& m);
template <class N, class L, class D, class V, class M>
constexpr auto push(saved_node<N, L> const& n, D const& dom, V const& v, M const& m);
template <class A, class B, class D, class V, class M>
constexpr auto push(matmul_node<A, B> const& n, D const& dom, V const& v, M const& m);
template <class A, class I, class D, class V, class M>
constexpr auto push(segment_sum_node<A, I> const& n, D const& dom, V const& v, M const& m);
template <class A, class B, std::size_t Axis, class D, class V, class M>
constexpr auto push(concat_node<A, B, Axis> const& n, D const& dom, V const& v, M const& m);
template <class A, std::size_t Axis, row_kind K, class D, class V, class M>
constexpr auto push(row_node<A, Axis, K> const&, D const&, V const&, M const&);
template <class Z, class Z2, class B, class D, class V, class M>
constexpr auto push(bound_let_node<Z, Z2, B> const& n, D const& dom, V const& v, M const& m);
template <class Z, class D, class V, class M>
constexpr auto push(var_node<Z> const& n, D const& dom, V const& v, M const& m);
template <class Z, class X, class B, class D, class V, class M>
constexpr auto push(let_node<Z, X, B> const& n, D const& dom, V const& v, M const& m);

// Leaves and stops.
template <class T, class P, class S, class D, class V, class M>
constexpr tuple<> push(one_hot_node<T, P, S> const&, D const&, V const&, M const&) {
  return {};  // its operand is an integer
}
template <class T, class S, class L, class Sp, class D, class V, class M>
constexpr tuple<> push(tensor_view<T, S, L, Sp> const&, D const&, V const&, M const&) {
  return {};
}
template <class T, class D, class V, class M>
constexpr tuple<> push(scalar_node<T> const&, D const&, V const&, M const&) {
  return {};
}
template <class T, class S, class F, class D, class V, class M>
constexpr tuple<> push(pattern_node<T, S, F> const&, D const&, V const&, M const&) {
  return {};  // a constant
}
template <class A, class D, class V, class M>
constexpr tuple<> push(detach_node<A> const&, D const&, V const&, M const&) {
  return {};
}
template <class View, class G, class D, class V, class M>
constexpr auto push(param_node<View, G> const& p, D const& dom, V const& v, M const& m) {
  if constexpr (!std::is_floating_point_v<typename View::value_type>) return tuple<>{};
  else {
    auto w = settle(v, dom);
    return make_tuple(use<D, decltype(w), M, G>{dom, w, m, gradix::detail::redirect_target(p.grad_)});
  }
}

// Elementwise.
template <class Op, class A, class D, class V, class M>
constexpr auto push(unary_node<Op, A> const& n, D const& dom, V const& v, M const& m) {
  using N = unary_node<Op, A>;
  if constexpr (!detail::differentiable_v<A> || !detail::differentiable_v<N>) {
    return tuple<>{};
  } else if constexpr (is_pending<V>::value) {
    return push(n.arg_, dom, extend_path<0>(v), m);
  } else if constexpr (partial_of_v<N, 0> == partial_kind::minus_one) {
    return push(n.arg_, dom, neg_v(v), m);
  } else if constexpr (partial_of_v<N, 0> == partial_kind::plus_one) {  // cast
    return push(n.arg_, dom, v, m);
  } else {  // a region starts here
    return group_region<light_t<N>, M>(push(n.arg_, dom, pending<V, N, path<0>, M>{v, &n, m}, m));
  }
}

template <class Op, class L, class R, class D, class V, class M>
constexpr auto push(binary_node<Op, L, R> const& n, D const& dom, V const& v, M const& m) {
  auto ml = compose_broadcast<shape_of_t<L>>(m);
  auto mr = compose_broadcast<shape_of_t<R>>(m);
  using N = binary_node<Op, L, R>;
  // The adjoint operand Side receives: inside a region, the path grows; outside, constant
  // partials pass v on, a product multiplies by the other operand (read at its own map, so
  // the value depends on no more axes than that operand does), and any other partial
  // starts a region here.
  auto side = [&]<std::size_t Side>(auto const& child, auto const& mc, auto const& other,
                                    auto const& mo) {
    using C = std::remove_cvref_t<decltype(child)>;
    using O = std::remove_cvref_t<decltype(other)>;
    if constexpr (!detail::differentiable_v<C> || partial_of_v<N, Side> == partial_kind::none)
      return tuple<>{};
    else if constexpr (is_pending<V>::value)
      return push(child, dom, extend_path<Side>(v), mc);
    else if constexpr (partial_of_v<N, Side> == partial_kind::plus_one)
      return push(child, dom, v, mc);
    else if constexpr (partial_of_v<N, Side> == partial_kind::minus_one)
      return push(child, dom, neg_v(v), mc);
    else if constexpr (std::is_same_v<Op, op::mul>)
      return push(child, dom,
                  mul_v(v, at_map_node<O, std::remove_cvref_t<decltype(mo)>, D>{other, mo, dom}), mc);
    else
      return push(child, dom, pending<V, N, path<Side>, M>{v, &n, m}, mc);
  };
  auto left = side.template operator()<0>(n.lhs_, ml, n.rhs_, mr);
  auto right = side.template operator()<1>(n.rhs_, mr, n.lhs_, ml);
  // does a region start here (on either side)?
  constexpr bool starts_region = !is_pending<V>::value && !std::is_same_v<Op, op::mul> &&
                                 (!constant_partial_v<N, 0> || !constant_partial_v<N, 1>);
  // the two uses of a `+` that share a domain and value (the square loss): one fused nest
  constexpr bool fuses = [] {
    if constexpr (std::is_same_v<Op, op::add> && decltype(left)::size == 1 &&
                  decltype(right)::size == 1) {
      using UL = std::remove_cvref_t<decltype(get<0>(left))>;
      using UR = std::remove_cvref_t<decltype(get<0>(right))>;
      if constexpr (is_plain_use<UL>::value && is_plain_use<UR>::value) return fusable_v<UL, UR>;
      else return false;
    } else {
      return false;
    }
  }();
  if constexpr (fuses) {
    using UL = std::remove_cvref_t<decltype(get<0>(left))>;
    using UR = std::remove_cvref_t<decltype(get<0>(right))>;
    return make_tuple(fused_use<UL, UR>{get<0>(left), get<0>(right)});
  } else if constexpr (is_pending<V>::value) {
    // inside a region: its uses so far join one multi_use here, so that the recursion
    // holds one copy of the region per level, not one per use below
    return group_region<light_t<typename pending_traits<V>::top>, typename pending_traits<V>::mtop>(
        tuple_cat(left, right));
  } else if constexpr (starts_region) {
    return group_region<light_t<N>, M>(tuple_cat(left, right));
  } else {
    return tuple_cat(left, right);
  }
}

// Reductions.
template <class Op, class A, std::uint64_t Mask, bool Keep, class D, class V, class M>
constexpr auto push(reduce_node<Op, A, Mask, Keep> const& n, D const& dom, V const& v, M const& m) {
  using SA = shape_of_t<A>;
  if constexpr (is_pending<V>::value) {
    return push(n, dom, settle(v, dom), m);
  } else if constexpr (!detail::differentiable_v<A>) {
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
  constexpr std::size_t R = shape_of_t<index_node<A, Axis, Idx>>::rank;
  // a buffer adjoint read at the identity, sliced: the operand's map keeps the slice as a
  // lookup, so that no node below takes the buffer for its own whole adjoint (a kept concat,
  // a permute, a reshape, a row node, a product's direct gradient read a buffer at the
  // identity as covering them)
  constexpr bool lookup = is_view_v<V> && std::is_same_v<M, decltype(identity_map<R>())>;
  if constexpr (is_pending<V>::value) return push(n, dom, settle(v, dom), m);
  else return push(n.arg_, dom, v, compose_index<Axis, Idx, shape_of_t<A>::rank, lookup>(m, n.idx_));
}
template <class A, class P, std::size_t Axis, class D, class V, class M>
constexpr auto push(take_along_node<A, P, Axis> const& n, D const& dom, V const& v, M const& m) {
  if constexpr (is_pending<V>::value) return push(n, dom, settle(v, dom), m);
  else return push(n.arg_, dom, v, compose_take<Axis>(m, n.pos_));
}
template <class A, std::size_t... P, class D, class V, class M>
constexpr auto push(permute_node<A, P...> const& n, D const& dom, V const& v, M const& m) {
  constexpr std::size_t R = sizeof...(P);
  if constexpr (is_pending<V>::value) {
    return push(n, dom, settle(v, dom), m);
  } else if constexpr (is_view_v<V> && std::is_same_v<M, decltype(identity_map<R>())>) {
    // the adjoint is a buffer read at the identity (a product's operand adjoint): the
    // operand's is the same buffer with its strides permuted, read at the identity (no map
    // to compose, as PyTorch's transpose of a gradient)
    constexpr array<std::size_t, R> perm{{P...}};
    array<index_t, R> st{};
    for (std::size_t k = 0; k < R; ++k) st[perm[k]] = v.strides_[k];
    using SA = shape_of_t<A>;
    tensor_view<typename V::element_type, SA, strided, space_of_t<V>> g(v.data_, n.arg_.shape(), st);
    return push(n.arg_, n.arg_.shape(), g, identity_map<R>());
  } else {
    return push(n.arg_, dom, v, compose_permute<P...>(m));
  }
}
template <class A, std::size_t Axis, class D, class V, class M>
constexpr auto push(unsqueeze_node<A, Axis> const& n, D const& dom, V const& v, M const& m) {
  if constexpr (is_pending<V>::value) return push(n, dom, settle(v, dom), m);
  else return push(n.arg_, dom, v, compose_unsqueeze<Axis>(m));
}
template <class A, class S, class D, class V, class M>
constexpr auto push(broadcast_node<A, S> const& n, D const& dom, V const& v, M const& m) {
  if constexpr (is_pending<V>::value) return push(n, dom, settle(v, dom), m);
  else return push(n.arg_, dom, v, compose_broadcast<shape_of_t<A>>(m));
}
template <class A, class S, class D, class V, class M>
constexpr auto push(reshape_node<A, S> const& n, D const& dom, V const& v, M const& m) {
  using SA = shape_of_t<A>;
  if constexpr (is_pending<V>::value) {
    return push(n, dom, settle(v, dom), m);
  } else if constexpr (is_view_v<V> && std::is_same_v<layout_of_t<V>, row_major> &&
                       std::is_same_v<M, decltype(identity_map<S::rank>())>) {
    // a row-major buffer read at the identity: the operand's adjoint is the same buffer with
    // the operand's shape (logical row-major order is the reshape's)
    tensor_view<typename V::element_type, SA, row_major, space_of_t<V>> g(v.data_, n.arg_.shape());
    return push(n.arg_, n.arg_.shape(), g, identity_map<SA::rank>());
  } else {
    return push(n.arg_, dom, v,
                compose_reshape<SA::rank, S::rank>(m, n.shape_.extents(), n.arg_.shape().extents()));
  }
}

// Saved values (expr/saved.hpp): an elementwise region above ends here (its values read
// the buffer); the adjoint goes on to the operand unchanged.
template <class A, class D, class V, class M>
constexpr auto push(save_mark_node<A> const& n, D const& dom, V const& v, M const& m) {
  if constexpr (is_pending<V>::value) return push(n, dom, settle(v, dom), m);
  else return push(n.arg_, dom, v, m);
}
template <class N, class L, class D, class V, class M>
constexpr auto push(saved_node<N, L> const& n, D const& dom, V const& v, M const& m) {
  if constexpr (is_pending<V>::value) {
    return push(n, dom, settle(v, dom), m);
  } else if constexpr (needs_argmax<N>::value) {
    // a kept max: the reduced axes map to the arg-max read from its buffer (no rescan)
    using A = std::remove_cvref_t<decltype(n.node().arg_)>;
    if constexpr (!detail::differentiable_v<A>) {
      return tuple<>{};
    } else {
      constexpr std::size_t RO = shape_of_t<N>::rank;
      return push(n.node().arg_, dom, v,
                  compose_kept_argmax<N::mask, N::keep, shape_of_t<A>::rank, RO>(
                      n.argmax_, n.node().shape().extents(), m));
    }
  } else if constexpr (is_row_node<N>::value) {
    // a kept softmax: its backward reads the adjoint from a buffer of its shape (the adjoint
    // itself when it is one, read at the identity; else the node's gout, written first)
    constexpr std::size_t R = shape_of_t<N>::rank;
    using SN = saved_node<N, L>;
    if constexpr (!reaches_param_v<N> || !detail::differentiable_v<N>) {
      return tuple<>{};
    } else if constexpr (is_view_v<V> && std::is_same_v<M, decltype(identity_map<R>())>) {
      using PX = decltype(row_operand_plan(n));
      return make_tuple(row_use<V, PX, SN>{v, &n});
    } else {
      using GO = adjoint_buffer<value_type_t<N>, shape_of_t<N>>;
      using P0 = use<D, V, M, GO>;
      using PE = decltype(staged_plan(n));
      return make_tuple(staged_use<P0, PE, SN>{P0{dom, v, m, nullptr}, &n});
    }
  } else if constexpr (is_concat_node<N>::value || is_kept_reshape<N>::value) {
    // a kept concat: each operand reads its block of the adjoint, which must be a buffer of
    // the concat's shape read at the identity: the adjoint itself when it is one (a
    // product's gc), else the node's own buffer, written first (a staged_use). A kept
    // reshape: its operand reads the adjoint as a buffer of the operand's shape, which needs
    // a row-major buffer of the reshape's shape (docs/ad.md, "Reshapes")
    constexpr std::size_t R = shape_of_t<N>::rank;
    constexpr bool direct = is_view_v<V> && std::is_same_v<M, decltype(identity_map<R>())> &&
                            (is_concat_node<N>::value || std::is_same_v<layout_of_t<V>, row_major>);
    if constexpr (!reaches_param_v<N>) {
      return tuple<>{};
    } else if constexpr (direct) {
      return push(n.node(), dom, v, m);
    } else {
      using GO = adjoint_buffer<value_type_t<N>, shape_of_t<N>>;
      using P0 = use<D, V, M, GO>;
      using PE = decltype(staged_plan(n));
      return make_tuple(staged_use<P0, PE, saved_node<N, L>>{P0{dom, v, m, nullptr}, &n});
    }
  } else if constexpr (stages_reduction_v<N>) {
    // a kept sum or mean whose adjoint arrives through a broadcast (the map projects some
    // domain axis: `x - mean<2>(x, keep_dims)`): pushed on as it is, the reduction would grow
    // the domain by its reduced axes on top of the broadcast ones, O(row^2) per row. Instead
    // one kernel sums the adjoint into the node's buffer (extra_.gout, its shape), once, and
    // the operand's plan is pushed from that buffer (a staged_use). Without a projection the
    // adjoint goes on unchanged, as before.
    using T = value_type_t<N>;
    using S = shape_of_t<N>;
    using GO = adjoint_buffer<T, S>;
    using P0 = use<D, V, M, GO>;
    if constexpr (kernel_traits<P0>::projected_mask == 0 || !reaches_param_v<N>) {
      return push(n.node(), dom, v, m);
    } else {
      using PE = decltype(staged_plan(n));
      return make_tuple(staged_use<P0, PE, saved_node<N, L>>{P0{dom, v, m, nullptr}, &n});
    }
  } else if constexpr (is_matmul_node<N>::value) {
    // a kept product: the adjoint stops here, in a buffer (ad/product.hpp)
    using T = value_type_t<N>;
    using GC = adjoint_buffer<T, shape_of_t<N>>;
    using SN = saved_node<N, L>;
    using P0 = use<D, V, M, GC>;
    using PA = decltype(product_plan_a(n));
    using PB = decltype(product_plan_b(n));
    return make_tuple(product_use<P0, PA, PB, SN>{P0{dom, v, m, nullptr}, &n});
  } else if constexpr (is_segment_sum_node<N>::value) {
    // a kept segment sum: one scatter over its operand's rows, d arg[j, r] = scale[j] *
    // d out[bag_of[j], r], reading the adjoint of the result from a buffer (the adjoint
    // itself when it is a view read at the identity, else the node's workspace buffer,
    // written first: a staged_use)
    using A = std::remove_cvref_t<decltype(n.node().arg_)>;
    using T = value_type_t<N>;
    using S = shape_of_t<N>;
    constexpr std::size_t R = S::rank;
    if constexpr (!reaches_param_v<A> || !detail::differentiable_v<A>) {
      return tuple<>{};
    } else {
      if constexpr (is_view_v<V> && std::is_same_v<M, decltype(identity_map<R>())>) {
        return detail::segment_scatter(n, v);
      } else {
        using GO = adjoint_buffer<T, S>;
        using P0 = use<D, V, M, GO>;
        using PE = decltype(staged_plan(n));
        return make_tuple(staged_use<P0, PE, saved_node<N, L>>{P0{dom, v, m, nullptr}, &n});
      }
    }
  } else if constexpr (is_scanned<N>::value) {
    // a kept scan: the reverse sweep reads its adjoint from a row-major buffer of its shape
    // (the adjoint itself when it is one, else the node's gout_, written first)
    using T = value_type_t<N>;
    using S = shape_of_t<N>;
    using SN = saved_node<N, L>;
    using GV = tensor_view<T const, S, row_major, buffer_space_t<N>>;
    if constexpr (!reaches_param_v<N>) {
      return tuple<>{};
    } else if constexpr (std::is_same_v<V, GV> && std::is_same_v<M, decltype(identity_map<S::rank>())>) {
      return make_tuple(scan_use<no_scan_p0, GV, SN>{no_scan_p0{}, v, &n});
    } else {
      using GO = adjoint_buffer<T, S>;
      using P0 = use<D, V, M, GO>;
      return make_tuple(scan_use<P0, GV, SN>{P0{dom, v, m, nullptr}, GV(n.node().gout_, n.shape()), &n});
    }
  } else if constexpr (is_var_node<N>::value) {
    // a let's placeholder: its reads add into the let's buffer, the target its saved node
    // holds (api/saved.hpp, keep_let)
    using Z = typename N::name_type;
    if constexpr (!detail::differentiable_v<Z> || !Z::reaches_param) {
      return tuple<>{};
    } else {
      using G = let_grad<value_type_t<Z>, shape_of_t<Z>, Z>;
      auto w = settle(v, dom);
      return make_tuple(use<D, decltype(w), M, G>{dom, w, m, const_cast<G*>(&n.extra_.g)});  // (written through)
    }
  } else {
    return push(n.node(), dom, v, m);
  }
}
/// A concat, its adjoint a view g of its shape read at the identity (a kept concat's push
/// makes sure of it): each operand gets its block of g, a strided view, at the identity.
template <class A, class B, std::size_t Axis, class D, class V, class M>
constexpr auto push(concat_node<A, B, Axis> const& n, D const&, V const& g, M const&) {
  constexpr std::size_t R = shape_of_t<concat_node<A, B, Axis>>::rank;
  static_assert(is_view_v<V> && std::is_same_v<M, decltype(identity_map<R>())>,
                "gradix internal: a concat is planned only through the API's save transform "
                "(gx::backward_plan_t), which keeps it and reads its adjoint from a buffer");
  if constexpr (is_view_v<V>) {
    auto block = [&](auto const& x, index_t start) {
      using X = std::remove_cvref_t<decltype(x)>;
      if constexpr (!reaches_param_v<X> || !detail::differentiable_v<X>) {
        return tuple<>{};
      } else {
        using SX = shape_of_t<X>;
        tensor_view<typename V::element_type, SX, strided, space_of_t<V>> b(g.data_ + start * g.strides_[Axis],
                                                                           x.shape(), g.strides_);
        return push(x, x.shape(), b, identity_map<SX::rank>());
      }
    };
    return tuple_cat(block(n.lhs_, 0), block(n.rhs_, n.split()));
  } else {
    return tuple<>{};
  }
}
template <class A, std::size_t Axis, row_kind K, class D, class V, class M>
constexpr auto push(row_node<A, Axis, K> const&, D const&, V const&, M const&) {
  static_assert(sizeof(A) == 0,
                "gradix internal: a row node (softmax, a norm) is planned only through the API's save transform "
                "(gx::backward_plan_t), which keeps its value");
  return tuple<>{};
}
template <class A, class I, class D, class V, class M>
constexpr auto push(segment_sum_node<A, I> const&, D const&, V const&, M const&) {
  static_assert(sizeof(A) == 0,
                "gradix internal: a segment sum is planned only through the API's save transform "
                "(gx::backward_plan_t), which keeps it");
  return tuple<>{};
}
// Lets (expr/let.hpp): the body's plan, in which every read of the placeholder adds its
// adjoint into the let's buffer (a let_grad target, set where the plan element runs); then
// the operand's plan, pushed once from that buffer.
template <class Z, class D, class V, class M>
constexpr auto push(var_node<Z> const&, D const& dom, V const& v, M const& m) {
  if constexpr (!detail::differentiable_v<Z> || !Z::reaches_param) {
    return tuple<>{};
  } else {
    using G = let_grad<value_type_t<Z>, shape_of_t<Z>, Z>;
    auto w = settle(v, dom);
    return make_tuple(use<D, decltype(w), M, G>{dom, w, m, nullptr});
  }
}
template <class Z, class Z2, class B, class D, class V, class M>
constexpr auto push(bound_let_node<Z, Z2, B> const& n, D const& dom, V const& v, M const& m) {
  if constexpr (is_pending<V>::value) {
    return push(n, dom, settle(v, dom), m);  // a region above ends here
  } else {
    using T = value_type_t<Z>;
    using S = shape_of_t<Z>;
    using G = let_grad<T, S, Z>;
    using PB = decltype(push(n.arg_, dom, v, m));
    if constexpr (!writes_target<G, PB>::value) {
      return push(n.arg_, dom, v, m);  // no gradient reaches the placeholder
    } else {
      using LN = bound_let_node<Z, Z2, B>;
      using PZ = decltype(let_operand_plan(n));
      return make_tuple(let_use<PB, PZ, G, LN, D, V, M>{&n, dom, v, m, G(n.gz_, n.z_.shape())});
    }
  }
}
template <class Z, class X, class B, class D, class V, class M>
constexpr auto push(let_node<Z, X, B> const&, D const&, V const&, M const&) {
  static_assert(sizeof(X) == 0,
                "gradix internal: a let is planned only through the API's save transform "
                "(gx::backward_plan_t), which binds its placeholder to a buffer");
  return tuple<>{};
}
template <class CN, class XN, class C0, class Xs, class B, class O, class D, class V, class M>
constexpr auto push(scan_node<CN, XN, C0, Xs, B, O> const&, D const&, V const&, M const&) {
  static_assert(sizeof(B) == 0,
                "gradix internal: a scan is planned only through the API's save transform "
                "(gx::backward_plan_t), which runs its steps first");
  return tuple<>{};
}
template <class A, class B, class D, class V, class M>
constexpr auto push(matmul_node<A, B> const&, D const&, V const&, M const&) {
  static_assert(sizeof(A) == 0,
                "gradix internal: a matrix product is planned only through the API's save "
                "transform (gx::backward_plan_t), which computes it into a buffer first");
  return tuple<>{};
}

// The plans built where their elements run (ad/product.hpp).
namespace detail {
template <class SN, class GV>
constexpr auto segment_scatter(SN const& n, GV const& gv) {
  using N = typename SN::node_type;
  using T = value_type_t<N>;
  constexpr std::size_t R = shape_of_t<N>::rank;
  using IV = index_vec<index_t>;
  using G = index_node<GV, 0, IV>;
  index_t const len = n.node().arg_.shape().extent(0);
  typename G::shape_type gs{};
  gs.set_extent(0, len);
  for (std::size_t j = 1; j < R; ++j) gs.set_extent(j, gv.shape().extent(j));
  G g{gv, IV{n.extra_.bag_of, len, 1}, gs};
  using SV = tensor_view<T const, shape<dyn>, row_major, buffer_space_t<N>>;
  SV sv(n.extra_.scale, shape<dyn>(dims(len)));
  auto const& xa = n.node().arg_;
  if constexpr (R == 1) {
    auto val = binary_node<op::mul, G, SV>{g, sv, gs};
    return push(xa, xa.shape(), val, identity_map<R>());
  } else {
    using U = unsqueeze_node<SV, 1>;
    typename U::shape_type us{};
    us.set_extent(0, len);
    auto val = binary_node<op::mul, G, U>{g, U{sv, us}, gs};
    return push(xa, xa.shape(), val, identity_map<R>());
  }
}
/// The plan of a product's operand x from its adjoint buffer g (none when no parameter).
template <class X, class T>
constexpr auto product_operand_plan(X const& x, T const* g) {
  if constexpr (!reaches_param_v<X>) {
    return tuple<>{};
  } else {
    using SX = shape_of_t<X>;
    tensor_view<T const, SX, row_major, buffer_space_t<X>> gv(g, x.shape());
    return push(x, x.shape(), gv, identity_map<SX::rank>());
  }
}
}  // namespace detail
template <class SN>
constexpr auto product_plan_a(SN const& n) {
  return detail::product_operand_plan(n.node().lhs_, n.extra_.ga);
}
template <class SN>
constexpr auto product_plan_b(SN const& n) {
  return detail::product_operand_plan(n.node().rhs_, n.extra_.gb);
}
template <class SN>
constexpr auto row_operand_plan(SN const& n) {
  using N = typename SN::node_type;
  using T = value_type_t<N>;
  using S = shape_of_t<N>;
  auto const& x = n.node().arg_;
  tensor_view<T const, S, row_major, buffer_space_t<N>> gin(n.extra_.gin, x.shape());
  return push(x, x.shape(), gin, identity_map<S::rank>());
}
template <class SN>
constexpr auto staged_plan(SN const& n) {
  using N = typename SN::node_type;
  using T = value_type_t<N>;
  using S = shape_of_t<N>;
  using GV = tensor_view<T const, S, row_major, buffer_space_t<N>>;
  GV gout(n.extra_.gout.data(), n.shape());
  if constexpr (is_segment_sum_node<N>::value) {
    return detail::segment_scatter(n, gout);
  } else if constexpr (is_row_node<N>::value) {
    using PX = decltype(row_operand_plan(n));
    return make_tuple(row_use<GV, PX, SN>{gout, &n});
  } else {
    return push(n.node(), n.shape(), gout, identity_map<S::rank>());
  }
}
template <class LN>
constexpr auto let_operand_plan(LN const& n) {
  using Z = typename LN::name_type;
  using T = value_type_t<Z>;
  using S = shape_of_t<Z>;
  tensor_view<T const, S, row_major, buffer_space_t<typename LN::name_type>> gv(n.gz_, n.z_.shape());
  return push(n.z_, n.z_.shape(), gv, identity_map<S::rank>());
}
template <class LN, class D, class V, class M>
constexpr auto let_body_plan(LN const& n, D const& dom, V const& v, M const& m) {
  return push(n.arg_, dom, v, m);
}
/// One step of a scan's reverse sweep: its transformed body e2 seeded with the adjoint g of
/// the carry it produced (a row-major buffer of the carry's shape).
template <class SN, class Step, class T>
constexpr auto scan_step_plan(SN const&, Step const& e2, T const* g) {
  using S = shape_of_t<Step>;
  tensor_view<T const, S, row_major, buffer_space_t<Step>> gv(g, e2.shape());
  return push(e2, e2.shape(), gv, identity_map<S::rank>());
}
/// The initial carry's plan from its adjoint g (the sweep's last carry buffer).
template <class SN, class T>
constexpr auto scan_carry_plan(SN const& n, T const* g) {
  auto const& c0 = n.node().c0_;
  using C = std::remove_cvref_t<decltype(c0)>;
  using S = shape_of_t<C>;
  if constexpr (!reaches_param_v<C> || !detail::differentiable_v<C>) {
    return tuple<>{};
  } else {
    tensor_view<T const, S, row_major, buffer_space_t<typename SN::node_type>> gv(g, c0.shape());
    return push(c0, c0.shape(), gv, identity_map<S::rank>());
  }
}
/// The inputs' plan from their adjoint (the node's gxs_, every step's x_t adjoint).
template <class SN>
constexpr auto scan_input_plan(SN const& n) {
  auto const& xs = n.node().xs_;
  using X = std::remove_cvref_t<decltype(xs)>;
  using S = shape_of_t<X>;
  using T = value_type_t<typename SN::node_type>;
  if constexpr (!reaches_param_v<X> || !detail::differentiable_v<X>) {
    return tuple<>{};
  } else {
    tensor_view<T const, S, row_major, buffer_space_t<typename SN::node_type>> gv(n.node().gxs_, xs.shape());
    return push(xs, xs.shape(), gv, identity_map<S::rank>());
  }
}

}  // namespace gradix::ad
