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
#include "gradix/ad/save.hpp"
#include "gradix/api/let.hpp"
#include "gradix/api/scan_hoist.hpp"
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

/// The matrix products an elementwise region holds at its top: N itself, or through
/// elementwise nodes only (types only).
template <class N>
struct is_binary_node : std::false_type {};
template <class Op, class L, class R>
struct is_binary_node<binary_node<Op, L, R>> : std::true_type {};
template <class N>
constexpr int region_products() {
  if constexpr (is_matmul_node<N>::value) {
    return 1;
  } else if constexpr (is_binary_node<N>::value) {
    return region_products<std::remove_cvref_t<decltype(std::declval<N const&>().lhs_)>>() +
           region_products<std::remove_cvref_t<decltype(std::declval<N const&>().rhs_)>>();
  } else if constexpr (is_specialization_of_unary<N>::value) {
    return region_products<std::remove_cvref_t<decltype(std::declval<N const&>().arg_)>>();
  } else {
    return 0;
  }
}
template <class F>
struct scan_share_tag {};
/// A body f(z) whose argument z holds two products or more in its region (an Elman body
/// tanh(x Wx + h Wh + b)) as let(z, f): z computed once into a buffer, and in the backward
/// the adjoint of z (f's derivative times the carry's adjoint) computed once and read in
/// place by every product, instead of once per product and bias (docs/ad.md, "Loops:
/// scan"). The same value, bit for bit. Min: the products it takes (1 for a body whose
/// product was taken apart, api/scan_hoist.hpp: z = x'_t + h W_h + b, whose adjoint the
/// input, the product and the bias read).
template <class Fn, int Min = 2, class B>
constexpr auto share_region(B const& b) {
  if constexpr (is_specialization_of_unary<B>::value) {
    using A = std::remove_cvref_t<decltype(b.arg_)>;
    if constexpr (region_products<A>() >= Min) return ad::let<scan_share_tag<Fn>>(b.arg_, [&](auto const& z) { return remake(b, z); });
    else return b;
  } else {
    return b;
  }
}

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

/// The option of gx::scan that takes the body's products of the step's input apart on the
/// host too (api/scan_hoist.hpp; on the device they always are): `[x, h] W` as x'_t + h W_h
/// and `x Wx` as x'_t, x' = x W_x of every step computed by one product before the loop.
/// Not the host's default: x' is a buffer of steps x batch x columns written and read
/// through memory where a step's own product stays in cache (an Elman layer, bench/scan.cpp:
/// 14% slower forward, 9% slower backward; docs/ad.md, "Loops: scan").
struct split_products_t {};
inline constexpr split_products_t split_products{};

/// The option of gx::scan for a batch of sequences of different lengths: len (an integer
/// tensor or view of shape [batch], batch = the carry's extent along axis 0, in host memory)
/// gives each sequence's number of steps, 0 <= len[b] <= steps; row b of the carry stops
/// changing after step len[b] - 1 (its later carries repeat it), as PyTorch's packed
/// sequences. A length outside [0, steps] or a len of another extent is a gradix::error
/// naming it, raised before any step runs.
template <class V>
struct lengths_t {
  V view_;
};
template <operand L>
constexpr auto lengths(L&& len) {
  using N = detail::node_t<L>;
  static_assert(is_view_v<N>, "gradix::lengths: the lengths must be a tensor or a view (of integers)");
  static_assert(std::is_integral_v<std::remove_const_t<value_type_t<N>>>, "gradix::lengths: the lengths must be integers");
  static_assert(shape_of_t<N>::rank == 1, "gradix::lengths: the lengths have one axis (one length per sequence)");
  static_assert(std::is_same_v<space_of_t<N>, host_space>,
                "gradix::lengths: the lengths must be in host memory (gradix checks them before the steps run)");
  return lengths_t<N>{detail::as_node(static_cast<L&&>(len))};
}

