#pragma once
/// \file
/// Reductions on a device grid (sum, mean, max over all axes or chosen axes), with a
/// combination order fixed by the shapes alone: the same bits for any number of blocks,
/// threads per block, block order or run.
///
/// For each output element o, its n reduced elements (the reduced axes' coordinates in
/// row-major order) are cut into tiles of 256. A tile is reduced by one warp of 32 threads:
/// lane l combines elements l, l + 32, ..., l + 224 of the tile in that order, then the 32
/// lane values are combined pairwise in a fixed tree (lane l + s into lane l, s = 16, 8, 4, 2,
/// 1) in shared memory, with barriers between the levels. That gives one partial per (o,
/// tile); the partials of each o are reduced the same way, level after level, until one value
/// per output is left. Which warp of which block takes a tile changes nothing.
///
/// When the launcher has an arrival counter and the partials are few (outputs x tiles at most
/// one_launch_partials), every level is one launch: the last block to finish the first level
/// reduces the partials, level after level, alone (reduce_last_block_kernel). Otherwise each
/// level is a launch. Both give the same bits.
///
/// A lane's elements are 32 apart in the reduced order: their coordinates are stepped from
/// the first by a mixed-radix addition (no division per element), and the lane's 8 loads are
/// issued before they are combined.

#include "gradix/backend/grid/launch.hpp"
#include "gradix/config.hpp"
#include "gradix/core/coords.hpp"
#include "gradix/core/layout.hpp"
#include "gradix/core/view.hpp"
#include "gradix/eval/evaluator.hpp"
#include "gradix/expr/node.hpp"
#include "gradix/expr/reduce.hpp"

#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace gradix::grid {

/// Lanes per tile (one warp), elements per lane and elements per tile.
inline constexpr index_t reduce_lanes = 32;
inline constexpr index_t reduce_per_lane = 8;
inline constexpr index_t reduce_tile = reduce_lanes * reduce_per_lane;
/// The most partials (outputs x tiles) that the last block of a one-launch reduction combines
/// alone (reduce_last_block_kernel); more go through further passes.
inline constexpr index_t one_launch_partials = index_t(1) << 15;

namespace detail {
/// The reduced axis that goes fastest in the reduced order of an operand Arg reduced over
/// Mask: its layout's contiguous axis when it is reduced (so a warp's lanes read adjacent
/// elements), else none (R: the last reduced axis, as in row-major order).
template <class Arg, axis_mask Mask>
inline constexpr std::size_t reduce_unit_v = [] {
  constexpr std::size_t R = shape_of_t<Arg>::rank;
  if constexpr (R == 0) {
    return std::size_t(0);
  } else {
    using Lay = layout_of_t<Arg>;
    if constexpr (requires { Lay::template unit_axis<R>; }) {
      constexpr std::size_t u = Lay::template unit_axis<R>;
      return ((Mask >> u) & 1) ? u : R;
    } else {
      return R;
    }
  }
}();

/// Where a pass writes: the partials of the next pass (p_[item]) ...
template <class T>
struct to_partials {
  T* p_;
  GRADIX_HOST_DEVICE void operator()(index_t item, index_t, T v) const { p_[item] = v; }
};
/// ... or, in the last pass, the destination element of output o (mean: divided by the
/// count n of reduced elements).
template <class DV, bool Mean, class T>
struct to_destination {
  DV dst_;
  index_t count_;
  GRADIX_HOST_DEVICE void operator()(index_t, index_t o, T v) const {
    using DT = typename DV::value_type;
    if constexpr (Mean) v = v / T(count_);
    dst_[coords::unravel(dst_.shape().extents(), o)] = DT(v);
  }
};
}  // namespace detail

