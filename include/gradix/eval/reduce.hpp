#pragma once
/// \file
/// Evaluator of reduction nodes, and gradix's fixed summation scheme.
///
/// The scheme (the same on every path: serial, parallel, constant evaluation):
/// 1. The reduced domain of one output element is walked in a fixed order: the inner axis
///    is the operand's contiguous axis if it is reduced, else the last reduced axis; the
///    other reduced axes form "rows" in row-major order. Its N elements get flat indices.
/// 2. The flat range is cut into blocks of `B = max(8192, ceil(N / 256))` elements, rounded
///    up to a multiple of the lane count L (so there are at most 256 blocks). B depends on
///    N only, never on the thread count.
/// 3. Within a block, each contiguous run (a row segment) is accumulated into L lanes:
///    the run's element j goes to lane j mod L. L = 4 * (32 bytes / sizeof(T)): 32 lanes for
///    float, 16 for double. Lanes persist across the runs of a block.
/// 4. A block's lanes are combined by a fixed tree (lane i += lane i + s, s = L/2, ..., 1).
/// 5. Block results are combined left to right, in block order.
/// Float sums accumulate in float (double in double); the blocking and lanes keep the error
/// growth far below a naive serial sum. The same bits come out for any thread count.

#include "gradix/config.hpp"
#include "gradix/core/simd.hpp"
#include "gradix/eval/evaluator.hpp"
#include "gradix/eval/inner.hpp"
#include "gradix/expr/reduce.hpp"

#include <type_traits>

namespace gradix::ev {

/// Number of accumulator lanes for element type T: 128 bytes of T (32 for float, 16 for
/// double), whatever the SIMD width of the build, so the bits of a sum do not depend on it.
template <class T>
inline constexpr int lanes_v = int(128 / sizeof(T)) >= 4 ? int(128 / sizeof(T)) : 4;
/// Smallest block of the scheme, and the largest number of blocks.
inline constexpr index_t min_block = 8192;
inline constexpr index_t max_blocks = 256;

template <class T>
GRADIX_HOST_DEVICE constexpr index_t block_size(index_t n) {
  index_t b = (n + max_blocks - 1) / max_blocks;
  if (b < min_block) b = min_block;
  constexpr index_t L = lanes_v<T>;
  return (b + L - 1) / L * L;
}

template <class Op, class T>
struct lanes {
  static constexpr int L = lanes_v<T>;
  T v_[L];
  GRADIX_HOST_DEVICE constexpr lanes() : v_{} {
    for (int i = 0; i < L; ++i) v_[i] = Op::template identity<T>();
  }
  /// Accumulates in.elem(0..n-1): element j into lane j mod L.
  template <class Inner>
  GRADIX_HOST_DEVICE constexpr void run(Inner const& in, index_t n) {
#if defined(GRADIX_HAS_VECTOR_EXT)
    if (!std::is_constant_evaluated()) {
      run_packs(in, n);
      return;
    }
#endif
    for (index_t j = 0; j < n; ++j) v_[j % L] = Op::combine(v_[j % L], T(in.elem(j)));
  }
  /// Combines the lanes by a fixed tree.
  GRADIX_HOST_DEVICE constexpr T result() const {
    T t[L];
    for (int i = 0; i < L; ++i) t[i] = v_[i];
    for (int s = L / 2; s >= 1; s /= 2)
      for (int i = 0; i < s; ++i) t[i] = Op::combine(t[i], t[i + s]);
    return t[0];
  }

#if defined(GRADIX_HAS_VECTOR_EXT)
  template <class Inner>
  GRADIX_ALWAYS_INLINE void run_packs(Inner const& in, index_t n) {
    constexpr int W = simd::width<T> < L ? simd::width<T> : L;
    constexpr int NP = L / W;  // accumulator packs: lane q*W + w is lane w of pack q
    using P = simd::pack<T, W>;
    P acc[NP];
GRADIX_UNROLL(16)
    for (int q = 0; q < NP; ++q) acc[q] = simd::load<T, W>(v_ + q * W);
    index_t j = 0;
    for (; j + L <= n; j += L) {
GRADIX_UNROLL(16)
      for (int q = 0; q < NP; ++q)
        acc[q] = Op::combine(acc[q], pack_as<T, W>(in, j + q * W));
    }
GRADIX_UNROLL(16)
    for (int q = 0; q < NP; ++q) simd::store<T, W>(v_ + q * W, acc[q]);
    for (; j < n; ++j) v_[j % L] = Op::combine(v_[j % L], T(in.elem(j)));
  }
#endif
};

/// Runs tasks 0..n-1 in order on the calling thread (the default executor).
struct serial_exec {
  template <class F>
  GRADIX_HOST_DEVICE constexpr void operator()(index_t n, F&& f) const {
    for (index_t k = 0; k < n; ++k) f(k);
  }
};

template <class Op, class Arg, axis_mask Mask, bool Keep>
struct evaluator<reduce_node<Op, Arg, Mask, Keep>> {
  using node_type = reduce_node<Op, Arg, Mask, Keep>;
  using value_type = typename node_type::value_type;
  using SA = shape_of_t<Arg>;
  static constexpr std::size_t in_rank = SA::rank;
  static constexpr std::size_t rank = node_type::shape_type::rank;
  static constexpr bool reduced(std::size_t j) { return (Mask >> j) & 1; }
  /// The axis walked innermost: the operand's contiguous axis if reduced, else the last
  /// reduced axis (in_rank when nothing is reduced).
  static constexpr std::size_t inner_axis = [] {
    constexpr std::size_t u = layout_of_t<Arg>::template unit_axis<in_rank>;
    if (in_rank > 0 && reduced(u)) return u;
    for (std::size_t j = in_rank; j-- > 0;)
      if (reduced(j)) return j;
    return in_rank;
  }();
  /// Accumulation type of a reduction: the element type (mean divides at the end).
  using acc_type = value_type;

