#pragma once
/// \file
/// The sum of every element of an expression on a device grid, with a combination order
/// fixed by the data alone: the same bits for any number of blocks, threads per block, block
/// order or run.
///
/// The flat (row-major) elements are cut into tiles of 1024. A tile is summed by one warp of
/// 32 threads: lane l adds elements l, l + 32, ..., l + 992 of the tile in that order, then the
/// 32 lane sums are added pairwise in a fixed tree (lane l + s into lane l, s = 16, 8, 4, 2, 1)
/// in shared memory, with barriers between the levels. That gives one partial per tile; the
/// partials are summed the same way, pass after pass, until one value is left. Which warp of
/// which block takes a tile changes nothing.

#include "gradix/backend/grid/launch.hpp"
#include "gradix/config.hpp"
#include "gradix/core/layout.hpp"
#include "gradix/core/view.hpp"
#include "gradix/eval/evaluator.hpp"
#include "gradix/expr/node.hpp"

#include <cstddef>
#include <type_traits>

namespace gradix::grid {

/// Lanes per tile (one warp) and elements per tile.
inline constexpr index_t sum_lanes = 32;
inline constexpr index_t sum_tile = sum_lanes * sum_lanes;

/// out_[t] = the sum of tile t of e (flat elements [1024 t, 1024 (t + 1)) of n_), for every
/// tile t < tiles_. Needs threads a multiple of 32 and threads x sizeof(T) shared bytes.
template <class E, class T>
struct sum_tiles_kernel {
  static constexpr bool uses_barriers = true;
  using value_type = T;
  E e_;
  T* out_;
  index_t n_;
  index_t tiles_;
  GRADIX_KERNEL_BODY
  template <class Ctx>
  GRADIX_HOST_DEVICE void operator()(Ctx const& c) const {
    constexpr std::size_t R = shape_of_t<E>::rank;
    ev::evaluator<E> ev(e_);
    auto const ext = e_.shape().extents();
    T* const sh = c.template shared<T>();
    index_t const warps = c.threads() / sum_lanes;
    index_t const w = c.thread() / sum_lanes, lane = c.thread() % sum_lanes;
    // block-uniform loop: every thread of the block takes the same iterations and barriers
    for (index_t base = c.block() * warps; base < tiles_; base += c.blocks() * warps) {
      index_t const tile = base + w;
      T acc = T(0);
      if (tile < tiles_) {
        index_t const k0 = tile * sum_tile + lane;
        for (index_t j = 0; j < sum_lanes; ++j) {
          index_t const k = k0 + j * sum_lanes;
          if (k < n_) acc += T(ev(grid::unravel<R>(ext, k)));
        }
      }
      sh[c.thread()] = acc;
      c.sync();
      for (index_t s = sum_lanes / 2; s > 0; s /= 2) {
        if (lane < s) sh[c.thread()] += sh[c.thread() + s];
        c.sync();
      }
      if (lane == 0 && tile < tiles_) out_[tile] = sh[c.thread()];
      c.sync();  // the next iteration writes sh again
    }
  }
};

namespace detail {
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
/// Threads per block for sum kernels: a multiple of the warp, within the device's limit.
constexpr index_t sum_threads(launch_options o, index_t max_threads) {
  index_t t = o.threads > 0 ? o.threads : 256;
  if (t > max_threads) t = max_threads;
  t = t / sum_lanes * sum_lanes;
  return t < sum_lanes ? sum_lanes : t;
}
template <class L, class K>
void launch_tiles(L& l, K const& k, index_t tiles, launch_options o) {
  index_t const t = sum_threads(o, l.max_threads());
  index_t const warps = t / sum_lanes;
  index_t b = (tiles + warps - 1) / warps;
  if (o.max_blocks > 0 && b > o.max_blocks) b = o.max_blocks;
  if (b < 1) b = 1;
  l.launch(launch_shape{b, t, std::size_t(t) * sizeof(typename K::value_type)}, k);
}
}  // namespace detail

/// The sum of every element of e, written to *out (device memory) in l's order, with fixed
/// bits (see the file comment). An empty e sums to 0.
template <class L, class E, class T>
void sum_to(L& l, T* out, E const& e, launch_options o = {}) {
  static_assert(std::is_same_v<space_of_t<E>, cuda_space> || std::is_void_v<space_of_t<E>>,
                "gradix::grid::sum: the expression reads host memory; every leaf of a device "
                "expression must be a cuda_space view");
  static_assert(std::is_same_v<T, value_type_t<E>>, "gradix::grid::sum: out must have the expression's value type");
  index_t n = e.shape().size();
  index_t tiles = (n + sum_tile - 1) / sum_tile;
  if (tiles <= 1) {
    using K = sum_tiles_kernel<E, T>;
    static_assert(std::is_trivially_copyable_v<K>, "gradix::grid::sum: a kernel must be trivially copyable");
    detail::launch_tiles(l, K{e, out, n, 1}, 1, o);
    return;
  }
  // pass 1 into a, then tiles of a into b, b into a, ... until one value is left (into out)
  detail::scratch<L> a(l, std::size_t(tiles) * sizeof(T));
  detail::scratch<L> b(l, std::size_t((tiles + sum_tile - 1) / sum_tile) * sizeof(T));
  {
    using K = sum_tiles_kernel<E, T>;
    detail::launch_tiles(l, K{e, a.template as<T>(), n, tiles}, tiles, o);
  }
  using PV = tensor_view<T const, shape<dyn>, row_major, cuda_space>;
  using KP = sum_tiles_kernel<PV, T>;
  T* src = a.template as<T>();
  T* dst = b.template as<T>();
  index_t m = tiles;
  while (true) {
    index_t next = (m + sum_tile - 1) / sum_tile;
    T* to = next == 1 ? out : dst;
    detail::launch_tiles(l, KP{PV(src, dims(m)), to, m, next}, next, o);
    if (next == 1) return;
    m = next;
    T* t = src;
    src = dst;
    dst = t;
  }
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