namespace detail {
/// The items [first, items) of a pass, step apart, by the warps of one block: item = o *
/// tiles + t (o < outputs, t < tiles) is the Op-reduction of tile t of output o's n reduced
/// elements of the evaluator ev (axes Mask; extents ext), given to sink(item, o, value).
/// Every thread of the block calls it (the loop is block-uniform: the same iterations and
/// barriers for every thread); sh holds a T per thread, and it ends with a barrier.
GRADIX_KERNEL_BODY
template <class Op, axis_mask Mask, std::size_t U, class T, class Ctx, class EV, std::size_t R, class Sink>
GRADIX_HOST_DEVICE void reduce_items(Ctx const& c, T* sh, EV const& ev, array<index_t, R> const& ext, index_t outputs, index_t n,
                                     index_t tiles, Sink const& sink, index_t first, index_t step_items) {
  index_t const w = c.thread() / reduce_lanes, lane = c.thread() % reduce_lanes;
  index_t const items = outputs * tiles;
  // the coordinates of the reduced offset reduce_lanes (a lane's step), when there is one
  coord<R> const step = n > reduce_lanes ? coords::compose<int(U)>(ext, Mask, 0, reduce_lanes) : coord<R>{};
  for (index_t base = first; base < items; base += step_items) {
    index_t const item = base + w;
    index_t const o = item / tiles, tile = item % tiles;
    T acc = Op::template identity<T>();
    if (item < items) {
      index_t const r0 = tile * reduce_tile + lane;
      // the lane's loads first, then their combination in the fixed order: the loads do not
      // wait for each other
      T v[reduce_per_lane];
      if (r0 < n) {
        coord<R> x = coords::compose<int(U)>(ext, Mask, o, r0);
        GRADIX_DEVICE_UNROLL
        for (index_t q = 0; q < reduce_per_lane; ++q) {
          v[q] = r0 + q * reduce_lanes < n ? T(ev(x)) : Op::template identity<T>();
          if (q + 1 < reduce_per_lane) coords::advance<int(U)>(x, ext, Mask, step);
        }
        GRADIX_DEVICE_UNROLL
        for (index_t q = 0; q < reduce_per_lane; ++q)
          if (r0 + q * reduce_lanes < n) acc = Op::template combine<T>(acc, v[q]);
      }
    }
    sh[c.thread()] = acc;
    c.sync();
    for (index_t s = reduce_lanes / 2; s > 0; s /= 2) {
      if (lane < s) sh[c.thread()] = Op::template combine<T>(sh[c.thread()], sh[c.thread() + s]);
      c.sync();
    }
    if (lane == 0 && item < items) sink(item, o, sh[c.thread()]);
    c.sync();  // the next iteration writes sh again
  }
}
}  // namespace detail

/// One pass: for every item = o * tiles_ + t (o < outputs_, t < tiles_), the Op-reduction of
/// tile t of output o's n_ reduced elements of arg_ (axes Mask), given to sink_. Needs
/// threads a multiple of 32 and threads x sizeof(T) shared bytes.
template <class Op, axis_mask Mask, class Arg, class T, class Sink>
struct reduce_tiles_kernel {
  static constexpr bool uses_barriers = true;
  using value_type = T;
  Arg arg_;
  Sink sink_;
  index_t outputs_;
  index_t n_;
  index_t tiles_;
  GRADIX_KERNEL_BODY
  template <class Ctx>
  GRADIX_HOST_DEVICE void operator()(Ctx const& c) const {
    ev::evaluator<Arg> ev(arg_);
    index_t const warps = c.threads() / reduce_lanes;
    detail::reduce_items<Op, Mask, detail::reduce_unit_v<Arg, Mask>>(c, c.template shared<T>(), ev, arg_.shape().extents(),
                                                                     outputs_, n_, tiles_, sink_, c.block() * warps,
                                                                     c.blocks() * warps);
  }
};

/// Every level of a reduction in one launch: the tiles' partials as the first level of
/// reduce_passes writes them, then the last block to finish (an arrival counter, after a
/// fence) reduces the partials, level after level (between partials_ and partials2_), as the
/// further passes would: the same items in the same order, so the same bits. The counter
/// (the launcher's arrival_counter) is zero before the launch, and the last block sets it to
/// zero again. Needs threads x sizeof(T) + 16 shared bytes.
template <class Op, axis_mask Mask, class Arg, class T, class Sink>
struct reduce_last_block_kernel {
  static constexpr bool uses_barriers = true;
  using value_type = T;
  Arg arg_;
  T* partials_;
  T* partials2_;
  Sink sink_;
  index_t outputs_;
  index_t n_;
  index_t tiles_;
  std::uint32_t* counter_;
  GRADIX_KERNEL_BODY
  template <class Ctx>
  GRADIX_HOST_DEVICE void operator()(Ctx const& c) const {
    T* const sh = c.template shared<T>();
    index_t const warps = c.threads() / reduce_lanes;
    {
      ev::evaluator<Arg> ev(arg_);
      detail::reduce_items<Op, Mask, detail::reduce_unit_v<Arg, Mask>>(c, sh, ev, arg_.shape().extents(), outputs_, n_, tiles_,
                                                                       detail::to_partials<T>{partials_}, c.block() * warps,
                                                                       c.blocks() * warps);
    }
    // every partial this block wrote is seen by the grid before its arrival is counted
    c.fence();
    c.sync();
    std::uint32_t* const last = reinterpret_cast<std::uint32_t*>(sh + c.threads());
    if (c.thread() == 0) *last = c.atomic_fetch_add(counter_, 1u) == std::uint32_t(c.blocks() - 1) ? 1u : 0u;
    c.sync();
    if (*last == 0) return;  // (the same for the whole block)
    c.fence();
    using PV = tensor_view<T const, shape<dyn, dyn>, row_major, cuda_space>;
    T* src = partials_;
    T* dst = partials2_;
    index_t m = tiles_;
    while (true) {
      index_t const next = (m + reduce_tile - 1) / reduce_tile;
      PV const pv(src, dims(outputs_, m));
      ev::evaluator<PV> pev(pv);
      if (next == 1) {
        detail::reduce_items<Op, 2, detail::reduce_unit_v<PV, 2>>(c, sh, pev, pv.shape().extents(), outputs_, m, 1, sink_, 0, warps);
        break;
      }
      // (reduce_items ends with a barrier: the block sees the level it wrote)
      detail::reduce_items<Op, 2, detail::reduce_unit_v<PV, 2>>(c, sh, pev, pv.shape().extents(), outputs_, m, next, detail::to_partials<T>{dst}, 0, warps);
      m = next;
      T* const t = src;
      src = dst;
      dst = t;
    }
    if (c.thread() == 0) *counter_ = 0;
  }
};

