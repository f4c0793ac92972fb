#pragma once
/// \file
/// Which host plan elements can carry the loss value, from their types alone (docs/ad.md, "The
/// loss value in the first kernel"): `carries_loss_v<Root, U>` (Root is sum(F) or mean(F)
/// over every axis of F: detail::loss_root), `carries_row_maxima_v` (an arg-max carrier), and
/// the scratch an arg-max carrier needs beyond the kernel's own (carry_scratch_bytes). The
/// kernels that carry it are in carrying.hpp, multi_use.hpp and fused.hpp (whose
/// detail::fused_carries specialisation completes the declaration here; the umbrella
/// backend/host/update.hpp includes it).

#include "gradix/ad/kernel.hpp"
#include "gradix/ad/map.hpp"
#include "gradix/ad/product.hpp"
#include "gradix/backend/host/multi_use.hpp"
#include "gradix/config.hpp"
#include "gradix/expr/reduce.hpp"

#include <cstddef>
#include <type_traits>
#include <utility>

namespace gradix::host {

namespace detail {
/// Root is sum(F) or mean(F) over every axis of F (rank >= 1). The carriers above a
/// rank-1 F (plain uses, multi_use, arg-max) walk F as one run; a fused pair
/// (backend/host/fused.hpp) walks a rank-R F run by run in the scheme's order.
template <class Root>
struct loss_root : std::false_type {};
template <class Op, class F, axis_mask Mask, bool Keep>
struct loss_root<reduce_node<Op, F, Mask, Keep>>
    : std::bool_constant<(std::is_same_v<Op, op::sum_of> || std::is_same_v<Op, op::mean_of>) &&
                         shape_of_t<F>::rank >= 1 && shape_of_t<F>::rank < 64 &&
                         Mask == (axis_mask(1) << shape_of_t<F>::rank) - 1 && !Keep &&
                         std::is_floating_point_v<value_type_t<F>>> {
  using arg = F;
  using op = Op;
  static constexpr std::size_t rank = shape_of_t<F>::rank;
};
/// Whether fused pair U (ad::fused_use) carries the value of Root (backend/host/fused.hpp).
template <class Root, class U>
struct fused_carries;
template <class F, class MU>
struct multi_carries : std::false_type {};
template <class F, int I, class Top, class TMap, class V0, class... U>
struct multi_carries<F, ad::multi_use<I, Top, TMap, V0, U...>> {
  using P = multi_parts<I, Top, TMap, V0, U...>;
  static constexpr bool value = std::is_same_v<typename P::T, value_type_t<F>> && P::RD == 1 &&
                                I == 0 && P::count(ad::member_kind::full) == P::NU;
};
}  // namespace detail

namespace detail {
/// How often a node of type Top occurs in N's elementwise tree (through unary and binary
/// nodes only).
template <class N, class Top>
struct top_count : std::integral_constant<int, std::is_same_v<N, Top> ? 1 : 0> {};
template <class Op, class A, class Top>
struct top_count<unary_node<Op, A>, Top>
    : std::integral_constant<int, std::is_same_v<unary_node<Op, A>, Top> ? 1 : top_count<A, Top>::value> {};
template <class Op, class L, class R, class Top>
struct top_count<binary_node<Op, L, R>, Top>
    : std::integral_constant<int, std::is_same_v<binary_node<Op, L, R>, Top>
                                      ? 1
                                      : top_count<L, Top>::value + top_count<R, Top>::value> {};

/// A use whose value is (v0 times) the path derivative of a region whose top occurs once in
/// F, reached from the use's rank-R domain through the identity map (every component the
/// domain coordinate itself), every node above the top of F's element type: F's value comes
/// from the top's, which the path derivative computes anyway (a plain use: R = 1,
/// carrying.hpp; a fused pair's nest: fused.hpp). The map's offsets and scales are checked
/// at run time (top_map_identity).
template <class F, class U, std::size_t R = 1>
inline constexpr bool top_in_f_v = [] {
  using V = typename U::value_expr;
  using RV = ad::region_value<V>;
  if constexpr (!RV::value) {
    return false;
  } else {
    using Top = typename RV::top;
    using AM = std::remove_cvref_t<decltype(ad::region_at_map(std::declval<V const&>()))>;
    using M = std::remove_cvref_t<decltype(std::declval<AM const&>().map_)>;
    if constexpr (M::size != R || shape_of_t<Top>::rank != R) {
      return false;  // (a top of another rank: no identity map)
    } else {
      constexpr bool identity = []<std::size_t... J>(std::index_sequence<J...>) {
        return (std::is_same_v<std::remove_cvref_t<decltype(get<J>(std::declval<M const&>()))>, ad::ax_dom<J>> &&
                ...);
      }(std::make_index_sequence<R>{});
      return identity && top_count<F, Top>::value == 1 && ad::region_uniform<F, value_type_t<F>>::value;
    }
  }
}();

/// The run-time half of top_in_f_v: every component of u's region map is the domain
/// coordinate itself (offset 0, scale 1).
template <class U>
bool top_map_identity(U const& u) {
  auto const& m = ad::region_at_map(u.v_).map_;
  return [&]<std::size_t... J>(std::index_sequence<J...>) {
    return ((get<J>(m).off_ == 0 && get<J>(m).scale_ == 1) && ...);
  }(std::make_index_sequence<std::remove_cvref_t<decltype(m)>::size>{});
}

/// A map component of a use that writes the first arg-max of the rank-1 max reduction F at
/// each domain element d (the max's own coordinate d): 1 for d itself, 2 for a coordinate of
/// the arg-max, 0 for anything else.
template <class F, class C>
struct argmax_comp : std::integral_constant<int, 0> {};
template <class F>
struct argmax_comp<F, ad::ax_dom<0>> : std::integral_constant<int, 1> {};
template <class F, std::size_t K>
struct argmax_comp<F, ad::ax_argmax<F, tuple<ad::ax_dom<0>>, K>> : std::integral_constant<int, 2> {
  static constexpr std::size_t axis = K;
};
template <class F, class M>
struct argmax_map : std::false_type {};
template <class F, class... C>
struct argmax_map<F, tuple<C...>>
    : std::bool_constant<((argmax_comp<F, C>::value != 0) && ...) &&
                         ((argmax_comp<F, C>::value == 2) || ...)> {};
/// A plain use that scatters into F's operand at F's arg-maxes, one per element of F's
/// domain (the backward of sum(max<...>(A)) or mean(...)): its arg-max search also finds
/// F's value there, so the kernel carries the loss (run_carrying_argmax).
template <class F, class U>
inline constexpr bool argmax_carrier_v = [] {
  if constexpr (ad::is_multi<U>::value || ad::is_fused<U>::value || ad::materialises_v<U>) {
    return false;
  } else {
    return U::domain_type::rank == 1 && argmax_map<F, typename U::map_type>::value &&
           !U::storage_type::sparse &&
           std::is_same_v<typename U::storage_type::value_type, value_type_t<F>>;
  }
}();
}  // namespace detail

/// Whether plan element U can carry the value of Root (types only; run_carrying may still
/// decline at run time: a strided target, a shifted map).
template <class Root, class U>
inline constexpr bool carries_loss_v = [] {
  if constexpr (!detail::loss_root<Root>::value) {
    return false;
  } else {
    using F = typename detail::loss_root<Root>::arg;
    using T = value_type_t<F>;
    if constexpr (ad::is_fused<U>::value) {
      return detail::fused_carries<Root, U>::value;
    } else if constexpr (detail::loss_root<Root>::rank != 1) {
      return false;
    } else if constexpr (detail::argmax_carrier_v<F, U>) {
      return true;
    } else if constexpr (ad::is_multi<U>::value) {
      return detail::multi_carries<F, U>::value;
    } else if constexpr (ad::materialises_v<U>) {
      return false;
    } else {
      using K = ad::kernel_traits<U>;
      return K::domain_rank == 1 && K::injective && K::inner_axis == 0 &&
             K::projected_mask == 0 && !U::storage_type::sparse &&
             std::is_same_v<typename U::storage_type::value_type, T> &&
             std::is_same_v<value_type_t<typename U::value_expr>, T>;
    }
  }
}();

/// Whether U is an arg-max carrier of Root (detail::argmax_carrier_v): the value it leaves
/// sums the operand's elements at the first arg-maxes, which equal the reduction's maxima up
/// to the sign of a zero (that no sum shows: a sum starts at +0) and a NaN's payload (the
/// caller computes value(root) instead when the carried value is a NaN).
template <class Root, class U>
inline constexpr bool carries_row_maxima_v = [] {
  if constexpr (!detail::loss_root<Root>::value) return false;
  else if constexpr (detail::loss_root<Root>::rank != 1) return false;
  else return detail::argmax_carrier_v<typename detail::loss_root<Root>::arg, U>;
}();

/// Scratch bytes run_carrying(u, root, parts) needs beyond scratch_bytes(u): an arg-max
/// carrier keeps F's elements (its row maxima) to sum them in the reduction's order.
template <class Root, class U>
std::size_t carry_scratch_bytes([[maybe_unused]] U const& u, [[maybe_unused]] Root const& root) {
  if constexpr (carries_row_maxima_v<Root, U>) {
    return std::size_t(root.arg_.shape().extents()[0]) * sizeof(value_type_t<Root>);
  } else {
    return 0;
  }
}

}  // namespace gradix::host