  evaluator<Arg> arg_;
  array<index_t, in_rank> ext_;  // operand extents

  GRADIX_HOST_DEVICE constexpr explicit evaluator(node_type const& n)
      : arg_(n.arg_), ext_(n.arg_.shape().extents()) {}

  /// Operand coordinate of output coordinate c, with the reduced axes at 0.
  GRADIX_HOST_DEVICE constexpr coord<in_rank> base(coord<rank> const& c) const {
    coord<in_rank> a{};
    std::size_t k = 0;
    for (std::size_t j = 0; j < in_rank; ++j) {
      if (reduced(j)) {
        a[j] = 0;
        if (Keep) ++k;
      } else {
        a[j] = c[k++];
      }
    }
    return a;
  }
  GRADIX_HOST_DEVICE constexpr index_t count() const {
    index_t n = 1;
    for (std::size_t j = 0; j < in_rank; ++j)
      if (reduced(j)) n *= ext_[j];
    return n;
  }

  /// Moves a to the next row of the reduced domain (the reduced axes other than the inner
  /// one, row-major, last fastest).
  GRADIX_HOST_DEVICE constexpr void next_row(coord<in_rank>& a) const {
    for (std::size_t j = in_rank; j-- > 0;) {
      if (!reduced(j) || j == inner_axis) continue;
      if (++a[j] < ext_[j]) break;
      a[j] = 0;
    }
  }

