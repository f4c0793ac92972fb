#pragma once
/// \file
/// Scatter-add of rows on a device grid, the device half of an index operation's backward:
/// dst[idx[i], :] += src(i, :) for i < n. Two modes:
///
/// - `scatter_mode::atomic`: one thread per (i, column), an atomic add into dst. Fast; with
///   repeated indices the order of the additions, hence the last bits, may change between
///   runs on a GPU.
/// - `scatter_mode::deterministic`: the pairs (idx[i], i) are sorted (a bitonic network over
///   global memory: the keys are unique, so every correct sort gives one order), then one
///   thread per (target row, column) adds the rows of its segment in the order of i, starting
///   from 0, and adds that sum into dst once. The same bits on every run, launch shape and
///   block order.
///
/// Before anything is written, a validation kernel checks every index against dst's row
/// count and records the first bad position (atomic min); the host reads it and throws the
/// host backend's message, `gradix::<op>: index v (position k) is out of range for axis a of
/// extent n`, with dst unchanged.

#include "gradix/backend/grid/launch.hpp"
#include "gradix/backend/grid/memory.hpp"
#include "gradix/backend/grid/reduce.hpp"
#include "gradix/config.hpp"
#include "gradix/core/error.hpp"
#include "gradix/core/layout.hpp"
#include "gradix/core/view.hpp"
#include "gradix/eval/evaluator.hpp"
#include "gradix/expr/node.hpp"

#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace gradix::grid {

enum class scatter_mode { atomic, deterministic };

/// *first_bad_ = the smallest position k < n_ whose index idx_[k * stride_] is outside
/// [0, extent_) (left as it is when there is none).
template <class I>
struct index_check_kernel {
  static constexpr bool uses_barriers = false;
  I const* idx_;
  index_t stride_;
  index_t n_;
  index_t extent_;
  long long* first_bad_;
  GRADIX_KERNEL_BODY
  template <class Ctx>
  GRADIX_HOST_DEVICE void operator()(Ctx const& c) const {
    for (index_t k = grid_first(c); k < n_; k += grid_step(c)) {
      I v = idx_[k * stride_];
      bool ok;
      if constexpr (std::is_signed_v<I>) ok = v >= 0 && static_cast<long long>(v) < static_cast<long long>(extent_);
      else ok = static_cast<unsigned long long>(v) < static_cast<unsigned long long>(extent_);
      if (!ok) c.atomic_min(first_bad_, static_cast<long long>(k));
    }
  }
};

/// Checks the n indices at idx (every stride-th element, device memory) against extent on
/// l's device; throws gradix::error naming op, the first bad position and value, the axis and
/// the extent. Waits for the device (it reads the result).
template <class L, class I>
void validate_indices(L& l, I const* idx, index_t n, index_t stride, index_t extent, char const* op, std::size_t axis,
                      launch_options o = {}) {
  static_assert(std::is_integral_v<I>, "gradix::grid::validate_indices: indices must be integers");
  if (n == 0) return;
  detail::device_buffer<L> flag(l, sizeof(long long));
  long long const none = static_cast<long long>(PTRDIFF_MAX);
  l.copy_to_device(flag.p_, &none, sizeof none);
  using K = index_check_kernel<I>;
  l.launch(shape_for(n, o, l.max_threads()), K{idx, stride, n, extent, flag.template as<long long>()});
  long long first = none;
  l.copy_to_host(&first, flag.p_, sizeof first);
  if (first != none) {
    I v{};
    l.copy_to_host(&v, idx + first * stride, sizeof v);
    ::gradix::detail::fail(op, ": index ", v, " (position ", first, ") is out of range for axis ", axis, " of extent ",
                           extent);
  }
}

/// A (target, position) pair of the deterministic scatter's sort.
struct scatter_key {
  index_t target;
  index_t pos;
};

namespace detail {
GRADIX_HOST_DEVICE constexpr bool key_less(scatter_key a, scatter_key b) {
  return a.target < b.target || (a.target == b.target && a.pos < b.pos);
}
}  // namespace detail

