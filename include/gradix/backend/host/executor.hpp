#pragma once
/// \file
/// The host's executor (exec/executor.hpp): host memory, the thread's workspace, the host's
/// loops (host::assign, host::gemm, backend/host/kept.hpp) and its plan kernels
/// (backend/host/update.hpp, fused.hpp, row_adjoint.hpp). The save transform (exec/save.hpp) and
/// the plan runner (exec/run.hpp) run over it for every call on host expressions.

#include "gradix/backend/host/assign.hpp"
#include "gradix/backend/host/gemm.hpp"
#include "gradix/backend/host/kept.hpp"
#include "gradix/backend/host/row_adjoint.hpp"
#include "gradix/backend/host/update.hpp"
#include "gradix/config.hpp"
#include "gradix/core/layout.hpp"
#include "gradix/exec/elements.hpp"
#include "gradix/exec/checks.hpp"
#include "gradix/exec/executor.hpp"
#include "gradix/expr/matmul.hpp"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <new>

namespace gradix::host {

struct executor {
  using space = host_space;
  /// A scan step whose values no sweep reads keeps its lets' elementwise operands in
  /// buffers (exec/save_scan.hpp, keep_scan): recomputing them where they are read (an LSTM
  /// cell's c2 twice, its gates' sigmoids with it) measured 20-35% slower on the host than
  /// writing them and reading them back from cache.
  static constexpr bool inlines_step_lets = false;
  /// A kept step's lets are assigned one loop after another (each reads the buffers the
  /// earlier ones wrote) rather than in one launch recomputing them (the grid's).
  static constexpr bool assigns_together = false;
  /// A scan's reverse sweep takes a weight's gradient of at least 2^17 elements (512 KB of
  /// floats) over several steps at once, in gemms of at most 128 rows of inner extent (4
  /// steps of a batch of 32), and a smaller one step by step (exec/elements.hpp,
  /// sweep_deferral). Measured with OpenBLAS 0.3.21 on an AMD EPYC (Zen 1), 1 thread: an
  /// LSTM's 256 x 1024 gradient over 64 steps of 32 rows took 30 ms in one gemm, 28 ms step
  /// by step, 25 ms in gemms of 128 rows, and taking it 4 steps at a time spares the
  /// step-by-step read and write of the whole 1 MB gradient (examples/char_rnn's step 8-9%
  /// faster); an Elman layer's 128 x 128 gradient over 1024 steps took 84 ms in one gemm, 31
  /// step by step, 30 in gemms of 128 rows, yet bench/scan.cpp's sweep ran 35% slower with
  /// it deferred in gemms of 128 rows (not understood: the gemms alone do not account for it).
  static constexpr index_t step_gradient_rows = 128;
  static constexpr index_t step_gradient_min = index_t(1) << 17;
  /// A scan's reverse sweep reads a weight B that its steps' products share in the gemm of
  /// each step's dA = dC B^T: OpenBLAS reads B^T in its NT form, which runs up to 2.5 times
  /// slower than NN when a step has few rows and the inner extent is long (0.3.21, 1 thread,
  /// AMD EPYC Zen 4: 64 steps of [32 x 1024] times a 256 x 1024 weight transposed, 20.9 ms
  /// NT, 13.0 ms NN on a transposed copy; 0.40 / 0.62 / 0.85 / 0.92 of NT at 8 / 32 / 128 /
  /// 256 rows, never slower). So a sweep of at least step_transpose_steps steps with at most
  /// step_transpose_rows rows per step transposes a weight of at least step_transpose_min
  /// elements once and every step reads the copy (exec/sweep.hpp, step_transposed).
  static constexpr index_t step_transpose_rows = 256;
  static constexpr index_t step_transpose_steps = 8;
  static constexpr index_t step_transpose_min = index_t(1) << 16;
  /// dst (row-major rows x cols) = src (rows x cols, any strides), in tiles.
  template <class T>
  static void transpose(T* dst, mat_ref<T> const& src, index_t rows, index_t cols) {
    constexpr index_t tile = 32;
    for (index_t i0 = 0; i0 < rows; i0 += tile)
      for (index_t j0 = 0; j0 < cols; j0 += tile) {
        index_t const i1 = std::min(rows, i0 + tile), j1 = std::min(cols, j0 + tile);
        for (index_t j = j0; j < j1; ++j)
          for (index_t i = i0; i < i1; ++i) dst[i * cols + j] = src.p[i * src.rs + j * src.cs];
      }
  }
  /// The storage guard of a plan: busy flags, and the storages' state kept for a rollback.
  template <std::size_t N>
  using guard = ::gradix::detail::storage_guard<N>;
  static std::byte* allocate(std::size_t bytes) {
    return static_cast<std::byte*>(::operator new(bytes, std::align_val_t{64}));
  }
  static void deallocate(std::byte* p) noexcept { ::operator delete(p, std::align_val_t{64}); }
  /// The calling thread's workspace (out of line: see host::scratch()).
  [[gnu::noinline]] static exec::call_workspace& workspace() {
    thread_local exec::call_workspace w([](void*, std::byte* p) noexcept { deallocate(p); }, nullptr);
    return w;
  }
  template <class V, class E>
  static constexpr void assign(V const& dst, E const& e) {
    host::assign(dst, e);
  }
  /// Whether gemm reads a strided matrix in place: always with gradix's loops; with a BLAS,
  /// when one of its axes has a unit stride (blas_form_of).
  template <class T>
  static constexpr bool in_place(index_t rows, index_t cols, index_t rs, index_t cs) {
    if constexpr (uses_blas_v<T>) {
      if (std::is_constant_evaluated()) return true;
      return blas_form_of(rows, cols, rs, cs).ok;
    } else {
      return true;
    }
  }
  template <class T>
  static constexpr void gemm(index_t batch, index_t m, index_t n, index_t k, mat_ref<T> a, mat_ref<T> b, T* c,
                             index_t ldc, index_t bs, bool accumulate) {
    host::gemm(batch, m, n, k, a, b, c, ldc, bs, accumulate);
  }
  template <class N, class T>
  static constexpr void rows(N const& n, T* c, T* rstd) {
    row_values(n, c, rstd);
  }
  template <class N, class T>
  static constexpr void segments(N const& n, T* c) {
    segment_values(n, c);
  }
  template <class N, class T>
  static constexpr void bags(N const& n, index_t* bag, T* scale) {
    bag_positions(n, bag, scale);
  }
  template <class N>
  static constexpr void argmax(N const& n, index_t* arg) {
    argmax_values(n, arg);
  }

