#pragma once
/// \file
/// The plan elements that write a workspace buffer first (ad::materialises_v: products,
/// staged uses, row uses, lets), run once for every executor: each is a short sequence of
/// executor steps around the plans of its operands, which run recursively.
///
///   product_use   the product's adjoint dC into its buffer (adjoint_into), then
///                 dA = dC op(B)^T and dB = op(A)^T dC by two gemms (straight into a dense
///                 row-major parameter gradient when that is the operand: direct_gradient;
///                 into a dense buffer's columns when the operand is a slice of them:
///                 slice_gradient; in a scan's sweep, dB over every step in one gemm at its
///                 end: sweep_deferral), then the operands' plans from their buffers;
///   staged_use    the node's adjoint into its buffer, then the operand's plan;
///   row_use       the operand's adjoint from the adjoint and the kept rows
///                 (the executor's row_adjoint), then the operand's plan;
///   let_use       the let's buffer cleared, the body's plan (its placeholder reads add into
///                 the buffer), then the operand's plan from it;
///   scan_use      the reverse sweep of a scan (run_scan below): per step from the last, the
///                 step's body transformed again over the step's region (exec/save.hpp) and
///                 its plan seeded with the adjoint of the carry it produced, then the initial
///                 carry's and the inputs' plans.
///
/// Other elements (use, fused_use, multi_use) are the executor's kernels: run(u),
/// run_serial(u), prepare(u), scratch_bytes(u). Serial: the serial path, as in constant
/// evaluation. Executor members used here: clear(p, n), assign(dst, e), gemm(...),
/// row_adjoint<Serial>(u).

#include "gradix/ad/kernel.hpp"
#include "gradix/ad/product.hpp"
#include "gradix/ad/region.hpp"
#include "gradix/config.hpp"
#include "gradix/core/tuple.hpp"
#include "gradix/core/view.hpp"
#include "gradix/exec/fusion.hpp"
#include "gradix/exec/save.hpp"
#include "gradix/exec/sweep.hpp"
#include "gradix/expr/scan.hpp"
#include "gradix/expr/matmul.hpp"
#include "gradix/grad/storage.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <type_traits>
#include <utility>

