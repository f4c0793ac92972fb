#pragma once
/// \file
/// Update kernels as types: a `use` (one parameter use: add v(d) to the gradient at m(d) for
/// d in D), the facts its type implies (`kernel_traits`), and `fused_use`: two uses with the
/// same domain and value expression (the operands of one `+`) run as one loop nest with two
/// targets, computing the value once. `eval_cost_v<V>`: the evaluator nodes a value expression
/// visits per domain element.

#include "gradix/ad/map.hpp"
#include "gradix/ad/value.hpp"
#include "gradix/config.hpp"
#include "gradix/core/array.hpp"
#include "gradix/expr/elementwise.hpp"
#include "gradix/expr/bag.hpp"
#include "gradix/expr/index.hpp"
#include "gradix/expr/let.hpp"
#include "gradix/expr/matmul.hpp"
#include "gradix/expr/reduce.hpp"
#include "gradix/expr/take.hpp"
#include "gradix/expr/concat.hpp"
#include "gradix/expr/row.hpp"
#include "gradix/expr/view.hpp"

#include <cstdint>
#include <type_traits>
#include <utility>

namespace gradix::ad {

/// One update kernel: add v(d) to the gradient storage *target_ at m(d), for d in D.
template <class D, class V, class M, class G>
struct use {
  using domain_type = D;
  using value_expr = V;
  using map_type = M;
  using storage_type = G;
  D dom_;
  V v_;
  M map_;
  G* target_;
};

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
        ((r = std::is_same_v<C, ax_dom<J>> && count_deps<M, J>::value == 1 ? int(J) : r), ...);
        return r;
      }(std::make_index_sequence<domain_rank>{});
    }
  }();
  /// v does not depend on any projected axis: their sum is `extent x v`, computed once.
  static constexpr bool collapses_projected =
      projected_mask != 0 && !value_depends_any_v<V, projected_mask, domain_rank>;
};

/// Two uses of one `+` node: the same domain and value expression (one object's copies) and
/// the same inner axis. One, A, projects the fastest of the non-inner axes (row-major order;
/// possibly none: it writes a target position per outer coordinate), the other, B, projects
/// all the others, and v depends on every projected axis (no sum collapses). The fused loop
/// nest walks the domain once in row-major order, computes v once per element for both, sums
/// A's projected axes in a register tile and B's into one row per coordinate of A's
/// projected axes (`ad::fused_pair_v`). The per-term square loss of the founding benchmark
/// is the case with A projecting nothing (one row for B); its batched form, A projecting
/// the term axis and B the gathered-entry axis, the general one.
template <class U1, class U2>
struct fused_use {
  U1 first_;
  U2 second_;
};

template <class U>
struct is_fused : std::false_type {};
template <class U1, class U2>
struct is_fused<fused_use<U1, U2>> : std::true_type {};

namespace detail {
template <class K>
inline constexpr std::uint64_t non_inner_mask =
    (K::domain_rank >= 64 ? ~std::uint64_t(0) : (std::uint64_t(1) << K::domain_rank) - 1) &
    ~(K::inner_axis >= 0 ? std::uint64_t(1) << (K::inner_axis < 0 ? 0 : K::inner_axis) : 0);
template <class K>
inline constexpr bool outer_only = K::inner_axis >= 0 && K::projected_mask == 0 && non_inner_mask<K> != 0;
template <class K>
inline constexpr bool projected_only =
    K::inner_axis >= 0 && non_inner_mask<K> != 0 && K::projected_mask == non_inner_mask<K> &&
    !K::collapses_projected;
}  // namespace detail

/// Kernels KA and KB (of one domain) as the A and B of a fused pair (see fused_use): the same
/// inner axis; A's projected axes, if any, all faster (higher) than B's; together they are
/// every non-inner axis; no projected sum collapses.
template <class KA, class KB>
inline constexpr bool fused_pair_v = [] {
  if constexpr (KA::inner_axis < 0 || KA::inner_axis != KB::inner_axis) {
    return false;
  } else {
    constexpr std::uint64_t N = detail::non_inner_mask<KA>;
    constexpr std::uint64_t PA = KA::projected_mask, PB = KB::projected_mask;
    if (N == 0 || PB == 0 || (PA & PB) != 0 || (PA | PB) != N) return false;
    if (KB::collapses_projected || (PA != 0 && KA::collapses_projected)) return false;
    int hb = 63;
    while (!((PB >> hb) & 1)) --hb;  // B's fastest axis
    int la = 0;
    while (PA != 0 && !((PA >> la) & 1)) ++la;  // A's slowest axis
    return PA == 0 || hb < la;
  }
}();