/// keys_[p] = (idx[p], p) for p < n_, (max, p) for the padding up to m_.
template <class I>
struct scatter_keys_kernel {
  static constexpr bool uses_barriers = false;
  I const* idx_;
  index_t stride_;
  index_t n_;
  index_t m_;
  scatter_key* keys_;
  GRADIX_KERNEL_BODY
  template <class Ctx>
  GRADIX_HOST_DEVICE void operator()(Ctx const& c) const {
    for (index_t p = grid_first(c); p < m_; p += grid_step(c))
      keys_[p] = scatter_key{p < n_ ? index_t(idx_[p * stride_]) : index_t(PTRDIFF_MAX), p};
  }
};

/// One compare-exchange step (j, k) of a bitonic sort of m_ (a power of two) keys.
struct bitonic_step_kernel {
  static constexpr bool uses_barriers = false;
  scatter_key* keys_;
  index_t m_;
  index_t j_;
  index_t k_;
  GRADIX_KERNEL_BODY
  template <class Ctx>
  GRADIX_HOST_DEVICE void operator()(Ctx const& c) const {
    for (index_t i = grid_first(c); i < m_; i += grid_step(c)) {
      index_t const l = i ^ j_;
      if (l <= i) continue;
      bool const up = (i & k_) == 0;
      scatter_key a = keys_[i], b = keys_[l];
      if (up == detail::key_less(b, a)) {
        keys_[i] = b;
        keys_[l] = a;
      }
    }
  }
};

namespace detail {
/// The bitonic steps k = k_first .. k_last (doubling), j from min(k / 2, tile / 2) down to 1,
/// on the tile of keys in shared memory sh whose first key has global index base: each a
/// compare-exchange of the pairs (i, i + j), ascending where ((base + i) & k) == 0. Every
/// thread of the block calls it; it ends with a barrier.
GRADIX_KERNEL_BODY
template <class Ctx>
GRADIX_HOST_DEVICE void bitonic_steps_in_shared(Ctx const& c, scatter_key* sh, index_t tile, index_t base, index_t k_first,
                                                index_t k_last) {
  index_t const t = c.thread(), b = c.threads(), half = tile / 2;
  for (index_t k = k_first; k <= k_last; k *= 2) {
    for (index_t j = (k / 2 < half ? k / 2 : half); j > 0; j /= 2) {
      for (index_t q = t; q < half; q += b) {
        index_t const i = ((q & ~(j - 1)) << 1) | (q & (j - 1));  // bit j of i is clear; its partner is i + j
        bool const up = ((base + i) & k) == 0;
        scatter_key const x = sh[i], y = sh[i + j];
        if (up == key_less(y, x)) {
          sh[i] = y;
          sh[i + j] = x;
        }
      }
      c.sync();
    }
  }
}
}  // namespace detail

/// Keys per block of bitonic_tile_kernel (in shared memory: 32 KiB of scatter_key) when the
/// launcher does not say how much shared memory a block may have.
inline constexpr index_t sort_tile = 2048;

/// The steps of a bitonic sort of m_ keys (m_ a power of two) that stay inside tiles of
/// tile_ keys, in shared memory, one tile per block (a grid-stride loop over tiles): for k
/// from k_first_ to k_last_ (doubling), j from min(k / 2, tile_ / 2) down to 1, each a
/// compare-exchange of the pairs (i, i + j), ascending where (i & k) == 0 (i the global index).
struct bitonic_tile_kernel {
  static constexpr bool uses_barriers = true;
  scatter_key* keys_;
  index_t m_;
  index_t tile_;
  index_t k_first_;
  index_t k_last_;
  GRADIX_KERNEL_BODY
  template <class Ctx>
  GRADIX_HOST_DEVICE void operator()(Ctx const& c) const {
    scatter_key* const sh = c.template shared<scatter_key>();
    index_t const t = c.thread(), b = c.threads();
    for (index_t base = c.block() * tile_; base < m_; base += c.blocks() * tile_) {
      for (index_t q = t; q < tile_; q += b) sh[q] = keys_[base + q];
      c.sync();
      detail::bitonic_steps_in_shared(c, sh, tile_, base, k_first_, k_last_);
      for (index_t q = t; q < tile_; q += b) keys_[base + q] = sh[q];
      c.sync();  // the tile is written back before the next one is loaded
    }
  }
};