namespace detail {
/// sh[t] = sh[0] + ... + sh[t] for the block's threads t (an inclusive Hillis-Steele scan in
/// shared memory; every thread of the block calls it; it ends with a barrier).
GRADIX_KERNEL_BODY
template <class Ctx, class S>
GRADIX_HOST_DEVICE void block_inclusive_scan(Ctx const& c, S* sh) {
  index_t const t = c.thread(), b = c.threads();
  for (index_t off = 1; off < b; off *= 2) {
    S const add = t >= off ? sh[t - off] : S(0);
    c.sync();
    sh[t] += add;
    c.sync();
  }
}

/// A temporary device allocation from launcher l (a flag, sort keys, a staged value),
/// given back when the guard goes; not the call's workspace (exec/workspace.hpp).
template <class L>
struct device_buffer {
  L& l_;
  void* p_;
  device_buffer(L& l, std::size_t bytes) : l_(l), p_(l.allocate(bytes)) {}
  device_buffer(device_buffer const&) = delete;
  device_buffer& operator=(device_buffer const&) = delete;
  ~device_buffer() { l_.deallocate(p_); }
  template <class T>
  T* as() const {
    return static_cast<T*>(p_);
  }
};
/// Threads per block for reduction kernels: a multiple of the warp, within the device's limit.
constexpr index_t reduce_threads(launch_options o, index_t max_threads) {
  index_t t = o.threads > 0 ? o.threads : 256;
  if (t > max_threads) t = max_threads;
  t = t / reduce_lanes * reduce_lanes;
  return t < reduce_lanes ? reduce_lanes : t;
}
template <class L, class K>
void launch_items(L& l, K const& k, index_t items, launch_options o) {
  static_assert(std::is_trivially_copyable_v<K>, "gradix::grid: a kernel must be trivially copyable");
  index_t const t = reduce_threads(o, l.max_threads());
  index_t const warps = t / reduce_lanes;
  index_t b = (items + warps - 1) / warps;
  index_t const cap = o.max_blocks > 0 ? o.max_blocks : max_grid_blocks;
  if (b > cap) b = cap;
  if (b < 1) b = 1;
  l.launch(launch_shape{b, t, std::size_t(t) * sizeof(typename K::value_type)}, k);
}
template <class Op>
struct reduce_op {
  using type = Op;
};
template <>
struct reduce_op<op::mean_of> {
  using type = op::sum_of;  // summed, then divided once by the count
};

/// Reduces Arg over axes Mask into the sink `final` of the last pass: outputs x n elements.
template <class Op, axis_mask Mask, class L, class Arg, class FinalSink>
void reduce_passes(L& l, Arg const& arg, index_t outputs, index_t n, FinalSink const& final, launch_options o) {
  using T = value_type_t<Arg>;
  index_t tiles = (n + reduce_tile - 1) / reduce_tile;
  if (tiles <= 1) {
    launch_items(l, reduce_tiles_kernel<Op, Mask, Arg, T, FinalSink>{arg, final, outputs, n, 1}, outputs, o);
    return;
  }
  // the partials of the first level into a, then those of a into b, b into a, ... until one
  // per output is left
  index_t const t2 = (tiles + reduce_tile - 1) / reduce_tile;
  if constexpr (requires { l.arrival_counter(); }) {
    // few enough partials for one block: one launch (reduce_last_block_kernel)
    if (outputs * tiles <= one_launch_partials) {
      device_buffer<L> ab(l, std::size_t(outputs * (tiles + t2)) * sizeof(T));
      using K = reduce_last_block_kernel<Op, Mask, Arg, T, FinalSink>;
      static_assert(std::is_trivially_copyable_v<K>, "gradix::grid: a kernel must be trivially copyable");
      index_t const t = reduce_threads(o, l.max_threads());
      index_t const warps = t / reduce_lanes;
      index_t b = (outputs * tiles + warps - 1) / warps;
      index_t const cap = o.max_blocks > 0 ? o.max_blocks : max_grid_blocks;
      if (b > cap) b = cap;
      T* const pa = ab.template as<T>();
      l.launch(launch_shape{b, t, std::size_t(t) * sizeof(T) + 16},
               K{arg, pa, pa + outputs * tiles, final, outputs, n, tiles, l.arrival_counter()});
      return;
    }
  }
  device_buffer<L> a(l, std::size_t(outputs * tiles) * sizeof(T));
  device_buffer<L> b(l, std::size_t(outputs * t2) * sizeof(T));
  launch_items(l, reduce_tiles_kernel<Op, Mask, Arg, T, to_partials<T>>{arg, {a.template as<T>()}, outputs, n, tiles},
               outputs * tiles, o);
  using PV = tensor_view<T const, shape<dyn, dyn>, row_major, cuda_space>;
  T* src = a.template as<T>();
  T* dst = b.template as<T>();
  index_t m = tiles;
  while (true) {
    index_t next = (m + reduce_tile - 1) / reduce_tile;
    PV pv(src, dims(outputs, m));
    if (next == 1) {
      launch_items(l, reduce_tiles_kernel<Op, 2, PV, T, FinalSink>{pv, final, outputs, m, 1}, outputs, o);
      return;
    }
    launch_items(l, reduce_tiles_kernel<Op, 2, PV, T, to_partials<T>>{pv, {dst}, outputs, m, next}, outputs * next, o);
    m = next;
    T* t = src;
    src = dst;
    dst = t;
  }
}

template <class E>
inline constexpr bool device_expression = std::is_same_v<space_of_t<E>, cuda_space> || std::is_void_v<space_of_t<E>>;
}  // namespace detail

