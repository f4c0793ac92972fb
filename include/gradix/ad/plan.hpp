#pragma once
/// \file
/// The compile-time plan of a backward pass: a tuple of update kernels (`use`s), one per
/// parameter use, and no buffers. `plan(e)` builds it; its type tells, for each kernel, the
/// domain rank, the kind of each domain axis (affine, lookup, projected), whether the write
/// map is injective (plain stores) or needs owner-computes accumulation, the domain axis
/// walked innermost, and whether projected sums collapse to `extent x v`.

#include "gradix/ad/map.hpp"
#include "gradix/ad/push.hpp"
#include "gradix/ad/value.hpp"
#include "gradix/config.hpp"
#include "gradix/expr/node.hpp"

#include <type_traits>

namespace gradix::ad {

enum class axis_kind { affine, lookup, projected };

template <class M, std::size_t K>
using map_component_t = std::remove_cvref_t<decltype(get<K>(std::declval<M const&>()))>;

/// Facts about one update kernel, from its type alone.
template <class Use>
struct kernel_traits {
  using D = typename Use::domain_type;
  using V = typename Use::value_expr;
  using M = typename Use::map_type;
  using G = typename Use::storage_type;
  static constexpr std::size_t domain_rank = D::rank;
  static constexpr std::size_t target_rank = M::size;

  template <std::size_t J>
  static constexpr axis_kind kind_of() {
    if constexpr (count_deps<M, J>::value == 0) return axis_kind::projected;
    else if constexpr (count_deps<M, J>::value == 1 && dom_component<M, J>::value >= 0)
      return axis_kind::affine;
    else return axis_kind::lookup;
  }
  static constexpr array<axis_kind, domain_rank> kinds = [] {
    array<axis_kind, domain_rank> r{};
    [&]<std::size_t... J>(std::index_sequence<J...>) { ((r[J] = kind_of<J>()), ...); }(
        std::make_index_sequence<domain_rank>{});
    return r;
  }();
  static constexpr std::uint64_t projected_mask = [] {
    std::uint64_t r = 0;
    for (std::size_t j = 0; j < domain_rank; ++j)
      if (kinds[j] == axis_kind::projected) r |= std::uint64_t(1) << j;
    return r;
  }();
  static constexpr bool injective = injective_map<M, domain_rank>::value;
  /// The target axis that is contiguous in the gradient storage.
  static constexpr int target_unit_axis = G::unit_axis;
  /// The domain axis walked innermost (reaches the target's contiguous axis affinely), or -1.
  static constexpr int inner_axis = [] {
    if constexpr (target_unit_axis < 0) {
      return -1;
    } else {
      using C = map_component_t<M, std::size_t(target_unit_axis)>;
      return [&]<std::size_t... J>(std::index_sequence<J...>) {
        int r = -1;
        ((std::is_same_v<C, ax_dom<J>> && count_deps<M, J>::value == 1 ? (r = int(J)) : 0), ...);
        return r;
      }(std::make_index_sequence<domain_rank>{});
    }
  }();
  /// v does not depend on any projected axis: their sum is `extent x v`, computed once.
  static constexpr bool collapses_projected =
      projected_mask != 0 && !value_depends_any_v<V, projected_mask, domain_rank>;
};

template <class Tuple>
struct plan_size : std::integral_constant<std::size_t, Tuple::size> {};

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
