#pragma once
/// \file
/// Which elements of a backward plan an executor may run together (the type-level facts;
/// the running is exec/elements.hpp's and the executor's):
///
///   kernel runs      consecutive kernel elements of one plan (uses, fused pairs, multi
///                    uses) read only what the elements before them wrote (the adjoint that
///                    seeds the plan, the call's saved values), so they may run in any
///                    order: an executor that says `runs_kernels_together` gets each run
///                    whole (`run_kernels(tuple)`; the grid's: as few launches as their
///                    targets allow);
///   pointwise lets   a let whose adjoint is written and read element by element
///                    (pointwise_let): its body's uses and its operand's may run in one pass
///                    over the let's elements (`runs_pointwise_lets`, `run_pointwise_let`).

#include "gradix/ad/kernel.hpp"
#include "gradix/ad/map.hpp"
#include "gradix/ad/product.hpp"
#include "gradix/ad/region.hpp"
#include "gradix/config.hpp"
#include "gradix/core/tuple.hpp"
#include "gradix/core/view.hpp"
#include "gradix/expr/elementwise.hpp"
#include "gradix/expr/index.hpp"
#include "gradix/expr/let.hpp"
#include "gradix/expr/node.hpp"
#include "gradix/expr/pattern.hpp"
#include "gradix/expr/saved.hpp"
#include "gradix/expr/visit.hpp"

#include <cstddef>
#include <type_traits>

