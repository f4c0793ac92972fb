#pragma once
/// \file
/// Reductions on a device grid (sum, mean, max over all axes or chosen axes), with a
/// combination order fixed by the shapes alone: the same bits for any number of blocks,
/// threads per block, block order or run.
///
/// For each output element o, its n reduced elements (the reduced axes' coordinates in
/// row-major order) are cut into tiles of 1024. A tile is reduced by one warp of 32 threads:
/// lane l combines elements l, l + 32, ..., l + 992 of the tile in that order, then the 32
/// lane values are combined pairwise in a fixed tree (lane l + s into lane l, s = 16, 8, 4, 2,
/// 1) in shared memory, with barriers between the levels. That gives one partial per (o,
/// tile); the partials of each o are reduced the same way, pass after pass, until one value
/// per output is left. Which warp of which block takes a tile changes nothing.

#include "gradix/backend/grid/launch.hpp"
#include "gradix/config.hpp"
#include "gradix/core/layout.hpp"
#include "gradix/core/view.hpp"
#include "gradix/eval/evaluator.hpp"
#include "gradix/expr/node.hpp"
#include "gradix/expr/reduce.hpp"

#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace gradix::grid {

/// Lanes per tile (one warp) and elements per tile.
inline constexpr index_t reduce_lanes = 32;
inline constexpr index_t reduce_tile = reduce_lanes * reduce_lanes;
/// The most partials (outputs x tiles) that the last block of a one-launch reduction combines
/// alone (reduce_last_block_kernel); more go through further passes.
inline constexpr index_t one_launch_partials = index_t(1) << 15;

namespace detail {
/// The coordinate of an operand of rank R from an output index o (row-major over the axes
/// not in Mask) and a reduced index r (row-major over the axes in Mask).
template <axis_mask Mask, std::size_t R>
GRADIX_HOST_DEVICE constexpr coord<R> compose(array<index_t, R> const& ext, index_t o, index_t r) {
  coord<R> c{};
  for (std::size_t j = R; j-- > 0;) {
    if ((Mask >> j) & 1) {
      c[j] = r % ext[j];
      r /= ext[j];
    } else {
      c[j] = o % ext[j];
      o /= ext[j];
    }
  }
  return c;
}

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
    dst_[grid::unravel(dst_.shape().extents(), o)] = DT(v);
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
template <class Op, axis_mask Mask, class T, class Ctx, class EV, std::size_t R, class Sink>
GRADIX_HOST_DEVICE void reduce_items(Ctx const& c, T* sh, EV const& ev, array<index_t, R> const& ext, index_t outputs, index_t n,
                                     index_t tiles, Sink const& sink, index_t first, index_t step) {
  index_t const w = c.thread() / reduce_lanes, lane = c.thread() % reduce_lanes;
  index_t const items = outputs * tiles;
  for (index_t base = first; base < items; base += step) {
    index_t const item = base + w;
    index_t const o = item / tiles, tile = item % tiles;
    T acc = Op::template identity<T>();
    if (item < items) {
      index_t const r0 = tile * reduce_tile + lane;
      // a group of the lane's loads first, then their combination in the fixed order: the
      // loads of a group do not wait for each other (one after another, a lane took 32
      // memory latencies); groups of 8 keep the registers within what a block of 1024
      // threads may use
      constexpr index_t group = 8;
      for (index_t j0 = 0; j0 < reduce_lanes; j0 += group) {
        T v[group];
        GRADIX_DEVICE_UNROLL
        for (index_t q = 0; q < group; ++q) {
          index_t const r = r0 + (j0 + q) * reduce_lanes;
          v[q] = r < n ? T(ev(compose<Mask, R>(ext, o, r))) : Op::template identity<T>();
        }
        GRADIX_DEVICE_UNROLL
        for (index_t q = 0; q < group; ++q)
          if (r0 + (j0 + q) * reduce_lanes < n) acc = Op::template combine<T>(acc, v[q]);
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
    detail::reduce_items<Op, Mask>(c, c.template shared<T>(), ev, arg_.shape().extents(), outputs_, n_, tiles_, sink_,
                                   c.block() * warps, c.blocks() * warps);
  }
};

/// Both passes of a two-level reduction in one launch: the tiles' partials as the first pass
/// of reduce_passes writes them, then the last block to finish (an arrival counter, after a
/// fence) reduces each output's partials as its second, final pass would: the same items in
/// the same order, so the same bits. The counter (the launcher's arrival_counter) is zero
/// before the launch, and the last block sets it to zero again. Needs threads x sizeof(T) +
/// 16 shared bytes.
template <class Op, axis_mask Mask, class Arg, class T, class Sink>
struct reduce_last_block_kernel {
  static constexpr bool uses_barriers = true;
  using value_type = T;
  Arg arg_;
  T* partials_;
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
      detail::reduce_items<Op, Mask>(c, sh, ev, arg_.shape().extents(), outputs_, n_, tiles_, detail::to_partials<T>{partials_},
                                     c.block() * warps, c.blocks() * warps);
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
    PV const pv(partials_, dims(outputs_, tiles_));
    ev::evaluator<PV> pev(pv);
    detail::reduce_items<Op, 2>(c, sh, pev, pv.shape().extents(), outputs_, tiles_, 1, sink_, 0, warps);
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

/// Device memory from launcher l, given back when the guard goes.
template <class L>
struct scratch {
  L& l_;
  void* p_;
  scratch(L& l, std::size_t bytes) : l_(l), p_(l.allocate(bytes)) {}
  scratch(scratch const&) = delete;
  scratch& operator=(scratch const&) = delete;
  ~scratch() { l_.deallocate(p_); }
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
  if constexpr (requires { l.arrival_counter(); }) {
    // two levels, and few enough partials for one block: one launch (reduce_last_block_kernel)
    if (tiles <= reduce_tile && outputs * tiles <= one_launch_partials) {
      scratch<L> a(l, std::size_t(outputs * tiles) * sizeof(T));
      using K = reduce_last_block_kernel<Op, Mask, Arg, T, FinalSink>;
      static_assert(std::is_trivially_copyable_v<K>, "gradix::grid: a kernel must be trivially copyable");
      index_t const t = reduce_threads(o, l.max_threads());
      index_t const warps = t / reduce_lanes;
      index_t b = (outputs * tiles + warps - 1) / warps;
      index_t const cap = o.max_blocks > 0 ? o.max_blocks : max_grid_blocks;
      if (b > cap) b = cap;
      l.launch(launch_shape{b, t, std::size_t(t) * sizeof(T) + 16},
               K{arg, a.template as<T>(), final, outputs, n, tiles, l.arrival_counter()});
      return;
    }
  }
  // pass 1 into a, then the partials of a into b, b into a, ... until one per output is left
  index_t const t2 = (tiles + reduce_tile - 1) / reduce_tile;
  scratch<L> a(l, std::size_t(outputs * tiles) * sizeof(T));
  scratch<L> b(l, std::size_t(outputs * t2) * sizeof(T));
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
  detail::scratch<L> r(l, sizeof(T));
  sum_to(l, r.template as<T>(), e, o);
  T v{};
  l.copy_to_host(&v, r.p_, sizeof(T));
  return v;
}

}  // namespace gradix::grid
