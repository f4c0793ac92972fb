#pragma once
/// \file
/// Host update kernels of plain uses: run one `use` of a backward plan. For every d of the
/// use's domain D, add v(d) to the gradient at m(d). (The odometer over masked domain axes is
/// core/coords.hpp's, a storage's addressing grad/storage.hpp's target_address, shared with
/// the grid.) Also the map helpers the host's update kernels share, and the pre-pass and
/// serial forms of a fused pair (its two uses one after the other; its
/// one-nest kernel is backend/host/fused.hpp).
///
/// Loop nest (from the kernel's type, ad::kernel_traits in ad/kernel.hpp): the domain axis
/// that reaches the target's contiguous axis affinely is innermost (SIMD packs when its step
/// is 1); projected axes are summed in a register tile that is written once (without an inner
/// axis: in SIMD packs along the fastest projected axis), or, when v does not depend on them,
/// collapse to `extent x v`; the remaining axes are outer, and the target position (with index
/// lookups and the slot map) is computed once per outer coordinate.
///
/// Threads: an injective map splits the outer coordinates freely (with one outer coordinate,
/// the inner axis at whole cache lines). Otherwise the outer coordinates are ordered by target
/// position (ties: by coordinate) and split at position boundaries (owner computes), so each
/// target element receives its additions in the same order as with one thread: bit-identical
/// results for any thread count. The order lives in the scratch arena (scratch.hpp).
///
/// In constant evaluation, run_serial: one element at a time, no SIMD, threads or scratch.

#include "gradix/ad/kernel.hpp"
#include "gradix/ad/map.hpp"
#include "gradix/backend/host/assign.hpp"
#include "gradix/backend/host/fused_rows.hpp"
#include "gradix/backend/host/scratch.hpp"
#include "gradix/backend/host/thread_pool.hpp"
#include "gradix/config.hpp"
#include "gradix/core/coords.hpp"
#include "gradix/core/simd.hpp"
#include "gradix/eval/cost.hpp"
#include "gradix/eval/evaluator.hpp"
#include "gradix/eval/map.hpp"
#include "gradix/grad/storage.hpp"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <utility>