namespace gradix::detail {

/// Whether plan element E is one of the executor's kernels (a use, a fused pair, a
/// multi_use), not an element that writes a workspace buffer first.
template <class E>
inline constexpr bool kernel_element_v = ad::is_plain_use<E>::value || ad::is_fused<E>::value || ad::is_multi<E>::value;

/// The end of the run of kernel elements of E... that starts at I (I itself when
/// element I is not one).
template <std::size_t I, class... E>
constexpr std::size_t kernel_run_end() {
  constexpr bool k[] = {kernel_element_v<E>..., false};
  std::size_t j = I;
  while (j < sizeof...(E) && k[j]) ++j;
  return j;
}

/// Whether executor Ex runs a run of consecutive kernel elements of one plan together
/// (`run_kernels(tuple)`: the grid's, in as few launches as their targets allow).
template <class Ex>
concept runs_kernels_together = requires { Ex::runs_kernels_together; } && Ex::runs_kernels_together;


// ---------------------------------------------------------------------------------------
// A let whose adjoint flows through it element by element

/// Whether pushing an adjoint through the let operand N (after the save transform) reads
/// that adjoint only at each domain element's own coordinate, over a domain of N's shape:
/// N is elementwise nodes and slices (index nodes: they move the target, not the read) down
/// to leaves whose push is one use (views, parameters, constants, let placeholders), and,
/// with Products, kept products (whose adjoint elements read the buffer whole, as their dC,
/// after it is complete). Any other node (a reduction, a permute, a reshape, a concat, a
/// kept value) may read the adjoint elsewhere or stage it in a buffer.
template <class N, bool Products>
struct pointwise_tree : std::bool_constant<is_view_v<N> || is_param_node<N>::value> {};
template <class T, bool P>
struct pointwise_tree<scalar_node<T>, P> : std::true_type {};
template <class T, class S, class F, bool P>
struct pointwise_tree<pattern_node<T, S, F>, P> : std::true_type {};
template <class Op, class A, bool P>
struct pointwise_tree<unary_node<Op, A>, P> : pointwise_tree<A, P> {};
template <class Op, class L, class R, bool P>
struct pointwise_tree<binary_node<Op, L, R>, P>
    : std::bool_constant<pointwise_tree<L, P>::value && pointwise_tree<R, P>::value> {};
template <class A, std::size_t Axis, class Idx, bool P>
struct pointwise_tree<index_node<A, Axis, Idx>, P> : pointwise_tree<A, P> {};
template <class N, class L, bool P>
struct pointwise_tree<saved_node<N, L>, P> : std::bool_constant<is_var_node<N>::value || (P && is_matmul_node<N>::value)> {};
/// The let operands whose every use reads the adjoint at its own coordinate (pointwise_let).
template <class N>
using pointwise_operand = pointwise_tree<N, false>;
/// The let operands that are that and kept products (a scan body's `x'_t + h W_h + b`, a
/// product beside the step's input, api/scan_hoist.hpp): its plain uses read the let's
/// buffer at their own coordinate (a broadcast leaf's sums it along the broadcast axes), its
/// products read it whole (partly_pointwise_let).
template <class N>
using pointwise_or_product_operand = pointwise_tree<N, true>;

/// Whether plan element U of a let's body plan is a plain use that, when it adds into the
/// let's buffer (target type G), does so at each domain element's own coordinate.
template <class U, class G>
struct pointwise_body_use : std::false_type {};
template <class D, class V, class M, class GU, class G>
struct pointwise_body_use<ad::use<D, V, M, GU>, G>
    : std::bool_constant<!std::is_same_v<GU, G> ||
                         (D::rank == G::shape_type::rank &&
                          std::is_same_v<M, decltype(ad::identity_map<G::shape_type::rank>())>)> {};

template <class E>
struct pointwise_let : std::false_type {};
/// A let_use whose body's plan (PB) and operand's plan (PZ) are plain uses only, whose
/// body's uses that add into the let's buffer (target type G) do so at the identity, and
/// whose operand reads the buffer element by element (pointwise_operand): every element of
/// the buffer is complete once the body's uses have run at that element, and the operand's
/// uses read it there alone. An executor may then run both plans in one pass over the
/// buffer's elements (runs_pointwise_let), the buffer never read across elements.
template <class... B, class... Z, class G, class Zn, class Z2, class Body, class D, class V, class M>
struct pointwise_let<ad::let_use<tuple<B...>, tuple<Z...>, G, bound_let_node<Zn, Z2, Body>, D, V, M>>
    : std::bool_constant<sizeof...(B) >= 1 && sizeof...(Z) >= 1 && (pointwise_body_use<B, G>::value && ...) &&
                         (ad::is_plain_use<Z>::value && ...) && pointwise_operand<Z2>::value> {};

/// Whether plan element Z of a let's operand plan (its buffer of rank R) is a plain use over
/// the buffer's domain that sums no axis: with pointwise_or_product_operand, it reads the
/// buffer at its own coordinate only.
template <class Z, std::size_t R>
inline constexpr bool pointwise_operand_use_v = [] {
  if constexpr (ad::is_plain_use<Z>::value) return ad::kernel_traits<Z>::domain_rank == R && ad::kernel_traits<Z>::projected_mask == 0;
  else return false;
}();

template <class E>
struct partly_pointwise_let : std::false_type {};
/// A let_use that is not a pointwise_let but whose body's plan is (plain uses adding into
/// the buffer at the identity), and whose operand is pointwise_or_product_operand with at
/// least one plain use over the buffer's domain summing no axis: those uses may run in the
/// body's pass over the buffer's elements (runs_pointwise_let), the operand's other
/// elements (its products, its broadcast leaves) after it, over the complete buffer (a scan
/// step's elementwise adjoint and its input's in one launch: docs/ad.md, "Loops: scan").
template <class... B, class... Z, class G, class Zn, class Z2, class Body, class D, class V, class M>
struct partly_pointwise_let<ad::let_use<tuple<B...>, tuple<Z...>, G, bound_let_node<Zn, Z2, Body>, D, V, M>>
    : std::bool_constant<sizeof...(B) >= 1 && (pointwise_body_use<B, G>::value && ...) && !pointwise_operand<Z2>::value &&
                         pointwise_or_product_operand<Z2>::value &&
                         (pointwise_operand_use_v<Z, G::shape_type::rank> || ...)> {};

/// The elements of a let's operand plan p that are (Keep) or are not (!Keep) plain uses over
/// its buffer's domain (rank R) summing no axis (pointwise_operand_use_v), in order.
template <bool Keep, std::size_t R, std::size_t I = 0, class... E>
constexpr auto operand_uses_split(tuple<E...> const& p) {
  if constexpr (I == sizeof...(E)) {
    return tuple<>{};
  } else {
    using X = std::remove_cvref_t<decltype(get<I>(p))>;
    auto const rest = operand_uses_split<Keep, R, I + 1>(p);
    if constexpr (pointwise_operand_use_v<X, R> == Keep) return ::gradix::tuple_cat(::gradix::make_tuple(get<I>(p)), rest);
    else return rest;
  }
}

/// Whether executor Ex can run a pointwise let's two plans in one pass:
/// `ex.run_pointwise_let(pb, pz, gz)` returns true when it did (false: the shapes or the
/// options at run time do not allow it, and nothing ran).
template <class Ex>
concept runs_pointwise_lets = requires { Ex::runs_pointwise_lets; } && Ex::runs_pointwise_lets;

}  // namespace gradix::detail
