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
#include "gradix/expr/scan.hpp"
#include "gradix/expr/visit.hpp"

#include <type_traits>

namespace gradix::ad {

// The plans of a product's operands, of a staged node's operand and of a let's body and
// operand are built where the element runs (pa(), pb(), pe(), pz(): ad/push.hpp defines the
// functions below), from the node the element points at in the expression the plan was built
// from (the call's transformed expression, which outlives the plan: ad::plan pushes through
// the expression it is given, by reference). Their types are the element's parameters, so
// everything the plan's type says is said before it runs; but the push that builds a plan
// stops at the first product, staged node or let on each path, and a plan's size is that of
// the kernels it runs itself. Held inside, a chain of n products made a plan of size O(n^2)
// and the push's frames O(n^2) or more of stack.
template <class SN>
constexpr auto product_plan_a(SN const& n);
template <class SN>
constexpr auto product_plan_b(SN const& n);
template <class SN>
constexpr auto staged_plan(SN const& n);
template <class LN>
constexpr auto let_operand_plan(LN const& n);
template <class SN>
constexpr auto row_operand_plan(SN const& n);
template <class LN, class D, class V, class M>
constexpr auto let_body_plan(LN const& n, D const& dom, V const& v, M const& m);
template <class SN, class Step, class T>
constexpr auto scan_step_plan(SN const& n, Step const& e2, T const* g);
template <class SN, class T>
constexpr auto scan_carry_plan(SN const& n, T const* g);
template <class SN>
constexpr auto scan_input_plan(SN const& n);

/// The plan element of a kept product SN (a saved_node of a matmul_node) in a backward call:
/// p0 writes the product's adjoint (its target, the buffer node_->extra_.gc, set where it
/// runs), then the operands' adjoints by gemm, then their plans (PA, PB).
template <class P0, class PA, class PB, class SN>
struct product_use {
  P0 p0_;
  SN const* node_;  // the saved product: its operands as the products read them, and its buffers
  constexpr PA pa() const { return product_plan_a(*node_); }
  constexpr PB pb() const { return product_plan_b(*node_); }
};

template <class U>
struct is_product : std::false_type {};
template <class P0, class PA, class PB, class SN>
struct is_product<product_use<P0, PA, PB, SN>> : std::true_type {};

/// The plan element of a kept node whose backward reads its adjoint at other coordinates
/// than the kernel that produces it (a sum or mean reduction reached through a broadcast, a
/// segment sum): p0 writes the adjoint into the node's workspace buffer
/// (node_->extra_.gout), then pe(), the operand's plan pushed from that buffer, runs.
template <class P0, class PE, class SN>
struct staged_use {
  P0 p0_;
  SN const* node_;
  constexpr PE pe() const { return staged_plan(*node_); }
};
template <class U>
struct is_staged : std::false_type {};
template <class P0, class PE, class SN>
struct is_staged<staged_use<P0, PE, SN>> : std::true_type {};

/// The plan element of a let (expr/let.hpp) in a backward call: pb(), the body's plan (the
/// let's incoming adjoint dom_, v_, m_ pushed through it), whose kernels for the
/// placeholder's reads add into the let's buffer gz_ (cleared first: their let_grad targets
/// are held by the placeholders' saved nodes), then pz(), the operand's plan pushed from that
/// buffer. LN is the bound let node.
template <class PB, class PZ, class G, class LN = void, class D = void, class V = void, class M = void>
struct let_use {
  LN const* node_;
  D dom_;
  V v_;
  M m_;
  G gz_;
  constexpr PB pb() const { return let_body_plan(*node_, dom_, v_, m_); }
  constexpr PZ pz() const { return let_operand_plan(*node_); }
};
template <class U>
struct is_let_use : std::false_type {};
template <class PB, class PZ, class G, class LN, class D, class V, class M>
struct is_let_use<let_use<PB, PZ, G, LN, D, V, M>> : std::true_type {};

/// The plan element of a kept row node SN (expr/row.hpp: softmax, log_softmax, the norms)
/// whose adjoint is the buffer g_ (a view of its shape, read at the identity): the operand's
/// adjoint written into the node's buffer gin, row by row from g_ and the kept value, then
/// px(), the operand's plan pushed from gin.
template <class G, class PX, class SN>
struct row_use {
  G g_;
  SN const* node_;
  constexpr PX px() const { return row_operand_plan(*node_); }
};
template <class U>
struct is_row_use : std::false_type {};
template <class G, class PX, class SN>
struct is_row_use<row_use<G, PX, SN>> : std::true_type {};

/// The plan element of a kept scan SN (a saved_node of a scanned node, expr/scan.hpp): the
/// reverse sweep (exec/elements.hpp, run_scan). p0_, when the scan's adjoint does not
/// arrive as a buffer of its shape, writes it into the node's gout_ first (no_scan_p0: g_ is
/// that buffer already). Then, for each step from the last, the step's body (transformed
/// again, or the last one kept) is planned with the carry's adjoint as its seed: step(e2, g)
/// (its placeholder reads add the adjoint of the previous carry into one of the node's two
/// carry buffers, and of x_t into gxs_), and at the end the initial carry's and the inputs'
/// plans run from their buffers: carry(g), input().
struct no_scan_p0 {};
template <class P0, class G, class SN>
struct scan_use {
  P0 p0_;
  G g_;  // the adjoint of the value: a row-major buffer of its shape
  SN const* node_;
  using step_type = typename SN::node_type::step_type;
  using value_type = value_type_t<SN>;
  constexpr auto step(step_type const& e2, value_type const* g) const { return scan_step_plan(*node_, e2, g); }
  constexpr auto carry(value_type const* g) const { return scan_carry_plan(*node_, g); }
  constexpr auto input() const { return scan_input_plan(*node_); }
};
template <class U>
struct is_scan_use : std::false_type {};
template <class P0, class G, class SN>
struct is_scan_use<scan_use<P0, G, SN>> : std::true_type {};

/// Plan elements that write a workspace buffer first (products, staged uses, lets, softmax
/// uses, scans): neither a plain, fused nor multi use.
template <class U>
inline constexpr bool materialises_v = is_product<U>::value || is_staged<U>::value || is_let_use<U>::value ||
                                       is_row_use<U>::value || is_scan_use<U>::value;

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
template <class G, class G2, class PX, class SN>
struct writes_target<G, row_use<G2, PX, SN>> : writes_target<G, PX> {};
template <class G, class PB, class PZ, class G2, class LN, class D, class V, class M>
struct writes_target<G, let_use<PB, PZ, G2, LN, D, V, M>>
    : std::bool_constant<writes_target<G, PB>::value || writes_target<G, PZ>::value> {};

template <class G, class P0, class GV, class SN>
struct writes_target<G, scan_use<P0, GV, SN>>
    : std::bool_constant<writes_target<G, decltype(std::declval<scan_use<P0, GV, SN> const&>().step(
                                              std::declval<typename SN::node_type::step_type const&>(), nullptr))>::value ||
                         writes_target<G, decltype(std::declval<scan_use<P0, GV, SN> const&>().carry(nullptr))>::value ||
                         writes_target<G, decltype(std::declval<scan_use<P0, GV, SN> const&>().input())>::value> {};

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
    return N::name_type::reaches_param;  // the operand it stands for (its name says)
  } else if constexpr (is_let_node<N>::value) {
    return reaches_param<std::remove_cvref_t<decltype(std::declval<N const&>().body_)>>();
  } else if constexpr (is_scan_node<N>::value || is_scanned<N>::value) {
    // the carry's name says whether the body, c0 or xs reach one (api/scan.hpp)
    return N::carry_name::reaches_param;
  } else if constexpr (is_saved_node<N>::value) {
    return reaches_param<typename N::node_type>();
  } else if constexpr (is_node_ref<N>::value) {
    return reaches_param<typename N::node_type>();
  } else if constexpr (gradix::detail::value_operand_count_v<N> == 2) {
    return reaches_param<gradix::detail::value_operand_t<0, N>>() || reaches_param<gradix::detail::value_operand_t<1, N>>();
  } else if constexpr (gradix::detail::value_operand_count_v<N> == 1) {
    return reaches_param<gradix::detail::value_operand_t<0, N>>();
  } else {
    return false;
  }
}
template <class N>
inline constexpr bool reaches_param_v = reaches_param<std::remove_cvref_t<N>>();

}  // namespace gradix::ad