/// dst = the reduction r (a sum, mean or max node over chosen axes or all axes, with or
/// without keep_dims) as block-then-grid kernels with fixed bits (see the file comment).
/// dst must have r's shape (checked by the caller).
template <class L, class DV, class Op, class Arg, axis_mask Mask, bool Keep>
void reduce_into(L& l, DV const& dst, reduce_node<Op, Arg, Mask, Keep> const& r, launch_options o = {}) {
  constexpr std::size_t R = shape_of_t<Arg>::rank;
  auto const ext = r.arg_.shape().extents();
  index_t n = 1, outputs = 1;
  for (std::size_t j = 0; j < R; ++j) {
    if ((Mask >> j) & 1) n *= ext[j];
    else outputs *= ext[j];
  }
  if (outputs == 0) return;
  using T = value_type_t<Arg>;
  constexpr bool mean = std::is_same_v<Op, op::mean_of>;
  detail::reduce_passes<typename detail::reduce_op<Op>::type, Mask>(l, r.arg_, outputs, n,
                                                                    detail::to_destination<DV, mean, T>{dst, n}, o);
}

/// The sum of every element of e, written to *out (device memory) in l's order, with fixed
/// bits. An empty e sums to 0.
template <class L, class E, class T>
void sum_to(L& l, T* out, E const& e, launch_options o = {}) {
  static_assert(detail::device_expression<E>,
                "gradix::grid::sum: the expression reads host memory; every leaf of a device "
                "expression must be a cuda_space view");
  static_assert(std::is_same_v<T, value_type_t<E>>, "gradix::grid::sum: out must have the expression's value type");
  constexpr std::size_t R = shape_of_t<E>::rank;
  constexpr axis_mask all = R == 0 ? 0 : (R >= 64 ? ~axis_mask(0) : (axis_mask(1) << R) - 1);
  using OV = tensor_view<T, shape<>, row_major, cuda_space>;
  detail::reduce_passes<op::sum_of, all>(l, e, 1, e.shape().size(), detail::to_destination<OV, false, T>{OV(out, shape<>{}), 1},
                                         o);
}

/// The sum of every element of e on l's device, returned to the host (waits for it).
template <class L, class E>
value_type_t<E> sum(L& l, E const& e, launch_options o = {}) {
  using T = value_type_t<E>;
  detail::device_buffer<L> r(l, sizeof(T));
  sum_to(l, r.template as<T>(), e, o);
  T v{};
  l.copy_to_host(&v, r.p_, sizeof(T));
  return v;
}

}  // namespace gradix::grid
