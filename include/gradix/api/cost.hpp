#pragma once
/// \file
/// The work of a call, counted from types alone (docs/ad.md, "What a backward costs"):
///
///   ad::forward_cost_v<E>    the forward (value, eval): the kernel of every value the call
///                            keeps (a product, a reduction, a row node, a let's operand...),
///                            each over its operands' buffers, plus the root's;
///   ad::backward_cost_v<E>   a backward call (gx::backward): its forward, and every element
///                            of its plan (gx::backward_plan_t<E>, ad::plan_cost_v in
///                            ad/cost.hpp).
///
/// Both read the save transform's output type (api/saved.hpp, saved_expr_t), so they live
/// in this layer. The unit is ad::eval_cost_v's (ad/kernel.hpp).

#include "gradix/ad/cost.hpp"
#include "gradix/ad/kernel.hpp"
#include "gradix/api/saved.hpp"
#include "gradix/config.hpp"
#include "gradix/expr/let.hpp"
#include "gradix/expr/saved.hpp"
#include "gradix/expr/visit.hpp"

#include <cstddef>
#include <type_traits>

namespace gradix::ad {

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
  } else if constexpr (gradix::detail::operand_count_v<N> == 3) {
    return kernels_below<gradix::detail::operand_t<0, N>>() + kernels_below<gradix::detail::operand_t<1, N>>() +
           kernels_below<gradix::detail::operand_t<2, N>>();
  } else if constexpr (gradix::detail::operand_count_v<N> == 2) {
    return kernels_below<gradix::detail::operand_t<0, N>>() + kernels_below<gradix::detail::operand_t<1, N>>();
  } else if constexpr (gradix::detail::operand_count_v<N> == 1) {
    return kernels_below<gradix::detail::operand_t<0, N>>();
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
  else if constexpr (is_scanned<K>::value)  // its operands', then one kernel per step (counted once)
    return kernels_below<std::remove_cvref_t<decltype(std::declval<K const&>().c0_)>>() +
           kernels_below<std::remove_cvref_t<decltype(std::declval<K const&>().xs_)>>() + 1;
  else return eval_cost_v<K> + kernels_below<K>();
}
}  // namespace detail

template <class E>
struct forward_cost
    : std::integral_constant<std::size_t, eval_cost_v<saved_expr_t<E>> + detail::kernels_below<saved_expr_t<E>>()> {};
template <class E>
inline constexpr std::size_t forward_cost_v = forward_cost<std::remove_cvref_t<E>>::value;

template <class E>
struct backward_cost
    : std::integral_constant<std::size_t, forward_cost<E>::value + plan_cost_v<backward_plan_t<E>>> {};
template <class E>
inline constexpr std::size_t backward_cost_v = backward_cost<std::remove_cvref_t<E>>::value;

}  // namespace gradix::ad
