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
#include "gradix/core/coords.hpp"
#include "gradix/core/simd.hpp"
#include "gradix/eval/cost.hpp"
#include "gradix/eval/evaluator.hpp"
#include "gradix/eval/inner.hpp"
#include "gradix/expr/reduce.hpp"

#include <array>
#include <cstdint>
#include <type_traits>
#include <utility>

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
  /// Number of threads that run tasks.
  GRADIX_HOST_DEVICE constexpr index_t workers() const { return 1; }
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
  /// The reduced axes, as a coords mask.
  static constexpr std::uint64_t reduced_axes = Mask;
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
  GRADIX_HOST_DEVICE constexpr index_t count() const { return coords::count(ext_, Mask); }

  /// The slowest of the row axes (the reduced axes other than the inner one); in_rank when
  /// there is none.
  static constexpr std::size_t outer_row_axis = [] {
    for (std::size_t j = 0; j < in_rank; ++j)
      if (reduced(j) && j != inner_axis) return j;
    return in_rank;
  }();
  /// Moves a to the next row of the reduced domain (the reduced axes other than the inner
  /// one, row-major, last fastest): coords::next, except that the slowest row axis is not
  /// wrapped: it passes its extent only after the domain's last row, where no run follows.
  /// (With a single row axis a row
  /// step is one increment, no compare: g++ 12 compiled the wrap of every interleaved cursor
  /// into a taken branch around a register clear, per row.)
  GRADIX_HOST_DEVICE constexpr void next_row(coord<in_rank>& a) const {
    for (std::size_t j = in_rank; j-- > 0;) {
      if (!reduced(j) || j == inner_axis) continue;
      if (j == outer_row_axis) {
        ++a[j];
        break;
      }
      if (++a[j] < ext_[j]) break;
      a[j] = 0;
    }
  }

  /// Start of block k of the scheme: its flat range [f, f1), the offset of its first run
  /// along the inner axis, and `a` with the block's first row placed on the other reduced
  /// axes (row-major order, last fastest).
  GRADIX_HOST_DEVICE constexpr void block_start(coord<in_rank>& a, index_t k, index_t n, index_t bsize,
                                                index_t& f, index_t& f1, index_t& off) const {
    constexpr std::size_t IA = inner_axis;
    index_t n_in = ext_[IA];
    f = k * bsize;
    f1 = f + bsize < n ? f + bsize : n;
    index_t row = f / n_in;
    off = f % n_in;
    coords::unravel_axes(a, ext_, Mask & ~(std::uint64_t(1) << IA), row);
  }

  /// Result of block k of the scheme, for the output element whose base coordinate is a.
  GRADIX_HOST_DEVICE constexpr value_type block(coord<in_rank> a, index_t k, index_t n,
                                                index_t bsize) const {
#if defined(GRADIX_HAS_VECTOR_EXT)
    if (!std::is_constant_evaluated()) return block_simd(a, k, n, bsize);
#endif
    constexpr std::size_t IA = inner_axis;
    index_t n_in = ext_[IA];
    index_t f = 0, f1 = 0, off = 0;
    block_start(a, k, n, bsize, f, f1, off);
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
  // The SIMD path: a block's lanes live in packs (registers) across the block's runs; a
  // partial pack is padded with Op's neutral element, so the bits equal the scalar path's.
  static constexpr int pack_l = lanes_v<acc_type>;
  static constexpr int pack_w = simd::width<acc_type> < pack_l ? simd::width<acc_type> : pack_l;
  static constexpr int pack_n = pack_l / pack_w;  // lane q*W + w is lane w of pack q
  /// Blocks run interleaved in groups of `group` (each block in its own order: the same
  /// bits), for independent dependency chains and loads shared between the group's runs
  /// (an operand that does not change along the reduced rows is read once for the group).
  /// As many as fit in registers: 4 with 2 packs of lanes per block (AVX-512), 2 with 4
  /// (AVX), else 1.
  /// An operand too expensive to copy (eval/cost.hpp) runs one block at a time, in plain
  /// loops over the accumulator packs: the same additions in the same order (the same bits),
  /// a fraction of the code.
  static constexpr bool cheap = cheap_body_v<Arg>;
  static constexpr int group = !cheap ? 1 : pack_n <= 2 ? 4 : pack_n <= 4 ? 2 : 1;
  static constexpr index_t static_in = [] {
    if constexpr (inner_axis < in_rank) return extent_v<SA, inner_axis>;
    else return dyn;
  }();
  /// The inner extent is static and a multiple of the lane count: whole runs have a
  /// constant trip count and no tail.
  static constexpr bool static_runs = static_in != dyn && static_in % pack_l == 0;

  /// Where a block in progress stands (its lanes are a separate local array, so that they
  /// stay in registers).
  struct cursor {
    coord<in_rank> a_;
    index_t f_, f1_, off_;
    GRADIX_ALWAYS_INLINE bool active() const { return f_ < f1_; }
  };
  template <class P>
  GRADIX_ALWAYS_INLINE static void start(P* acc) {
    GRADIX_UNROLL(16)
    for (int q = 0; q < pack_n; ++q) acc[q] = simd::splat<acc_type, pack_w>(Op::template identity<acc_type>());
  }
  GRADIX_ALWAYS_INLINE index_t n_inner() const {
    return static_in != dyn ? static_in : ext_[inner_axis];
  }
  /// Length of the cursor's next run.
  GRADIX_ALWAYS_INLINE index_t run_length(cursor const& c) const {
    index_t n_in = n_inner();
    return n_in - c.off_ < c.f1_ - c.f_ ? n_in - c.off_ : c.f1_ - c.f_;
  }
  GRADIX_ALWAYS_INLINE void advance(cursor& c, index_t len) const {
    c.f_ += len;
    c.off_ = 0;
    next_row(c.a_);
  }
  /// Adds elements j .. j + L - 1 of a run.
  template <class P, class In>
  GRADIX_ALWAYS_INLINE static void add_full(P* acc, In const& in, index_t j) {
    if constexpr (cheap) {
      GRADIX_UNROLL(16)
      for (int q = 0; q < pack_n; ++q)
        acc[q] = Op::combine(acc[q], pack_as<acc_type, pack_w>(in, j + q * pack_w));
    } else {
      GRADIX_NO_UNROLL
      for (int q = 0; q < pack_n; ++q)
        acc[q] = Op::combine(acc[q], pack_as<acc_type, pack_w>(in, j + q * pack_w));
    }
  }
  /// Adds the last rem (< L) elements of a run, from j on: lanes rem .. L - 1 of the last
  /// pack that has elements hold Op's pad, packs past it are left alone. The elements are
  /// read by one scalar loop into a padded buffer (one copy of the operand's scalar code,
  /// not one per pack).
  template <class P, class In>
  GRADIX_ALWAYS_INLINE static void add_tail(P* acc, In const& in, index_t j, index_t rem) {
    using T = acc_type;
    alignas(sizeof(P)) T buf[pack_l];
    GRADIX_UNROLL(16)
    for (int q = 0; q < pack_n; ++q) simd::store<T, pack_w>(buf + q * pack_w, simd::splat<T, pack_w>(Op::template pad<T>()));
    GRADIX_NO_UNROLL
    for (index_t w = 0; w < rem; ++w) buf[w] = T(in.elem(j + w));
    GRADIX_UNROLL(16)
    for (int q = 0; q < pack_n; ++q)
      if (q * pack_w < rem) acc[q] = Op::combine(acc[q], simd::load<T, pack_w>(buf + q * pack_w));
  }
  /// Inner evaluators of the runs that start at a[0], ..., a[G - 1].
  template <int G>
  GRADIX_ALWAYS_INLINE static auto inners(evaluator<Arg> const& arg, coord<in_rank> const* a) {
    return [&]<int... g>(std::integer_sequence<int, g...>) {
      return std::array<decltype(arg.template outer<int(inner_axis)>(a[0])), std::size_t(G)>{
          {arg.template outer<int(inner_axis)>(a[g])...}};
    }(std::make_integer_sequence<int, G>{});
  }
  /// Number of whole runs of a static inner extent that the cursor can take next in the
  /// fast loop (0 when runs are not static, or the cursor is inside a run).
  GRADIX_ALWAYS_INLINE index_t whole_runs(cursor const& c) const {
    if constexpr (static_runs) return c.off_ == 0 ? (c.f1_ - c.f_) / static_in : 0;
    else return 0;
  }
  /// Takes m whole runs of the static inner extent from each of G cursors, interleaved.
  template <int G, class P>
  GRADIX_ALWAYS_INLINE void take_whole(cursor* c, P (*acc)[pack_n], index_t m) const {
    if constexpr (static_runs) {
      constexpr std::size_t IA = inner_axis;
      // Local copies of the cursors' coordinates and (of a cheap operand) of the operand's
      // evaluator: nothing in the loop can alias them, so compilers keep them in registers
      // and hoist what does not change along the rows (g++ 12 reloaded the operand's strides
      // and recomputed its row-invariant addresses every row, clang 16 kept the row counters
      // in memory).
      coord<in_rank> a[G];
      GRADIX_UNROLL(8)
      for (int g = 0; g < G; ++g) {
        a[g] = c[g].a_;
        a[g][IA] = 0;
      }
      std::conditional_t<cheap, evaluator<Arg> const, evaluator<Arg> const&> arg = arg_;
      for (index_t r = 0; r < m; ++r) {
        auto in = inners<G>(arg, a);
        GRADIX_UNROLL(8)
        for (index_t jj = 0; jj < static_in; jj += pack_l) {
          GRADIX_UNROLL(8)
          for (int g = 0; g < G; ++g) add_full(acc[g], in[std::size_t(g)], jj);
        }
        GRADIX_UNROLL(8)
        for (int g = 0; g < G; ++g) next_row(a[g]);
      }
      GRADIX_UNROLL(8)
      for (int g = 0; g < G; ++g) {
        c[g].a_ = a[g];
        c[g].f_ += m * static_in;
      }
    }
  }
  /// Processes the next run (of length len) of each of G cursors, interleaved.
  template <int G, class P>
  GRADIX_ALWAYS_INLINE void step(cursor* c, P (*acc)[pack_n], index_t len) const {
    constexpr std::size_t IA = inner_axis;
    constexpr index_t L = pack_l;
    coord<in_rank> a[G];
    GRADIX_UNROLL(8)
    for (int g = 0; g < G; ++g) {
      c[g].a_[IA] = c[g].off_;
      a[g] = c[g].a_;
    }
    auto in = inners<G>(arg_, a);
    index_t j = 0;
    for (; j + L <= len; j += L) {
      GRADIX_UNROLL(8)
      for (int g = 0; g < G; ++g) add_full(acc[g], in[std::size_t(g)], j);
    }
    if (len - j > 0) {
      GRADIX_UNROLL(8)
      for (int g = 0; g < G; ++g) add_tail(acc[g], in[std::size_t(g)], j, len - j);
    }
    GRADIX_UNROLL(8)
    for (int g = 0; g < G; ++g) advance(c[g], len);
  }
  /// One cursor alone: to the end of its block (to_end), or its next run only. Out of line,
  /// one copy per reduction: it is what a lone block runs, and what a group runs only where
  /// its cursors' runs differ (at a block's first or last row) and to finish. Callers pass
  /// copies of their lanes and cursor, so that their own never have their address taken and
  /// stay in registers in the group's loops. (Inlined at each of those places, the body
  /// was 5-7 copies of the run loop per reduction: the founding example's 16 reductions
  /// spent most of their compile time on them.)
  template <class P>
  [[gnu::noinline]] GRADIX_FLATTEN void run_alone(cursor& c, P (&acc)[pack_n], bool to_end) const {
    while (c.active()) {
      index_t m = to_end ? whole_runs(c) : 0;
      if (m > 0) take_whole<1>(&c, &acc, m);
      else step<1>(&c, &acc, run_length(c));
      if (!to_end) break;
    }
  }
  /// run_alone on copies of a group member's cursor and lanes.
  template <class P>
  GRADIX_ALWAYS_INLINE void run_alone_copy(cursor& c, P (&acc)[pack_n], bool to_end) const {
    cursor cc = c;
    P t[pack_n];
    GRADIX_UNROLL(16)
    for (int q = 0; q < pack_n; ++q) t[q] = acc[q];
    run_alone(cc, t, to_end);
    GRADIX_UNROLL(16)
    for (int q = 0; q < pack_n; ++q) acc[q] = t[q];
    c = cc;
  }
  /// Combines a finished cursor's lanes by the scheme's tree.
  template <class P>
  GRADIX_ALWAYS_INLINE static value_type finish(P const* acc) {
    // lanes::result's tree, its levels of stride >= pack_w done on whole packs (lane i of
    // pack q meets lane i of pack q + s / pack_w: the same combinations, the same bits),
    // the rest on the lanes of the first pack
    P t[pack_n];
    GRADIX_UNROLL(16)
    for (int q = 0; q < pack_n; ++q) t[q] = acc[q];
    GRADIX_UNROLL(16)
    for (int m = pack_n / 2; m >= 1; m /= 2) {
      GRADIX_UNROLL(16)
      for (int q = 0; q < m; ++q) t[q] = Op::combine(t[q], t[q + m]);
    }
    alignas(sizeof(P)) acc_type v[pack_w];
    simd::store<acc_type, pack_w>(v, t[0]);
    GRADIX_UNROLL(16)
    for (int s = pack_w / 2; s >= 1; s /= 2) {
      GRADIX_UNROLL(16)
      for (int i = 0; i < s; ++i) v[i] = Op::combine(v[i], v[i + s]);
    }
    return v[0];
  }
  /// The reduction of one run along the inner axis from a (a[inner_axis] = 0) of length n:
  /// block_simd's additions for a reduction over that axis alone whose count fits one block,
  /// without the block and cursor bookkeeping (a row of a row-wise sum: a kept dot product
  /// of two gathered rows costs its loads and adds).
  GRADIX_ALWAYS_INLINE value_type single_run(coord<in_rank> a, index_t n) const {
    using P = simd::pack<acc_type, pack_w>;
    constexpr index_t L = pack_l;
    P acc[pack_n];
    start(acc);
    auto const in = arg_.template outer<int(inner_axis)>(a);
    index_t j = 0;
    for (; j + L <= n; j += L) add_full(acc, in, j);
    if (n - j > 0) add_tail(acc, in, j, n - j);
    return finish(acc);
  }
  /// Block k alone (the SIMD path of block()).
  [[gnu::noinline]] value_type block_simd(coord<in_rank> a, index_t k, index_t n, index_t bsize) const {
    using P = simd::pack<acc_type, pack_w>;
    cursor c{a, 0, 0, 0};
    block_start(c.a_, k, n, bsize, c.f_, c.f1_, c.off_);
    P acc[pack_n];
    start(acc);
    run_alone(c, acc, true);
    return finish(acc);
  }
  /// Blocks k0 .. k0 + group - 1, interleaved: out[g] gets the result of block k0 + g, the
  /// same bits as block(a, k0 + g, ...).
  GRADIX_FLATTEN void block_group(coord<in_rank> const& a, index_t k0, index_t n, index_t bsize,
                                  value_type* out) const {
    constexpr int G = group;
    using P = simd::pack<acc_type, pack_w>;
    cursor c[G];
    P acc[G][pack_n];
    GRADIX_UNROLL(8)
    for (int g = 0; g < G; ++g) {
      c[g] = cursor{a, 0, 0, 0};
      block_start(c[g].a_, k0 + g, n, bsize, c[g].f_, c[g].f1_, c[g].off_);
      start(acc[g]);
    }
    for (;;) {
      bool all = true;
      index_t m = whole_runs(c[0]);
      index_t len = run_length(c[0]);
      bool same = true;
      GRADIX_UNROLL(8)
      for (int g = 0; g < G; ++g) {
        all = all && c[g].active();
        index_t mg = whole_runs(c[g]);
        m = mg < m ? mg : m;
        same = same && run_length(c[g]) == len;
      }
      if (!all) break;
      if (m > 0) {
        take_whole<G>(c, acc, m);
      } else if (same && !static_runs) {
        // (with static runs, a run that is not whole starts or ends a block: the cursors
        // take it alone, below)
        step<G>(c, acc, len);
      } else {
        GRADIX_UNROLL(8)
        for (int g = 0; g < G; ++g) run_alone_copy(c[g], acc[g], false);
      }
    }
    GRADIX_UNROLL(8)
    for (int g = 0; g < G; ++g) {
      run_alone_copy(c[g], acc[g], true);
      out[g] = finish(acc[g]);
    }
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
        bool grouped = false;
#if defined(GRADIX_HAS_VECTOR_EXT)
        if constexpr (group > 1) {
          // tasks of `group` blocks (the last ones alone), unless that would leave threads
          // idle
          if (!std::is_constant_evaluated() && nblocks >= group * 2 * exec.workers()) {
            index_t ngroups = nblocks / group;
            exec(ngroups + (nblocks - ngroups * group), [&](index_t t) {
              if (t < ngroups) {
                block_group(a, t * group, n, bsize, part + t * group);
              } else {
                index_t k = ngroups * group + (t - ngroups);
                part[k] = block(a, k, n, bsize);
              }
            });
            grouped = true;
          }
        }
#endif
        if (!grouped) exec(nblocks, [&](index_t k) { part[k] = block(a, k, n, bsize); });
        r = part[0];
        for (index_t k = 1; k < nblocks; ++k) r = Op::combine(r, part[k]);
      }
      if constexpr (std::is_same_v<Op, op::mean_of>) r = r / value_type(n);
      return r;
    }
  }

  GRADIX_HOST_DEVICE constexpr value_type operator()(coord<rank> const& c) const {
#if defined(GRADIX_HAS_VECTOR_EXT)
    if (!std::is_constant_evaluated()) return compute_out(c);
#endif
    return compute(c, serial_exec{});
  }
#if defined(GRADIX_HAS_VECTOR_EXT)
  // A reduction read as an operand (of another reduction, an elementwise node, a kernel's
  // value expression) runs out of line. Inlined, its whole blocked SIMD nest was copied into
  // every pack lane of the caller's unrolled loops, and `flatten` on the caller's block
  // functions inlined it recursively: backward(sum(sum<1>(X))) over a 4 x 6 double took 37 s
  // to compile with g++ 12 -O1 -march=native (2.1 s at -O2), object 553 KB. One call per
  // reduced value costs nothing next to the reduction itself.
  [[gnu::noinline]] value_type compute_out(coord<rank> const& c) const {
    if constexpr (inner_axis < in_rank && Mask == (axis_mask(1) << inner_axis)) {
      // one reduced axis, the contiguous one: a run that fits one block needs no blocks
      index_t const n = ext_[inner_axis];
      if (n > 0 && n <= min_block) {
        value_type r = single_run(base(c), n);
        if constexpr (std::is_same_v<Op, op::mean_of>) r = r / value_type(n);
        return r;
      }
    }
    return compute(c, serial_exec{});
  }
#endif
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
