#pragma once
/// \file
/// The work of a backward plan, counted from types alone (docs/ad.md, "What a backward
/// costs"): `ad::plan_cost_v<P>`, every element of plan P with the plans that products,
/// staged nodes, lets and row nodes build where they run. api/cost.hpp adds the forward
/// (`ad::forward_cost_v<E>`) and a whole backward call (`ad::backward_cost_v<E>`), which need
/// the save transform's types.
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
#include "gradix/config.hpp"

#include <cstddef>
#include <type_traits>

namespace gradix::ad {

/// A product's work per output element, either operand read once per term.
inline constexpr std::size_t product_cost = 1 + 2 * reduction_weight;
/// A row node's backward per element: the row sum of g times the value, then the adjoint.
inline constexpr std::size_t row_backward_cost = 4 + reduction_weight;

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

}  // namespace gradix::ad