/// Row destinations of segment_sum_kernel: element (target, d) of a rank-2 view ...
template <class DV>
struct view_rows {
  DV dst_;
  GRADIX_HOST_DEVICE typename DV::value_type& at(index_t t, index_t d) const { return dst_[coord<2>{t, d}]; }
};

/// For each segment head s (s == 0 or a new target) and column d: the sum, in position order
/// from 0, of src(pos, d) over the segment, added into dst_.at(target, d).
template <class Dest, class E, class T>
struct segment_sum_kernel {
  static constexpr bool uses_barriers = false;
  Dest dst_;
  E src_;
  scatter_key const* keys_;
  index_t n_;
  index_t cols_;
  GRADIX_KERNEL_BODY
  template <class Ctx>
  GRADIX_HOST_DEVICE void operator()(Ctx const& c) const {
    ev::evaluator<E> ev(src_);
    index_t const total = n_ * cols_;
    for (index_t q = grid_first(c); q < total; q += grid_step(c)) {
      index_t const s = q / cols_, d = q % cols_;
      index_t const t = keys_[s].target;
      if (s > 0 && keys_[s - 1].target == t) continue;
      T acc = T(0);
      for (index_t r = s; r < n_ && keys_[r].target == t; ++r) acc += T(ev(coord<2>{keys_[r].pos, d}));
      dst_.at(t, d) += acc;
    }
  }
};

namespace detail {
/// The number of keys the sort works on: n rounded up to a power of two.
constexpr index_t key_count(index_t n) {
  index_t m = 1;
  while (m < n) m *= 2;
  return m;
}
/// The keys a tile of bitonic_tile_kernel holds on l: sort_tile, or fewer when the launcher
/// says that a block's shared memory (max_shared_bytes) holds fewer. (Larger tiles were
/// measured slower on an H200: the deterministic scatter of 5000 rows took 0.17 ms with one
/// block sorting all 8192 keys, 0.10 ms with tiles of 2048 on 4 blocks and 5 more launches.)
template <class L>
index_t sort_tile_for(L& l) {
  if constexpr (requires { l.max_shared_bytes(); }) {
    index_t t = 2;
    while (t < sort_tile && std::size_t(2 * t) * sizeof(scatter_key) <= l.max_shared_bytes()) t *= 2;
    return t;
  } else {
    return sort_tile;
  }
}
/// Sorts the m keys at kp (m = key_count(n), a power of two; unique keys, so the result is
/// the same for every launch shape): the steps whose pairs stay inside a tile (sort_tile_for)
/// run in shared memory, many steps per launch (bitonic_tile_kernel); only the steps with
/// j >= tile go through global memory, one launch each. 5000 keys (m = 8192) take 6 launches
/// instead of 91; up to a tile of keys, one.
template <class L>
void bitonic_sort(L& l, scatter_key* kp, index_t m, launch_options o) {
  if (m < 2) return;
  index_t const max_tile = sort_tile_for(l);
  index_t const tile = m < max_tile ? m : max_tile;
  index_t th = reduce_threads(o, l.max_threads());
  if (th > tile / 2) th = tile / 2;
  index_t blocks = m / tile;
  index_t const cap = o.max_blocks > 0 ? o.max_blocks : max_grid_blocks;
  if (blocks > cap) blocks = cap;
  launch_shape const ts{blocks, th, std::size_t(tile) * sizeof(scatter_key)};
  l.launch(ts, bitonic_tile_kernel{kp, m, tile, 2, tile});
  for (index_t k = 2 * tile; k <= m; k *= 2) {
    for (index_t j = k / 2; j >= tile; j /= 2) l.launch(shape_for(m, o, l.max_threads()), bitonic_step_kernel{kp, m, j, k});
    l.launch(ts, bitonic_tile_kernel{kp, m, tile, k, k});
  }
}
/// Writes the (idx[p], p) keys of the n indices, padded to m = key_count(n), into kp and
/// sorts them (bitonic_sort).
template <class L, class I>
void sort_keys(L& l, scatter_key* kp, index_t m, I const* idx, index_t n, index_t stride, launch_options o) {
  l.launch(shape_for(m, o, l.max_threads()), scatter_keys_kernel<I>{idx, stride, n, m, kp});
  bitonic_sort(l, kp, m, o);
}
}  // namespace detail

