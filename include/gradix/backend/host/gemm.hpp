#pragma once
/// \file
/// General matrix products on the host, C = op(A) op(B) (+ C): through OpenBLAS's
/// cblas_sgemm / cblas_dgemm where gradix was built with it (GRADIX_USE_OPENBLAS, set by
/// meson when libopenblas-dev is installed), and through gradix's own loops otherwise (and
/// for long double, and in constant evaluation).
///
/// Operands are strided matrices: element (b, i, j) of a batch of matrices is
/// p[b * bs + i * rs + j * cs]. A BLAS takes a matrix with a unit stride along one axis;
/// which one it is becomes the call's transpose flag (a transposed view costs nothing).
/// Before each BLAS call the BLAS's thread count is set to gradix's (set_num_threads).

#include "gradix/backend/host/assign.hpp"
#include "gradix/backend/host/thread_pool.hpp"
#include "gradix/config.hpp"
#include "gradix/core/shape.hpp"
#include "gradix/expr/matmul.hpp"

#include <cstring>
#include <type_traits>

#if defined(GRADIX_USE_OPENBLAS)
// (OpenBLAS's header declares C99 complex types, which -Wpedantic flags in C++)
#if defined(__clang__)
#pragma clang diagnostic push
#pragma clang diagnostic ignored "-Wpedantic"
#pragma clang diagnostic ignored "-Wc99-extensions"
#elif defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpedantic"
#endif
#include <cblas.h>
#if defined(__clang__)
#pragma clang diagnostic pop
#elif defined(__GNUC__)
#pragma GCC diagnostic pop
#endif
#endif

namespace gradix::host {

// blas_form, blas_form_of: expr/matmul.hpp (the grid's gemm reads operands the same way)
using ::gradix::blas_form;
using ::gradix::blas_form_of;

namespace detail {
/// gradix's own product: parallel over the rows of C; per row an axpy over B's rows when B
/// is contiguous along j, dot products along k otherwise.
template <class T>
constexpr void gemm_loops(index_t batch, index_t m, index_t n, index_t k, mat_ref<T> a, mat_ref<T> b, T* c,
                          index_t ldc, index_t cbs, bool accumulate) {
  for (index_t q = 0; q < batch; ++q) {
    bool const add = accumulate || (cbs == 0 && q > 0);
    T* const cq = c + q * cbs;
    auto rows = [&](index_t i0, index_t i1) {
      for (index_t i = i0; i < i1; ++i) {
        T* const ci = cq + i * ldc;
        if (b.cs == 1) {
          if (!add)
            for (index_t j = 0; j < n; ++j) ci[j] = T(0);
          T const* const bq = b.p + q * b.bs;
          for (index_t kk = 0; kk < k; ++kk) {
            T const aik = a.at(q, i, kk);
            T const* const bk = bq + kk * b.rs;
            for (index_t j = 0; j < n; ++j) ci[j] += aik * bk[j];
          }
        } else {
          for (index_t j = 0; j < n; ++j) {
            T s = 0;
            for (index_t kk = 0; kk < k; ++kk) s += a.at(q, i, kk) * b.at(q, kk, j);
            ci[j] = add ? T(ci[j] + s) : s;
          }
        }
      }
    };
    if (std::is_constant_evaluated()) {
      rows(0, m);
    } else {
      index_t const per_row = n * (k > 0 ? k : 1);
      index_t const grain = per_row >= parallel_min_elements ? 1 : parallel_min_elements / per_row;
      parallel_ranges(m, rows, grain);
    }
  }
}

#if defined(GRADIX_USE_OPENBLAS)
inline void match_blas_threads() {
  int const n = pool().size();
  if (openblas_get_num_threads() != n) openblas_set_num_threads(n);
}
#endif
}  // namespace detail

/// C[q] = op(A[q]) op(B[q]) for q < batch (+ C[q] when accumulate), C row-major with leading
/// dimension ldc and batch stride cbs; cbs = 0 sums every batch element's product into one C.
/// A is m x k, B k x n.
template <class T>
constexpr void gemm(index_t batch, index_t m, index_t n, index_t k, mat_ref<T> a, mat_ref<T> b, T* c,
                    index_t ldc, index_t cbs, bool accumulate) {
  if (m == 0 || n == 0 || batch == 0) return;
  if (k == 0) {
    if (!accumulate)
      for (index_t q = 0; q < (cbs == 0 ? 1 : batch); ++q)
        for (index_t i = 0; i < m; ++i)
          for (index_t j = 0; j < n; ++j) c[q * cbs + i * ldc + j] = T(0);
    return;
  }
#if defined(GRADIX_USE_OPENBLAS)
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    if (!std::is_constant_evaluated()) {
      blas_form const fa = blas_form_of(m, k, a.rs, a.cs), fb = blas_form_of(k, n, b.rs, b.cs);
      constexpr index_t imax = 2147483647;
      bool const fits = m <= imax && n <= imax && k <= imax && fa.ld <= imax && fb.ld <= imax &&
                        ldc <= imax && (batch == 1 || m <= imax / batch);
      if (fa.ok && fb.ok && fits) {
        // the rows of every batch element stacked into one matrix: one call
        if (batch > 1 && b.bs == 0 && cbs == m * ldc && !fa.trans && a.bs == m * fa.ld) {
          m *= batch;
          batch = 1;
        }
        detail::match_blas_threads();
        for (index_t q = 0; q < batch; ++q) {
          bool const add = accumulate || (cbs == 0 && q > 0);
          auto const ta = fa.trans ? CblasTrans : CblasNoTrans, tb = fb.trans ? CblasTrans : CblasNoTrans;
          if constexpr (std::is_same_v<T, float>)
            cblas_sgemm(CblasRowMajor, ta, tb, int(m), int(n), int(k), 1.0f, a.p + q * a.bs, int(fa.ld),
                        b.p + q * b.bs, int(fb.ld), add ? 1.0f : 0.0f, c + q * cbs, int(ldc));
          else
            cblas_dgemm(CblasRowMajor, ta, tb, int(m), int(n), int(k), 1.0, a.p + q * a.bs, int(fa.ld),
                        b.p + q * b.bs, int(fb.ld), add ? 1.0 : 0.0, c + q * cbs, int(ldc));
        }
        return;
      }
    }
  }
#endif
  detail::gemm_loops(batch, m, n, k, a, b, c, ldc, cbs, accumulate);
}

/// Whether gradix calls a BLAS for products of T (at run time).
template <class T>
inline constexpr bool uses_blas_v =
#if defined(GRADIX_USE_OPENBLAS)
    std::is_same_v<T, float> || std::is_same_v<T, double>;
#else
    false;
#endif

}  // namespace gradix::host