  /// Result of block k of the scheme, for the output element whose base coordinate is a.
  GRADIX_HOST_DEVICE constexpr value_type block(coord<in_rank> a, index_t k, index_t n,
                                                index_t bsize) const {
    constexpr std::size_t IA = inner_axis;
    index_t n_in = ext_[IA];
    index_t f = k * bsize;
    index_t f1 = f + bsize < n ? f + bsize : n;
    index_t row = f / n_in, off = f % n_in;
    // place `row` on the other reduced axes (row-major order, last fastest)
    for (std::size_t j = in_rank; j-- > 0;) {
      if (!reduced(j) || j == IA) continue;
      a[j] = row % ext_[j];
      row /= ext_[j];
    }
#if defined(GRADIX_HAS_VECTOR_EXT)
    if (!std::is_constant_evaluated()) return block_packs(a, f, f1, off);
#endif
    lanes<Op, acc_type> acc;
    while (f < f1) {
      index_t len = n_in - off < f1 - f ? n_in - off : f1 - f;
      a[IA] = off;
      acc.run(arg_.template outer<int(IA)>(a), len);
      f += len;
      off = 0;
      next_row(a);
    }
    return acc.result();
  }

#if defined(GRADIX_HAS_VECTOR_EXT)
  /// The same block with the lanes in SIMD registers across the block's runs (a partial
  /// pack is padded with Op's neutral element, so the bits equal the scalar path's).
  GRADIX_ALWAYS_INLINE value_type block_packs(coord<in_rank> a, index_t f, index_t f1,
                                              index_t off) const {
    using T = acc_type;
    constexpr std::size_t IA = inner_axis;
    constexpr int L = lanes_v<T>;
    constexpr int W = simd::width<T> < L ? simd::width<T> : L;
    constexpr int NP = L / W;
    using P = simd::pack<T, W>;
    constexpr index_t static_in = extent_v<SA, IA>;
    index_t const n_in = static_in != dyn ? static_in : ext_[IA];
    P acc[NP];
    GRADIX_UNROLL(16)
    for (int q = 0; q < NP; ++q) acc[q] = simd::splat<T, W>(Op::template identity<T>());
    while (f < f1) {
      index_t len = n_in - off < f1 - f ? n_in - off : f1 - f;
      a[IA] = off;
      auto in = arg_.template outer<int(IA)>(a);
      if constexpr (static_in != dyn && static_in % L == 0) {
        if (len == static_in) {  // a whole run of a static extent: a constant trip count
          GRADIX_UNROLL(8)
          for (index_t jj = 0; jj < static_in; jj += L) {
            GRADIX_UNROLL(16)
            for (int q = 0; q < NP; ++q)
              acc[q] = Op::combine(acc[q], pack_as<T, W>(in, jj + q * W));
          }
          f += len;
          off = 0;
          next_row(a);
          continue;
        }
      }
      index_t j = 0;
      for (; j + L <= len; j += L) {
        GRADIX_UNROLL(16)
        for (int q = 0; q < NP; ++q)
          acc[q] = Op::combine(acc[q], pack_as<T, W>(in, j + q * W));
      }
      index_t rem = len - j;
      if (rem > 0) {
        GRADIX_UNROLL(16)
        for (int q = 0; q < NP; ++q) {
          index_t lo = q * W;
          if (lo < rem) {
            P t = simd::splat<T, W>(Op::template pad<T>());
            index_t m = rem - lo < W ? rem - lo : W;
            for (index_t w = 0; w < m; ++w) t[w] = T(in.elem(j + lo + w));
            acc[q] = Op::combine(acc[q], t);
          }
        }
      }
      f += len;
      off = 0;
      next_row(a);
    }
    lanes<Op, T> l;
    GRADIX_UNROLL(16)
    for (int q = 0; q < NP; ++q) simd::store<T, W>(l.v_ + q * W, acc[q]);
    return l.result();
  }
#endif

  /// The reduction at output coordinate c; blocks run through `exec(nblocks, f)`, which may
  /// run them in any order or in parallel (results are combined in block order).
  // The host backend instantiates this with its thread-pool executor (host-only): nvcc must
  // not warn about that instantiation calling a host function.
#if defined(__CUDACC__)
#pragma nv_exec_check_disable
#endif
  template <class Exec>
  GRADIX_HOST_DEVICE constexpr value_type compute(coord<rank> const& c, Exec const& exec) const {
    coord<in_rank> a = base(c);
    if constexpr (Mask == 0) {
      return arg_(a);
    } else {
      index_t n = count();
      if (n == 0) return Op::template identity<value_type>();
      index_t bsize = block_size<acc_type>(n);
      index_t nblocks = (n + bsize - 1) / bsize;
      value_type r{};
      if (nblocks == 1) {
        r = block(a, 0, n, bsize);
      } else {
        value_type part[max_blocks] = {};
        exec(nblocks, [&](index_t k) { part[k] = block(a, k, n, bsize); });
        r = part[0];
        for (index_t k = 1; k < nblocks; ++k) r = Op::combine(r, part[k]);
      }
      if constexpr (std::is_same_v<Op, op::mean_of>) r = r / value_type(n);
      return r;
    }
  }

  GRADIX_HOST_DEVICE constexpr value_type operator()(coord<rank> const& c) const {
    return compute(c, serial_exec{});
  }
  template <int Axis>
  GRADIX_HOST_DEVICE constexpr auto outer(coord<rank> const& c) const {
    if constexpr (Axis == invariant_axis) {
      return const_inner<value_type>{(*this)(c)};
    } else {
      return generic_inner<evaluator, rank, Axis>{this, c};
    }
  }
};

}  // namespace gradix::ev