/// Can uses U1 and U2 (from one `+` node) run as one fused loop nest?
template <class U1, class U2>
inline constexpr bool fusable_v = [] {
  if constexpr (!std::is_same_v<typename U1::domain_type, typename U2::domain_type> ||
                !std::is_same_v<typename U1::value_expr, typename U2::value_expr>) {
    return false;
  } else {
    using K1 = kernel_traits<U1>;
    using K2 = kernel_traits<U2>;
    return fused_pair_v<K1, K2> || fused_pair_v<K2, K1>;
  }
}();

// ---------------------------------------------------------------------------------------
// Several uses of one elementwise region in one kernel

/// The parts of a use's value expression when it is (v0 times) d Top / d X of a region:
/// `at_map_node<path_deriv_node<Top, P>, M, D>`, optionally multiplied by v0 on the left and
/// negated (`settle` in ad/push.hpp builds exactly these forms).
template <class V>
struct region_value {
  static constexpr bool value = false;
};
template <class Top, class P, class M, class D>
struct region_value<at_map_node<path_deriv_node<Top, P>, M, D>> {
  static constexpr bool value = true;
  static constexpr bool negative = false;
  static constexpr bool has_v0 = false;
  using top = Top;
  using path_type = P;
  using map = M;
  using v0 = void;
};
template <class V0, class Top, class P, class M, class D>
struct region_value<binary_node<op::mul, V0, at_map_node<path_deriv_node<Top, P>, M, D>>>
    : region_value<at_map_node<path_deriv_node<Top, P>, M, D>> {
  static constexpr bool has_v0 = true;
  using v0 = V0;
};
template <class X>
struct region_value<unary_node<op::neg, X>> : region_value<X> {
  static constexpr bool negative = region_value<X>::value;
};

/// Every node of an elementwise region (unary and binary nodes from Top down to the first
/// node of another kind) has element type T, and no node is a cast.
template <class N, class T>
struct region_uniform : std::true_type {};  // the region ends here
template <class Op, class A, class T>
struct region_uniform<unary_node<Op, A>, T>
    : std::bool_constant<std::is_same_v<value_type_t<unary_node<Op, A>>, T> &&
                         !requires { typename Op::result_type; } && region_uniform<A, T>::value> {};
template <class Op, class L, class R, class T>
struct region_uniform<binary_node<Op, L, R>, T>
    : std::bool_constant<std::is_same_v<value_type_t<binary_node<Op, L, R>>, T> &&
                         region_uniform<L, T>::value && region_uniform<R, T>::value> {};

/// The domain axes of a rank-R domain, as a mask.
template <std::size_t R>
inline constexpr std::uint64_t all_axes_v = R >= 64 ? ~std::uint64_t(0) : (std::uint64_t(1) << R) - 1;

/// The domain axes that map M follows affinely (some component is exactly ax_dom<J>).
template <class M, std::size_t R>
inline constexpr std::uint64_t followed_axes_v = [] {
  std::uint64_t r = 0;
  [&]<std::size_t... J>(std::index_sequence<J...>) {
    ((r |= dom_component<M, J>::value >= 0 ? std::uint64_t(1) << J : 0), ...);
  }(std::make_index_sequence<R>{});
  return r;
}();

/// What a member of a multi_use whose loop nest walks domain axis I innermost does with its
/// adjoints (from its projected axes P, ad::kernel_traits):
///   full     P empty: one target element per domain element
///   column   P = {I}: the inner axis is summed (in registers), one target element per outer
///            coordinate (a column broadcast across a row-major domain)
///   row      P = every axis but I: the outer axes are summed into one target row (a bias row
///            broadcast down a row-major domain)
///   scalar   P = every axis: everything is summed into one target element
enum class member_kind { full, column, row, scalar };
template <std::uint64_t P, std::size_t R, int I>
inline constexpr member_kind member_kind_v =
    P == 0                                                   ? member_kind::full
    : P == all_axes_v<R>                                     ? member_kind::scalar
    : P == (std::uint64_t(1) << I)                           ? member_kind::column
                                                             : member_kind::row;