namespace gradix::host {

namespace detail {

/// A map component that is idx(off + scale * d[J]) for a plain index vector.
template <class C>
struct is_direct_lookup : std::false_type {};
template <std::size_t J, class I>
struct is_direct_lookup<ad::ax_lookup<ad::ax_dom<J>, index_vec<I>>> : std::true_type {
  static constexpr std::size_t axis = J;
};
template <std::size_t J, class I>
struct is_direct_lookup<ad::ax_lookup<ad::ax_dom<J>, unique_vec<I>>> : std::true_type {
  static constexpr std::size_t axis = J;
};

template <class C>
struct is_reshape_ax : std::false_type {};
template <class M, std::size_t K, std::size_t RO, std::size_t RI>
struct is_reshape_ax<ad::ax_reshape<M, K, RO, RI>> : std::true_type {};

}  // namespace detail

/// Pre-pass of one use (serial): reserve sparse slots / mark touched dense slices along the
/// storage's axis, for every position the use will write.
template <class Use>
constexpr void prepare(Use const& u) {
  if (!u.target_) return;  // a use that grad() does not want
  using K = ad::kernel_traits<Use>;
  using G = typename Use::storage_type;
  constexpr std::size_t RD = K::domain_rank;
  constexpr std::size_t S = G::axis;
  if constexpr (K::target_rank == 0) {
    u.target_->touch(0);  // the one element (zero_grad clears it)
  } else {
    auto ext = u.dom_.extents();
    for (std::size_t j = 0; j < RD; ++j)
      if (ext[j] == 0) return;
    using C = ad::map_component_t<typename Use::map_type, S>;
    std::uint64_t mask = [] {
      std::uint64_t r = 0;
      [&]<std::size_t... J>(std::index_sequence<J...>) {
        ((r |= ad::depends_v<C, J> ? (std::uint64_t(1) << J) : 0), ...);
      }(std::make_index_sequence<RD>{});
      return r;
    }();
    G& g = *u.target_;
    auto const& comp = get<S>(u.map_);
    if constexpr (!G::sparse && (ad::injective_ax<C>::value || detail::is_reshape_ax<C>::value)) {
      // a use that writes at least as many positions along S as there are (a whole-table
      // use, a reshape across S): mark everything, so zero_grad does one full clear.
      // (An index vector may repeat positions: its slices are listed exactly, below.)
      index_t n = 1;
      for (std::size_t j = 0; j < RD; ++j)
        if ((mask >> j) & 1) n *= ext[j];
      if (n >= g.shape().extent(S)) {
        g.touch_all();
        return;
      }
    }
    if constexpr (detail::is_direct_lookup<C>::value) {
      // the common case, a gather by an index vector along one domain axis: a tight loop
      // (the map's state copied into locals, which touch() cannot modify; touch() itself
      // runs only for positions not yet touched)
      constexpr std::size_t J = detail::is_direct_lookup<C>::axis;
      auto const idx = comp.idx_;
      index_t const off = comp.off_, scale = comp.scale_;
      index_t const in_off = comp.inner_.off_, in_scale = comp.inner_.scale_;
      index_t const n = ext[J];
      for (index_t k = 0; k < n; ++k) {
        index_t id = off + scale * idx(in_off + in_scale * k);
        if (!g.is_touched(id)) g.touch(id);
      }
    } else {
      coord<RD> d{};
      do {
        g.touch(ev::ax_value(comp, d));
      } while (coords::next(d, ext, mask));
    }
  }
}

namespace detail {
/// The domain axes of a kernel's outer loops: neither the inner axis nor projected ones.
template <class K>
inline constexpr std::uint64_t outer_mask_v = ad::detail::non_inner_mask<K> & ~K::projected_mask;

/// The loop sizes of one use: outer, inner and projected extents (empty: nothing to do).
template <class Use>
struct use_sizes {
  index_t n_outer = 1, n_in = 1, n_proj = 1;
  bool empty = false;
};
template <class Use>
constexpr use_sizes<Use> sizes_of(Use const& u) {
  using K = ad::kernel_traits<Use>;
  constexpr std::size_t RD = K::domain_rank;
  constexpr int I = K::inner_axis;
  constexpr std::uint64_t P = K::projected_mask;
  constexpr std::uint64_t O = outer_mask_v<K>;
  use_sizes<Use> r;
  auto ext = u.dom_.extents();
  for (std::size_t j = 0; j < RD; ++j) {
    if (ext[j] == 0) r.empty = true;
    if ((O >> j) & 1) r.n_outer *= ext[j];
    if ((P >> j) & 1) r.n_proj *= ext[j];
  }
  constexpr index_t static_in = [] {
    if constexpr (I >= 0) return extent_v<typename Use::domain_type, std::size_t(I)>;
    else return index_t(1);
  }();
  r.n_in = static_in != dyn ? static_in : ext[std::size_t(I < 0 ? 0 : I)];
  return r;
}
/// Whether run(u) splits u over the pool.
template <class Use>
bool runs_parallel(use_sizes<Use> const& z) {
  using K = ad::kernel_traits<Use>;
  index_t work = z.n_outer * z.n_in * (K::collapses_projected ? 1 : z.n_proj);
  if (z.empty || pool().size() < 2 || work < 2 * parallel_min_elements || z.n_outer < 2) return false;
  if constexpr (!K::injective) {
    // owner-computes first sorts the outer coordinates by target, serially: worth it only
    // when each outer coordinate brings enough work (at least ~24 log2(outer) elements; a
    // scatter of 64-wide rows is faster serial)
    index_t per = work / z.n_outer, lg = 1;
    while ((index_t(1) << lg) < z.n_outer) ++lg;
    if (per < 24 * lg) return false;
  }
  return true;
}
}  // namespace detail

/// Scratch bytes run(u) needs (the owner-computes order of a non-injective parallel use);
/// backward reserves the largest in its pre-pass.
template <class Use>
std::size_t scratch_bytes(Use const& u) {
  if (!u.target_) return 0;
  if constexpr (ad::kernel_traits<Use>::injective) {
    return 0;
  } else {
    auto z = detail::sizes_of(u);
    if (!detail::runs_parallel(z)) return 0;
    return std::size_t(z.n_outer) * sizeof(std::pair<index_t, index_t>);
  }
}

/// Runs one use (after prepare).
template <class Use>
void run(Use const& u, [[maybe_unused]] gradix::detail::fused_sink* sink = nullptr) {
  if (!u.target_) return;  // a use that grad() does not want
  using K = ad::kernel_traits<Use>;
  using G = typename Use::storage_type;
  using T = typename G::value_type;
  using V = typename Use::value_expr;
  using VT [[maybe_unused]] = value_type_t<V>;
  constexpr std::size_t RD = K::domain_rank;
  constexpr int I = K::inner_axis;
  constexpr std::uint64_t P = K::projected_mask;
  constexpr std::uint64_t O = detail::outer_mask_v<K>;

  auto ext = u.dom_.extents();
  auto const sizes = detail::sizes_of(u);
  if (sizes.empty) return;
  index_t const n_outer = sizes.n_outer, n_proj = sizes.n_proj;
  // a static inner extent gives the inner loop a constant trip count
  constexpr index_t static_in = [] {
    if constexpr (I >= 0) return extent_v<typename Use::domain_type, std::size_t(I)>;
    else return index_t(1);
  }();
  index_t const n_in = static_in != dyn ? static_in : sizes.n_in;

  // Copy the kernel's state into locals: gradient stores cannot alias it.
  ev::evaluator<V> const vev(u.v_);
  auto const map = u.map_;
  G const& g = *u.target_;
  auto const addr = target_address_of(g);
  T* const data = u.target_->data();
  index_t const tstride = [&] {
    if constexpr (I >= 0) {
      return g.strides()[std::size_t(K::target_unit_axis)] *
             get<std::size_t(K::target_unit_axis)>(map).scale_;
    } else {
      return index_t(0);
    }
  }();
  T const mult = K::collapses_projected ? T(n_proj) : T(1);

  // The work of one outer coordinate o (inner and projected coordinates 0); without projected
  // axes (or when they collapse), only the inner elements [i_begin, i_end).
  // (body_at: the same work into the row at tp: a fused step's row buffer, fused_rows.hpp)
  auto body_at = [&](coord<RD> const& o, T* tp, [[maybe_unused]] index_t i_begin = 0,
                     [[maybe_unused]] index_t i_end = std::numeric_limits<index_t>::max()) {
    // locals: the gradient stores below cannot alias them
    [[maybe_unused]] index_t const nin = n_in;
    [[maybe_unused]] index_t const ts = tstride;
    [[maybe_unused]] T const mul = mult;
    if constexpr (I < 0) {
      if constexpr (K::collapses_projected) {
        *tp += T(vev(o)) * mul;
      } else if constexpr (P == 0) {
        *tp += T(vev(o));
      } else {
#if defined(GRADIX_HAS_VECTOR_EXT)
        // the sum over the projected axes (an adjoint summed over a broadcast: a reduction's
        // staged adjoint, a softmax's row sum): the fastest of them in SIMD packs of v, the
        // lanes and the tail added in a fixed order (the same bits for any thread count)
        constexpr std::size_t JP = std::size_t(63 - __builtin_clzll(P));
        constexpr std::uint64_t P2 = P & ~(std::uint64_t(1) << JP);
        constexpr int W = simd::width<T>;
        index_t const nj = ext[JP];
        simd::pack<T, W> s{};
        T tail{};
        coord<RD> d = o;
        do {
          auto in = vev.template outer<int(JP)>(d);
          index_t i = 0;
          for (; i + W <= nj; i += W) s += ev::pack_as<T, W>(in, i);
          for (; i < nj; ++i) tail += T(in.elem(i));
        } while (coords::next(d, ext, P2));
        T acc{};
        for (int w = 0; w < W; ++w) acc += s[w];
        *tp += acc + tail;
#else
        VT acc{};
        coord<RD> d = o;
        do acc += vev(d);
        while (coords::next(d, ext, P));
        *tp += T(acc);
#endif
      }
    } else {
      constexpr int W = simd::width<T>;
      if constexpr (P == 0 || K::collapses_projected) {
        auto in = vev.template outer<I>(o);
        index_t i = i_begin;
        index_t const nin_end = i_end < nin ? i_end : nin;
#if defined(GRADIX_HAS_VECTOR_EXT)
        if (ts == 1) {
          for (; i + W <= nin_end; i += W) {
            auto x = ev::pack_as<T, W>(in, i);
            if constexpr (K::collapses_projected) x *= mul;
            simd::store<T, W>(tp + i, simd::load<T, W>(tp + i) + x);
          }
        }
#endif
        // no `* mul` unless collapsed (mul is 1 then): g++ may contract a product in v with
        // the addition, and must do so as in the pack loop above and the fused kernel
        // below, so that every path gives the same bits
        for (T* q = tp + i * ts; i < nin_end; ++i, q += ts) {
          T x = T(in.elem(i));
          if constexpr (K::collapses_projected) x *= mul;
          *q += x;
        }
      } else {
        // register tile over the inner axis, summed over the projected axes, written once
        // (the whole inner extent when it is static and at most 16 packs)
        constexpr index_t TILE =
            static_in != dyn && static_in % W == 0 && static_in <= 16 * W ? static_in : 4 * W;
        for (index_t t0 = 0; t0 < nin; t0 += TILE) {
          index_t len = nin - t0 < TILE ? nin - t0 : TILE;
          T acc[TILE] = {};
          coord<RD> d = o;
          do {
            auto in = vev.template outer<I>(d);
#if defined(GRADIX_HAS_VECTOR_EXT)
            if (len == TILE) {
              auto add = [&](index_t q) {
                simd::store<T, W>(acc + q, simd::load<T, W>(acc + q) +
                                               ev::pack_as<T, W>(in, t0 + q));
              };
              if constexpr (ev::cheap_body_v<V>) {
                GRADIX_UNROLL(16)
                for (index_t q = 0; q < TILE; q += W) add(q);
              } else {  // an expensive v is not copied (eval/cost.hpp)
                GRADIX_NO_UNROLL
                for (index_t q = 0; q < TILE; q += W) add(q);
              }
              continue;
            }
#endif
            for (index_t q = 0; q < len; ++q) acc[q] += T(in.elem(t0 + q));
          } while (coords::next(d, ext, P));
          for (index_t q = 0; q < len; ++q) tp[(t0 + q) * ts] += acc[q];
        }
      }
    }
  };

  auto body = [&](coord<RD> const& o, index_t i_begin = 0, index_t i_end = std::numeric_limits<index_t>::max()) {
    body_at(o, data + addr.offset(ev::map_value(map, o)), i_begin, i_end);
  };
  if constexpr (fused_rows_ok<Use>) {
    if (sink) {
      run_rows(u, *sink, [&](coord<RD> const& o, T* row) { body_at(o, row); });
      return;
    }
  }

  thread_pool& tp = pool();
  using pair = std::pair<index_t, index_t>;
  // the order of a non-injective use lives in the scratch reserved by backward's pre-pass;
  // should the pool have grown since (set_num_threads from another thread), run serially
  // rather than allocate here
  pair* order = nullptr;
  if constexpr (!K::injective) {
    if (detail::runs_parallel(sizes)) order = scratch().try_get<pair>(std::size_t(n_outer));
  }
  if constexpr (K::injective && I >= 0 && (P == 0 || K::collapses_projected)) {
    // one outer coordinate (a vector domain): split the inner axis, at whole cache lines
    if (n_outer == 1 && !sizes.empty && tp.size() > 1 && n_in >= 2 * parallel_min_elements) {
      coord<RD> const o{};
      parallel_ranges(n_in, [&](index_t a, index_t b) { body(o, a, b); });
      return;
    }
  }
  if (!detail::runs_parallel(sizes) || (!K::injective && !order)) {
    coord<RD> o{};
    do body(o);
    while (coords::next(o, ext, O));
    return;
  }
  if constexpr (K::injective) {
    parallel_ranges(
        n_outer,
        [&](index_t a, index_t b) {
          coord<RD> o = coords::unravel(ext, O, a);
          for (index_t k = a; k < b; ++k) {
            body(o);
            coords::next(o, ext, O);
          }
        },
        std::max<index_t>(1, parallel_min_elements / std::max<index_t>(1, n_in)));
  } else {
    // owner computes: order outer coordinates by target position, split at boundaries
    {
      coord<RD> o{};
      index_t k = 0;
      do {
        order[k] = {addr.offset(ev::map_value(map, o)), k};
        ++k;
      } while (coords::next(o, ext, O));
    }
    std::sort(order, order + n_outer);  // ties by outer index: a stable order
    index_t tasks = std::min<index_t>(n_outer, index_t(tp.size()) * 4);
    auto task = [&](index_t t) {
      index_t a = n_outer * t / tasks, b = n_outer * (t + 1) / tasks;
      // move both ends forward to the start of a target position's group
      while (a > 0 && a < n_outer && order[a].first == order[a - 1].first) ++a;
      while (b > 0 && b < n_outer && order[b].first == order[b - 1].first) ++b;
      for (index_t k = a; k < b; ++k) body(coords::unravel(ext, O, order[k].second));
    };
    tp.run(tasks, task);
  }
}

template <class U1, class U2>
constexpr void prepare(ad::fused_use<U1, U2> const& f) {
  prepare(f.first_);
  prepare(f.second_);
}

/// Runs one use as a plain serial loop over its whole domain, one element at a time: the
/// path of constant evaluation (no SIMD, no threads, no scratch memory). Projected axes are
/// summed element by element, so results equal run()'s up to rounding.
template <class Use>
constexpr void run_serial(Use const& u) {
  if (!u.target_) return;  // a use that grad() does not want
  using K = ad::kernel_traits<Use>;
  using G = typename Use::storage_type;
  using T = typename G::value_type;
  constexpr std::size_t RD = K::domain_rank;
  constexpr std::uint64_t all_mask = RD >= 64 ? ~std::uint64_t(0) : (std::uint64_t(1) << RD) - 1;
  auto ext = u.dom_.extents();
  for (std::size_t j = 0; j < RD; ++j)
    if (ext[j] == 0) return;
  ev::evaluator<typename Use::value_expr> const vev(u.v_);
  auto const addr = target_address_of(*u.target_);
  T* const data = u.target_->data();
  coord<RD> d{};
  do data[addr.offset(ev::map_value(u.map_, d))] += T(vev(d));
  while (coords::next(d, ext, all_mask));
}
template <class U1, class U2>
constexpr void run_serial(ad::fused_use<U1, U2> const& f) {
  run_serial(f.first_);
  run_serial(f.second_);
}

}  // namespace gradix::host
