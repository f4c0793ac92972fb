#pragma once
/// \file
/// Device update kernels: run one `use` of a backward plan (ad/kernel.hpp) on a device grid.
/// For every d of the use's domain D, add v(d) to the gradient storage at m(d). The plan types
/// are the host's; only the loops differ (the host's are in backend/host/update.hpp).
///
/// Axes of D, from the use's type (ad::kernel_traits): projected axes reach no target axis and
/// are summed inside a thread (or, when v does not depend on them, collapse to `extent x v`);
/// the other axes are *outer*, one target element per outer coordinate. Among the outer axes,
/// a *column* axis J reaches exactly one target component, as ax_dom<J> itself; the rest are
/// *key* axes (index lookups, reshapes, an axis read twice). The store follows from the map:
///
/// - injective map (ad::kernel_traits::injective): one thread per outer coordinate, a plain
///   `+=` (no two threads share a target element);
/// - otherwise, `scatter_mode::atomic`: the same loop with an atomic add;
/// - otherwise, `scatter_mode::deterministic`: the key coordinates are sorted by (target
///   position of the key components, key coordinate), and one thread per (segment, column
///   coordinate) adds the segment's values in key order, then stores once. With a key fixed,
///   the column axes reach distinct target elements, so no two threads share one. The same
///   bits on every run, launch shape and block order.
///
/// Sparse storage first reserves its slots on the device (`prepare`, one reserve_kernel
/// launch): the positions along the storage's axis that the use writes get slots in order of
/// first touch. Nothing proportional to a table's extent is touched.

#include "gradix/ad/kernel.hpp"
#include "gradix/ad/map.hpp"
#include "gradix/ad/value.hpp"
#include "gradix/backend/grid/grad.hpp"
#include "gradix/backend/grid/launch.hpp"
#include "gradix/backend/grid/reduce.hpp"
#include "gradix/backend/grid/scatter.hpp"
#include "gradix/config.hpp"
#include "gradix/core/array.hpp"
#include "gradix/eval/evaluator.hpp"
#include "gradix/eval/map.hpp"

#include <cstdint>
#include <memory>
#include <type_traits>
#include <utility>

