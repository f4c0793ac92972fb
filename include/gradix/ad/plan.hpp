#pragma once
/// \file
/// The compile-time plan of a backward pass: a tuple of plan elements. An update kernel
/// (`use`) per parameter use, except where kernels are joined (`fused_use`: the two uses of
/// one `+`; `multi_use`: the uses of one elementwise region, ad/kernel.hpp), and an element
/// per kept node whose backward needs a buffer first (`product_use`, `staged_use`,
/// `let_use`, `row_use`: ad/product.hpp), which builds its operands' plans where it runs.
/// (The values a call keeps in buffers are decided by ad/save.hpp; a call runs the plan of
/// the expression over those buffers: gx::backward_plan_t in api/saved.hpp.) `plan(e)`
/// builds it; its type tells, for each kernel, the
/// domain rank, the kind of each domain axis (affine, lookup, projected), whether the write
/// map is injective (plain stores) or needs owner-computes accumulation, the domain axis
/// walked innermost, and whether projected sums collapse to `extent x v`.

#include "gradix/ad/kernel.hpp"
#include "gradix/ad/map.hpp"
#include "gradix/ad/push.hpp"
#include "gradix/ad/value.hpp"
#include "gradix/config.hpp"
#include "gradix/expr/node.hpp"

#include <type_traits>

namespace gradix::ad {

namespace detail {
/// e as the node the plan is pushed through: e itself when it is an expression (the plan
/// points at its kept products and staged nodes: product_use, staged_use), else its view.
template <class E>
constexpr decltype(auto) plan_root(E const& e) {
  if constexpr (expression<E>) return (e);
  else return gradix::detail::as_node(e);
}
}  // namespace detail

/// The plan of backward(e) for a rank-0 expression: its update kernels. The plan points into
/// e (its kept products and staged nodes): e must outlive it.
template <operand E>
constexpr auto plan(E const& e_in) {
  decltype(auto) e = detail::plan_root(e_in);
  using N = std::remove_cvref_t<decltype(e)>;
  static_assert(shape_of_t<N>::rank == 0,
                "gradix::backward: the expression is not rank 0; pass a seed (an adjoint of "
                "the expression's shape) as second argument");
  using T = value_type_t<N>;
  return push(e, shape<>{}, one_node<T, shape<>>{}, tuple<>{});
}

/// The plan of backward(e, seed): the seed is the adjoint of e (same shape). The plan points
/// into e, as above.
template <operand E, class Seed>
constexpr auto plan(E const& e_in, Seed const& seed) {
  decltype(auto) e = detail::plan_root(e_in);
  using N = std::remove_cvref_t<decltype(e)>;
  using D = shape_of_t<N>;
  return push(e, e.shape(), seed, identity_map<D::rank>());
}

}  // namespace gradix::ad
