#pragma once
/// \file
/// The operand protocol (issue 33): the one place that says what a node's operands are
/// (operands_of, for_each_operand, for_each_node, operand_types), for the walks that treat
/// every operand alike; and the walk over an expression's leaves for the checks a call makes
/// before it runs an expression (exec/checks.hpp): parameters whose value moved, aliasing
/// between a destination and the leaves, lifetimes. One pass over the node tree, no
/// allocation.

#include "gradix/config.hpp"
#include "gradix/core/tuple.hpp"
#include "gradix/core/view.hpp"
#include "gradix/expr/concat.hpp"
#include "gradix/expr/elementwise.hpp"
#include "gradix/expr/index.hpp"
#include "gradix/expr/let.hpp"
#include "gradix/expr/matmul.hpp"
#include "gradix/expr/node.hpp"
#include "gradix/expr/param.hpp"
#include "gradix/expr/pattern.hpp"
#include "gradix/expr/reduce.hpp"
#include "gradix/expr/saved.hpp"
#include "gradix/expr/take.hpp"
#include "gradix/expr/view.hpp"

#include <type_traits>

namespace gradix::detail {

template <class N>
struct is_param_node : std::false_type {};
template <class V, class G>
struct is_param_node<param_node<V, G>> : std::true_type {};

/// The operands of node n, in a fixed order (f gets each with n's constness):
///   let_node              (operand z_, body_)        bound_let_node   (operand z_, body arg_)
///   binary, matmul, concat (lhs_, rhs_)              take_along       (arg_, positions pos_)
///   one_hot               (pos_)                     other inner nodes (arg_)
///   leaves (views, parameters, scalars, placeholders, saved values, patterns): none.
/// Index data (an index node's or a segment sum's idx_) is not an operand: a lookup table.
/// A walk that treats each kind of operand differently (for_each_leaf below, rebuild) names
/// the members itself.
template <class N, class F>
constexpr void for_each_operand(N& n, F&& f) {
  using D = std::remove_const_t<N>;
  if constexpr (is_view_v<D> || is_param_node<D>::value || is_saved_node<D>::value) {
  } else if constexpr (is_let_node<D>::value) {
    f(n.z_);
    f(n.body_);
  } else if constexpr (is_bound_let_node<D>::value) {
    f(n.z_);
    f(n.arg_);
  } else if constexpr (requires { n.lhs_; n.rhs_; }) {
    f(n.lhs_);
    f(n.rhs_);
  } else if constexpr (requires { n.arg_; n.pos_; }) {
    f(n.arg_);
    f(n.pos_);
  } else if constexpr (requires { n.pos_; }) {
    f(n.pos_);
  } else if constexpr (requires { n.arg_; }) {
    f(n.arg_);
  }
}
/// The operand types of N (cv-ref removed, for_each_operand's order), as a gradix::tuple.
template <class N>
struct operand_types {
  using D = std::remove_cvref_t<N>;
  template <class... C>
  static std::type_identity<tuple<std::remove_cvref_t<C>...>> of(C&&...);
  static auto probe() {
    if constexpr (is_view_v<D> || is_param_node<D>::value || is_saved_node<D>::value)
      return std::type_identity<tuple<>>{};
    else if constexpr (is_let_node<D>::value) return decltype(of(std::declval<D&>().z_, std::declval<D&>().body_)){};
    else if constexpr (is_bound_let_node<D>::value) return decltype(of(std::declval<D&>().z_, std::declval<D&>().arg_)){};
    else if constexpr (requires(D& n) { n.lhs_; n.rhs_; }) return decltype(of(std::declval<D&>().lhs_, std::declval<D&>().rhs_)){};
    else if constexpr (requires(D& n) { n.arg_; n.pos_; }) return decltype(of(std::declval<D&>().arg_, std::declval<D&>().pos_)){};
    else if constexpr (requires(D& n) { n.pos_; }) return decltype(of(std::declval<D&>().pos_)){};
    else if constexpr (requires(D& n) { n.arg_; }) return decltype(of(std::declval<D&>().arg_)){};
    else return std::type_identity<tuple<>>{};
  }
  using type = typename decltype(probe())::type;
};
template <class N>
using operand_types_t = typename operand_types<N>::type;
/// Calls f(m) for n and every node below it, parents first, operands in order.
template <class N, class F>
constexpr void for_each_node(N& n, F&& f) {
  f(n);
  for_each_operand(n, [&](auto& c) { for_each_node(c, f); });
}
/// Whether Pred<M>::value holds for N or a node below it (types only). Memoized per type in
/// a variable template: each node's answer is a constant of its own, so deep expressions
/// (an unrolled recurrence) do not nest constant evaluations as deep as the expression.
template <class N, template <class> class Pred>
struct any_node_s;
template <class N, template <class> class Pred>
inline constexpr bool any_node_v = any_node_s<N, Pred>::value;
template <class N, template <class> class Pred>
struct any_node_s {
  template <class... C>
  static constexpr bool any_of(tuple<C...> const*) {
    return (any_node_v<C, Pred> || ... || false);
  }
  static constexpr bool value = Pred<N>::value || any_of(static_cast<operand_types_t<N> const*>(nullptr));
};
template <class N, template <class> class Pred>
constexpr bool any_node() {
  return any_node_v<std::remove_cvref_t<N>, Pred>;
}

/// Whether an operand of a binary node is read at the result's own coordinate (same rank,
/// no axis broadcast).
template <class Operand, class Result>
inline constexpr bool reads_in_place_v = [] {
  if constexpr (Operand::rank != Result::rank) {
    return false;
  } else {
    for (std::size_t j = 0; j < Operand::rank; ++j)
      if (Operand::static_extents[j] == 1 && Result::static_extents[j] != 1) return false;
    return true;
  }
}();

/// Calls f(leaf, in_place) for every view and parameter leaf of n, and for the index
/// vectors it gathers with (n may be const or not; f gets the leaf with n's constness). `in_place` is true when the leaf is read only at the
/// coordinate being computed: the path from n down to it has elementwise nodes only, and
/// none broadcasts it. Scalars are not leaves here.
template <class N, class F>
constexpr void for_each_leaf(N& n, F&& f, bool in_place = true) {
  using D = std::remove_const_t<N>;
  if constexpr (is_view_v<D> || is_param_node<D>::value) {
    f(n, in_place);
  } else if constexpr (is_let_node<D>::value) {  // the operand, and the body's other leaves
    for_each_leaf(n.z_, f, false);
    for_each_leaf(n.body_, f, false);
  } else if constexpr (is_saved_node<D>::value) {
    // a value kept by the call (exec/save.hpp): its buffer is the call's own, no user memory
  } else if constexpr (is_var_node<D>::value || is_pattern_node<D>::value) {
    // the let's operand: visited there; a pattern reads no memory
  } else if constexpr (is_concat_node<D>::value) {  // the right operand is read shifted
    for_each_leaf(n.lhs_, f, false);
    for_each_leaf(n.rhs_, f, false);
  } else if constexpr (is_matmul_node<D>::value) {  // every element reads whole rows and columns
    for_each_leaf(n.lhs_, f, false);
    for_each_leaf(n.rhs_, f, false);
  } else if constexpr (requires { n.lhs_; n.rhs_; }) {  // binary_node
    using RS = shape_of_t<D>;
    for_each_leaf(n.lhs_, f, in_place && reads_in_place_v<shape_of_t<decltype(n.lhs_)>, RS>);
    for_each_leaf(n.rhs_, f, in_place && reads_in_place_v<shape_of_t<decltype(n.rhs_)>, RS>);
  } else if constexpr (requires { n.arg_; n.pos_; }) {  // take_along: the positions too
    for_each_leaf(n.pos_, f, false);
    for_each_leaf(n.arg_, f, false);
  } else if constexpr (requires { n.pos_; }) {  // one_hot
    for_each_leaf(n.pos_, f, false);
  } else if constexpr (requires { n.arg_; n.idx_; }) {  // index_node: the index data too
    if constexpr (is_index_vec<std::remove_cvref_t<decltype(n.idx_)>>::value) f(n.idx_, false);
    for_each_leaf(n.arg_, f, false);
  } else if constexpr (requires { n.arg_; }) {
    // unary and detach nodes read their operand in place; reductions, index and view nodes
    // read it elsewhere
    constexpr bool same = requires { typename D::is_elementwise_node; };
    for_each_leaf(n.arg_, f, in_place && same);
  } else {
    static_assert(std::is_same_v<D, scalar_node<value_type_t<D>>>,
                  "gradix: internal: for_each_leaf does not know this node kind");
  }
}

}  // namespace gradix::detail
