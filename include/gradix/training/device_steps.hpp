#pragma once
/// \file
/// The optimizers' steps on device parameters (grid::param; issue 33): grid kernels written
/// against the launch abstraction, one thread per element, in the parameter's launcher's
/// order. The optimizers of training/optimizers.hpp call them for a device parameter where
/// they run their host loops for a host one, with the same per-element formulas and the same
/// choice of elements:
///
///   all_dense    every element of a dense storage (its gradient read at the same offset);
///   touched      every element of every stored slice of a sparse storage (slot by slot);
///   all_sparse   every element of a parameter with sparse storage, its gradient looked up
///                through the slot map (0 where nothing is stored: Adam's dense algorithm).
///
/// A dense device storage tracks no touched slices, so the host's "touched slices of a dense
/// storage" is every slice on the device (the same result for SGD without momentum and for
/// Adagrad: an element with gradient 0 does not move). Per-slice state (SGD's first-step
/// flags, lazy Adam's last step) lives in device arrays indexed by the position along the
/// sparse axis, written by a second kernel over the stored slices once the elements are done.
/// A half-width parameter (bfloat16, half) is read widened and written rounded, once per
/// element and step (`rounded_values`, the host's optim::detail::values): its gradient and
/// state are float. Never run on a GPU; the emulator suite compares them with the host's
/// steps (tests/cuda/optim_test.cpp, to the bit for the half-width parameters).

#include "gradix/backend/grid/grad.hpp"
#include "gradix/backend/grid/launch.hpp"
#include "gradix/backend/grid/memory.hpp"
#include "gradix/config.hpp"
#include "gradix/core/array.hpp"
#include "gradix/core/coords.hpp"
#include "gradix/core/half.hpp"
#include "gradix/core/layout.hpp"
#include "gradix/core/rng.hpp"
#include "gradix/core/tensor.hpp"

#include <cmath>
#include <cstdint>
#include <type_traits>

