#pragma once
/// \file
/// The backward of a matrix product C = A B (docs/ad.md, "Matrix products"). The adjoint
/// that reaches C is a mapped adjoint like any other, but a product cannot push it into its
/// operands element by element: d A = d C B^T needs all of d C. So the push stops at C and
/// the plan gets one element of a kind of its own, a product_use:
///
///   p0   one update kernel that writes d C into the call's workspace (product_state::gc):
///        the mapped adjoint, settled, scattered into a buffer of C's shape
///   then two products (backend/host/gemm.hpp): d A = d C op(B)^T into ga, d B = op(A)^T d C
///        into gb (summed over the batch for an operand shared by every batch element)
///   pa   the plan of A with the adjoint d A: a view of ga over A's shape (identity map)
///   pb   the same for B
///
/// pa or pb is empty (and its product skipped) when no gradient flows into that operand. The
/// elements of pa and pb are ordinary plan elements (uses, fused and multi uses, products
/// further down), run in order after the products.

#include "gradix/ad/kernel.hpp"
#include "gradix/config.hpp"
#include "gradix/expr/param.hpp"
#include "gradix/expr/bag.hpp"
#include "gradix/expr/let.hpp"
#include "gradix/expr/matmul.hpp"
#include "gradix/expr/saved.hpp"
#include "gradix/expr/visit.hpp"

#include <type_traits>

namespace gradix::ad {

/// The plan element of a kept product SN (a saved_node of a matmul_node) in a backward call.
/// (The plan holds copies of nodes, not pointers into the expression: plan() works on a copy
/// of its own. p0's target, the product's adjoint buffer, is set where it runs, as a
/// workspace_grad over the buffer node_.extra_.gc names.)
template <class P0, class PA, class PB, class SN>
struct product_use {
  P0 p0_;
  PA pa_;
  PB pb_;
  SN node_;  // the saved product: its operands as the products read them, and its buffers
};

template <class U>
struct is_product : std::false_type {};
template <class P0, class PA, class PB, class SN>
struct is_product<product_use<P0, PA, PB, SN>> : std::true_type {};

/// The plan element of a kept node whose backward reads its adjoint at other coordinates
/// than the kernel that produces it (a segment sum, when its adjoint is not a buffer
/// already): p0 writes the adjoint into the node's workspace buffer (node_.extra_.gout),
/// then pe, the operand's plan pushed from that buffer, runs.
template <class P0, class PE, class SN>
struct staged_use {
  P0 p0_;
  PE pe_;
  SN node_;
};
template <class U>
struct is_staged : std::false_type {};
template <class P0, class PE, class SN>
struct is_staged<staged_use<P0, PE, SN>> : std::true_type {};

/// The plan element of a let (expr/let.hpp) in a backward call: pb, the body's plan, whose
/// kernels for the placeholder's reads target a let_grad G (set where it runs: the let's
/// buffer gz_, cleared first), then pz, the operand's plan pushed from that buffer.
template <class PB, class PZ, class G>
struct let_use {
  PB pb_;
  PZ pz_;
  G gz_;
};
template <class U>
struct is_let_use : std::false_type {};
template <class PB, class PZ, class G>
struct is_let_use<let_use<PB, PZ, G>> : std::true_type {};

/// Plan elements that write a workspace buffer first (products, staged uses and lets):
/// neither a plain, fused nor multi use.
template <class U>
inline constexpr bool materialises_v = is_product<U>::value || is_staged<U>::value || is_let_use<U>::value;

/// Whether plan element (or plan) U holds a kernel whose target has type G (types only).
template <class G, class U>
struct writes_target : std::bool_constant<std::is_same_v<typename U::storage_type, G>> {};  // use, member_use
template <class G, class... E>
struct writes_target<G, tuple<E...>> : std::bool_constant<(writes_target<G, E>::value || ...)> {};
template <class G, class U1, class U2>
struct writes_target<G, fused_use<U1, U2>>
    : std::bool_constant<writes_target<G, U1>::value || writes_target<G, U2>::value> {};
template <class G, int I, class Top, class TMap, class V0, class... U>
struct writes_target<G, multi_use<I, Top, TMap, V0, U...>> : std::bool_constant<(writes_target<G, U>::value || ...)> {};
template <class G, class P0, class PA, class PB, class SN>
struct writes_target<G, product_use<P0, PA, PB, SN>>
    : std::bool_constant<writes_target<G, PA>::value || writes_target<G, PB>::value> {};
template <class G, class P0, class PE, class SN>
struct writes_target<G, staged_use<P0, PE, SN>> : writes_target<G, PE> {};
template <class G, class PB, class PZ, class G2>
struct writes_target<G, let_use<PB, PZ, G2>>
    : std::bool_constant<writes_target<G, PB>::value || writes_target<G, PZ>::value> {};

template <class N>
struct is_detach : std::false_type {};
template <class A>
struct is_detach<detach_node<A>> : std::true_type {};

/// Whether a gradient can flow from N into a parameter: N holds a floating-point parameter
/// that is not under a detach (types only; an over-estimate costs a product whose plan is
/// empty, and then the product is skipped).
template <class N>
constexpr bool reaches_param() {
  if constexpr (gradix::detail::is_param_node<N>::value) {
    return std::is_floating_point_v<value_type_t<N>>;
  } else if constexpr (is_detach<N>::value) {
    return false;
  } else if constexpr (is_var_node<N>::value) {
    return reaches_param<typename N::operand_type>();  // the operand it stands for
  } else if constexpr (is_let_node<N>::value) {
    return reaches_param<std::remove_cvref_t<decltype(std::declval<N const&>().body_)>>();
  } else if constexpr (is_saved_node<N>::value) {
    return reaches_param<std::remove_cvref_t<decltype(std::declval<N const&>().node_)>>();
  } else if constexpr (requires(N const& x) { x.lhs_; x.rhs_; }) {
    return reaches_param<std::remove_cvref_t<decltype(std::declval<N const&>().lhs_)>>() ||
           reaches_param<std::remove_cvref_t<decltype(std::declval<N const&>().rhs_)>>();
  } else if constexpr (requires(N const& x) { x.arg_; }) {
    return reaches_param<std::remove_cvref_t<decltype(std::declval<N const&>().arg_)>>();
  } else {
    return false;
  }
}
template <class N>
inline constexpr bool reaches_param_v = reaches_param<std::remove_cvref_t<N>>();

}  // namespace gradix::ad
