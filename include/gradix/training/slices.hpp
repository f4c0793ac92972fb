#pragma once
/// \file
/// The gradient accessors optimizers are built on: the slices of a parameter's gradient that
/// backward touched.
///
/// A parameter's gradient is stored in *slices* along its storage axis (grad/storage.hpp):
/// dense storage tracks which slices backward touched, sparse storage keeps only those.
/// `for_each_grad_slice(p, f)` and `update_touched(p, f)` walk the slices that may hold a
/// nonzero gradient, for both kinds alike and in any layout, so an update written by hand
/// needs no pointer arithmetic into `value().data()`. The `detail::` helpers below
/// (`slice_count`, `slice_runs`, `slice_elements`) are what the optimizers of
/// training/optimizers.hpp loop with: runs of elements consecutive in both a parameter's value
/// and its gradient. They only read the gradient storage; writing values is the caller's.
///
/// Part of `<gradix/optim.hpp>` (docs/optim.md), which includes this header.

#include "gradix/api/param.hpp"
#include "gradix/config.hpp"
#include "gradix/core/array.hpp"
#include "gradix/core/coords.hpp"
#include "gradix/core/layout.hpp"

#include <cstddef>
#include <type_traits>
#include <utility>

namespace gradix {

namespace detail {
template <class P>
using param_storage_t = std::remove_cvref_t<decltype(std::declval<P&>().grad())>;

/// Number of slices of p (the extent of its storage axis; 1 for rank 0).
template <class P>
index_t slice_count(P const& p) {
  using G = param_storage_t<P>;
  if constexpr (G::rank == 0) return 1;
  else return p.value().shape().extent(G::axis);
}

/// Calls run(off, g, n) for runs of n elements of slice id of p that are consecutive in
/// both p's value and its gradient, covering the slice: off is the first element's offset
/// in p's value (and in any tensor of p's shape and layout), g a pointer to its gradient, or
/// nullptr when the slice holds none (a sparse slice not stored). One run when the slice is
/// contiguous (row-major with axis 0, column-major with the last axis, rank 1), else runs
/// of one element.
template <class P, class F>
void slice_runs(P& p, index_t id, F&& run) {
  using G = param_storage_t<P>;
  using L = typename P::layout_type;
  constexpr std::size_t R = G::rank;
  auto& g = p.grad();
  using T = typename G::value_type;
  if constexpr (R == 0) {
    run(index_t(0), static_cast<T const*>(g.data()), index_t(1));
  } else {
    constexpr std::size_t A = G::axis;
    auto const ext = p.value().shape().extents();
    auto const vst = contiguous_strides<L>(ext);
    auto const gst = g.strides();
    index_t const slot = g.slot(id);
    T const* const gbase = slot >= 0 ? g.data() + slot * gst[A] : nullptr;
    index_t const vbase = id * vst[A];
    index_t n = 1;
    for (std::size_t k = 0; k < R; ++k)
      if (k != A) n *= ext[k];
    if (n == 0) return;
    // one contiguous run in both the value and the gradient (row-major with axis 0,
    // column-major with the last axis, rank 1): a flat loop
    bool flat = true;
    {
      index_t want_v = 1, want_g = 1;
      auto check = [&](std::size_t k) {
        if (k == A || ext[k] == 1) return;
        flat = flat && vst[k] == want_v && gst[k] == want_g;
        want_v *= ext[k];
        want_g *= ext[k];
      };
      if constexpr (std::is_same_v<L, col_major>) {
        for (std::size_t k = 0; k < R; ++k) check(k);
      } else {
        for (std::size_t k = R; k-- > 0;) check(k);
      }
    }
    if (flat) {
      run(vbase, gbase, n);
      return;
    }
    coord<R> c{};
    for (index_t e = 0; e < n; ++e) {
      index_t vo = vbase, go = 0;
      for (std::size_t k = 0; k < R; ++k)
        if (k != A) {
          vo += c[k] * vst[k];
          go += c[k] * gst[k];
        }
      run(vo, gbase ? gbase + go : nullptr, index_t(1));
      coords::next(c, ext, coords::all_but<R>(A));
    }
  }
}
/// Calls f(off, g) for every element of slice id of p (slice_runs, one element at a time).
template <class P, class F>
void slice_elements(P& p, index_t id, F&& f) {
  slice_runs(p, id, [&](index_t off, auto const* g, index_t n) {
    for (index_t e = 0; e < n; ++e) f(off + e, g ? g + e : nullptr);
  });
}
}  // namespace detail

/// Calls f(id) for every slice of p's gradient that may hold a nonzero value: the slices
/// backward touched (dense storage: every slice once all are touched; sparse: the stored
/// ones), in the order they were first written.
template <class P, class F>
  requires requires(P& p) { p.grad(); p.value(); }
void for_each_grad_slice(P& p, F&& f) {
  auto& g = p.grad();
  using G = detail::param_storage_t<P>;
  if constexpr (G::sparse) {
    for (index_t k = 0; k < g.size(); ++k) f(g.id(k));
  } else {
    if (g.all_touched()) {
      index_t const n = detail::slice_count(p);
      for (index_t id = 0; id < n; ++id) f(id);
    } else {
      for (index_t id : g.touched()) f(id);
    }
  }
}

/// Calls f(value, grad) for every element of the slices for_each_grad_slice visits: value a
/// reference to the parameter's element, grad its gradient. `update_touched(p, [&](float& w,
/// float g) { w -= lr * g; })` is plain SGD, for dense and sparse gradients alike.
template <class P, class F>
  requires requires(P& p) { p.grad(); p.value(); }
void update_touched(P& p, F&& f) {
  auto* v = p.value().data();
  for_each_grad_slice(p, [&](index_t id) {
    detail::slice_elements(p, id, [&](index_t off, auto const* g) { f(v[off], *g); });
  });
}

}  // namespace gradix