namespace gradix::detail {

template <class E>
struct is_plan : std::false_type {};
template <class... E>
struct is_plan<tuple<E...>> : std::true_type {};

/// Calls f(k) for every kernel k (use, member of a multi use) in plan element or plan e,
/// through fused pairs and the operand plans of products, staged uses, row uses and lets
/// (those built for the call: f sees copies, and what it changes in them is not kept).
template <class E, class F>
constexpr void for_each_kernel(E& e, F&& f) {
  using U = std::remove_cv_t<E>;
  if constexpr (is_plan<U>::value) {
    for_each_element(e, [&](auto& x) { for_each_kernel(x, f); });
  } else if constexpr (ad::is_product<U>::value) {
    auto pa = e.pa();
    auto pb = e.pb();
    for_each_kernel(pa, f);
    for_each_kernel(pb, f);
  } else if constexpr (ad::is_staged<U>::value) {
    auto pe = e.pe();
    for_each_kernel(pe, f);
  } else if constexpr (ad::is_row_use<U>::value) {
    auto px = e.px();
    for_each_kernel(px, f);
  } else if constexpr (ad::is_let_use<U>::value) {
    auto pb = e.pb();
    auto pz = e.pz();
    for_each_kernel(pb, f);
    for_each_kernel(pz, f);
  } else if constexpr (ad::is_scan_use<U>::value) {
    // a step's kernels (the last step's plan: every step's has the same targets), the
    // initial carry's and the inputs'
    auto const& k = e.node_->node();
    if (k.last_) {
      auto ps = e.step(*k.last_, k.ga_);
      for_each_kernel(ps, f);
    }
    auto pc = e.carry(k.ga_);
    auto px = e.input();
    for_each_kernel(pc, f);
    for_each_kernel(px, f);
  } else if constexpr (ad::is_fused<U>::value) {
    f(e.first_);
    f(e.second_);
  } else if constexpr (ad::is_multi<U>::value) {
    for_each_element(e.uses_, f);
  } else {
    f(e);
  }
}

template <bool Serial, class Ex, class E>
constexpr void run_element(Ex& ex, E const& e);

template <bool Serial, std::size_t I, class Ex, class... E>
constexpr void run_elements_from(Ex& ex, tuple<E...> const& plan) {
  if constexpr (I < sizeof...(E)) {
    constexpr std::size_t J = kernel_run_end<I, E...>();
    if constexpr (!Serial && runs_kernels_together<Ex> && J - I >= 2) {
      // consecutive kernels of one plan read only what the elements before them wrote (the
      // adjoint that seeds the plan, the call's saved values) and write disjoint targets or
      // add into shared ones: they may run in any order, so in one launch
      [&]<std::size_t... K>(std::index_sequence<K...>) {
        ex.run_kernels(::gradix::make_tuple(get<I + K>(plan)...));
      }(std::make_index_sequence<J - I>{});
      run_elements_from<Serial, J>(ex, plan);
    } else {
      run_element<Serial>(ex, get<I>(plan));
      run_elements_from<Serial, I + 1>(ex, plan);
    }
  }
}
template <bool Serial, class Ex, class Plan>
constexpr void run_elements(Ex& ex, Plan const& plan) {
  run_elements_from<Serial, 0>(ex, plan);
}

/// The serial pre-pass of plan element e: its kernels reserve slots and mark slices (the
/// kernels that write a workspace buffer have nothing to reserve).
template <class Ex, class E>
constexpr void prepare_element(Ex& ex, E const& e) {
  if constexpr (ad::is_product<E>::value) {
    for_each_element(e.pa(), [&](auto const& x) { prepare_element(ex, x); });
    for_each_element(e.pb(), [&](auto const& x) { prepare_element(ex, x); });
  } else if constexpr (ad::is_staged<E>::value) {
    for_each_element(e.pe(), [&](auto const& x) { prepare_element(ex, x); });
  } else if constexpr (ad::is_row_use<E>::value) {
    for_each_element(e.px(), [&](auto const& x) { prepare_element(ex, x); });
  } else if constexpr (ad::is_let_use<E>::value) {
    for_each_element(e.pb(), [&](auto const& x) { prepare_element(ex, x); });
    for_each_element(e.pz(), [&](auto const& x) { prepare_element(ex, x); });
  } else if constexpr (ad::is_scan_use<E>::value) {
    // every step's plan reserves what the last step's does (the same targets, index data
    // that no step changes)
    auto const& k = e.node_->node();
    if (k.last_) for_each_element(e.step(*k.last_, k.ga_), [&](auto const& x) { prepare_element(ex, x); });
    for_each_element(e.carry(k.ga_), [&](auto const& x) { prepare_element(ex, x); });
    for_each_element(e.input(), [&](auto const& x) { prepare_element(ex, x); });
  } else {
    ex.prepare(e);
  }
}

/// Calls f(p0) with p0 a copy of u0 (a node's one incoming kernel) whose target is the
/// node's adjoint buffer buf (a product's gc, a staged use's gout).
template <class P0, class G, class F>
constexpr void with_target(P0 const& u0, G const& buf, F&& f) {
  G g = buf;
  P0 p0 = u0;
  p0.target_ = &g;
  f(p0);
}

/// Scratch bytes element e's kernels need at most.
template <class Ex, class E>
std::size_t element_scratch(Ex& ex, E const& e) {
  std::size_t r = 0;
  auto sub = [&](auto const& plan) {
    for_each_element(plan, [&](auto const& x) { r = std::max(r, element_scratch(ex, x)); });
  };
  if constexpr (ad::is_product<E>::value) {
    with_target(e.p0_, e.node_->extra_.gc, [&](auto const& p0) { r = ex.scratch_bytes(p0); });
    sub(e.pa());
    sub(e.pb());
  } else if constexpr (ad::is_staged<E>::value) {
    with_target(e.p0_, e.node_->extra_.gout, [&](auto const& p0) { r = ex.scratch_bytes(p0); });
    sub(e.pe());
  } else if constexpr (ad::is_row_use<E>::value) {
    sub(e.px());
  } else if constexpr (ad::is_let_use<E>::value) {
    sub(e.pb());
    sub(e.pz());
  } else if constexpr (ad::is_scan_use<E>::value) {
    auto const& k = e.node_->node();
    if constexpr (!std::is_same_v<std::remove_cvref_t<decltype(e.p0_)>, ad::no_scan_p0>) {
      adjoint_buffer<value_type_t<E>, shape_of_t<decltype(k)>> gout(k.gout_, k.shape());
      with_target(e.p0_, gout, [&](auto const& p0) { r = ex.scratch_bytes(p0); });
    }
    if (k.last_) sub(e.step(*k.last_, k.ga_));
    sub(e.carry(k.ga_));
    sub(e.input());
  } else {
    r = ex.scratch_bytes(e);
  }
  return r;
}

/// The adjoint of a kept node written into its (row-major) buffer buf by u0, the node's one
/// incoming kernel: assigned in one pass when u0 covers buf exactly (its map the identity,
/// no axis summed), else buf cleared and u0 added into it.
template <bool Serial, class Ex, class P0, class G>
constexpr void adjoint_into(Ex& ex, P0 const& u0, G const& buf) {
  using K = ad::kernel_traits<P0>;
  using D = typename P0::domain_type;
  using S = typename G::shape_type;
  using T = typename G::value_type;
  constexpr std::size_t R = S::rank;
  if constexpr (D::rank == R && K::projected_mask == 0 &&
                std::is_same_v<typename P0::map_type, decltype(ad::identity_map<R>())>) {
    if (maps_exactly(u0, buf.shape())) {
      tensor_view<T, S, row_major, typename Ex::space> out(buf.data(), buf.shape());
      ex.assign(out, u0.v_);
      return;
    }
  }
  ex.clear(buf.data(), buf.shape().size());
  with_target(u0, buf, [&](auto const& p0) { run_element<Serial>(ex, p0); });
}

/// An operand's gradient from its product: gemm(dst, ld, accumulate) into where its plan
/// adds it when that is one kernel into a dense block (gemm_target: the parameter's own
/// gradient; the columns of a buffer through a unit-step slice, an LSTM carry's h; a block
/// of a weight's rows; nothing at all when grad() does not want it), else into the buffer
/// buf (ld the operand's row length), then the operand plan from it.
template <bool Serial, class Ex, class P, class T, class F>
constexpr void operand_gradient(Ex& ex, P const& plan, T* buf, index_t ld, F&& gemm_into) {
  if constexpr (gemm_target_v<P, typename Ex::space>) {
    auto const d = gemm_target<typename Ex::space, T>(plan, ld);
    if (!d.want) return;
    if (d.p) {
      gemm_into(d.p, d.ld, true);
      return;
    }
  }
  gemm_into(buf, ld, false);
  run_elements<Serial>(ex, plan);
}

/// Whether the product's adjoint can be read where it is: u0 (its one incoming kernel) reads
/// a view of the call's memory at the identity, covering the product (of shape s) exactly (a
/// let's or a staged buffer: the adjoint is that buffer, nothing to copy), with a stride a
/// gemm takes. Then g is set to it.
template <class Ex, class T, class P0, class S>
constexpr bool adjoint_in_place(P0 const& u0, S const& s, mat_ref<T>& g) {
  using V = typename P0::value_expr;
  using D = typename P0::domain_type;
  constexpr std::size_t R = D::rank;
  if constexpr (is_view_v<V> && ad::kernel_traits<P0>::projected_mask == 0 &&
                std::is_same_v<typename P0::map_type, decltype(ad::identity_map<R>())> && (R == 2 || R == 3)) {
    if constexpr (!std::is_same_v<typename V::storage_type, T> ||
                  !std::is_same_v<typename V::space_type, typename Ex::space>) {
      return false;
    } else {
      if (!maps_exactly(u0, s)) return false;  // (the view's shape is the domain's)
      index_t const rs = u0.v_.strides_[R - 2], cs = u0.v_.strides_[R - 1];
      if (!Ex::template in_place<T>(s.extent(R - 2), s.extent(R - 1), rs, cs)) return false;
      g = mat_ref<T>{u0.v_.data_, rs, cs, R == 3 ? u0.v_.strides_[0] : 0};
      return true;
    }
  } else {
    return false;
  }
}

template <bool Serial, class Ex, class P0, class PA, class PB, class SN>
constexpr void run_product(Ex& ex, ad::product_use<P0, PA, PB, SN> const& u) {
  auto const& sn = *u.node_;
  auto const& mm = sn.node();
  auto const& st = sn.extra_;
  using T = value_type_t<decltype(mm)>;
  using A = std::remove_cvref_t<decltype(mm.lhs_)>;
  using B = std::remove_cvref_t<decltype(mm.rhs_)>;
  constexpr bool batched = std::remove_cvref_t<decltype(mm)>::rank == 3;
  index_t const nb = mm.batch(), m = mm.rows(), n = mm.cols(), k = mm.inner();
  mat_ref<T> g{st.gc.data(), n, 1, batched ? m * n : 0};
  if (std::is_constant_evaluated() || !adjoint_in_place<Ex>(u.p0_, st.gc.shape(), g))
    adjoint_into<Serial>(ex, u.p0_, st.gc);  // d C, into its buffer
  if constexpr (!std::is_same_v<PA, tuple<>>) {
    // d A (m x k) = d C (m x n) op(B)^T (n x k); a shared A sums over the batch
    constexpr bool own = shape_of_t<A>::rank == 3;
    mat_ref<T> bt{st.b.p, st.b.cs, st.b.rs, st.b.bs};
    if constexpr (!batched)
      if (!std::is_constant_evaluated()) bt = step_transposed(ex, bt, n, k, m);
    operand_gradient<Serial>(ex, u.pa(), st.ga, k, [&](T* dst, index_t ld, bool add) {
      ex.gemm(nb, m, k, n, g, bt, dst, ld, own ? m * ld : 0, add);
    });
  }
  if constexpr (!std::is_same_v<PB, tuple<>>) {
    // d B (k x n) = op(A)^T (k x m) d C (m x n)
    constexpr bool own = shape_of_t<B>::rank == 3;
    mat_ref<T> const at{st.a.p, st.a.cs, st.a.rs, st.a.bs};
    bool deferred = false;  // (taken over every step of a sweep: sweep_deferral)
    if constexpr (!batched && gemm_target_v<PB, typename Ex::space>)
      if (!std::is_constant_evaluated()) deferred = defer_gradient(ex, u.pb(), st.a, g, m, n, k);
    if (!deferred)
      operand_gradient<Serial>(ex, u.pb(), st.gb, n, [&](T* dst, index_t ld, bool add) {
        ex.gemm(nb, k, n, m, at, g, dst, ld, own ? k * ld : 0, add);
      });
  }
}

/// The reverse sweep of a scan (ad::scan_use): the value's adjoint g, in the node's gout_
/// (written there first, or copied once when it arrived in another buffer), then per step t
/// from the last: the step's body is transformed again over the step's region (the last
/// step's is the one the forward kept; every step's when the call kept them) and its plan
/// runs, seeded with g[t] (complete: the whole adjoint of carry t); the placeholders' reads
/// add the adjoint of carry t - 1 into g[t - 1] in place (scan_carry_grad; for t = 0 into
/// ga_, cleared first) and of x_t into gxs_. Then the initial carry's and the inputs' plans.
/// A step is its body's kernels and nothing else: no carry adjoint is copied.
template <bool Serial, class Ex, class E>
void run_scan(Ex& ex, E const& e) {
  auto const& k = e.node_->node();
  using K = std::remove_cvref_t<decltype(k)>;
  using T = value_type_t<K>;
  using Sp = typename Ex::space;
  index_t const steps = k.steps();
  if (steps == 0) return;  // no step read c0 nor xs: their adjoints are zero
  if constexpr (!std::is_same_v<std::remove_cvref_t<decltype(e.p0_)>, ad::no_scan_p0>)
    adjoint_into<Serial>(ex, e.p0_, adjoint_buffer<T, shape_of_t<K>>(k.gout_, k.shape()));
  auto const cs = k.c0_.shape();
  auto const xsh = one_step(k.xs_.shape());
  using CS = std::remove_cvref_t<decltype(cs)>;
  using CV = tensor_view<T const, CS, row_major, Sp>;
  std::size_t const c = std::size_t(cs.size()), x = std::size_t(xsh.size());
  // the carries' adjoints accumulate in place in gout_ (scan_carry_grad): the value's
  // adjoint is copied there once when it arrived in another buffer
  if (e.g_.data_ != k.gout_) {
    using GS = shape_of_t<K>;
    ex.assign(tensor_view<T, GS, row_major, Sp>(k.gout_, k.shape()), tensor_view<T const, GS, row_major, Sp>(e.g_.data_, k.shape()));
  }
  T* const g = k.gout_;
  if (k.gxs_) ex.clear(k.gxs_, index_t(std::size_t(steps) * x));
  saved_sizes z;
  z.nf = k.region_.nf;
  z.nd = k.region_.nd;
  z.nl = k.region_.nl;
  z.ni = k.region_.ni;
  z.af = k.region_.af;
  z.ad = k.region_.ad;
  z.al = k.region_.al;
  z.argmax = true;
  constexpr std::size_t RC = CS::rank;
  using MV = tensor_view<T, CS, row_major, Sp>;
  // with every step's values kept, products' weight gradients are taken in one gemm over
  // the steps (sweep_deferral); the thread's current sweep is this one until it ends
  sweep_deferral<T> defer;
  defer.steps = steps;
  defer.serial = next_sweep_serial();
  if (k.gxs_) defer.in_lo = k.gxs_, defer.in_hi = k.gxs_ + std::size_t(steps) * x;
  if constexpr (std::is_same_v<T, float>) defer.mem = k.region_.f, defer.mem_n = k.region_.copies * k.region_.nf;
  else if constexpr (std::is_same_v<T, double>) defer.mem = k.region_.d, defer.mem_n = k.region_.copies * k.region_.nd;
  else if constexpr (std::is_same_v<T, long double>) defer.mem = k.region_.l, defer.mem_n = k.region_.copies * k.region_.nl;
  struct sweep_scope {
    sweep_slot saved;
    sweep_scope(sweep_deferral<T>* d) : saved(current_sweep()) {
      current_sweep() = d ? sweep_slot{&sweep_tag_v<T>, d} : sweep_slot{};
    }
    ~sweep_scope() { current_sweep() = saved; }
  } const scope(k.steps_ ? &defer : nullptr);
  for (index_t t = steps - 1; t >= 0; --t) {
    defer.t = t;
    defer.visit = 0;
    defer.tvisit = 0;
    defer.svisit = 0;
    defer.avisit = 0;
    T* const gc = scan_carry_grad(t, c, k.ga_, g);  // the adjoint of carry t - 1 so far
    T* const gnext = g + std::size_t(t) * c;         // the whole adjoint of carry t
    if (t == 0) ex.clear(gc, index_t(c));
    if (t >= k.ran_) {  // no step ran: carry t is carry t - 1
      ex.assign(MV(gc, cs), CV(gc, cs) + CV(gnext, cs));
      continue;
    }
    if (k.len_) {
      // a finished row's carry t is its carry t - 1: its adjoint goes there, and the step's
      // body is seeded with the active rows' only
      auto const act = scan_active<T, RC, Sp>(k.len_, cs.extent(0), t);
      ex.assign(MV(gc, cs), ::gradix::where(act, CV(gc, cs), CV(gc, cs) + CV(gnext, cs)));
      ex.assign(MV(gnext, cs), ::gradix::where(act, CV(gnext, cs), T(0)));
    }
    if (k.steps_) {
      run_elements<Serial>(ex, e.step(*k.steps_[t], gnext));  // the step the forward kept
    } else if (t == k.ran_ - 1) {
      run_elements<Serial>(ex, e.step(*k.last_, gnext));
    } else {
      saved_space<Ex> sp(z, ex, k.region_, 0, false);
      T const* carry = t == 0 ? k.c_init_ : k.h_ + std::size_t(t - 1) * c;
      bool wrote = false;  // (the step's lets and root in one launch where the executor can: keep_scan's)
      auto const e2 = with_saved_together(scan_body_at(k, k.vc_, k.vx_, cs, xsh, carry, k.x_ + std::size_t(t) * x, gc,
                                                       k.gxs_ ? k.gxs_ + std::size_t(t) * x : nullptr),
                                          sp, static_cast<T*>(nullptr), wrote);
      static_assert(std::is_same_v<std::remove_cvref_t<decltype(e2)>, typename K::step_type>,
                    "gradix internal: a scan step transforms to the type the forward kept");
      run_elements<Serial>(ex, e.step(e2, gnext));
    }
  }
  for (int i = 0; i < defer.n; ++i) flush_deferred(ex, defer.d[i]);
  if constexpr (requires { Ex::sums_rows_over_steps; })
    for (int i = 0; i < defer.ns; ++i) flush_row_sum(ex, defer.s[i]);
  if constexpr (requires { Ex::adds_over_steps; })
    for (int i = 0; i < defer.na; ++i) flush_add(ex, defer.a[i]);
  run_elements<Serial>(ex, e.carry(k.ga_));
  run_elements<Serial>(ex, e.input());
}

template <bool Serial, class Ex, class E>
constexpr void run_element(Ex& ex, E const& e) {
  if constexpr (ad::is_scan_use<E>::value) {
    run_scan<Serial>(ex, e);
  } else if constexpr (ad::is_product<E>::value) {
    run_product<Serial>(ex, e);
  } else if constexpr (ad::is_staged<E>::value) {
    adjoint_into<Serial>(ex, e.p0_, e.node_->extra_.gout);
    run_elements<Serial>(ex, e.pe());
  } else if constexpr (ad::is_row_use<E>::value) {
    ex.template row_adjoint<Serial>(e);  // into the node's gin
    run_elements<Serial>(ex, e.px());
  } else if constexpr (ad::is_let_use<E>::value) {
    auto const& g = e.gz_;
    ex.clear(g.data(), g.shape().size());  // the operand's adjoint: cleared, then added into
    auto const pb = e.pb();
    auto const pz = e.pz();
    if constexpr (!Serial && runs_pointwise_lets<Ex> && pointwise_let<E>::value) {
      if (ex.run_pointwise_let(pb, pz, g)) return;
    } else if constexpr (!Serial && runs_pointwise_lets<Ex> && partly_pointwise_let<E>::value) {
      constexpr std::size_t R = std::remove_cvref_t<decltype(g)>::shape_type::rank;
      if (ex.run_pointwise_let(pb, operand_uses_split<true, R>(pz), g)) {
        run_elements<Serial>(ex, operand_uses_split<false, R>(pz));  // (its products and broadcast leaves)
        return;
      }
    }
    run_elements<Serial>(ex, pb);
    run_elements<Serial>(ex, pz);
  } else if constexpr (Serial) {
    ex.run_serial(e);
  } else {
    if constexpr (requires { Ex::sums_rows_over_steps; }) {
      if constexpr (Ex::sums_rows_over_steps && row_sum_gradient<E, typename Ex::space>::value)
        if (!std::is_constant_evaluated() && defer_row_sum(ex, e)) return;  // (taken when the sweep ends)
    }
    if constexpr (requires { Ex::adds_over_steps; }) {
      if constexpr (Ex::adds_over_steps && step_add_gradient<E, typename Ex::space>::value)
        if (!std::is_constant_evaluated() && defer_add(ex, e)) return;  // (taken when the sweep ends)
    }
    ex.run(e);
  }
}

}  // namespace gradix::detail
