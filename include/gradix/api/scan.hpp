#pragma once
/// \file
/// `gx::scan`: a recurrence of run-time length (docs/ad.md, "Loops: scan").
///
///   auto hs = gx::scan(h0, xs, [&](auto h, auto x) {
///     return gx::tanh(gx::matmul(x, Wx) + gx::matmul(h, Wh) + b);
///   });
///
/// The body f receives two placeholders, the carry (h: c0's shape and element type) and the
/// step's input (x = xs[t]: xs without its leading axis), and returns the new carry, an
/// expression of the carry's shape and element type. The scan's value is every step's new
/// carry, stacked along a leading axis: hs[t] = carry after step t, shape [steps, C...], with
/// steps = xs's extent along axis 0, known at run time. A per-step output is an expression of
/// hs (and xs) after the scan: all steps' outputs in one kernel or one product.
///
/// Every call (eval, value, backward, grad) runs the steps in order; each step is the body's
/// own fused kernels (its products by gemm), reading the previous carry from the scan's
/// buffer, with no per-step allocation (the call's workspace holds the carries, the inputs
/// and one step's own kept values). backward runs the reverse sweep: per step, the body's
/// kept values computed again from the kept carry, then the body's backward plan, seeded
/// with the adjoint of the carry it produced; parameters read in the body accumulate their
/// gradients over the steps, and c0's and xs's gradients are pushed once at the end.

#include "gradix/ad/product.hpp"
#include "gradix/config.hpp"
#include "gradix/core/error.hpp"
#include "gradix/expr/let.hpp"
#include "gradix/expr/node.hpp"
#include "gradix/expr/rebuild.hpp"
#include "gradix/expr/scan.hpp"
#include "gradix/expr/visit.hpp"

#include <type_traits>

namespace gradix {

namespace detail {
/// The provisional names of a scan's placeholders while its body is built (F: the body's type).
template <class F, int K>
struct scan_tag {};

/// Whether shape types A and B can hold the same extents (same rank; where both are static,
/// the same extent).
template <class A, class B>
inline constexpr bool same_extents_v = [] {
  if constexpr (A::rank != B::rank) {
    return false;
  } else {
    for (std::size_t j = 0; j < A::rank; ++j)
      if (A::static_extents[j] != dyn && B::static_extents[j] != dyn && A::static_extents[j] != B::static_extents[j])
        return false;
    return true;
  }
}();

template <class A, class B>
using scan_space_t = std::conditional_t<!std::is_void_v<space_of_t<A>>, space_of_t<A>,
                                        std::conditional_t<!std::is_void_v<space_of_t<B>>, space_of_t<B>, host_space>>;
}  // namespace detail

/// The option of gx::scan that keeps only the carries in a backward call: the reverse sweep
/// computes each step's own kept values (its products, reductions, lets) again from the
/// kept carry. Memory: one step's values instead of every step's; time: each step's forward
/// once more (docs/ad.md, "Loops: scan").
struct recompute_steps_t {};
inline constexpr recompute_steps_t recompute_steps{};

namespace detail {
template <bool Recompute, class C0, class Xs, class F>
constexpr auto make_scan(C0&& c0, Xs&& xs, F&& f) {
  using NC = detail::node_t<C0>;
  using NX = detail::node_t<Xs>;
  using T = value_type_t<NC>;
  using SC = shape_of_t<NC>;
  static_assert(std::is_floating_point_v<T>, "gradix::scan: the carry must have a floating-point element type");
  static_assert(shape_of_t<NX>::rank >= 1,
                "gradix::scan: the sequence needs an axis of steps (axis 0), so it has rank >= 1");
  static_assert(std::is_same_v<value_type_t<NX>, T>,
                "gradix::scan: the sequence must have the carry's element type (use gx::cast on one of them)");
  using SX = typename detail::step_shape<shape_of_t<NX>>::type;
  using Sp = detail::scan_space_t<NC, NX>;
  using Fn = std::remove_cvref_t<F>;
  NC const c = detail::as_node(static_cast<C0&&>(c0));
  NX const s = detail::as_node(static_cast<Xs&&>(xs));
  using CP = let_name<detail::scan_tag<Fn, 0>, T, SC, Sp, true>;
  using XP = let_name<detail::scan_tag<Fn, 1>, T, SX, Sp, true>;
  auto body = f(var_node<CP>{c.shape()}, var_node<XP>{detail::one_step(s.shape())});
  using B = decltype(body);
  static_assert(expression<B>, "gradix::scan: the body must return an expression (the new carry)");
  if constexpr (expression<B>) {
    static_assert(std::is_same_v<value_type_t<B>, T>,
                  "gradix::scan: the body changes the carry's element type (the new carry must have the "
                  "element type of c0)");
    static_assert(detail::same_extents_v<shape_of_t<B>, SC>,
                  "gradix::scan: the body changes the carry's shape (the new carry must have the shape of c0)");
    if constexpr (std::is_same_v<value_type_t<B>, T> && detail::same_extents_v<shape_of_t<B>, SC>) {
      if (!(body.shape() == c.shape()))
        detail::fail("gradix::scan: the body's new carry has shape ", to_string(body.shape()),
                     " but the carry c0 has shape ", to_string(c.shape()));
      constexpr int L = 1 + detail::max_let_level<B>();
      constexpr bool reaches = detail::any_node<B, detail::is_param_node>() || ad::reaches_param_v<NC> ||
                               ad::reaches_param_v<NX>;
      using CN = let_name<scan_level<L, 0>, T, SC, Sp, reaches>;
      using XN = let_name<scan_level<L, 1>, T, SX, Sp, ad::reaches_param_v<NX>>;
      auto b = detail::bind_var<XP>(detail::bind_var<CP>(body, var_node<CN>{c.shape()}),
                                    var_node<XN>{detail::one_step(s.shape())});
      return scan_node<CN, XN, NC, NX, decltype(b), Recompute>{c, s, b, detail::stepped(s.shape().extent(0), c.shape())};
    }
  }
}
}  // namespace detail

/// The carries of the recurrence carry(t) = f(carry(t - 1), xs[t]), carry(-1) = c0, for t in
/// [0, steps) with steps = xs's extent along axis 0 (docs/ad.md, "Loops: scan"). f takes the
/// carry and the step's input (placeholder expressions) and returns the new carry: an
/// expression of the carry's shape and element type. The result has shape [steps, C...]:
/// result[t] is the carry after step t. A backward call keeps every step's own kept values
/// (its products' results, ...); with gx::recompute_steps it keeps only the carries.
template <operand C0, operand Xs, class F>
constexpr auto scan(C0&& c0, Xs&& xs, F&& f) {
  return detail::make_scan<false>(static_cast<C0&&>(c0), static_cast<Xs&&>(xs), static_cast<F&&>(f));
}
template <operand C0, operand Xs, class F>
constexpr auto scan(C0&& c0, Xs&& xs, F&& f, recompute_steps_t) {
  return detail::make_scan<true>(static_cast<C0&&>(c0), static_cast<Xs&&>(xs), static_cast<F&&>(f));
}

}  // namespace gradix
