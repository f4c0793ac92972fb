#pragma once
/// \file
/// The work of a call, counted from types alone (docs/ad.md, "What a backward costs"):
///
///   ad::forward_cost_v<E>    the forward (value, eval): the kernel of every value the call
///                            keeps (a product, a reduction, a row node, a let's operand...),
///                            each over its operands' buffers, plus the root's;
///   ad::backward_cost_v<E>   a backward call (gx::backward): its forward, and every element
///                            of its plan (gx::backward_plan_t<E>), with the plans that
///                            products, staged nodes, lets and row nodes build where they run.
///
/// The unit is `ad::eval_cost_v` (ad/kernel.hpp): evaluator nodes visited per element of a
/// kernel's domain, a reduction or a product counting `reduction_weight` times the operands it
/// reads per output element. Domains of different sizes count alike: the figure says how many
/// times each node's work is done, not its run time. Reverse mode's promise is a backward
/// that costs a small constant times its forward; a backward that recomputes a reduction per
/// element of a larger domain (the bug of issue 32: the adjoint of a layer norm's mean
/// recomputed for every element) adds `reduction_weight` times that reduction's operand for
/// each recomputation, and breaks the bound. tests/random asserts
/// `backward_cost_v <= 6 forward_cost_v` for every generated graph, tests/ad/cost_test.cpp for
/// the model blocks.
///
/// Per plan element:
///   use            eval_cost of its value expression (ad::use::value_expr)
///   fused_use      its first use's value, computed once, and one more add
///   multi_use      two passes over its region (values, then the reverse sweep) and one add per
///                  member
///   product_use    its adjoint kernel, two products (the operands' adjoints), the operands' plans
///   staged_use     its adjoint kernel and its operand's plan
///   let_use        the body's plan and the operand's plan
///   row_use        the row backward (two passes over each row, one row sum) and the operand's
///                  plan

#include "gradix/ad/kernel.hpp"
#include "gradix/ad/product.hpp"
#include "gradix/api/saved.hpp"
#include "gradix/config.hpp"
#include "gradix/expr/let.hpp"
#include "gradix/expr/saved.hpp"

#include <cstddef>
#include <type_traits>

namespace gradix::ad {

/// A product's work per output element, either operand read once per term.
inline constexpr std::size_t product_cost = 1 + 2 * reduction_weight;
/// A row node's backward per element: the row sum of g times the value, then the adjoint.
inline constexpr std::size_t row_backward_cost = 4 + reduction_weight;

// ---------------------------------------------------------------------------------------
// Forward: the kernels of the transformed expression (api/saved.hpp, saved_expr_t).

namespace detail {
template <class N>
constexpr std::size_t kept_kernels();

/// The kernels a kept node's own kernel needs first: the kept values below it.
template <class N>
constexpr std::size_t kernels_below() {
  if constexpr (is_saved_node<N>::value) {
    return kept_kernels<N>();
  } else if constexpr (is_bound_let_node<N>::value) {
    using Z2 = std::remove_cvref_t<decltype(std::declval<N const&>().z_)>;
    using B2 = std::remove_cvref_t<decltype(std::declval<N const&>().arg_)>;
    // the operand's kernels, its value (its root's kernel when kept, else an assignment into
    // the let's buffer), and the body's kernels
    return kernels_below<Z2>() + (is_saved_node<Z2>::value ? 0 : eval_cost_v<Z2>) + kernels_below<B2>();
  } else if constexpr (requires(N const& x) { x.lhs_; x.rhs_; }) {
    return kernels_below<std::remove_cvref_t<decltype(std::declval<N const&>().lhs_)>>() +
           kernels_below<std::remove_cvref_t<decltype(std::declval<N const&>().rhs_)>>();
  } else if constexpr (requires(N const& x) { x.arg_; x.pos_; }) {
    return kernels_below<std::remove_cvref_t<decltype(std::declval<N const&>().arg_)>>() +
           kernels_below<std::remove_cvref_t<decltype(std::declval<N const&>().pos_)>>();
  } else if constexpr (requires(N const& x) { x.arg_; }) {
    return kernels_below<std::remove_cvref_t<decltype(std::declval<N const&>().arg_)>>();
  } else {
    return 0;
  }
}
/// A saved node's kernel (its node over its operands' buffers) and the kernels below it; a
/// let's placeholder bound to the let's buffer costs nothing here (the let counts it).
template <class N>
constexpr std::size_t kept_kernels() {
  using K = typename N::node_type;
  if constexpr (is_var_node<K>::value) return 0;
  else return eval_cost_v<K> + kernels_below<K>();
}
}  // namespace detail

template <class E>
struct forward_cost
    : std::integral_constant<std::size_t, eval_cost_v<saved_expr_t<E>> + detail::kernels_below<saved_expr_t<E>>()> {};
template <class E>
inline constexpr std::size_t forward_cost_v = forward_cost<std::remove_cvref_t<E>>::value;

// ---------------------------------------------------------------------------------------
// Backward: the plan's elements, with the plans built where they run.

template <class P>
struct plan_cost;
template <class P>
inline constexpr std::size_t plan_cost_v = plan_cost<P>::value;

template <class U>
struct plan_cost : std::integral_constant<std::size_t, eval_cost_v<typename U::value_expr>> {};  // use
template <class... E>
struct plan_cost<tuple<E...>> : std::integral_constant<std::size_t, (plan_cost_v<E> + ... + 0)> {};
template <class U1, class U2>
struct plan_cost<fused_use<U1, U2>> : std::integral_constant<std::size_t, plan_cost_v<U1> + 1> {};
template <int I, class Top, class TMap, class V0, class... U>
struct plan_cost<multi_use<I, Top, TMap, V0, U...>>
    : std::integral_constant<std::size_t, 2 * eval_cost_v<Top> + sizeof...(U)> {};
template <class P0, class PA, class PB, class SN>
struct plan_cost<product_use<P0, PA, PB, SN>>
    : std::integral_constant<std::size_t, plan_cost_v<P0> + 2 * product_cost + plan_cost_v<PA> + plan_cost_v<PB>> {};
template <class P0, class PE, class SN>
struct plan_cost<staged_use<P0, PE, SN>> : std::integral_constant<std::size_t, plan_cost_v<P0> + plan_cost_v<PE>> {};
template <class PB, class PZ, class G, class LN, class D, class V, class M>
struct plan_cost<let_use<PB, PZ, G, LN, D, V, M>>
    : std::integral_constant<std::size_t, plan_cost_v<PB> + plan_cost_v<PZ>> {};
template <class G, class PX, class SN>
struct plan_cost<row_use<G, PX, SN>> : std::integral_constant<std::size_t, row_backward_cost + plan_cost_v<PX>> {};

template <class E>
struct backward_cost
    : std::integral_constant<std::size_t, forward_cost<E>::value + plan_cost_v<backward_plan_t<E>>> {};
template <class E>
inline constexpr std::size_t backward_cost_v = backward_cost<std::remove_cvref_t<E>>::value;

}  // namespace gradix::ad