namespace gradix::optim::device {

/// Whether P is a device parameter (grid::param).
template <class P>
inline constexpr bool is_device_param_v = requires { typename P::launcher_type; };

/// Where an element's gradient is: dense (same offset as the value), or a sparse storage's
/// stored slices (slot map, ids, slices) along Axis.
template <class T, std::size_t R, std::size_t Axis, class Layout>
struct sparse_view {
  std::int32_t const* slot_of;
  std::int32_t const* ids;
  T const* data;
  std::int32_t const* count;
  index_t slice;
  array<index_t, R> sext;   // the value's extents with Axis's set to 1 (a slice)
  array<index_t, R> sst;    // strides inside a slice (Axis's unused)
  array<index_t, R> wst;    // the value's strides
};

/// f(offset in the value, gradient, position along the sparse axis or -1) for each element the
/// step visits (see the file comment): Kind 0 all_dense, 1 touched, 2 all_sparse.
template <int Kind, class T, std::size_t R, std::size_t Axis, class Layout, class F>
struct step_kernel {
  static constexpr bool uses_barriers = false;
  F f_;
  T const* g_;                           // all_dense: the dense gradient
  sparse_view<T, R, Axis, Layout> sv_;   // touched, all_sparse
  array<index_t, R> ext_;                // the value's extents
  index_t n_;                            // elements to visit (touched: capacity x slice)
  GRADIX_KERNEL_BODY
  template <class Ctx>
  GRADIX_HOST_DEVICE void operator()(Ctx const& c) const {
    for (index_t k = grid::grid_first(c); k < n_; k += grid::grid_step(c)) {
      if constexpr (Kind == 0) {  // (a dense storage's slices are along axis 0)
        f_(k, g_[k], R == 0 ? index_t(0) : coords::unravel_in<Layout>(ext_, k)[0]);
      } else if constexpr (Kind == 1) {
        index_t const slot = k / sv_.slice;
        if (slot >= index_t(*sv_.count)) continue;
        index_t const id = sv_.ids[slot];
        coord<R> co = coords::unravel_in<Layout>(sv_.sext, k % sv_.slice);
        co[Axis] = id;
        index_t off = 0;
        for (std::size_t j = 0; j < R; ++j) off += co[j] * sv_.wst[j];
        f_(off, sv_.data[k], id);
      } else {
        coord<R> const co = coords::unravel_in<Layout>(ext_, k);
        index_t off = 0, in = 0;
        for (std::size_t j = 0; j < R; ++j) {
          off += co[j] * sv_.wst[j];
          if (j != Axis) in += co[j] * sv_.sst[j];
        }
        std::int32_t const slot = sv_.slot_of[co[Axis]];
        f_(off, slot >= 0 ? sv_.data[index_t(slot) * sv_.slice + in] : T(0), co[Axis]);
      }
    }
  }
};

/// f(position) for each stored slice of a sparse storage (per-slice state after a step).
template <class F>
struct per_slice_kernel {
  static constexpr bool uses_barriers = false;
  F f_;
  std::int32_t const* ids_;
  std::int32_t const* count_;
  index_t capacity_;
  GRADIX_KERNEL_BODY
  template <class Ctx>
  GRADIX_HOST_DEVICE void operator()(Ctx const& c) const {
    for (index_t s = grid::grid_first(c); s < capacity_; s += grid::grid_step(c))
      if (s < index_t(*count_)) f_(index_t(ids_[s]));
  }
};

/// Runs f over the elements of device parameter p that a step visits (Kind as step_kernel's;
/// a dense storage always all_dense).
template <int Kind, class P, class F>
void visit(P& p, F const& f) {
  using T = compute_type_t<typename P::value_type>;  // the gradient's type
  using S = typename P::shape_type;
  using Lay = typename P::layout_type;
  using G = typename P::storage_type;
  constexpr std::size_t R = S::rank;
  auto& l = p.launcher();
  auto const ext = p.value().shape().extents();
  array<index_t, R> const wst = contiguous_strides<Lay>(ext);
  index_t const size = p.value().shape().size();
  if constexpr (!G::sparse) {
    using K = step_kernel<0, T, R, 0, Lay, F>;
    if (size > 0) l.launch(grid::shape_for(size, {}, l.max_threads()), K{f, p.grad().data(), {}, ext, size});
  } else {
    constexpr std::size_t Ax = G::axis;
    auto const r = p.grad().current();
    sparse_view<T, R, Ax, Lay> sv{r.slot_of, r.ids, r.data, r.count, r.slice, ext, p.grad().strides(), wst};
    sv.sext[Ax] = 1;
    if constexpr (Kind == 2) {
      if (size > 0)
        l.launch(grid::shape_for(size, {}, l.max_threads()), step_kernel<2, T, R, Ax, Lay, F>{f, nullptr, sv, ext, size});
    } else {
      index_t const n = p.grad().capacity() * r.slice;
      if (n > 0) l.launch(grid::shape_for(n, {}, l.max_threads()), step_kernel<1, T, R, Ax, Lay, F>{f, nullptr, sv, ext, n});
    }
  }
}
/// f(position) for positions 0 .. n_ - 1 (per-slice state of a dense storage, whose every
/// slice a step visits).
template <class F>
struct all_slices_kernel {
  static constexpr bool uses_barriers = false;
  F f_;
  index_t n_;
  GRADIX_KERNEL_BODY
  template <class Ctx>
  GRADIX_HOST_DEVICE void operator()(Ctx const& c) const {
    for (index_t s = grid::grid_first(c); s < n_; s += grid::grid_step(c)) f_(s);
  }
};
/// The number of slices of p: the extent of its storage's axis (1 for a rank-0 parameter).
template <class P>
index_t slice_total(P const& p) {
  using G = typename P::storage_type;
  if constexpr (P::shape_type::rank == 0) return 1;
  else return p.value().shape().extent(G::axis);
}
/// Runs f(position) for each slice a step visited: the stored slices of a sparse storage,
/// every slice of a dense one.
template <class P, class F>
void per_slice(P& p, F const& f) {
  using G = typename P::storage_type;
  auto& l = p.launcher();
  if constexpr (G::sparse) {
    auto const r = p.grad().current();
    index_t const cap = p.grad().capacity();
    if (cap > 0) l.launch(grid::shape_for(cap, {}, l.max_threads()), per_slice_kernel<F>{f, r.ids, r.count, cap});
  } else {
    index_t const n = slice_total(p);
    if (n > 0) l.launch(grid::shape_for(n, {}, l.max_threads()), all_slices_kernel<F>{f, n});
  }
}

// The element updates (GRADIX_HOST_DEVICE functors: the same formulas as the host's).

/// A parameter's values as an element update reads and writes them: widened on read;
/// rounded on write to nearest (ties to even) or stochastically, with the step's key
/// (element k draws rng::bits(key, k): the same bits for any launch shape or thread count).
/// The host's steps read theirs through it too (optim::detail::values).
template <class S>
struct rounded_values {
  using T = compute_type_t<S>;
  S* w;
  bool stochastic = false;
  std::uint64_t key = 0;
  GRADIX_HOST_DEVICE T get(index_t off) const { return T(w[off]); }
  GRADIX_HOST_DEVICE void put(index_t off, T v) const {
    if constexpr (is_half_width_v<S>) {
      if (stochastic) w[off] = round_stochastic<S>(v, std::uint32_t(rng::bits(key, std::uint64_t(off))));
      else w[off] = S(v);
    } else {
      w[off] = v;
    }
  }
};
/// The values of parameter p (host or device) for one step (a stochastic rounding draws the step's key
/// here, once, as the host's step does).
template <class P>
rounded_values<typename P::value_type> rounded_values_of(P& p) {
  rounded_values<typename P::value_type> r{p.value().data()};
  if constexpr (is_half_width_v<typename P::value_type>) {
    r.stochastic = p.rounding().stochastic;
    if (r.stochastic) r.key = p.next_rounding_key();
  }
  return r;
}

/// SGD: g += wd * w; with momentum b = fresh ? g : mu * b + damp * g, g = nesterov ? g + mu * b
/// : b; w -= lr * g. fresh: the slice's first step (per position, or one flag for dense).
template <class S>
struct sgd_update {
  using T = compute_type_t<S>;
  rounded_values<S> w;
  T* b;                          // momentum buffer (null without momentum)
  unsigned char const* first;    // per position along the storage's axis (momentum only)
  T lr, wd, mu, damp;
  bool nesterov;
  GRADIX_HOST_DEVICE void operator()(index_t off, T g, index_t id) const {
    T const wv = w.get(off);
    if (wd != T(0)) g += wd * wv;
    if (mu != T(0)) {
      bool const fresh = first[id] != 0;
      b[off] = fresh ? g : T(mu * b[off] + damp * g);
      g = nesterov ? T(g + mu * b[off]) : b[off];
    }
    w.put(off, wv - lr * g);
  }
};
/// After an SGD step with momentum: the slices it visited are no longer fresh.
struct clear_flag {
  unsigned char* first;
  GRADIX_HOST_DEVICE void operator()(index_t id) const { first[id] = 0; }
};

/// Adagrad: g += wd * w; s += g^2; w -= lr * g / (sqrt(s) + eps).
template <class S>
struct adagrad_update {
  using T = compute_type_t<S>;
  rounded_values<S> w;
  T* s;
  T lr, wd, eps;
  GRADIX_HOST_DEVICE void operator()(index_t off, T g, index_t) const {
    T const wv = w.get(off);
    if (wd != T(0)) g += wd * wv;
    s[off] += g * g;
    w.put(off, wv - lr * g / (T(std::sqrt(s[off])) + eps));
  }
};

/// Adam's element update (training/optimizers.hpp's adam_base::update), with lazy Adam's
/// catch-up of the moment decay for the steps a slice skipped (last: per position, null for
/// dense Adam; the factors pow(beta1, skipped), pow(beta2, skipped) in double from the
/// options' betas, then rounded to T, as the host does).
template <class S>
struct adam_update {
  using T = compute_type_t<S>;
  rounded_values<S> w;
  T* m;
  T* v;
  std::int64_t const* last;  // lazy Adam: the step of each position's previous update (0: none)
  std::int64_t t;
  double beta1, beta2;
  T lr, b1, b2, c1, c2, eps, wd, decay;
  GRADIX_HOST_DEVICE void operator()(index_t off, T g, index_t id) const {
    if (last) {
      std::int64_t const skipped = t - last[id] - 1;
      if (skipped > 0) {
        m[off] *= T(std::pow(beta1, double(skipped)));
        v[off] *= T(std::pow(beta2, double(skipped)));
      }
    }
    T const wv = w.get(off);
    g += wd * wv;
    m[off] = b1 * m[off] + (T(1) - b1) * g;
    v[off] = b2 * v[off] + (T(1) - b2) * g * g;
    w.put(off, decay * wv - lr * (m[off] * c1) / (T(std::sqrt(v[off])) * c2 + eps));
  }
};
/// After a lazy Adam step: the stored slices were updated at step t.
struct set_last {
  std::int64_t* last;
  std::int64_t t;
  GRADIX_HOST_DEVICE void operator()(index_t id) const { last[id] = t; }
};

/// A device array of n elements on l, each v (per-position state), in l's order.
template <class T, class L>
grid::device_tensor<T, shape<dyn>, L> filled(L& l, index_t n, T v) {
  tensor<T, shape<dyn>> h(dims(n));
  for (index_t k = 0; k < n; ++k) h(k) = v;
  return grid::device_tensor<T, shape<dyn>, L>::from_host(l, h);
}
/// The state tensor of a device parameter p (its shape and layout, its compute type: float
/// for a half-width parameter), each element v.
template <class P>
auto state_like(P& p, compute_type_t<typename P::value_type> v) {
  using T = compute_type_t<typename P::value_type>;
  using D = grid::device_tensor<T, typename P::shape_type, typename P::launcher_type, typename P::layout_type>;
  if (v == T(0)) return D::zeros(p.launcher(), p.value().shape());
  tensor<T, typename P::shape_type, typename P::layout_type> h(p.value().shape());
  for (index_t k = 0; k < h.size(); ++k) h.data()[k] = v;
  return D::from_host(p.launcher(), h);
}

}  // namespace gradix::optim::device
