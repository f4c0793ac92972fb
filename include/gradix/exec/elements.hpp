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

/// Whether use u's map is the identity at run time and its domain has shape s: a map of the
/// identity's type may still carry offsets or steps (a slice, a selection), so the type
/// alone does not say that u covers s exactly.
template <class U, class S>
constexpr bool maps_exactly(U const& u, S const& s) {
  constexpr std::size_t R = S::rank;
  return [&]<std::size_t... J>(std::index_sequence<J...>) {
    return ((get<J>(u.map_).off_ == 0 && get<J>(u.map_).scale_ == 1 && u.dom_.extent(J) == s.extent(J)) && ...);
  }(std::make_index_sequence<R>{});
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

/// Whether gradient storage G is dense and row-major: a parameter's dense storage on either
/// backend, or an adjoint buffer of the call (a scan's carry adjoint, a kept node's), whose
/// memory is one contiguous row-major block a gemm can accumulate into.
template <class G>
struct row_major_dense : std::bool_constant<!G::sparse && (G::rank == 0 || G::unit_axis == int(G::rank) - 1)> {};

/// Whether operand plan P is one kernel that adds the operand's adjoint buffer (a row-major
/// view of memory space Sp, at the identity) into a dense row-major gradient of the same
/// shape: the operand is a parameter itself, and its product can accumulate into that
/// gradient directly.
template <class P, class Sp>
struct direct_gradient : std::false_type {};
template <class D, class T, class S, class M, class G, class Sp>
struct direct_gradient<tuple<ad::use<D, tensor_view<T const, S, row_major, Sp>, M, G>>, Sp>
    : std::bool_constant<std::is_same_v<M, decltype(ad::identity_map<S::rank>())> && !G::sparse &&
                         (S::rank < 2 || row_major_dense<G>::value) && std::is_same_v<typename G::value_type, T>> {};

/// Whether operand plan P is one kernel that adds the operand's adjoint buffer (a row-major
/// matrix of memory space Sp) into a column slice of a dense row-major gradient or adjoint
/// buffer (rows at the identity, columns through a slice): the operand is a slice of a
/// buffer's columns (an LSTM carry's h, a slice of [h, c]), whose product can accumulate into
/// that buffer directly with its row stride.
template <class P, class Sp>
struct slice_gradient : std::false_type {};
template <class D, class T, class S, class G, class Sp>
struct slice_gradient<
    tuple<ad::use<D, tensor_view<T const, S, row_major, Sp>, tuple<ad::ax_dom<0>, ad::ax_lookup<ad::ax_dom<1>, index_range>>, G>>,
    Sp> : std::bool_constant<S::rank == 2 && !G::sparse && G::rank == 2 && row_major_dense<G>::value &&
                             std::is_same_v<typename G::value_type, T>> {};

/// An operand's gradient from its product: gemm(dst, ld, accumulate) into the parameter's own
/// gradient when the operand plan is one direct kernel covering it (direct_gradient and
/// maps_exactly; nothing at all when grad() does not want it), or into the columns of a
/// dense buffer it adds into through a unit-step slice (slice_gradient; ld its row stride),
/// else into the buffer buf (ld the operand's row length), then the operand plan from it.
template <bool Serial, class Ex, class P, class T, class F>
constexpr void operand_gradient(Ex& ex, P const& plan, T* buf, index_t ld, F&& gemm_into) {
  if constexpr (direct_gradient<P, typename Ex::space>::value) {
    auto const& k = get<0>(plan);
    if (!k.target_) return;  // grad() does not want it
    if (maps_exactly(k, k.target_->shape())) {
      gemm_into(k.target_->data(), ld, true);  // (its slices were marked by prepare)
      return;
    }
  } else if constexpr (slice_gradient<P, typename Ex::space>::value) {
    auto const& k = get<0>(plan);
    if (!k.target_) return;
    auto const& r = get<0>(k.map_);
    auto const& c = get<1>(k.map_);
    auto const st = k.target_->strides();
    if (r.scale_ == 1 && c.scale_ * c.idx_.step_ * c.inner_.scale_ == 1 && st[1] == 1) {
      index_t const c0 = c.off_ + c.scale_ * (c.idx_.start_ + c.idx_.step_ * c.inner_.off_);
      gemm_into(k.target_->data() + r.off_ * st[0] + c0, st[0], true);
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

/// The operand bt (B^T, rows x cols, as a product's dA = dC B^T gemm reads it, m rows of
/// dC per step) as the gemm of a sweep's step should read it: on an executor that asks for
/// it (step_transpose_rows), when the BLAS would read it transposed (a unit stride along
/// its rows: its NT form, which OpenBLAS runs up to 2.5 times slower than NN for few rows
/// and a long inner extent), a row-major copy made once per sweep and read by every step;
/// else bt itself. The copy's memory is the thread's, kept from call to call (a first call
/// that cannot get it reads bt as it is).
template <class Ex, class T>
mat_ref<T> step_transposed(Ex& ex, mat_ref<T> const& bt, index_t rows, index_t cols, index_t m) {
  if constexpr (!requires { Ex::step_transpose_rows; }) {
    return bt;
  } else {
    sweep_deferral<T>* c = sweep_deferral_of<T>();
    if (!c) return bt;
    int const i = c->tvisit++;
    if (i >= sweep_deferral<T>::max || bt.rs != 1 || bt.cs == 1 || bt.bs != 0 || m > Ex::step_transpose_rows ||
        c->steps < Ex::step_transpose_steps || rows * cols < Ex::step_transpose_min)
      return bt;
    transposed_copy<T>& tc = step_transposes<T>()[i];
    if (tc.sweep != c->serial || tc.src != bt.p || tc.rows != rows || tc.cols != cols || tc.cs != bt.cs) {
      std::size_t const need = std::size_t(rows) * std::size_t(cols);
      if (tc.cap < need) {
        tc.p.reset(new (std::nothrow) T[need]);
        tc.cap = tc.p ? need : 0;
        tc.sweep = 0;
        if (!tc.p) return bt;
      }
      ex.transpose(tc.p.get(), bt, rows, cols);
      tc.sweep = c->serial;
      tc.src = bt.p;
      tc.rows = rows;
      tc.cols = cols;
      tc.cs = bt.cs;
    }
    return mat_ref<T>{tc.p.get(), cols, 1, 0};
  }
}
/// The deferred steps of r in one gemm (r off after).
template <class Ex, class T>
void flush_deferred(Ex& ex, deferred_gradient<T>& r) {
  if (!r.on) return;
  r.on = false;
  index_t const q = r.hi - r.lo;
  mat_ref<T> const at{r.a_hi - q * r.m * r.a_rs, r.a_cs, r.a_rs, 0};
  mat_ref<T> const g{r.g_hi - q * r.m * r.n, r.n, 1, 0};
  ex.gemm(1, r.k, r.n, (q + 1) * r.m, at, g, r.dst, r.n, 0, true);
}
/// Whether this step's dB = op(A)^T dC of a product (A m x k as the gemm read it, dC m x n,
/// its B plan `plan` direct) is deferred (recorded) rather than run now.
template <class Ex, class T, class P>
bool defer_gradient(Ex& ex, P const& plan, mat_ref<T> const& a, mat_ref<T> const& g, index_t m, index_t n, index_t k) {
  sweep_deferral<T>* c = sweep_deferral_of<T>();
  if (!c) return false;
  // addresses compared as integers: a step's A or dC may lie anywhere, the pattern is
  // checked before any pointer arithmetic spans steps
  auto at = [](T const* p) { return reinterpret_cast<std::uintptr_t>(p); };
  auto down = [](index_t steps, index_t per) { return std::uintptr_t(steps) * std::uintptr_t(per) * sizeof(T); };
  int const i = c->visit++;
  auto const& kb = get<0>(plan);
  if (!kb.target_ || !maps_exactly(kb, kb.target_->shape())) return false;
  T* const dst = kb.target_->data();
  index_t const t = c->t;
  if (i >= c->n) {  // the first step that visits it
    if (i != c->n || i >= sweep_deferral<T>::max) return false;
    ++c->n;
    auto& r = c->d[i];
    r = deferred_gradient<T>{dst, m, n, k, a.rs, a.cs, a.p, g.p, t, t, false};
    r.on = g.rs == n && g.cs == 1 && m > 0 && n > 0 && k * n >= Ex::step_gradient_min && c->mem && at(g.p) >= at(c->mem) &&
           at(g.p) - at(c->mem) + std::uintptr_t(m * n) * sizeof(T) <= c->mem_n * sizeof(T);
    return r.on;
  }
  auto& r = c->d[i];
  if (!r.on) return false;
  bool ok = r.dst == dst && r.m == m && r.n == n && r.k == k && r.a_rs == a.rs && r.a_cs == a.cs && g.rs == n &&
            g.cs == 1 && r.lo == t + 1;
  if (ok) {
    index_t const steps_down = r.hi - t;
    // from one step to the next, A moves by its m rows and dC by its m x n elements
    ok = at(a.p) == at(r.a_hi) - down(steps_down, m * a.rs) && at(g.p) == at(r.g_hi) - down(steps_down, m * n);
  }
  if (!ok) {
    flush_deferred(ex, r);  // the steps so far in one gemm; this one and the later per step
    return false;
  }
  if constexpr (Ex::step_gradient_rows > 0) {
    if ((r.hi - t + 1) * m > Ex::step_gradient_rows) {  // the executor's bound: the steps so far, then on from t
      flush_deferred(ex, r);
      r.a_hi = a.p;
      r.g_hi = g.p;
      r.hi = t;
      r.on = true;
    }
  }
  r.lo = t;
  return true;
}

/// Whether use U adds the column sums of a row-major matrix view of memory space Sp (its
/// domain, read at the identity) into a dense vector gradient: a bias added inside a scan's
/// body, whose gradient a sweep that kept every step takes in one reduction when it ends,
/// on an executor that asks for it (Ex::sums_rows_over_steps; defer_row_sum).
template <class U, class Sp>
struct row_sum_gradient : std::false_type {};
template <class D, class T, class S, class G, class Sp>
struct row_sum_gradient<ad::use<D, tensor_view<T const, S, row_major, Sp>, tuple<ad::ax_dom<1>>, G>, Sp>
    : std::bool_constant<D::rank == 2 && S::rank == 2 && G::rank == 1 && !G::sparse &&
                         std::is_same_v<typename G::value_type, T>> {};
/// The deferred steps of r in one reduction (r off after).
template <class Ex, class T>
void flush_row_sum(Ex& ex, deferred_sum<T>& r) {
  if (!r.on) return;
  r.on = false;
  index_t const q = r.hi - r.lo;
  ex.add_row_sums(r.dst, r.g_hi - q * r.m * r.n, (q + 1) * r.m, r.n);
}
/// Whether this step's row sums of use u (row_sum_gradient) are deferred (recorded) rather
/// than run now: u's matrix lies in the step's own memory, and the steps so far form one
/// contiguous block with it (else the steps so far run in one reduction, this one and the
/// later ones as they come).
template <class Ex, class U>
bool defer_row_sum(Ex& ex, U const& u) {
  using T = value_type_t<decltype(u.v_)>;
  sweep_deferral<T>* c = sweep_deferral_of<T>();
  if (!c) return false;
  auto at = [](T const* p) { return reinterpret_cast<std::uintptr_t>(p); };
  int const i = c->svisit++;
  if (!u.target_) return false;
  index_t const m = u.v_.shape().extent(0), n = u.v_.shape().extent(1);
  if (!(u.dom_ == u.v_.shape()) || u.target_->shape().extent(0) != n) return false;
  T* const dst = u.target_->data();
  T const* const gp = u.v_.data_;
  index_t const t = c->t;
  if (i >= c->ns) {  // the first step that visits it
    if (i != c->ns || i >= sweep_deferral<T>::max) return false;
    ++c->ns;
    auto& r = c->s[i];
    r = deferred_sum<T>{dst, m, n, gp, t, t, false};
    r.on = m > 0 && n > 0 && c->mem && at(gp) >= at(c->mem) &&
           at(gp) - at(c->mem) + std::uintptr_t(m * n) * sizeof(T) <= c->mem_n * sizeof(T);
    return r.on;
  }
  auto& r = c->s[i];
  if (!r.on) return false;
  bool const ok = r.dst == dst && r.m == m && r.n == n && r.lo == t + 1 &&
                  at(gp) == at(r.g_hi) - std::uintptr_t(r.hi - t) * std::uintptr_t(m * n) * sizeof(T);
  if (!ok) {
    flush_row_sum(ex, r);
    return false;
  }
  r.lo = t;
  return true;
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
    if constexpr (!batched && direct_gradient<PB, typename Ex::space>::value)
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
    ex.run(e);
  }
}

}  // namespace gradix::detail
