#pragma once
/// \file
/// Rebuilding an expression over transformed operands (the operand protocol's constructing
/// half, expr/visit.hpp): the save transform (exec/save.hpp) rebuilds a node over its operands with their kept values in
/// buffers, and a let (expr/let.hpp) binds its placeholder by rebuilding its body with the
/// placeholder replaced (by the operand's buffer in a call; by the operand itself in the raw
/// evaluator of eval/let.hpp).

#include "gradix/config.hpp"
#include "gradix/expr/bag.hpp"
#include "gradix/expr/elementwise.hpp"
#include "gradix/expr/index.hpp"
#include "gradix/expr/let.hpp"
#include "gradix/expr/matmul.hpp"
#include "gradix/expr/param.hpp"
#include "gradix/expr/reduce.hpp"
#include "gradix/expr/saved.hpp"
#include "gradix/expr/scan.hpp"
#include "gradix/expr/take.hpp"
#include "gradix/expr/concat.hpp"
#include "gradix/expr/row.hpp"
#include "gradix/expr/view.hpp"
#include "gradix/expr/visit.hpp"

#include <type_traits>

namespace gradix::detail {

// rebuild<U>(n, f): node n over its value operands transformed by f.apply<U>(operand) (U:
// whether they sit under it as under a reduction or a save mark), operands taken through the
// operand protocol (expr/visit.hpp: operand_at, value_operand_count_v), in order; f is the
// save transform (saving), the binding of a let's placeholder (binding) or grad()'s
// redirection. remake(n, operands...) is the protocol's constructing half: one line per node
// kind, the node rebuilt over new operands with its other members (shape, positions, index
// data, epsilon) kept.
template <class Op, class A, class A2>
constexpr auto remake(unary_node<Op, A> const&, A2 const& a) {
  return unary_node<Op, A2>{a};
}
template <class Op, class L, class R, class L2, class R2>
constexpr auto remake(binary_node<Op, L, R> const& n, L2 const& l, R2 const& r) {
  return binary_node<Op, L2, R2>{l, r, n.shape_};
}
template <class Op, class A, axis_mask M, bool K, class A2>
constexpr auto remake(reduce_node<Op, A, M, K> const& n, A2 const& a) {
  return reduce_node<Op, A2, M, K>{a, n.shape_};
}
template <class A, class P, std::size_t Axis, class A2>
constexpr auto remake(take_along_node<A, P, Axis> const& n, A2 const& a) {
  return take_along_node<A2, P, Axis>{a, n.pos_, n.shape_};  // positions kept
}
template <class A, std::size_t Axis, class A2>
constexpr auto remake(argmax_node<A, Axis> const& n, A2 const& a) {
  return argmax_node<A2, Axis>{a, n.shape_};
}
template <class A, std::size_t Axis, class Idx, class A2>
constexpr auto remake(index_node<A, Axis, Idx> const& n, A2 const& a) {
  return index_node<A2, Axis, Idx>{a, n.idx_, n.shape_};
}
template <class A, std::size_t... P, class A2>
constexpr auto remake(permute_node<A, P...> const& n, A2 const& a) {
  return permute_node<A2, P...>{a, n.shape_};
}
template <class A, std::size_t Axis, class A2>
constexpr auto remake(unsqueeze_node<A, Axis> const& n, A2 const& a) {
  return unsqueeze_node<A2, Axis>{a, n.shape_};
}
template <class A, class S, class A2>
constexpr auto remake(broadcast_node<A, S> const& n, A2 const& a) {
  return broadcast_node<A2, S>{a, n.shape_};
}
template <class A, class S, class A2>
constexpr auto remake(reshape_node<A, S> const& n, A2 const& a) {
  return reshape_node<A2, S>{a, n.shape_};
}
template <class A, class A2>
constexpr auto remake(detach_node<A> const&, A2 const& a) {
  return detach_node<A2>{a};
}
template <class A, class I, class A2>
constexpr auto remake(segment_sum_node<A, I> const& n, A2 const& a) {
  return segment_sum_node<A2, I>{a, n.idx_, n.shape_, n.mean_};
}
template <class A, class B, class A2, class B2>
constexpr auto remake(matmul_node<A, B> const& n, A2 const& a, B2 const& b) {
  return matmul_node<A2, B2>{a, b, n.shape_};
}
template <class A, class B, std::size_t Axis, class A2, class B2>
constexpr auto remake(concat_node<A, B, Axis> const& n, A2 const& a, B2 const& b) {
  return concat_node<A2, B2, Axis>{a, b, n.shape_};
}
template <class A, std::size_t Axis, row_kind K, class A2>
constexpr auto remake(row_node<A, Axis, K> const& n, A2 const& a) {
  return row_node<A2, Axis, K>{a, n.eps_};
}
template <class A, class A2>
constexpr auto remake(save_mark_node<A> const&, A2 const& a) {
  return save_mark_node<A2>{a};
}

template <class CN, class XN, class C0, class Xs, class B, class O, class C02, class Xs2, class B2>
constexpr auto remake(scan_node<CN, XN, C0, Xs, B, O> const& n, C02 const& c0, Xs2 const& xs, B2 const& b) {
  return scan_node<CN, XN, C02, Xs2, B2, O>{c0, xs, b, n.shape_, n.opt_};
}

template <bool U, class F, class N>
constexpr auto rebuild(N const& n, F const& f) {
  if constexpr (is_save_mark_node_v<N> && F::drops_marks) {
    return f.template apply<U>(n.arg_);  // the mark itself becomes the saved_node around it
  } else if constexpr (value_operand_count_v<N> == 1) {
    auto a = f.template apply<U>(operand_at<0>(n));
    return remake(n, a);
  } else if constexpr (value_operand_count_v<N> == 2) {
    auto a = f.template apply<U>(operand_at<0>(n));  // in order: the save transform takes buffers as it goes
    auto b = f.template apply<U>(operand_at<1>(n));
    return remake(n, a, b);
  } else {
    static_assert(value_operand_count_v<N> == 3, "gradix internal: rebuild of a node without operands");
    auto a = f.template apply<U>(operand_at<0>(n));
    auto b = f.template apply<U>(operand_at<1>(n));
    auto c = f.template apply<U>(operand_at<2>(n));
    return remake(n, a, b, c);
  }
}

// ---------------------------------------------------------------------------------------
// Lets (expr/let.hpp): the operand computed once, the body's placeholders bound to it.

/// Whether N reads the placeholder var_node<Z> (types only).
template <class N, class Z>
constexpr bool mentions_var() {
  if constexpr (std::is_same_v<N, var_node<Z>>) {
    return true;
  } else if constexpr (is_let_node<N>::value) {
    return mentions_var<std::remove_cvref_t<decltype(std::declval<N const&>().z_)>, Z>() ||
           mentions_var<std::remove_cvref_t<decltype(std::declval<N const&>().body_)>, Z>();
  } else if constexpr (value_operand_count_v<N> == 3) {
    return mentions_var<value_operand_t<0, N>, Z>() || mentions_var<value_operand_t<1, N>, Z>() ||
           mentions_var<value_operand_t<2, N>, Z>();
  } else if constexpr (value_operand_count_v<N> == 2) {
    return mentions_var<value_operand_t<0, N>, Z>() || mentions_var<value_operand_t<1, N>, Z>();
  } else if constexpr (value_operand_count_v<N> == 1) {
    return mentions_var<value_operand_t<0, N>, Z>();
  } else {
    return false;
  }
}

template <class Z, class Rep, class N>
constexpr auto bind_var(N const& n, Rep const& rep);
/// The binding of var_node<Z> to rep as rebuild's f.
template <class Z, class Rep>
struct binding {
  static constexpr bool drops_marks = false;
  Rep const& rep;
  template <bool U, class C>
  constexpr auto apply(C const& c) const {
    return bind_var<Z>(c, rep);
  }
};
/// n with every var_node<Z> replaced by rep (placeholders are named by small types,
/// expr/let.hpp: binding renames nothing). No let inside n binds Z itself: a let's level is
/// above every level in its body, and a name under construction is a closure type's.
template <class Z, class Rep, class N>
constexpr auto bind_var(N const& n, Rep const& rep) {
  if constexpr (std::is_same_v<N, var_node<Z>>) {
    return rep;
  } else if constexpr (!mentions_var<N, Z>()) {
    return n;
  } else if constexpr (is_let_node<N>::value) {
    using Z1 = typename N::name_type;
    static_assert(!std::is_same_v<Z1, Z>, "gradix internal: nested lets share a placeholder name");
    auto z = bind_var<Z>(n.z_, rep);
    auto b = bind_var<Z>(n.body_, rep);
    return let_node<Z1, decltype(z), decltype(b)>{z, b};
  } else {
    return rebuild<true>(n, binding<Z, Rep>{rep});
  }
}

/// The highest level of the finished lets in N's type (expr/let.hpp, let_level; 0: none).
template <class N>
constexpr int max_let_level() {
  if constexpr (is_var_node<N>::value) {
    return let_level_of<typename N::name_type>::value;
  } else if constexpr (is_let_node<N>::value) {
    constexpr int a = let_level_of<typename N::name_type>::value;
    constexpr int b = max_let_level<std::remove_cvref_t<decltype(std::declval<N const&>().z_)>>();
    constexpr int c = max_let_level<std::remove_cvref_t<decltype(std::declval<N const&>().body_)>>();
    return a > b ? (a > c ? a : c) : (b > c ? b : c);
  } else if constexpr (is_scan_node<N>::value) {
    // its own level is above its body's; its operands' lets are beside it
    constexpr int a = let_level_of<typename N::carry_name>::value;
    constexpr int b = max_let_level<value_operand_t<0, N>>();
    constexpr int c = max_let_level<value_operand_t<1, N>>();
    return a > b ? (a > c ? a : c) : (b > c ? b : c);
  } else if constexpr (value_operand_count_v<N> == 2) {
    constexpr int a = max_let_level<value_operand_t<0, N>>();
    constexpr int b = max_let_level<value_operand_t<1, N>>();
    return a > b ? a : b;
  } else if constexpr (value_operand_count_v<N> == 1) {
    return max_let_level<value_operand_t<0, N>>();
  } else {
    return 0;
  }
}

/// A let over z whose body was built with the provisional name P (a closure type's tag):
/// the placeholder renamed to its level (expr/let.hpp). Every let inside the body finished
/// first and has a lower level, and the enclosing lets, still under construction, have
/// provisional names: no two nested lets share a name.
template <class P, class X, class B>
constexpr auto name_let(X const& z, B const& body) {
  constexpr int L = 1 + max_let_level<B>();
  using Name = let_name<let_level<L>, typename P::value_type, typename P::shape_type, typename P::space_type,
                        P::reaches_param>;
  auto b = bind_var<P>(body, var_node<Name>{z.shape()});
  return let_node<Name, X, decltype(b)>{z, b};
}

}  // namespace gradix::detail
