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
#include "gradix/expr/scan.hpp"
#include "gradix/expr/take.hpp"
#include "gradix/expr/view.hpp"

#include <cstddef>
#include <type_traits>
#include <utility>

namespace gradix::detail {

template <class N>
struct is_param_node : std::false_type {};
template <class V, class G>
struct is_param_node<param_node<V, G>> : std::true_type {};

/// The operands of node n, in a fixed order (f gets each with n's constness):
///   let_node              (operand z_, body_)        bound_let_node   (operand z_, body arg_)
///   scan_node             (initial carry c0_, sequence xs_, step body_)
///   binary, matmul, concat (lhs_, rhs_)              take_along       (arg_, positions pos_)
///   one_hot               (pos_)                     other inner nodes (arg_)
///   leaves (views, parameters, scalars, placeholders, saved values, patterns): none.
/// Index data (an index node's or a segment sum's idx_) is not an operand: a lookup table.
/// The value operands are the operands whose values flow into n's value: all of them but
/// positions (take_along's and one_hot's pos_, integer data read as an address, never
/// differentiated, never kept by a call). Walks that transform or cost an expression's values
/// (the save transform's counts, buffer and kernel counts, lets, regions, finite checks) use
/// the value operands; walks over the memory an expression reads (checks, validation) use
/// all. Rebuilding a node over new operands is the protocol's other half: expr/rebuild.hpp,
/// one constructor per node kind, over the value operands (positions are kept as they are).
/// A walk that treats one kind of operand differently (for_each_leaf below) names the
/// members itself.
template <class N>
inline constexpr bool is_operand_leaf_v =
    is_view_v<std::remove_const_t<N>> || is_param_node<std::remove_const_t<N>>::value || is_saved_node<std::remove_const_t<N>>::value;

/// The table above, once: how many operands node type D has (Positions: counting positions)...
template <class D, bool Positions>
constexpr std::size_t operand_count_of() {
  if constexpr (is_operand_leaf_v<D>) return 0;
  else if constexpr (is_let_node<D>::value || is_bound_let_node<D>::value) return 2;
  else if constexpr (is_scan_node<D>::value) return 3;
  else if constexpr (requires(D& n) { n.lhs_; n.rhs_; }) return 2;
  else if constexpr (requires(D& n) { n.arg_; n.pos_; }) return Positions ? 2 : 1;
  else if constexpr (requires(D& n) { n.pos_; }) return Positions ? 1 : 0;
  else if constexpr (requires(D& n) { n.arg_; }) return 1;
  else return 0;
}
/// ... and its I-th operand (n's constness kept).
template <std::size_t I, class N>
constexpr auto& operand_at(N& n) {
  using D = std::remove_const_t<N>;
  if constexpr (is_let_node<D>::value) {
    if constexpr (I == 0) return n.z_;
    else return n.body_;
  } else if constexpr (is_bound_let_node<D>::value) {
    if constexpr (I == 0) return n.z_;
    else return n.arg_;
  } else if constexpr (is_scan_node<D>::value) {
    if constexpr (I == 0) return n.c0_;
    else if constexpr (I == 1) return n.xs_;
    else return n.body_;
  } else if constexpr (requires { n.lhs_; n.rhs_; }) {
    if constexpr (I == 0) return n.lhs_;
    else return n.rhs_;
  } else if constexpr (requires { n.arg_; n.pos_; }) {
    if constexpr (I == 0) return n.arg_;
    else return n.pos_;
  } else if constexpr (requires { n.pos_; }) {
    static_assert(I == 0);
    return n.pos_;
  } else {
    static_assert(I == 0);
    return n.arg_;
  }
}

/// The number of operands of N (0 to 3) and the type of the I-th (cv-ref removed); the
/// same for the value operands (the value operands come first: the I-th value operand is the
/// I-th operand). What a type-level walk recurses on, one instantiation per level, so deep
/// expressions (an unrolled recurrence) stay within the compilers' instantiation depth:
///   if constexpr (value_operand_count_v<N> == 2) return f<value_operand_t<0, N>>() || f<value_operand_t<1, N>>();
template <class N>
inline constexpr std::size_t operand_count_v = operand_count_of<std::remove_cvref_t<N>, true>();
template <class N>
inline constexpr std::size_t value_operand_count_v = operand_count_of<std::remove_cvref_t<N>, false>();
template <std::size_t I, class N>
using operand_t = std::remove_cvref_t<decltype(operand_at<I>(std::declval<std::remove_cvref_t<N>&>()))>;
template <std::size_t I, class N>
using value_operand_t = operand_t<I, N>;

/// Calls f(c) for every operand c of n (positions included), in order.
template <class N, class F>
constexpr void for_each_operand(N& n, F&& f) {
  constexpr std::size_t k = operand_count_v<N>;
  if constexpr (k >= 1) f(operand_at<0>(n));
  if constexpr (k >= 2) f(operand_at<1>(n));
  if constexpr (k >= 3) f(operand_at<2>(n));
}
/// Calls f(c) for every value operand c of n (positions left out).
template <class N, class F>
constexpr void for_each_value_operand(N& n, F&& f) {
  constexpr std::size_t k = value_operand_count_v<N>;
  if constexpr (k >= 1) f(operand_at<0>(n));
  if constexpr (k >= 2) f(operand_at<1>(n));
  if constexpr (k >= 3) f(operand_at<2>(n));
}
/// The operand types of N (cv-ref removed, for_each_operand's order), as a gradix::tuple; the
/// value operands' types.
template <class N, bool Positions = true>
struct operand_types {
  static constexpr std::size_t k = operand_count_of<std::remove_cvref_t<N>, Positions>();
  static auto probe() {
    if constexpr (k == 0) return std::type_identity<tuple<>>{};
    else if constexpr (k == 1) return std::type_identity<tuple<operand_t<0, N>>>{};
    else if constexpr (k == 2) return std::type_identity<tuple<operand_t<0, N>, operand_t<1, N>>>{};
    else return std::type_identity<tuple<operand_t<0, N>, operand_t<1, N>, operand_t<2, N>>>{};
  }
  using type = typename decltype(probe())::type;
};
template <class N>
using operand_types_t = typename operand_types<N, true>::type;
template <class N>
using value_operand_types_t = typename operand_types<N, false>::type;

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
  } else if constexpr (is_scan_node<D>::value) {  // every step reads all of them
    for_each_leaf(n.c0_, f, false);
    for_each_leaf(n.xs_, f, false);
    for_each_leaf(n.body_, f, false);
    if constexpr (D::options::has_lengths) f(n.opt_.len_, false);
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