/// The inner axes with which use U can join the multi_use of region Top (entered with map M),
/// as a mask (0: it cannot join). Its value must be a path derivative of Top read at M; its
/// map injective apart from projected axes (summed), with its projected axes one of the
/// member kinds above for that inner axis (a full or row member: its target's contiguous axis
/// reached by I); the region of one element type, that of the target; and the region's top
/// must follow I.
template <class U, class Top, class M>
inline constexpr std::uint64_t member_axes_v = [] {
  using V = typename U::value_expr;
  using RV = region_value<V>;
  if constexpr (!RV::value) {
    return std::uint64_t(0);
  } else if constexpr (!std::is_same_v<typename RV::top, Top> || !std::is_same_v<typename RV::map, M>) {
    return std::uint64_t(0);
  } else {
    using K = kernel_traits<U>;
    using T = value_type_t<Top>;
    constexpr std::size_t R = K::domain_rank;
    if constexpr (!K::injective || !std::is_same_v<typename U::storage_type::value_type, T> ||
                  !std::is_floating_point_v<T> || !region_uniform<Top, T>::value) {
      return std::uint64_t(0);
    } else {
      constexpr std::uint64_t P = K::projected_mask, all = all_axes_v<R>;
      constexpr std::uint64_t in = K::inner_axis >= 0 ? std::uint64_t(1) << K::inner_axis : 0;
      // a row: the one axis left is one component exactly and reaches no other (the row is
      // a straight line of some stride in the target)
      constexpr std::uint64_t left = all & ~P;
      constexpr bool row = [&] {
        if constexpr (P == 0 || __builtin_popcountll(left) != 1) {
          return false;
        } else {
          constexpr std::size_t J = std::size_t(__builtin_ctzll(left));
          constexpr int C = dom_component<typename U::map_type, J>::value;
          using G = typename U::storage_type;
          // (not along a sparse storage's axis: its slots are not a line)
          return C >= 0 && count_deps<typename U::map_type, J>::value == 1 &&
                 !(G::sparse && std::size_t(C) == G::axis);
        }
      }();
      if constexpr (R == 0) {
        // a rank-0 domain (a region of scalars): one element, every use a full member; the
        // multi_use's inner axis is a formality (0), its kernel one sweep
        return std::uint64_t(1);
      }
      std::uint64_t r = 0;
      if (P == 0) r = in;  // full
      if (P != 0 && P == all) r = all;  // scalar
      if (__builtin_popcountll(P) == 1 && P != all) r |= P;  // column, for I the projected axis
      if (row) r |= left;
      return r & followed_axes_v<M, R>;
    }
  }
}();

/// A use inside a multi_use: its domain, map and target; its value (a path derivative of the
/// region, V) is computed by the multi_use's sweep, so only its type is kept.
template <class D, class V, class M, class G>
struct member_use {
  using domain_type = D;
  using value_expr = V;
  using map_type = M;
  using storage_type = G;
  D dom_;
  M map_;
  G* target_;
};
/// No v0 factor (the region's adjoint at its top is the seed 1).
struct no_v0 {};

/// Uses U... (member_use) of one region, Top entered with map TMap and adjoint v0 (V0, or
/// no_v0), run as one kernel: one loop nest over the shared domain with axis I innermost;
/// per element one reverse sweep of the region gives every use's adjoint (eval/sweep.hpp),
/// added to each target in order (summed first over a member's projected axes: member_kind).
/// The region is held once, not once per use.
template <int I, class Top, class TMap, class V0, class... U>
struct multi_use {
  static constexpr int inner_axis = I;
  using top_type = Top;
  using tmap_type = TMap;
  using v0_type = V0;
  Top top_;
  TMap tmap_;
  V0 v0_;
  tuple<U...> uses_;
};
template <class U>
struct is_multi : std::false_type {};
template <int I, class Top, class TMap, class V0, class... U>
struct is_multi<multi_use<I, Top, TMap, V0, U...>> : std::true_type {};