namespace gradix::grid {

namespace detail {

GRADIX_HOST_DEVICE constexpr std::uint64_t bit(std::size_t j) { return std::uint64_t(1) << j; }

/// Sets the coordinates of d on the axes in mask to the k-th point of their row-major odometer
/// (the last axis fastest, as the host's next_coord).
template <std::size_t R>
GRADIX_HOST_DEVICE constexpr void unravel_mask(coord<R>& d, array<index_t, R> const& ext, std::uint64_t mask, index_t k) {
  for (std::size_t j = R; j-- > 0;) {
    if (!((mask >> j) & 1)) continue;
    d[j] = k % ext[j];
    k /= ext[j];
  }
}
/// unravel_mask with axis F fastest (when F >= 0 and in mask), then the others of mask in
/// row-major order: threads next to each other then reach elements next to each other along
/// F.
template <int F, std::size_t R>
GRADIX_HOST_DEVICE constexpr void unravel_mask_fast(coord<R>& d, array<index_t, R> const& ext, std::uint64_t mask, index_t k) {
  if constexpr (F >= 0 && std::size_t(F) < R) {
    if ((mask >> F) & 1) {
      d[F] = k % ext[F];
      k /= ext[F];
      mask &= ~(std::uint64_t(1) << F);
    }
  }
  unravel_mask(d, ext, mask, k);
}
/// The number of points over the axes in mask.
template <std::size_t R>
constexpr index_t count_mask(array<index_t, R> const& ext, std::uint64_t mask) {
  index_t n = 1;
  for (std::size_t j = 0; j < R; ++j)
    if ((mask >> j) & 1) n *= ext[j];
  return n;
}

/// The offset of a target coordinate in a storage: strides, and along a sparse storage's axis
/// the slot map (device pointers, copied into the kernel).
template <std::size_t R, bool Sparse, std::size_t SAxis>
struct target_address {
  array<index_t, R> st_;
  std::int32_t const* slots_;
  GRADIX_HOST_DEVICE constexpr index_t offset(coord<R> const& t) const {
    index_t off = 0;
    for (std::size_t k = 0; k < R; ++k) {
      index_t x = t[k];
      if constexpr (Sparse) {
        if (k == SAxis) x = slots_[x];
      }
      off += x * st_[k];
    }
    return off;
  }
};
template <class G>
using address_of_t = target_address<G::rank, G::sparse, G::axis>;
template <class G>
address_of_t<G> address_of(G const& g) {
  address_of_t<G> a{g.strides(), nullptr};
  if constexpr (G::sparse) a.slots_ = g.slot_map();
  return a;
}

/// The axes of a use's domain, by role (see the file comment), as masks.
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
      unravel_mask(d, ext, P, p);
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
      detail::unravel_mask_fast<Fast>(d, ext, outer, k);
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
    if (n_proj > block_lanes) unravel_mask(step, ext, P, block_lanes);
    unravel_mask(d, ext, P, t);
    constexpr index_t group = 8;
    for (index_t p0 = t; p0 < n_proj; p0 += group * block_lanes) {
      VT v[group];
      GRADIX_DEVICE_UNROLL
      for (index_t q = 0; q < group; ++q) {
        if (p0 + q * block_lanes < n_proj) {
          v[q] = vev(d);
          advance<P, R>(d, ext, step);
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
      detail::unravel_mask(d, ext, outer, k);
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
  unravel_mask(d, dom.extents(), Key, r);
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
      detail::unravel_mask(d, ext, Col, col);
      detail::unravel_mask(d, ext, Key, keys_[s].pos);
      index_t const off = addr_.offset(ev::map_value(map_, d));
      T acc = T(0);
      for (index_t r = s; r < n_keys_ && keys_[r].target == t; ++r) {
        detail::unravel_mask(d, ext, Key, keys_[r].pos);
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
      detail::unravel_mask(d, ext, Col, col);
      VT seg{};
      for (index_t r = s; r < n_keys_ && keys_[r].target == tg; ++r) {
        detail::unravel_mask(d, ext, Key, keys_[r].pos);
        seg += detail::block_projected_sum<P>(c, sh, vev, d, ext, n_proj_);  // in key order
      }
      if (c.thread() == 0) {
        detail::unravel_mask(d, ext, Key, keys_[s].pos);
        data_[addr_.offset(ev::map_value(map_, d))] += T(seg);
      }
    }
  }
};

/// Slot reservation of one use in a sparse storage, in one block, first-touch order: the
/// positions pos(p) along the storage's axis of the points p < n_ over the axes in Dep (the
/// axes the map's component C depends on), in the odometer's order.
///   1. every thread marks its points: a position without a slot (-1) becomes INT32_MIN,
///      then holds max(-2 - p) = -2 - (its first point); stored slots (>= 0) are only read.
///      When no point found a position without a slot (every call after the first, when a
///      call keeps reading the same positions), the kernel ends here;
///   2. the points where pos(p) holds -2 - p (the first touch of a new position) are counted
///      by an exclusive scan (each thread owns consecutive points, one scan over the
///      threads), and the k-th gets slot count + k: slot_of[pos] and ids[slot] are set;
///   3. the new slices (contiguous, after the old count) are cleared and count is advanced.
/// Thread 0 then publishes (seq_, count) to host-visible memory when there is some
/// (device_sparse_grad::make_room reads it without waiting).
/// Slots and their order depend on the map alone: the same on every run and launch shape,
/// and, as on the host (grad/storage.hpp), in order of first touch.
template <class D, class M, std::size_t C, std::uint64_t Dep, class T>
struct reserve_kernel {
  static constexpr bool uses_barriers = true;
  D dom_;
  M map_;
  index_t n_;
  std::int32_t* slot_of_;
  std::int32_t* ids_;
  T* data_;
  std::int32_t* count_;
  index_t slice_;
  std::uint64_t* published_;  // host-visible (null: none): (seq_ << 32) | the count after this call
  std::uint32_t seq_;
  GRADIX_HOST_DEVICE void publish(std::int32_t count) const {
    if (published_) *published_ = (std::uint64_t(seq_) << 32) | std::uint32_t(count);
  }
  GRADIX_HOST_DEVICE index_t pos(index_t p) const {
    coord<D::rank> d{};
    detail::unravel_mask(d, dom_.extents(), Dep, p);
    return ev::ax_value(get<C>(map_), d);
  }
  GRADIX_KERNEL_BODY
  template <class Ctx>
  GRADIX_HOST_DEVICE void operator()(Ctx const& c) const {
    std::int32_t* const sh = c.template shared<std::int32_t>();
    index_t const t = c.thread(), b = c.threads();
    if (t == 0) sh[b] = 0;  // set when a position without a slot is seen
    c.sync();
    for (index_t p = t; p < n_; p += b) {
      std::int32_t* const s = slot_of_ + pos(p);
      if (*s >= 0) continue;  // stored already (a slot does not change here): nothing to mark
      sh[b] = 1;
      c.atomic_cas(s, -1, INT32_MIN);
      c.atomic_max(s, std::int32_t(-2 - p));
    }
    std::int32_t const base = *count_;
    c.sync();
    if (sh[b] == 0) {  // every position has its slot (the same answer in every thread)
      if (t == 0) publish(base);
      return;
    }
    // each thread owns consecutive points [lo, hi): it counts its first touches of new
    // positions, one exclusive scan over the threads (Hillis-Steele in shared memory) gives
    // its first slot, and it assigns its points' slots in order
    index_t const per = (n_ + b - 1) / b;
    index_t const lo = t * per < n_ ? t * per : n_;
    index_t const hi = lo + per < n_ ? lo + per : n_;
    std::int32_t mine = 0;
    for (index_t p = lo; p < hi; ++p)
      if (slot_of_[pos(p)] == std::int32_t(-2 - p)) ++mine;
    sh[t] = mine;
    c.sync();
    detail::block_inclusive_scan(c, sh);
    std::int32_t const carry = sh[b - 1];
    std::int32_t next = base + sh[t] - mine;
    for (index_t p = lo; p < hi; ++p) {
      index_t const x = pos(p);
      if (slot_of_[x] == std::int32_t(-2 - p)) {  // only this thread holds x's first touch
        slot_of_[x] = next;
        ids_[next] = std::int32_t(x);
        ++next;
      }
    }
    index_t const fresh = index_t(carry) * slice_;
    T* const first = data_ + index_t(base) * slice_;
    for (index_t e = t; e < fresh; e += b) first[e] = T(0);
    if (t == 0) {
      *count_ = base + carry;
      publish(base + carry);
    }
  }
};

namespace detail {
/// The axes of D that component C of a use's map (the sparse storage's axis) depends on.
template <class Use, std::size_t C>
inline constexpr std::uint64_t component_deps_v = [] {
  using CT = ad::map_component_t<typename Use::map_type, C>;
  std::uint64_t r = 0;
  [&]<std::size_t... J>(std::index_sequence<J...>) { ((r |= ad::depends_v<CT, J> ? bit(J) : 0), ...); }(
      std::make_index_sequence<ad::kernel_traits<Use>::domain_rank>{});
  return r;
}();

/// A launch member that does nothing (the reservation of a use whose storage is dense).
struct no_work {
  static constexpr bool uses_barriers = false;
  GRADIX_KERNEL_BODY
  template <class Ctx>
  GRADIX_HOST_DEVICE void operator()(Ctx const&) const {}
};

/// The reservation kernel of a use (no_work for dense storage).
template <class Use, bool Sparse = Use::storage_type::sparse>
struct reserve_of {
  using type = no_work;
};
template <class Use>
struct reserve_of<Use, true> {
  using G = typename Use::storage_type;
  using type = reserve_kernel<typename Use::domain_type, typename Use::map_type, G::axis, component_deps_v<Use, G::axis>,
                              typename G::value_type>;
};
template <class Use>
using reserve_of_t = typename reserve_of<Use>::type;

/// The reservation of use u, made ready to launch (the storage made room for it): `active`
/// false when there is nothing to reserve (dense storage, no target, an empty domain).
template <class Use>
struct ready_reserve {
  reserve_of_t<Use> k;
  bool active;
};
template <class Use>
ready_reserve<Use> make_reserve(Use const& u, bool wanted = true) {
  using G = typename Use::storage_type;
  if constexpr (!G::sparse) {
    return {{}, false};
  } else {
    using K = ad::kernel_traits<Use>;
    constexpr std::size_t RD = K::domain_rank;
    auto const ext = u.dom_.extents();
    bool empty = !u.target_ || !wanted;
    for (std::size_t j = 0; j < RD; ++j)
      if (ext[j] == 0) empty = true;
    if (empty) return {{u.dom_, u.map_, 0, nullptr, nullptr, nullptr, nullptr, 0, nullptr, 0}, false};
    index_t const n = count_mask(ext, component_deps_v<Use, G::axis>);
    if (n > index_t(INT32_MAX) - 2)
      ::gradix::detail::fail("gradix::grid::backward: a use writes ", n, " positions of a sparse gradient in one call (at most ",
                             INT32_MAX - 2, ")");
    auto const r = u.target_->make_room(n);
    static_assert(std::is_trivially_copyable_v<reserve_of_t<Use>>,
                  "gradix::grid: a reservation kernel must be trivially copyable");
    return {{u.dom_, u.map_, n, r.slot_of, r.ids, r.data, r.count, r.slice, r.published, r.sequence}, true};
  }
}
/// Threads per block of reservation launches (the block's size changes no slot: by default
/// the largest block, for the shortest scan).
template <class L>
index_t reserve_threads(L& l, launch_options o) {
  return reduce_threads(o.threads > 0 ? o : launch_options{l.max_threads(), o.max_blocks}, l.max_threads());
}
}  // namespace detail

/// The pre-pass of one use on the device: a sparse storage reserves the slots of the
/// positions the use writes along its axis (a dense one needs nothing), with one
/// reserve_kernel launch.
template <class L, class Use>
void prepare(L& l, Use const& u, launch_options o = {}) {
  auto const r = detail::make_reserve(u);
  if (!r.active) return;
  index_t const th = detail::reserve_threads(l, o);
  l.launch(launch_shape{1, th, std::size_t(th + 1) * sizeof(std::int32_t)}, r.k);
}

namespace detail {
/// Which kernel stores a use (see run()).
enum class store_kind : std::uint8_t { none, thread, block, segment, segment_block };

/// One use's update, with the kernel chosen at run time (kind_): update_kernel (thread),
/// update_block_kernel (block), use_segment_kernel (segment) or use_segment_block_kernel
/// (segment_block). run() launches the chosen kernel; a fused launch (backward.hpp) runs the
/// work itself as a member.
template <class Use>
struct use_work {
  using K = ad::kernel_traits<Use>;
  using A = use_axes<Use>;
  using G = typename Use::storage_type;
  using T = typename G::value_type;
  using D = typename Use::domain_type;
  using V = typename Use::value_expr;
  using M = typename Use::map_type;
  using Addr = address_of_t<G>;
  static constexpr std::size_t RD = K::domain_rank;
  using VT = value_at_t<V, RD>;
  /// Whether the use has projected axes that v depends on (a block may sum them).
  static constexpr bool may_block = A::projected != 0 && !K::collapses_projected;
  static constexpr bool uses_barriers = may_block;
  using thread_kernel = update_kernel<D, V, M, T, Addr, A::projected, K::collapses_projected, !K::injective, A::fast>;
  /// update_kernel that adds atomically although the map is injective: for an injective use
  /// that shares its launch with another use of the same storage (atomic mode).
  using thread_atomic_kernel = update_kernel<D, V, M, T, Addr, A::projected, K::collapses_projected, true, A::fast>;

  D dom_;
  V v_;
  M map_;
  T* data_;
  Addr addr_;
  index_t n_outer_;
  index_t n_proj_;
  scatter_key const* keys_;
  index_t n_keys_;
  index_t n_cols_;
  store_kind kind_;
  bool atomic_;  // add atomically even where the map is injective (see thread_atomic_kernel)

  thread_kernel as_thread() const { return {dom_, v_, map_, data_, addr_, n_outer_, n_proj_}; }
  auto as_block() const
    requires may_block
  {
    return update_block_kernel<D, V, M, T, Addr, A::projected, !K::injective>{dom_, v_, map_, data_, addr_, n_outer_, n_proj_};
  }
  auto as_segment() const
    requires(!K::injective)
  {
    return use_segment_kernel<D, V, M, T, Addr, A::key, A::column, A::projected, K::collapses_projected>{
        dom_, v_, map_, data_, addr_, keys_, n_keys_, n_cols_, n_proj_};
  }
  auto as_segment_block() const
    requires(!K::injective && may_block)
  {
    return use_segment_block_kernel<D, V, M, T, Addr, A::key, A::column, A::projected>{
        dom_, v_, map_, data_, addr_, keys_, n_keys_, n_cols_, n_proj_};
  }

  GRADIX_KERNEL_BODY
  template <class Ctx>
  GRADIX_HOST_DEVICE void operator()(Ctx const& c) const {
    if (kind_ == store_kind::thread) {
      if constexpr (K::injective) {
        if (atomic_) thread_atomic_kernel{dom_, v_, map_, data_, addr_, n_outer_, n_proj_}(c);
        else thread_kernel{dom_, v_, map_, data_, addr_, n_outer_, n_proj_}(c);
      } else {
        thread_kernel{dom_, v_, map_, data_, addr_, n_outer_, n_proj_}(c);
      }
    }
    if constexpr (may_block) {
      if (kind_ == store_kind::block) {
        if constexpr (K::injective) {
          if (atomic_) update_block_kernel<D, V, M, T, Addr, A::projected, true>{dom_, v_, map_, data_, addr_, n_outer_, n_proj_}(c);
          else update_block_kernel<D, V, M, T, Addr, A::projected, false>{dom_, v_, map_, data_, addr_, n_outer_, n_proj_}(c);
        } else {
          update_block_kernel<D, V, M, T, Addr, A::projected, true>{dom_, v_, map_, data_, addr_, n_outer_, n_proj_}(c);
        }
      }
    }
    if constexpr (!K::injective) {
      if (kind_ == store_kind::segment)
        use_segment_kernel<D, V, M, T, Addr, A::key, A::column, A::projected, K::collapses_projected>{
            dom_, v_, map_, data_, addr_, keys_, n_keys_, n_cols_, n_proj_}(c);
      if constexpr (may_block) {
        if (kind_ == store_kind::segment_block)
          use_segment_block_kernel<D, V, M, T, Addr, A::key, A::column, A::projected>{
              dom_, v_, map_, data_, addr_, keys_, n_keys_, n_cols_, n_proj_}(c);
      }
    }
  }

  /// Whether the chosen kernel runs block by block (block_lanes threads per block).
  bool blockwise() const { return kind_ == store_kind::block || kind_ == store_kind::segment_block; }
  /// The shared memory it needs per block.
  std::size_t shared_bytes() const { return blockwise() ? std::size_t(block_lanes) * sizeof(VT) : 0; }
  /// The blocks it takes with t threads per block, at most cap (0: nothing to run).
  index_t blocks(index_t t, index_t cap) const {
    index_t n = 0;
    switch (kind_) {
      case store_kind::none: return 0;
      case store_kind::thread: n = (n_outer_ + t - 1) / t; break;
      case store_kind::block: n = n_outer_; break;
      case store_kind::segment: n = (n_keys_ * n_cols_ + t - 1) / t; break;
      case store_kind::segment_block: n = n_keys_ * n_cols_; break;
    }
    if (n > cap) n = cap;
    return n < 1 ? 1 : n;
  }
};

/// Whether axis expression Ax reads a whole device_index_vec at d[J] itself (up to the
/// shift and scale that the lookup's value gets; the inner d[J] is checked at run time).
template <class Ax, std::size_t J>
struct reads_index_at : std::false_type {};
template <class I, std::size_t J>
struct reads_index_at<ad::ax_lookup<ad::ax_dom<J>, device_index_vec<I>>, J> : std::true_type {};

/// The target component through which a use's keys can take their order from its index
/// vector (grid::index_order), or -1: the use has one key axis J, and among the key
/// components one reads a device index vector at d[J]; the others are constants. The keys of
/// such a use, sorted by (target, key coordinate), are then in the order of the vector's
/// values sorted by (value, position), and two keys share a target exactly when the values
/// are equal (a key's target is off + scale * value times a positive stride, plus constants).
template <class M, std::uint64_t KeyComps, std::uint64_t Key>
struct order_component {
  static constexpr int value = -1;
};
template <class... Ax, std::uint64_t KC, std::uint64_t Key>
  requires(Key != 0 && (Key & (Key - 1)) == 0)
struct order_component<tuple<Ax...>, KC, Key> {
  static constexpr std::size_t J = std::size_t(__builtin_ctzll(Key));
  static constexpr int value = [] {
    int found = -1, k = 0;
    bool ok = true;
    auto one = [&](bool key_comp, bool constant, bool lookup) {
      if (key_comp && !constant) {
        if (lookup && found < 0) found = k;
        else ok = false;
      }
      ++k;
    };
    (one(((KC >> k) & 1) != 0, std::is_same_v<Ax, ad::ax_const>, reads_index_at<Ax, J>::value), ...);
    return ok ? found : -1;
  }();
};

/// The index order that use u's keys can come from (order_component), or nullptr: also the
/// lookup must read the vector as a whole, position d[J] at key coordinate d[J], with a
/// nonzero scale.
template <class Use>
index_order* order_of(Use const& u) {
  using A = use_axes<Use>;
  constexpr int C = order_component<typename Use::map_type, A::key_components, A::key>::value;
  if constexpr (C < 0) {
    return nullptr;
  } else {
    constexpr std::size_t J = std::size_t(__builtin_ctzll(A::key));
    auto const& a = get<std::size_t(C)>(u.map_);
    bool const whole = a.scale_ != 0 && a.inner_.off_ == 0 && a.inner_.scale_ == 1 && a.idx_.stride_ == 1 &&
                       u.dom_.extents()[J] == a.idx_.size_;
    return whole ? a.idx_.order_ : nullptr;
  }
}

/// The keys of use u (m of them, padded) from its index vector's kept order, or nullptr
/// (order_of; another thread's or launcher's order). *made: whether they are made already.
template <class L, class Use>
scatter_key* kept_keys(L& l, Use const& u, index_t m, bool* made) {
  index_order* const o = order_of(u);
  if (!o) return nullptr;
  return static_cast<scatter_key*>(o->keys_for(&l, std::size_t(m) * sizeof(scatter_key), made));
}

/// The update of use u, chosen as run() describes, with u's storage as it is now (after its
/// reservation). In deterministic mode a lookup's keys are made and sorted here, into
/// `keys`, which must outlive the launch of the work.
template <class Use>
use_work<Use> idle_work(Use const& u) {
  return {u.dom_, u.v_, u.map_, nullptr, {}, 0, 0, nullptr, 0, 0, store_kind::none, false};
}
template <class L, class Use>
use_work<Use> make_work(L& l, Use const& u, scatter_mode mode, std::unique_ptr<scratch<L>>& keys, launch_options o,
                        bool presorted = false) {
  using W = use_work<Use>;
  using K = typename W::K;
  using A = typename W::A;
  using G = typename W::G;
  W w = idle_work(u);
  if (!u.target_) return w;  // a use that grad() does not want
  auto const ext = u.dom_.extents();
  for (std::size_t j = 0; j < W::RD; ++j)
    if (ext[j] == 0) return w;
  G& g = *u.target_;
  w.data_ = g.data();
  w.addr_ = address_of(g);
  w.n_proj_ = count_mask(ext, A::projected);
  bool const long_proj = W::may_block && w.n_proj_ >= block_proj_min && block_lanes <= l.max_threads();
  if (K::injective || mode == scatter_mode::atomic) {
    w.n_outer_ = count_mask(ext, A::outer);
    w.kind_ = long_proj ? store_kind::block : store_kind::thread;
    return w;
  }
  if constexpr (!K::injective) {
    constexpr std::size_t RT = K::target_rank;
    w.n_keys_ = count_mask(ext, A::key);
    w.n_cols_ = count_mask(ext, A::column);
    array<index_t, RT> kst = contiguous_strides<row_major>(g.shape().extents());
    for (std::size_t k = 0; k < RT; ++k)
      if (!((A::key_components >> k) & 1)) kst[k] = 0;
    index_t const m = key_count(w.n_keys_);
    auto sort_into = [&](scatter_key* kp) {
      l.launch(shape_for(m, o, l.max_threads()),
               use_keys_kernel<typename W::D, typename W::M, A::key, RT>{u.dom_, u.map_, kst, w.n_keys_, m, kp});
      bitonic_sort(l, kp, m, o);
    };
    bool made = false;
    if (scatter_key* const kp = kept_keys(l, u, m, &made)) {
      // the index vector's kept order (made here once per upload, unless make_sort made it)
      if (!made) {
        sort_into(kp);
        order_of(u)->made();
      }
      w.keys_ = kp;
    } else {
      if (!presorted) {  // (else make_sort made and sorted them in the reservation launch)
        keys = std::make_unique<scratch<L>>(l, std::size_t(m) * sizeof(scatter_key));
        sort_into(keys->template as<scatter_key>());
      }
      w.keys_ = keys->template as<scatter_key>();
    }
    w.kind_ = long_proj ? store_kind::segment_block : store_kind::segment;
  }
  return w;
}
}  // namespace detail

namespace detail {
/// The one-block key sort of a use (use_sort_kernel; no_work when its map is injective).
template <class Use, bool Injective = ad::kernel_traits<Use>::injective>
struct sort_of {
  using type = no_work;
};
template <class Use>
struct sort_of<Use, false> {
  using type = use_sort_kernel<typename Use::domain_type, typename Use::map_type, use_axes<Use>::key,
                               ad::kernel_traits<Use>::target_rank>;
};
template <class Use>
using sort_of_t = typename sort_of<Use>::type;

/// The key sort of use u in one block, made ready to launch (its keys in `keys`): active when
/// the use stores through sorted keys (a lookup, in deterministic mode) and its keys fit in a
/// block's shared memory, whose bytes it needs (`shared`).
template <class Use>
struct ready_sort {
  sort_of_t<Use> k;
  bool active;
  std::size_t shared;
};
template <class L, class Use>
ready_sort<Use> make_sort(L& l, Use const& u, scatter_mode mode, std::unique_ptr<scratch<L>>& keys, bool wanted) {
  using K = ad::kernel_traits<Use>;
  if constexpr (K::injective) {
    return {{}, false, 0};
  } else {
    using A = use_axes<Use>;
    using G = typename Use::storage_type;
    constexpr std::size_t RT = K::target_rank;
    auto const ext = u.dom_.extents();
    index_t const n = count_mask(ext, A::key);
    index_t const m = key_count(n);
    array<index_t, RT> kst{};
    ready_sort<Use> r{{u.dom_, u.map_, kst, n, m, nullptr}, false, 0};
    bool empty = !u.target_ || !wanted || mode != scatter_mode::deterministic || m > sort_tile_for(l) || m < 2;
    for (std::size_t j = 0; j < K::domain_rank; ++j)
      if (ext[j] == 0) empty = true;
    if (empty) return r;
    G& g = *u.target_;
    kst = contiguous_strides<row_major>(g.shape().extents());
    for (std::size_t k = 0; k < RT; ++k)
      if (!((A::key_components >> k) & 1)) kst[k] = 0;
    bool made = false;
    if (scatter_key* const kp = kept_keys(l, u, m, &made)) {
      // the index vector's kept order: nothing to sort when made; else made here (marked
      // made now, so that another use of the vector in this launch does not sort it too;
      // run_device_plan marks it stale again if a launch fails)
      if (made) return r;
      order_of(u)->made();
      r.k.keys_ = kp;
    } else {
      keys = std::make_unique<scratch<L>>(l, std::size_t(m) * sizeof(scatter_key));
      r.k.keys_ = keys->template as<scatter_key>();
    }
    r.k.kst_ = kst;
    r.active = true;
    r.shared = std::size_t(m) * sizeof(scatter_key);
    return r;
  }
}
}  // namespace detail

/// Runs one use on the device (after prepare), in mode `mode` when its map is not injective:
/// one thread per outer coordinate (plain stores when the map is injective, atomic adds in
/// atomic mode), or one block per outer coordinate when the projected axes are long and do not
/// collapse; in deterministic mode, one thread (or block) per segment of sorted keys and
/// column coordinate.
template <class L, class Use>
void run(L& l, Use const& u, scatter_mode mode, launch_options o = {}) {
  std::unique_ptr<detail::scratch<L>> keys;
  auto const w = detail::make_work(l, u, mode, keys, o);
  using W = std::remove_cvref_t<decltype(w)>;
  using VT = typename W::VT;
  switch (w.kind_) {
    case detail::store_kind::none: return;
    case detail::store_kind::thread: {
      static_assert(std::is_trivially_copyable_v<typename W::thread_kernel>,
                    "gradix::grid: an update kernel must be trivially copyable");
      l.launch(shape_for(w.n_outer_, o, l.max_threads()), w.as_thread());
      return;
    }
    case detail::store_kind::block:
      if constexpr (W::may_block) detail::launch_blocks<VT>(l, w.as_block(), w.n_outer_, o);
      return;
    case detail::store_kind::segment:
      if constexpr (!W::K::injective) {
        static_assert(std::is_trivially_copyable_v<decltype(w.as_segment())>,
                      "gradix::grid: an update kernel must be trivially copyable");
        l.launch(shape_for(w.n_keys_ * w.n_cols_, o, l.max_threads()), w.as_segment());
      }
      return;
    case detail::store_kind::segment_block:
      if constexpr (!W::K::injective && W::may_block)
        detail::launch_blocks<VT>(l, w.as_segment_block(), w.n_keys_ * w.n_cols_, o);
      return;
  }
}

// ---------------------------------------------------------------------------------------
// Fused pairs and multi_uses: their uses run one by one (the host fuses their loop nests;
// on the device each use is its own kernel, with the same plan).

namespace detail {
/// The value expression of a member of a multi_use (ad/kernel.hpp): the region's path
/// derivative read at the region's map, times v0, negated, as region_value describes it.
template <class V>
struct member_value;
template <class Top, class P, class M, class D>
struct member_value<ad::at_map_node<ad::path_deriv_node<Top, P>, M, D>> {
  using type = ad::at_map_node<ad::path_deriv_node<Top, P>, M, D>;
  template <class MU, class V0>
  static type make(Top const& top, M const& tmap, V0 const&, MU const& mu) {
    return type{ad::path_deriv_node<Top, P>{top}, tmap, mu.dom_};
  }
};
template <class V0T, class X>
struct member_value<binary_node<op::mul, V0T, X>> {
  using type = binary_node<op::mul, V0T, X>;
  template <class Top, class M, class MU>
  static type make(Top const& top, M const& tmap, V0T const& v0, MU const& mu) {
    type r{v0, member_value<X>::make(top, tmap, v0, mu), {}};
    for (std::size_t j = 0; j < type::shape_type::rank; ++j) r.shape_.set_extent(j, mu.dom_.extent(j));
    return r;
  }
};
template <class X>
struct member_value<unary_node<op::neg, X>> {
  using type = unary_node<op::neg, X>;
  template <class Top, class M, class V0, class MU>
  static type make(Top const& top, M const& tmap, V0 const& v0, MU const& mu) {
    return type{member_value<X>::make(top, tmap, v0, mu)};
  }
};

/// Member k of a multi_use as a plain use.
template <class MultiUse, class MU>
auto member_as_use(MultiUse const& mu_all, MU const& mu) {
  using V = typename MU::value_expr;
  V v = member_value<V>::make(mu_all.top_, mu_all.tmap_, mu_all.v0_, mu);
  return ad::use<typename MU::domain_type, V, typename MU::map_type, typename MU::storage_type>{mu.dom_, v, mu.map_,
                                                                                              mu.target_};
}
}  // namespace detail

template <class L, class U1, class U2>
void prepare(L& l, ad::fused_use<U1, U2> const& f, launch_options o = {}) {
  prepare(l, f.first_, o);
  prepare(l, f.second_, o);
}
template <class L, class U1, class U2>
void run(L& l, ad::fused_use<U1, U2> const& f, scatter_mode mode, launch_options o = {}) {
  run(l, f.first_, mode, o);
  run(l, f.second_, mode, o);
}
template <class L, int I, class Top, class TMap, class V0, class... U>
void prepare(L& l, ad::multi_use<I, Top, TMap, V0, U...> const& m, launch_options o = {}) {
  for_each_element(m.uses_, [&](auto const& mu) { prepare(l, detail::member_as_use(m, mu), o); });
}
template <class L, int I, class Top, class TMap, class V0, class... U>
void run(L& l, ad::multi_use<I, Top, TMap, V0, U...> const& m, scatter_mode mode, launch_options o = {}) {
  for_each_element(m.uses_, [&](auto const& mu) { run(l, detail::member_as_use(m, mu), mode, o); });
}

}  // namespace gradix::grid