  // plan elements (exec/run.hpp, exec/elements.hpp): the kernels of uses, fused pairs and
  // multi uses; a row use's operand adjoint; clearing an adjoint buffer
  // (a plain use whose target is an armed fused sink, exec/fused_sink.hpp, runs row by row:
  // it reserves nothing in the buffer, backend/host/fused_rows.hpp)
  template <class U>
  static gradix::detail::fused_sink* rows_sink(U const& u) {
    if constexpr (ad::is_plain_use<U>::value) {
      if constexpr (fused_rows_ok<U>) {
        if (gradix::detail::fused_sink* s = gradix::detail::armed_sink(u.target_))
          if (fused_rows_fit(u)) return s;
      }
    }
    return nullptr;
  }
  template <class U>
  static constexpr void prepare(U const& u) {
    if (!std::is_constant_evaluated() && rows_sink(u)) return;
    host::prepare(u);
  }
  template <class U>
  static std::size_t scratch_bytes(U const& u) {
    if (rows_sink(u)) return fused_rows_bytes(u);
    return host::scratch_bytes(u);
  }
  static void reserve_scratch(std::size_t bytes) { scratch().reserve(bytes); }
  template <class U>
  static void run(U const& u) {
    if constexpr (ad::is_plain_use<U>::value) {
      if (gradix::detail::fused_sink* s = rows_sink(u)) {
        host::run(u, s);
        return;
      }
    }
    host::run(u);
  }
  template <class U>
  static constexpr void run_serial(U const& u) {
    host::run_serial(u);
  }
  template <bool Serial, class U>
  static constexpr void row_adjoint(U const& u) {
    host::row_adjoint<Serial>(u);
  }
  template <class T>
  static constexpr void clear(T* p, index_t n) {
    if (std::is_constant_evaluated()) {
      for (index_t q = 0; q < n; ++q) p[q] = T(0);
    } else if (n > 0) {
      std::memset(static_cast<void*>(p), 0, std::size_t(n) * sizeof(T));
    }
  }
  template <class E>
  static constexpr value_type_t<E> value(E const& e) {
    return host::value(e);
  }
  // the loss value carried by a gradient kernel (backend/host/plan_facts.hpp)
  template <class Root, class U>
  static constexpr bool carries_loss = carries_loss_v<Root, U>;
  template <class Root, class U>
  static constexpr bool carries_row_maxima = carries_row_maxima_v<Root, U>;
  template <class U, class Root>
  static std::size_t carry_scratch_bytes(U const& u, Root const& root) {
    return host::carry_scratch_bytes(u, root);
  }
  template <class U, class Root>
  static bool run_carrying(U const& u, Root const& root, value_type_t<Root>* parts) {
    return host::run_carrying(u, root, parts);
  }
};
static_assert(exec::executor<executor>);

}  // namespace gradix::host
