#pragma once
// The gradix side of the randomized graph tests: reading gradix tensors in logical row-major
// order and the two checks, used by the sources tools/gen_random_graphs.py writes. Only
// flat() is a template: the comparisons live in ref.cpp, compiled once (each generated graph
// instantiates gradix's eval and backward for its own types, which dominates compile time).
#include "random/ref.hpp"

#include <gradix/gradix.hpp>

#include <doctest/doctest.h>

#include <cstddef>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

namespace rg {

namespace gx = gradix;

/// The elements of a tensor (or gradient tensor) in logical row-major order.
template <class T>
std::vector<double> flat(T const& t) {
  auto s = t.shape();
  std::vector<double> out(std::size_t(s.size()));
  for (gx::index_t k = 0; k < s.size(); ++k) out[std::size_t(k)] = double(t[gx::detail::unravel(s, k)]);
  return out;
}

inline std::span<double const> span(std::vector<double> const& v) { return {v.data(), v.size()}; }

/// An index vector of element type I.
template <class I>
std::vector<I> indices_as(std::vector<int> const& v) {
  return std::vector<I>(v.begin(), v.end());
}

/// The compile-time cost rule (api/cost.hpp): a backward call costs at most
/// `backward_cost_bound` times the forward. The template arguments appear in a failure's
/// message (both compilers print them).
inline constexpr std::size_t backward_cost_bound = 6;
template <std::size_t Backward, std::size_t Forward>
struct backward_cost_within : std::bool_constant<Backward <= backward_cost_bound * Forward> {};
template <class Loss>
using cost_check = backward_cost_within<gx::ad::backward_cost_v<Loss>, gx::ad::forward_cost_v<Loss>>;

}  // namespace rg

/// LOSS: the scalar the gradient checks differentiate (the root, or sum(W * root)).
#define RG_CHECK_COST(LOSS)                                                                     \
  static_assert(rg::cost_check<std::remove_cvref_t<decltype(LOSS)>>::value,                    \
                "random graph: backward_cost_v > 6 forward_cost_v (api/cost.hpp): the backward " \
                "recomputes what the forward keeps")

#define RG_CHECK_FORWARD(expected, got)                     \
  do {                                                      \
    std::string rg_msg_ = rg::check_values(expected, got); \
    CHECK_MESSAGE(rg_msg_.empty(), rg_msg_);                \
  } while (0)

#define RG_CHECK_GRAD(G, F, D, LEAF, ANALYTIC)                                \
  do {                                                                        \
    std::string rg_msg_ = rg::check_grad(G, F, D, LEAF, rg::flat(ANALYTIC));  \
    CHECK_MESSAGE(rg_msg_.empty(), rg_msg_);                                  \
  } while (0)
