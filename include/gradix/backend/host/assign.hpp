#pragma once
/// \file
/// Host loop nests: evaluate an expression into a destination view, and the value of a
/// rank-0 expression. The loop walks the destination's contiguous axis innermost, in SIMD
/// packs, with the other axes outside (an odometer: no division or modulo per element).
/// Large work is split into tasks of contiguous flat ranges for the thread pool; every
/// element is written by exactly one task, so results do not depend on the thread count.

#include "gradix/backend/host/thread_pool.hpp"
#include "gradix/config.hpp"
#include "gradix/core/coords.hpp"
#include "gradix/core/half.hpp"
#include "gradix/core/simd.hpp"
#include "gradix/core/view.hpp"
#include "gradix/eval/elementwise.hpp"
#include "gradix/eval/evaluator.hpp"
#include "gradix/eval/reduce.hpp"

#include <type_traits>

namespace gradix::host {

/// Calls f(c, len) for each contiguous run of the flat range [f0, f1) of a domain with
/// extents ext, walked with axis A innermost (other axes row-major, last fastest); c is the
/// run's first coordinate. One division per call, none per run or element.
template <std::size_t R, std::size_t A, class F>
constexpr void for_each_run(array<index_t, R> const& ext, index_t f0, index_t f1, F&& f) {
  index_t n_in = ext[A];
  if (n_in == 0 || f0 >= f1) return;
  index_t row = f0 / n_in, off = f0 % n_in;
  coord<R> c = coords::unravel(ext, coords::all_but<R>(A), row);
  index_t fl = f0;
  while (fl < f1) {
    index_t len = n_in - off < f1 - fl ? n_in - off : f1 - fl;
    c[A] = off;
    f(c, len);
    fl += len;
    off = 0;
    coords::next(c, ext, coords::all_but<R>(A));
  }
}

/// Runs body(f0, f1) over [0, n) in tasks of at least `grain` elements; serially when small.
template <class Body>
void parallel_ranges(index_t n, Body&& body, index_t grain = parallel_min_elements) {
  thread_pool& p = pool();
  // small, or one thread: one task, [0, n), run on the calling thread (through the same
  // task function, so that body is compiled once)
  index_t tasks = 1, chunk = n;
  if (n >= 2 * grain && p.size() > 1) {
    tasks = n / grain;
    index_t max_tasks = index_t(p.size()) * 8;
    if (tasks > max_tasks) tasks = max_tasks;
    chunk = (n + tasks - 1) / tasks;
    chunk = (chunk + 63) / 64 * 64;  // keep task boundaries aligned to whole cache lines
    tasks = (n + chunk - 1) / chunk;
  }
  auto task = [&](index_t k) {
    index_t a = k * chunk;
    index_t b = a + chunk < n ? a + chunk : n;
    body(a, b);
  };
  p.run(tasks, task);
}

/// Executor that runs the blocks of a reduction on the thread pool, or (serial_, and in
/// constant evaluation) in order on the calling thread.
struct pool_exec {
  bool serial_ = false;
  /// Number of threads that run tasks.
  constexpr index_t workers() const {
    return serial_ || std::is_constant_evaluated() ? 1 : index_t(pool().size());
  }
  template <class F>
  constexpr void operator()(index_t n, F&& f) const {
    if (std::is_constant_evaluated()) {
      for (index_t k = 0; k < n; ++k) f(k);
      return;
    }
    pool().run(n, f, serial_);
  }
};

/// The value of a rank-0 expression; a reduction at the root runs its blocks in parallel
/// when it is large. (One executor type for both cases: the root's reduction is compiled
/// once.)
template <class E>
constexpr value_type_t<E> value(E const& e) {
  ev::evaluator<E> ev(e);
  if constexpr (is_reduce_node<E>::value) {
    return ev.compute(coord<0>{}, pool_exec{ev.count() < 2 * parallel_min_elements});
  } else {
    return ev(coord<0>{});
  }
}

/// Writes e into dst (same shape, checked by the caller).
template <class DT, class DS, class DL, class E>
constexpr void assign(tensor_view<DT, DS, DL, host_space> const& dst, E const& e) {
  constexpr std::size_t R = DS::rank;
  using T = value_type_t<E>;
  if constexpr (R == 0) {
    dst[coord<0>{}] = DT(host::value(e));
  } else {
    ev::evaluator<E> ev(e);
    auto ext = dst.shape().extents();
    if (std::is_constant_evaluated()) {
      for_each_run<R, R - 1>(ext, 0, dst.size(), [&](coord<R> c, index_t len) {
        for (index_t i = 0; i < len; ++i, ++c[R - 1]) dst[c] = DT(ev(c));
      });
      return;
    }
    constexpr std::size_t A = DL::template unit_axis<R>;
    index_t sA = dst.stride(A);
    DT* base = dst.data();
    auto body = [&](index_t f0, index_t f1) {
      for_each_run<R, A>(ext, f0, f1, [&](coord<R> const& c, index_t len) {
        auto in = ev.template outer<int(A)>(c);
        DT* d = base + dst.offset(c);
#if defined(GRADIX_HAS_VECTOR_EXT)
        if constexpr (unit_stride_v<DL, R, A> && std::is_same_v<compute_type_t<DT>, T>) {
          constexpr int W = simd::width<T>;  // half-width DT: float packs rounded to nearest (even)
          index_t i = 0;
          for (; i + W <= len; i += W) simd::store_narrow<DT, W>(d + i, in.template pack<W>(i));
          for (; i < len; ++i) d[i] = DT(in.elem(i));
          return;
        }
#endif
        for (index_t i = 0; i < len; ++i) d[i * sA] = DT(in.elem(i));
      });
    };
    parallel_ranges(dst.size(), body);
  }
}

}  // namespace gradix::host
