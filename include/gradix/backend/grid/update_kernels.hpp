#pragma once
/// \file
/// The device kernels of one `use` of a backward plan (ad/kernel.hpp), as functors run by a
/// launcher (backend/grid/launch.hpp); run() in backend/grid/update.hpp chooses among them. The
/// axes of a use's domain by role (projected, outer; column and key among the outer:
/// use_axes), as update.hpp's file comment describes them, and:
///
/// - update_kernel: one thread per outer coordinate, its projected points summed in the
///   thread (or collapsed to `extent x v`), a plain `+=` or an atomic add at m(d);
/// - update_block_kernel: one block of block_lanes threads per outer coordinate, for long
///   projected axes that v depends on: lanes, then a fixed pairwise tree in shared memory;
/// - use_keys_kernel / use_sort_kernel: the keys (target position, key coordinate) of a use
///   whose map is not injective, made (and, for one sort tile, sorted in one block);
/// - use_segment_kernel / use_segment_block_kernel: one thread (or block) per (segment of
///   sorted keys, column coordinate), the segment summed in key order and stored once.
///
/// Their bits depend on the shapes alone (never on the launch shape or block order), except
/// for atomic adds.

#include "gradix/ad/kernel.hpp"
#include "gradix/ad/map.hpp"
#include "gradix/backend/grid/launch.hpp"
#include "gradix/backend/grid/reduce.hpp"
#include "gradix/backend/grid/scatter.hpp"
#include "gradix/config.hpp"
#include "gradix/core/array.hpp"
#include "gradix/core/coords.hpp"
#include "gradix/eval/evaluator.hpp"
#include "gradix/eval/map.hpp"

#include <cstdint>
#include <type_traits>
#include <utility>