/// The at_map_node<path_deriv_node<Top, P>, M, D> of a region value (region_value), and its v0.
template <class V>
constexpr auto const& region_at_map(V const& v) {
  if constexpr (requires { v.arg_; }) return region_at_map(v.arg_);  // neg
  else if constexpr (requires { v.rhs_; }) return v.rhs_;            // v0 * ...
  else return v;
}
template <class V>
constexpr auto const& region_v0(V const& v) {
  if constexpr (requires { v.arg_; }) return region_v0(v.arg_);
  else return v.lhs_;
}

// ---------------------------------------------------------------------------------------
// Work per domain element (types only): how many evaluator nodes a kernel's value
// expression visits for one element of its domain, counting every recomputation. A
// reduction read inside a value expression counts `reduction_weight` times its operand, a
// stand-in for its reduced extent. tests/plan asserts that chains cost O(depth).

inline constexpr std::size_t reduction_weight = 1024;

template <class V>
struct eval_cost : std::integral_constant<std::size_t, 1> {};  // leaves and unknown nodes
template <class Op, class A>
struct eval_cost<unary_node<Op, A>> : std::integral_constant<std::size_t, 1 + eval_cost<A>::value> {};
template <class Op, class L, class R>
struct eval_cost<binary_node<Op, L, R>>
    : std::integral_constant<std::size_t, 1 + eval_cost<L>::value + eval_cost<R>::value> {};
template <class Sub, class M, class D>
struct eval_cost<at_map_node<Sub, M, D>> : eval_cost<Sub> {};
template <class V, class D>
struct eval_cost<extend_node<V, D>> : eval_cost<V> {};
template <class Top, class P>
struct eval_cost<path_deriv_node<Top, P>> : eval_cost<Top> {};  // one pass over Top (a bound)
template <class Op, class A, std::uint64_t Mask, bool Keep>
struct eval_cost<reduce_node<Op, A, Mask, Keep>>
    : std::integral_constant<std::size_t, 1 + reduction_weight * eval_cost<A>::value> {};
template <class A, class P, std::size_t Axis>
struct eval_cost<take_along_node<A, P, Axis>>
    : std::integral_constant<std::size_t, 1 + eval_cost<A>::value + eval_cost<P>::value> {};
template <class A, std::size_t Axis>
struct eval_cost<argmax_node<A, Axis>>
    : std::integral_constant<std::size_t, 1 + reduction_weight * eval_cost<A>::value> {};
template <class A, std::size_t Axis, class Idx>
struct eval_cost<index_node<A, Axis, Idx>> : std::integral_constant<std::size_t, 1 + eval_cost<A>::value> {};
template <class A, std::size_t... P>
struct eval_cost<permute_node<A, P...>> : std::integral_constant<std::size_t, 1 + eval_cost<A>::value> {};
template <class A, std::size_t Axis>
struct eval_cost<unsqueeze_node<A, Axis>> : std::integral_constant<std::size_t, 1 + eval_cost<A>::value> {};
template <class A, class S>
struct eval_cost<broadcast_node<A, S>> : std::integral_constant<std::size_t, 1 + eval_cost<A>::value> {};
template <class A, class S>
struct eval_cost<reshape_node<A, S>> : std::integral_constant<std::size_t, 1 + eval_cost<A>::value> {};
template <class A, class I>
struct eval_cost<segment_sum_node<A, I>> : std::integral_constant<std::size_t, 1 + reduction_weight * eval_cost<A>::value> {};
template <class A, class B>
struct eval_cost<matmul_node<A, B>>
    : std::integral_constant<std::size_t, 1 + reduction_weight * (eval_cost<A>::value + eval_cost<B>::value)> {};
template <class A, std::size_t Axis, row_kind K>
struct eval_cost<row_node<A, Axis, K>>
    : std::integral_constant<std::size_t, 1 + reduction_weight * eval_cost<A>::value> {};
template <class A, class B, std::size_t Axis>
struct eval_cost<concat_node<A, B, Axis>>
    : std::integral_constant<std::size_t, 1 + (eval_cost<A>::value > eval_cost<B>::value ? eval_cost<A>::value : eval_cost<B>::value)> {};
template <class Z, class Z2, class B>
struct eval_cost<bound_let_node<Z, Z2, B>> : eval_cost<B> {};  // its bound body
template <class V>
inline constexpr std::size_t eval_cost_v = eval_cost<V>::value;

}  // namespace gradix::ad
