#pragma once
/// \file
/// A reverse sweep's deferred gradients (exec/elements.hpp, run_scan): a sweep that kept
/// every step's values takes a product's weight gradient (one gemm over the steps) and a
/// bias's (one reduction over the steps) when it ends rather than step by step; the records
/// here, the thread's current sweep they hang from, and the thread's transposed copies of
/// a weight that the steps' products read (step_transposed).

#include "gradix/config.hpp"

#include <cstddef>
#include <cstdint>
#include <memory>

namespace gradix::detail {

/// A product's operand-B gradient dB = op(A)^T dC taken over the steps of a reverse sweep in
/// one gemm (sweep_deferral): A's rows and dC's rows over steps lo..hi are each one evenly
/// strided matrix ((hi - lo + 1) m rows), whose product accumulates into dst when the sweep
/// ends (or when a step breaks the pattern).
template <class T>
struct deferred_gradient {
  T* dst = nullptr;
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
/// The weight gradients a reverse sweep defers (run_scan, in a call that kept every step's
/// values, so that each step's dC stays in its own buffer: saved_sizes::step_adjoints): a
/// product whose B plan is one direct kernel into a dense parameter gradient
/// (direct_gradient) and whose A rows over the steps form one evenly strided matrix (read in
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

}  // namespace gradix::detail
