#pragma once
/// \file
/// Code size of an element's evaluation (types only): `ev::code_cost_v<N>` counts the nodes
/// an evaluator of N visits inline for one element. A reduction read as an operand runs out of
/// line (eval/reduce.hpp) and counts as a call. Loop nests use it to decide how much to copy:
/// a cheap body (a memory-bound `sum(a * b)`) is unrolled over several accumulator packs and
/// interleaved blocks, an expensive one (a chain of tanh) runs in plain loops. Copying an
/// expensive body buys nothing (its own arithmetic keeps the pipelines busy) and cost g++
/// minutes: the forward reduction of a depth-32 tanh chain was 295 KB of code in one
/// function, 22 s to compile at -O2 -march=native.

#include "gradix/config.hpp"
#include "gradix/expr/reduce.hpp"
#include "gradix/expr/visit.hpp"

#include <cstddef>
#include <type_traits>

namespace gradix::ev {

/// Bodies costing more than this many nodes are not copied by unrolling.
inline constexpr std::size_t unroll_cost_limit = 12;

template <class N>
struct code_cost;
template <class N>
inline constexpr std::size_t code_cost_v = code_cost<N>::value;

namespace detail {
template <class N>
constexpr std::size_t code_cost_of() {
  if constexpr (is_reduce_node<N>::value) {
    return 4;  // an out-of-line call
  } else if constexpr (requires(N const& n) { n.top_; }) {
    // (AD nodes, ad/value.hpp) a path derivative evaluates its region once, values and partials
    return 2 * code_cost_v<std::remove_cvref_t<decltype(std::declval<N const&>().top_)>>;
  } else if constexpr (requires(N const& n) { n.sub_; }) {
    return code_cost_v<std::remove_cvref_t<decltype(std::declval<N const&>().sub_)>>;
  } else if constexpr (gradix::detail::value_operand_count_v<N> == 3) {
    return 1 + code_cost_v<gradix::detail::value_operand_t<0, N>> + code_cost_v<gradix::detail::value_operand_t<1, N>> +
           code_cost_v<gradix::detail::value_operand_t<2, N>>;
  } else if constexpr (gradix::detail::value_operand_count_v<N> == 2) {  // expression nodes: the operand protocol
    return 1 + code_cost_v<gradix::detail::value_operand_t<0, N>> + code_cost_v<gradix::detail::value_operand_t<1, N>>;
  } else if constexpr (gradix::detail::value_operand_count_v<N> == 1) {
    return 1 + code_cost_v<gradix::detail::value_operand_t<0, N>>;
  } else if constexpr (requires(N const& n) { n.v_; }) {
    return code_cost_v<std::remove_cvref_t<decltype(std::declval<N const&>().v_)>>;
  } else {
    return 1;  // leaves, scalars, the seed
  }
}
}  // namespace detail

template <class N>
struct code_cost : std::integral_constant<std::size_t, detail::code_cost_of<N>()> {};

/// Is evaluating N cheap enough to be copied by unrolling?
template <class N>
inline constexpr bool cheap_body_v = code_cost_v<N> <= unroll_cost_limit;

}  // namespace gradix::ev
