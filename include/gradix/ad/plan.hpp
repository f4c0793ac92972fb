#pragma once
/// \file
/// The compile-time plan of a backward pass: a tuple of update kernels (`use`s), one per
/// parameter use. (The values a call keeps in buffers are decided by ad/save.hpp; a call
/// runs the plan of the expression over those buffers: gx::backward_plan_t in api/saved.hpp.) `plan(e)` builds it; its type tells, for each kernel, the
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

/// The plan of backward(e) for a rank-0 expression: its update kernels.
template <operand E>
constexpr auto plan(E const& e_in) {
  auto e = gradix::detail::as_node(e_in);
  using N = decltype(e);
  static_assert(shape_of_t<N>::rank == 0,
                "gradix::backward: the expression is not rank 0; pass a seed (an adjoint of "
                "the expression's shape) as second argument");
  using T = value_type_t<N>;
  return push(e, shape<>{}, one_node<T, shape<>>{}, tuple<>{});
}

/// The plan of backward(e, seed): the seed is the adjoint of e (same shape).
template <operand E, class Seed>
constexpr auto plan(E const& e_in, Seed const& seed) {
  auto e = gradix::detail::as_node(e_in);
  using N = decltype(e);
  using D = shape_of_t<N>;
  return push(e, e.shape(), seed, identity_map<D::rank>());
}

}  // namespace gradix::ad