/// The option of gx::scan that ends the loop early, for solvers: pred(carry, t) (carry a
/// host tensor_view of the carry after step t, t the step) is asked after each step; when it
/// returns true no step runs after t, and the later carries repeat carry t (every row, as
/// if every length were t + 1). Host scans only. backward through such a scan is the
/// gradient of what ran.
template <class P>
struct stop_when_t {
  P pred_;
};
template <class P>
constexpr stop_when_t<std::decay_t<P>> stop_when(P&& pred) {
  return {static_cast<P&&>(pred)};
}

namespace detail {
/// The scan_opts of a list of gx::scan options (each given at most once).
template <bool R, class L, class S>
constexpr auto scan_options(scan_opts<R, L, S> o) {
  return o;
}
template <bool R, class L, class S, class... More>
constexpr auto scan_options(scan_opts<R, L, S> o, recompute_steps_t, More... more) {
  static_assert(!R, "gradix::scan: gx::recompute_steps is given twice");
  return scan_options(scan_opts<true, L, S>{o.len_, o.stop_}, more...);
}
template <bool R, class L, class S, class... More>
constexpr auto scan_options(scan_opts<R, L, S> o, split_products_t, More... more) {
  return scan_options(o, more...);  // (taken by gx::scan when the body is built)
}
template <bool R, class L, class S, class V, class... More>
constexpr auto scan_options(scan_opts<R, L, S> o, lengths_t<V> l, More... more) {
  static_assert(std::is_same_v<L, no_lengths>, "gradix::scan: gx::lengths is given twice");
  return scan_options(scan_opts<R, V, S>{l.view_, o.stop_}, more...);
}
template <bool R, class L, class S, class P, class... More>
constexpr auto scan_options(scan_opts<R, L, S> o, stop_when_t<P> p, More... more) {
  static_assert(std::is_same_v<S, no_stop>, "gradix::scan: gx::stop_when is given twice");
  return scan_options(scan_opts<R, L, P>{o.len_, p.pred_}, more...);
}
template <class O>
struct is_scan_option : std::false_type {};
template <>
struct is_scan_option<recompute_steps_t> : std::true_type {};
template <>
struct is_scan_option<split_products_t> : std::true_type {};
template <class V>
struct is_scan_option<lengths_t<V>> : std::true_type {};
template <class P>
struct is_scan_option<stop_when_t<P>> : std::true_type {};

/// The scan node of body (built over the placeholders scan_tag<Fn, 0> for the carry and XP
/// for the input, checked), c0 c and the sequence s: the placeholders renamed to the scan's
/// level (Share: share_region's Min).
template <class Fn, class XP, int Share = 2, class Opt, class NC, class NX, class B0>
constexpr auto scan_of_body(NC const& c, NX const& s, B0 const& body0, Opt const& opt) {
  using T = value_type_t<NC>;
  using SC = shape_of_t<NC>;
  using SX = typename detail::step_shape<shape_of_t<NX>>::type;
  using Sp = detail::scan_space_t<NC, NX>;
  using CP = let_name<detail::scan_tag<Fn, 0>, T, SC, Sp, true>;
  auto body = detail::share_region<Fn, Share>(body0);
  using B = decltype(body);
  constexpr int L = 1 + detail::max_let_level<B>();
  constexpr bool reaches = detail::any_node<B, detail::is_param_node>() || ad::reaches_param_v<NC> ||
                           ad::reaches_param_v<NX>;
  using CN = let_name<scan_level<L, 0>, T, SC, Sp, reaches>;
  using XN = let_name<scan_level<L, 1>, T, SX, Sp, ad::reaches_param_v<NX>>;
  auto b = detail::bind_var<XP>(detail::bind_var<CP>(body, var_node<CN>{c.shape()}),
                                var_node<XN>{detail::one_step(s.shape())});
  return scan_node<CN, XN, NC, NX, decltype(b), Opt>{c, s, b, detail::stepped(s.shape().extent(0), c.shape()), opt};
}

/// scan_of_body with the body's products of the input beside the carry taken apart
/// (api/scan_hoist.hpp): their input halves, one product over the whole sequence, become
/// the scan's input. On the device, or on the host with gx::split_products (Split).
template <class Fn, class XP, bool Split, class Opt, class NC, class NX, class B0>
constexpr auto scan_hoisted(NC const& c, NX const& s, B0 const& body, Opt const& opt) {
  constexpr std::size_t n = hoist_count_v<XP, B0>;
  constexpr bool here = Split || !std::is_same_v<scan_space_t<NC, NX>, host_space>;
  if constexpr (n == 0 || shape_of_t<NX>::rank != 3 || !here) {
    return scan_of_body<Fn, XP>(c, s, body, opt);
  } else {
    using T = value_type_t<NC>;
    using Sp = detail::scan_space_t<NC, NX>;
    auto const wx = hoisted_side_by_side(hoisted_weights<XP>(body), std::make_index_sequence<n>{});
    auto const xsh = s.shape();
    index_t const steps = xsh.extent(0), rows = xsh.extent(1), d = xsh.extent(2);
    auto const proj = ::gradix::reshape(::gradix::matmul(::gradix::reshape(s, dims(steps * rows, d)), wx),
                                        dims(steps, rows, wx.shape().extent(1)));
    constexpr bool keep_x = reads_input_after_hoist<B0, XP>();
    auto const xs2 = [&] {
      if constexpr (keep_x) return ::gradix::concat<2>(s, proj);
      else return proj;
    }();
    using X2 = std::remove_cvref_t<decltype(xs2)>;
    using XP2 = let_name<scan_tag<Fn, 2>, T, typename step_shape<shape_of_t<X2>>::type, Sp, true>;
    var_node<XP2> const xv{one_step(xs2.shape())};
    index_t off = keep_x ? d : 0;
    auto const b1 = hoist_body<XP, !keep_x && n == 1>(body, xv, off);
    if constexpr (keep_x) return scan_of_body<Fn, XP2, 1>(c, xs2, bind_var<XP>(b1, ::gradix::slice<1>(xv, 0, d)), opt);
    else return scan_of_body<Fn, XP2, 1>(c, xs2, b1, opt);
  }
}

template <bool Split, class Opt, class C0, class Xs, class F>
constexpr auto make_scan(C0&& c0, Xs&& xs, F&& f, Opt const& opt) {
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
      if constexpr (Opt::has_stop)
        static_assert(std::is_same_v<Sp, host_space>, "gradix::stop_when: a scan that stops early runs on the host");
      if constexpr (Opt::has_lengths)
        static_assert(std::is_same_v<Sp, host_space>, "gradix::lengths: a scan with lengths runs on the host (for now)");
      return scan_hoisted<Fn, XP, Split>(c, s, body, opt);
    } else {
      return scalar_node<T>{};  // (after the error above: no second error at the user's line)
    }
  } else {
    return scalar_node<T>{};
  }
}
}  // namespace detail

/// The carries of the recurrence carry(t) = f(carry(t - 1), xs[t]), carry(-1) = c0, for t in
/// [0, steps) with steps = xs's extent along axis 0 (docs/ad.md, "Loops: scan"). f takes the
/// carry and the step's input (placeholder expressions) and returns the new carry: an
/// expression of the carry's shape and element type. The result has shape [steps, C...]:
/// result[t] is the carry after step t. A backward call keeps every step's own kept values
/// (its products' results, ...). Options, in any order: gx::recompute_steps (keep only the
/// carries), gx::lengths(len) (sequences of different lengths), gx::stop_when(pred) (an
/// early exit), gx::split_products (the body's products of the input taken out of the loop
/// on the host too, as on the device).
template <operand C0, operand Xs, class F, class... Opts>
  requires(detail::is_scan_option<Opts>::value && ...)
constexpr auto scan(C0&& c0, Xs&& xs, F&& f, Opts... opts) {
  constexpr bool split = (std::is_same_v<Opts, split_products_t> || ... || false);
  return detail::make_scan<split>(static_cast<C0&&>(c0), static_cast<Xs&&>(xs), static_cast<F&&>(f),
                                  detail::scan_options(scan_opts<>{}, opts...));
}

}  // namespace gradix