/// dst(idx[i], d) += src(i, d) with an atomic add per element.
template <class DV, class E, class I>
struct atomic_scatter_kernel {
  static constexpr bool uses_barriers = false;
  DV dst_;
  E src_;
  I const* idx_;
  index_t stride_;
  index_t n_;
  index_t cols_;
  GRADIX_KERNEL_BODY
  template <class Ctx>
  GRADIX_HOST_DEVICE void operator()(Ctx const& c) const {
    using T = typename DV::value_type;
    ev::evaluator<E> ev(src_);
    index_t const total = n_ * cols_;
    for (index_t q = grid_first(c); q < total; q += grid_step(c)) {
      index_t const i = q / cols_, d = q % cols_;
      c.atomic_add(&dst_[coord<2>{index_t(idx_[i * stride_]), d}], T(ev(coord<2>{i, d})));
    }
  }
};

namespace detail {
/// scatter_add_rows: checks the source's shape, validates the indices unless `checked` (their
/// bounds are known to be in range), then scatters.
template <class L, class DT, class DS, class DL, class I, class E>
void scatter_rows(L& l, tensor_view<DT, DS, DL, cuda_space> const& dst, I const* idx, index_t n, index_t stride,
                  E const& src, scatter_mode mode, char const* op, launch_options o, bool checked) {
  static_assert(DS::rank == 2 && shape_of_t<E>::rank == 2,
                "gradix::grid::scatter_add_rows: dst and src are rank 2 (rows x columns)");
  static_assert(detail::device_expression<E>,
                "gradix::grid::scatter_add_rows: src reads host memory; every leaf must be a cuda_space view");
  auto const se = src.shape().extents();
  if (se[0] != n || se[1] != dst.extent(1))
    ::gradix::detail::fail(op, ": the source rows have shape ", to_string(src.shape()), " for ", n,
                           " indices into rows of ", dst.extent(1), " columns");
  if (!checked) validate_indices(l, idx, n, stride, dst.extent(0), op, 0, o);
  index_t const cols = dst.extent(1);
  if (n == 0 || cols == 0) return;
  using DV = tensor_view<DT, DS, DL, cuda_space>;
  if (mode == scatter_mode::atomic) {
    l.launch(shape_for(n * cols, o, l.max_threads()), atomic_scatter_kernel<DV, E, I>{dst, src, idx, stride, n, cols});
    return;
  }
  index_t const m = detail::key_count(n);
  detail::device_buffer<L> keys(l, std::size_t(m) * sizeof(scatter_key));
  scatter_key* const kp = keys.template as<scatter_key>();
  detail::sort_keys(l, kp, m, idx, n, stride, o);
  l.launch(shape_for(n * cols, o, l.max_threads()),
           segment_sum_kernel<view_rows<DV>, E, DT>{{dst}, src, kp, n, cols});
}
}  // namespace detail

/// dst[idx[i], :] += src(i, :) for the n indices at idx (device memory, every stride-th
/// element); dst is a rank-2 device view (rows x columns, any layout), src a device
/// expression of shape [n, columns]. Validates every index first (nothing is written when
/// one is out of range; `op` names the operation in the message). See the file comment for
/// the modes.
template <class L, class DT, class DS, class DL, class I, class E>
void scatter_add_rows(L& l, tensor_view<DT, DS, DL, cuda_space> const& dst, I const* idx, index_t n, index_t stride,
                      E const& src, scatter_mode mode, char const* op = "gradix::scatter_add", launch_options o = {}) {
  detail::scatter_rows(l, dst, idx, n, stride, src, mode, op, o, false);
}

/// scatter_add_rows with the indices of a grid::device_indices (stride 1): validated by its
/// bounds on the host, with no kernel and no wait, unless a bound is out of range.
template <class L, class DT, class DS, class DL, class I, class E>
void scatter_add_rows(L& l, tensor_view<DT, DS, DL, cuda_space> const& dst, device_indices<I, L> const& idx, E const& src,
                      scatter_mode mode, char const* op = "gradix::scatter_add", launch_options o = {}) {
  detail::scatter_rows(l, dst, idx.cview().data(), idx.size(), 1, src, mode, op, o, idx.bounds().within(dst.extent(0)));
}

}  // namespace gradix::grid