namespace gradix::grid {

namespace detail {

GRADIX_HOST_DEVICE constexpr std::uint64_t bit(std::size_t j) { return std::uint64_t(1) << j; }

/// The axes of a use's domain, by role (see backend/grid/update.hpp's file comment), as masks.
template <class Use>
struct use_axes {
  using K = ad::kernel_traits<Use>;
  using M = typename Use::map_type;
  static constexpr std::size_t RD = K::domain_rank;
  static constexpr std::size_t RT = K::target_rank;
  static constexpr std::uint64_t all = ad::all_axes_v<RD>;
  static constexpr std::uint64_t projected = K::projected_mask;
  static constexpr std::uint64_t outer = all & ~projected;
  static constexpr std::uint64_t column = [] {
    std::uint64_t r = 0;
    [&]<std::size_t... J>(std::index_sequence<J...>) {
      ((r |= (ad::count_deps<M, J>::value == 1 && ad::dom_component<M, J>::value >= 0) ? bit(J) : 0), ...);
    }(std::make_index_sequence<RD>{});
    return r & outer;
  }();
  static constexpr std::uint64_t key = outer & ~column;
  /// The outer axis that reaches the storage's contiguous component as itself (a column
  /// axis), or -1: update_kernel's threads go along it first, so their stores are adjacent.
  static constexpr int fast = [] {
    using G = typename Use::storage_type;
    if constexpr (G::unit_axis < 0) {
      return -1;
    } else {
      constexpr int j = ad::dom_component_of<M, std::size_t(G::unit_axis)>::value;
      if constexpr (j < 0) return -1;
      else return ((column >> j) & 1) ? j : -1;
    }
  }();
  /// Whether a component that is ax_dom<j> (j >= 0; -1: another kind) is a column axis's.
  static constexpr bool reached_by_column(int j) { return j >= 0 && ((column >> (j < 0 ? 0 : j)) & 1); }
  /// The target components that no column axis reaches (those a key determines), as a mask.
  static constexpr std::uint64_t key_components = [] {
    std::uint64_t r = 0;
    [&]<std::size_t... C>(std::index_sequence<C...>) {
      ((r |= reached_by_column(ad::dom_component_of<M, C>::value) ? 0 : bit(C)), ...);
    }(std::make_index_sequence<RT>{});
    return r;
  }();
};

/// The value of one outer coordinate d (projected coordinates summed in the odometer's
/// order, or `extent x v` when v does not depend on them).
template <class T, std::uint64_t P, bool Collapse, class VE, std::size_t R>
GRADIX_HOST_DEVICE T outer_value(VE const& vev, coord<R>& d, array<index_t, R> const& ext, index_t n_proj) {
  if constexpr (P == 0) {
    return T(vev(d));
  } else if constexpr (Collapse) {
    return T(vev(d)) * T(n_proj);
  } else {
    using VT = std::remove_cvref_t<decltype(vev(d))>;
    VT acc{};
    for (index_t p = 0; p < n_proj; ++p) {
      coords::unravel_axes(d, ext, P, p);
      acc += vev(d);
    }
    return T(acc);
  }
}

}  // namespace detail

/// One thread per outer coordinate: its value, stored (Atomic: added atomically) at m(d).
/// Consecutive threads take consecutive coordinates along outer axis Fast first (when >= 0).
template <class D, class V, class M, class T, class Addr, std::uint64_t P, bool Collapse, bool Atomic, int Fast = -1>
struct update_kernel {
  static constexpr bool uses_barriers = false;
  D dom_;
  V v_;
  M map_;
  T* data_;
  Addr addr_;
  index_t n_outer_;
  index_t n_proj_;
  GRADIX_KERNEL_BODY
  template <class Ctx>
  GRADIX_HOST_DEVICE void operator()(Ctx const& c) const {
    constexpr std::size_t RD = D::rank;
    constexpr std::uint64_t outer = ad::all_axes_v<RD> & ~P;
    ev::evaluator<V> const vev(v_);
    auto const ext = dom_.extents();
    for (index_t k = grid_first(c); k < n_outer_; k += grid_step(c)) {
      coord<RD> d{};
      coords::unravel_axes_fast<Fast>(d, ext, outer, k);
      T const s = detail::outer_value<T, P, Collapse>(vev, d, ext, n_proj_);
      index_t const off = addr_.offset(ev::map_value(map_, d));
      if constexpr (Atomic) c.atomic_add(data_ + off, s);
      else data_[off] += s;
    }
  }
};

/// The lanes of update_block_kernel (its block size, whatever the launch options say, so that
/// its bits depend on the shapes alone), and the projected extent from which run() uses it.
inline constexpr index_t block_lanes = 256;
inline constexpr index_t block_proj_min = 256;

namespace detail {
/// The value type of the evaluator of V at a rank-R coordinate.
template <class V, std::size_t R>
using value_at_t = std::remove_cvref_t<decltype(std::declval<ev::evaluator<V> const&>()(std::declval<coord<R>&>()))>;

/// The sum of vev over the projected points (axes P) of d, by a block of block_lanes threads:
/// lane l sums the points l, l + block_lanes, ... in that order, then a fixed pairwise tree in
/// shared memory sh combines the lanes. Every thread of the block calls it and gets the sum;
/// it ends with a barrier, so sh may be written again right after.
GRADIX_KERNEL_BODY
template <std::uint64_t P, class Ctx, class VE, class VT, std::size_t R>
GRADIX_HOST_DEVICE VT block_projected_sum(Ctx const& c, VT* sh, VE const& vev, coord<R>& d, array<index_t, R> const& ext,
                                          index_t n_proj) {
  index_t const t = c.thread();
  VT acc{};
  if (t < n_proj) {
    // the lane's points are block_lanes apart: their coordinates are stepped from the first
    // (a mixed-radix addition, no division), and groups of 8 values are loaded before they
    // are added, in order
    coord<R> step{};
    if (n_proj > block_lanes) coords::unravel_axes(step, ext, P, block_lanes);
    coords::unravel_axes(d, ext, P, t);
    constexpr index_t group = 8;
    for (index_t p0 = t; p0 < n_proj; p0 += group * block_lanes) {
      VT v[group];
      GRADIX_DEVICE_UNROLL
      for (index_t q = 0; q < group; ++q) {
        if (p0 + q * block_lanes < n_proj) {
          v[q] = vev(d);
          coords::advance<-1>(d, ext, P, step);
        }
      }
      GRADIX_DEVICE_UNROLL
      for (index_t q = 0; q < group; ++q)
        if (p0 + q * block_lanes < n_proj) acc += v[q];
    }
  }
  sh[t] = acc;
  c.sync();
  for (index_t h = block_lanes / 2; h > 0; h /= 2) {
    if (t < h) sh[t] += sh[t + h];
    c.sync();
  }
  VT const s = sh[0];
  c.sync();  // everyone has read sh[0] before sh is written again
  return s;
}

/// Launches a block kernel K (block_lanes threads, one block per item up to the grid bound).
template <class VT, class L, class K>
void launch_blocks(L& l, K const& k, index_t items, launch_options o) {
  static_assert(std::is_trivially_copyable_v<K>, "gradix::grid: an update kernel must be trivially copyable");
  index_t const cap = o.max_blocks > 0 ? o.max_blocks : max_grid_blocks;
  l.launch(launch_shape{items < cap ? items : cap, block_lanes, std::size_t(block_lanes) * sizeof(VT)}, k);
}
}  // namespace detail

/// One block of block_lanes threads per outer coordinate (a grid-stride loop over blocks),
/// for uses whose projected axes are long and v depends on them (so they do not collapse):
/// lane l sums the projected points l, l + block_lanes, ... in that order, a fixed pairwise
/// tree in shared memory combines the lanes, and one thread stores (Atomic: adds atomically)
/// at m(d). Without it, one thread would sum every projected point of its outer coordinate
/// alone (update_kernel): the founding benchmark's squared loss has 64 outer coordinates of
/// 5000 projected points for the at(j) table, 64 busy threads on the whole device.
template <class D, class V, class M, class T, class Addr, std::uint64_t P, bool Atomic>
struct update_block_kernel {
  static constexpr bool uses_barriers = true;
  D dom_;
  V v_;
  M map_;
  T* data_;
  Addr addr_;
  index_t n_outer_;
  index_t n_proj_;
  GRADIX_KERNEL_BODY
  template <class Ctx>
  GRADIX_HOST_DEVICE void operator()(Ctx const& c) const {
    constexpr std::size_t RD = D::rank;
    constexpr std::uint64_t outer = ad::all_axes_v<RD> & ~P;
    ev::evaluator<V> const vev(v_);
    auto const ext = dom_.extents();
    using VT = detail::value_at_t<V, RD>;
    VT* const sh = c.template shared<VT>();
    for (index_t k = c.block(); k < n_outer_; k += c.blocks()) {
      coord<RD> d{};
      coords::unravel_axes(d, ext, outer, k);
      T const v = T(detail::block_projected_sum<P>(c, sh, vev, d, ext, n_proj_));
      if (c.thread() == 0) {
        index_t const off = addr_.offset(ev::map_value(map_, d));  // (m ignores projected axes)
        if constexpr (Atomic) c.atomic_add(data_ + off, v);
        else data_[off] += v;
      }
    }
  }
};

namespace detail {
/// Key r of a use: (the linear target position (strides kst) of the map at the r-th point over
/// the axes in Key, r) for r < n, (max, r) for the padding.
GRADIX_KERNEL_BODY
template <std::uint64_t Key, class D, class M, std::size_t RT>
GRADIX_HOST_DEVICE scatter_key use_key(D const& dom, M const& map, array<index_t, RT> const& kst, index_t n, index_t r) {
  if (r >= n) return scatter_key{index_t(PTRDIFF_MAX), r};
  coord<D::rank> d{};
  coords::unravel_axes(d, dom.extents(), Key, r);
  auto const t = ev::map_value(map, d);
  index_t key = 0;
  for (std::size_t k = 0; k < RT; ++k) key += t[k] * kst[k];
  return scatter_key{key, r};
}
}  // namespace detail

/// keys_[r] = (the linear target position of the key components at key coordinate r, r) for
/// r < n_, (max, r) for the padding up to m_.
template <class D, class M, std::uint64_t Key, std::size_t RT>
struct use_keys_kernel {
  static constexpr bool uses_barriers = false;
  D dom_;
  M map_;
  array<index_t, RT> kst_;  // dense strides of the key components (0 for the others)
  index_t n_;
  index_t m_;
  scatter_key* keys_;
  GRADIX_KERNEL_BODY
  template <class Ctx>
  GRADIX_HOST_DEVICE void operator()(Ctx const& c) const {
    for (index_t r = grid_first(c); r < m_; r += grid_step(c)) keys_[r] = detail::use_key<Key>(dom_, map_, kst_, n_, r);
  }
};

/// use_keys_kernel and bitonic_sort in one block, for m_ keys that fit in one sort tile
/// (sort_tile_for; m_ x sizeof(scatter_key) bytes of shared memory): the keys are made in
/// shared memory, sorted there (every step of the bitonic network), and written to keys_. The
/// same sorted keys as the launches it replaces; a fused launch runs it beside the
/// reservations (backward.hpp). More keys are sorted by bitonic_sort, over several blocks.
template <class D, class M, std::uint64_t Key, std::size_t RT>
struct use_sort_kernel {
  static constexpr bool uses_barriers = true;
  D dom_;
  M map_;
  array<index_t, RT> kst_;
  index_t n_;
  index_t m_;
  scatter_key* keys_;
  GRADIX_KERNEL_BODY
  template <class Ctx>
  GRADIX_HOST_DEVICE void operator()(Ctx const& c) const {
    if (c.block() != 0) return;  // (one block's work)
    scatter_key* const sh = c.template shared<scatter_key>();
    index_t const t = c.thread(), b = c.threads();
    for (index_t r = t; r < m_; r += b) sh[r] = detail::use_key<Key>(dom_, map_, kst_, n_, r);
    c.sync();
    detail::bitonic_steps_in_shared(c, sh, m_, 0, 2, m_);
    for (index_t r = t; r < m_; r += b) keys_[r] = sh[r];
  }
};

/// For each segment head s of the sorted keys and column coordinate q: the sum, in key
/// order, of the segment's values at q, stored once at m(d).
template <class D, class V, class M, class T, class Addr, std::uint64_t Key, std::uint64_t Col, std::uint64_t P,
          bool Collapse>
struct use_segment_kernel {
  static constexpr bool uses_barriers = false;
  D dom_;
  V v_;
  M map_;
  T* data_;
  Addr addr_;
  scatter_key const* keys_;
  index_t n_keys_;
  index_t n_cols_;
  index_t n_proj_;
  GRADIX_KERNEL_BODY
  template <class Ctx>
  GRADIX_HOST_DEVICE void operator()(Ctx const& c) const {
    constexpr std::size_t RD = D::rank;
    ev::evaluator<V> const vev(v_);
    auto const ext = dom_.extents();
    index_t const total = n_keys_ * n_cols_;
    for (index_t q = grid_first(c); q < total; q += grid_step(c)) {
      index_t const s = q / n_cols_, col = q % n_cols_;
      index_t const t = keys_[s].target;
      if (s > 0 && keys_[s - 1].target == t) continue;
      coord<RD> d{};
      coords::unravel_axes(d, ext, Col, col);
      coords::unravel_axes(d, ext, Key, keys_[s].pos);
      index_t const off = addr_.offset(ev::map_value(map_, d));
      T acc = T(0);
      for (index_t r = s; r < n_keys_ && keys_[r].target == t; ++r) {
        coords::unravel_axes(d, ext, Key, keys_[r].pos);
        acc += detail::outer_value<T, P, Collapse>(vev, d, ext, n_proj_);
      }
      data_[off] += acc;
    }
  }
};

/// use_segment_kernel for long projected axes that v depends on: one block of block_lanes
/// threads per (segment head, column coordinate) (a grid-stride loop over blocks); for each
/// key of the segment, in key order, the block sums the projected points as
/// update_block_kernel does (lanes, then a fixed tree), and thread 0 adds that into the
/// segment's sum; the sum is stored once. The same bits on every run and launch shape.
template <class D, class V, class M, class T, class Addr, std::uint64_t Key, std::uint64_t Col, std::uint64_t P>
struct use_segment_block_kernel {
  static constexpr bool uses_barriers = true;
  D dom_;
  V v_;
  M map_;
  T* data_;
  Addr addr_;
  scatter_key const* keys_;
  index_t n_keys_;
  index_t n_cols_;
  index_t n_proj_;
  GRADIX_KERNEL_BODY
  template <class Ctx>
  GRADIX_HOST_DEVICE void operator()(Ctx const& c) const {
    constexpr std::size_t RD = D::rank;
    ev::evaluator<V> const vev(v_);
    auto const ext = dom_.extents();
    using VT = detail::value_at_t<V, RD>;
    VT* const sh = c.template shared<VT>();
    index_t const total = n_keys_ * n_cols_;
    for (index_t q = c.block(); q < total; q += c.blocks()) {
      index_t const s = q / n_cols_, col = q % n_cols_;
      index_t const tg = keys_[s].target;
      if (s > 0 && keys_[s - 1].target == tg) continue;  // the same for the whole block
      coord<RD> d{};
      coords::unravel_axes(d, ext, Col, col);
      VT seg{};
      for (index_t r = s; r < n_keys_ && keys_[r].target == tg; ++r) {
        coords::unravel_axes(d, ext, Key, keys_[r].pos);
        seg += detail::block_projected_sum<P>(c, sh, vev, d, ext, n_proj_);  // in key order
      }
      if (c.thread() == 0) {
        coords::unravel_axes(d, ext, Key, keys_[s].pos);
        data_[addr_.offset(ev::map_value(map_, d))] += T(seg);
      }
    }
  }
};

}  // namespace gradix::grid
