#pragma once
/// \file
/// A reverse sweep's deferred gradients (exec/elements.hpp, run_scan): a sweep that kept
/// every step's values takes a product's weight gradient (one gemm over the steps), a
/// bias's (one reduction over the steps) and the input's adjoint added at the identity (one
/// launch over the steps) when it ends rather than step by step; the records, the thread's
/// current sweep they hang from, the thread's transposed copies of a weight that the steps'
/// products read (step_transposed), and the functions that defer and flush them.

#include "gradix/ad/kernel.hpp"
#include "gradix/config.hpp"
#include "gradix/core/tuple.hpp"
#include "gradix/core/view.hpp"
#include "gradix/exec/gemm_target.hpp"
#include "gradix/expr/matmul.hpp"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <type_traits>

namespace gradix::detail {

/// A product's operand-B gradient dB = op(A)^T dC taken over the steps of a reverse sweep in
/// one gemm (sweep_deferral): A's rows and dC's rows over steps lo..hi are each one evenly
/// strided matrix ((hi - lo + 1) m rows), whose product accumulates into dst when the sweep
/// ends (or when a step breaks the pattern).
template <class T>
struct deferred_gradient {
  T* dst = nullptr;
  index_t ld = 0;  // dst's row stride (n: a whole gradient; more: a block of a weight's rows or columns)
  index_t m = 0, n = 0, k = 0;
  index_t a_rs = 0, a_cs = 0;  // A's strides (m x k)
  T const* a_hi = nullptr;     // A at step hi
  T const* g_hi = nullptr;     // dC at step hi (m x n, rows contiguous)
  index_t hi = 0, lo = 0;      // (from one step to the next A moves by m a_rs, dC by m n)
  bool on = false;
};
/// A parameter gradient dst[j] += sum over rows of g[r, j] (a bias added inside a scan's
/// body, `h Wh + bh`) taken over the steps of a reverse sweep in one reduction
/// (sweep_deferral): g's rows over steps lo..hi are one contiguous (hi - lo + 1) m x n matrix.
template <class T>
struct deferred_sum {
  T* dst = nullptr;
  index_t m = 0, n = 0;
  T const* g_hi = nullptr;  // g at step hi (from one step to the next it moves by m n)
  index_t hi = 0, lo = 0;
  bool on = false;
};
/// An input's adjoint dst[r, j] += g[r, j] (a step's own adjoint added at the identity into
/// the scan's input adjoint: the input x'_t of a body whose product was taken apart, read
/// beside that product, api/scan_hoist.hpp) taken over the steps of a reverse sweep in one
/// launch (sweep_deferral): g's rows over steps lo..hi are one contiguous
/// ((hi - lo + 1) m) x n matrix, dst's rows one matrix of row stride ld.
template <class T>
struct deferred_add {
  T* dst_hi = nullptr;      // dst at step hi (from one step to the next it moves by m ld)
  T const* g_hi = nullptr;  // g at step hi (it moves by m n)
  index_t m = 0, n = 0, ld = 0;
  index_t hi = 0, lo = 0;
  bool on = false;
};
/// The weight gradients a reverse sweep defers (run_scan, in a call that kept every step's
/// values, so that each step's dC stays in its own buffer: saved_sizes::step_adjoints): a
/// product whose B plan is one kernel into a dense block of a parameter gradient
/// (gemm_target: the whole gradient, or a block of its rows or columns) and whose A rows over the steps form one evenly strided matrix (read in
/// place from the carries, carry t - 1 being row block t of one buffer, or from the inputs,
/// or copied into the steps' buffers, which lie buffer by buffer) gets its dB from one gemm
/// over every step instead of one per step: in a sweep a step is then its body's adjoint
/// kernels and the carry's gemm. Products are told apart by the order the step visits them.
template <class T>
struct sweep_deferral {
  static constexpr int max = 8;
  deferred_gradient<T> d[max];
  int n = 0;       // records made
  int visit = 0;   // products visited in the current step (their operand B's gradients)
  int tvisit = 0;  // products visited in the current step (their operand A's gradients)
  deferred_sum<T> s[max];  // row sums into a parameter's gradient (Ex::sums_rows_over_steps)
  int ns = 0;              // records made
  int svisit = 0;          // row sums visited in the current step
  deferred_add<T> a[max];  // an input's adjoint added (Ex::adds_over_steps)
  int na = 0;              // records made
  int avisit = 0;          // such adds visited in the current step
  T* in_lo = nullptr;      // the scan's input adjoint (the only target such an add may have:
  T* in_hi = nullptr;      //   nothing reads it before the sweep ends)
  index_t t = 0;   // the current step
  index_t steps = 0;
  std::uint64_t serial = 0;  // this sweep among the thread's (step_transposed)
  // the steps' values of element type T (every step's own: a dC there stays until the
  // sweep ends; one elsewhere, in an adjoint buffer the steps share, is not deferred)
  T const* mem = nullptr;
  std::size_t mem_n = 0;
};
/// The thread's current sweep (type-erased: tag names its T), null outside a sweep.
struct sweep_slot {
  void const* tag = nullptr;
  void* ctx = nullptr;
};
[[gnu::noinline]] inline sweep_slot& current_sweep() {
  thread_local sweep_slot s;
  return s;
}
template <class T>
inline constexpr char sweep_tag_v = 0;
/// The thread's current sweep when it defers products of element type T.
template <class T>
sweep_deferral<T>* sweep_deferral_of() {
  sweep_slot const& s = current_sweep();
  return s.tag == &sweep_tag_v<T> ? static_cast<sweep_deferral<T>*>(s.ctx) : nullptr;
}
/// A sweep's copy of a product's operand B transposed (step_transposed): per product (by
/// visit order) and thread, kept from call to call so that a warm call allocates nothing;
/// valid for the sweep that made it (serial) and the operand it was made from.
template <class T>
struct transposed_copy {
  std::unique_ptr<T[]> p;
  std::size_t cap = 0;
  std::uint64_t sweep = 0;
  T const* src = nullptr;
  index_t rows = 0, cols = 0, cs = 0;  // (its row stride is 1: step_transposed copies no other)
};
template <class T>
transposed_copy<T>* step_transposes() {
  thread_local transposed_copy<T> c[sweep_deferral<T>::max];
  return c;
}
inline std::uint64_t next_sweep_serial() {
  thread_local std::uint64_t n = 0;
  return ++n;
}

// ---------------------------------------------------------------------------------------
// The deferrals themselves (run by exec/elements.hpp: run_product, run_element, run_scan).

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
  ex.gemm(1, r.k, r.n, (q + 1) * r.m, at, g, r.dst, r.ld, 0, true);
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
  auto const dt = gemm_target<typename Ex::space, T>(plan, n);
  if (!dt.p) return false;
  T* const dst = dt.p;
  index_t const ld = dt.ld;
  index_t const t = c->t;
  if (i >= c->n) {  // the first step that visits it
    if (i != c->n || i >= sweep_deferral<T>::max) return false;
    ++c->n;
    auto& r = c->d[i];
    r = deferred_gradient<T>{dst, ld, m, n, k, a.rs, a.cs, a.p, g.p, t, t, false};
    r.on = g.rs == n && g.cs == 1 && m > 0 && n > 0 && k * n >= Ex::step_gradient_min && c->mem && at(g.p) >= at(c->mem) &&
           at(g.p) - at(c->mem) + std::uintptr_t(m * n) * sizeof(T) <= c->mem_n * sizeof(T);
    return r.on;
  }
  auto& r = c->d[i];
  if (!r.on) return false;
  bool ok = r.dst == dst && r.ld == ld && r.m == m && r.n == n && r.k == k && r.a_rs == a.rs && r.a_cs == a.cs && g.rs == n &&
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

/// The bookkeeping a bias's and an input's deferral share (defer_row_sum, defer_add): the
/// i-th such use a step visits is record recs[i] (n made so far). The first step that visits
/// it makes `fresh`, on when `ok` and its step's adjoint g (g_n elements) lies in the steps'
/// own memory (nothing overwrites it before the sweep ends); a later step extends it when
/// same(r) holds (the same target and shapes, one step down the pattern), else flush(r)
/// runs the steps so far and this one runs by itself. Returns whether this step is deferred.
template <class T, class R, class Same, class Flush>
bool extend_deferral(sweep_deferral<T>& c, R* recs, int& n, int i, R const& fresh, bool ok, T const* g, std::size_t g_n,
                     Same&& same, Flush&& flush) {
  auto at = [](T const* p) { return reinterpret_cast<std::uintptr_t>(p); };
  if (i >= n) {  // the first step that visits it
    if (i != n || i >= sweep_deferral<T>::max) return false;
    ++n;
    R& r = recs[i];
    r = fresh;
    r.on = ok && c.mem && at(g) >= at(c.mem) && at(g) - at(c.mem) + g_n * sizeof(T) <= c.mem_n * sizeof(T);
    return r.on;
  }
  R& r = recs[i];
  if (!r.on) return false;
  if (!same(r)) {
    flush(r);
    return false;
  }
  r.lo = c.t;
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
  return extend_deferral(
      *c, c->s, c->ns, i, deferred_sum<T>{dst, m, n, gp, t, t, false}, m > 0 && n > 0, gp, std::size_t(m * n),
      [&](deferred_sum<T> const& r) {
        return r.dst == dst && r.m == m && r.n == n && r.lo == t + 1 &&
               at(gp) == at(r.g_hi) - std::uintptr_t(r.hi - t) * std::uintptr_t(m * n) * sizeof(T);
      },
      [&](deferred_sum<T>& r) { flush_row_sum(ex, r); });
}

/// Whether use U adds a row-major matrix view of memory space Sp (its domain, read at the
/// identity) at the identity into a dense row-major gradient: a step's own adjoint added
/// into the scan's input adjoint (a body whose product was taken apart reads its input x'_t
/// beside the product, api/scan_hoist.hpp), which a sweep that kept every step takes in one
/// launch when it ends, on an executor that asks for it (Ex::adds_over_steps; defer_add).
template <class U, class Sp>
struct step_add_gradient : std::false_type {};
template <class D, class T, class S, class G, class Sp>
struct step_add_gradient<ad::use<D, tensor_view<T const, S, row_major, Sp>, tuple<ad::ax_dom<0>, ad::ax_dom<1>>, G>, Sp>
    : std::bool_constant<D::rank == 2 && S::rank == 2 && G::rank == 2 && !G::sparse && row_major_dense<G>::value &&
                         std::is_same_v<typename G::value_type, T>> {};
/// The deferred steps of r in one launch (r off after).
template <class Ex, class T>
void flush_add(Ex& ex, deferred_add<T>& r) {
  if (!r.on) return;
  r.on = false;
  index_t const q = r.hi - r.lo;
  ex.add_rows(r.dst_hi - q * r.m * r.ld, r.ld, r.g_hi - q * r.m * r.n, (q + 1) * r.m, r.n);
}
/// Whether this step's add of use u (step_add_gradient) is deferred (recorded) rather than
/// run now: u's matrix lies in the step's own memory, its target in the scan's input
/// adjoint, and the steps so far form one evenly strided block with it (else the steps so
/// far run in one launch, this one and the later ones as they come).
template <class Ex, class U>
bool defer_add(Ex& ex, U const& u) {
  using T = value_type_t<decltype(u.v_)>;
  sweep_deferral<T>* c = sweep_deferral_of<T>();
  if (!c) return false;
  auto at = [](T const* p) { return reinterpret_cast<std::uintptr_t>(p); };
  int const i = c->avisit++;
  if (!u.target_) return false;
  index_t const m = u.v_.shape().extent(0), n = u.v_.shape().extent(1);
  auto const& mp = u.map_;
  auto const st = u.target_->strides();
  if (!(u.dom_ == u.v_.shape()) || get<0>(mp).scale_ != 1 || get<1>(mp).scale_ != 1 || st[1] != 1 || get<0>(mp).off_ != 0 ||
      get<1>(mp).off_ != 0 || u.target_->shape().extent(0) != m || u.target_->shape().extent(1) != n)
    return false;
  T* const dst = u.target_->data();
  index_t const ld = st[0];
  T const* const gp = u.v_.data_;
  index_t const t = c->t;
  bool const inside = c->in_lo && at(dst) >= at(c->in_lo) && at(dst + (m - 1) * ld + n) <= at(c->in_hi);
  auto down = [](index_t steps, index_t per) { return std::uintptr_t(steps) * std::uintptr_t(per) * sizeof(T); };
  return extend_deferral(
      *c, c->a, c->na, i, deferred_add<T>{dst, gp, m, n, ld, t, t, false}, m > 0 && n > 0 && inside, gp,
      std::size_t(m * n),
      [&](deferred_add<T> const& r) {
        return inside && r.m == m && r.n == n && r.ld == ld && r.lo == t + 1 &&
               at(gp) == at(r.g_hi) - down(r.hi - t, m * n) && at(dst) == at(r.dst_hi) - down(r.hi - t, m * ld);
      },
      [&](deferred_add<T>& r) { flush_add(ex, r); });
}

}  // namespace gradix::detail
