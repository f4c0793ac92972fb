#pragma once
/// \file
/// The host's loops for the values the save transform keeps that are not one assign
/// (exec/save.hpp through host::executor): the rows of a row node (softmax, log_softmax,
/// layer and RMS norm), the bags of a segment sum, each position's bag, and the arg-maxes of
/// a max reduction. Each writes only the buffer it is given; rows, bags and output elements
/// split over the thread pool, every one written by one task, so the bits do not depend on
/// the thread count.

#include "gradix/backend/host/thread_pool.hpp"
#include "gradix/config.hpp"
#include "gradix/core/coords.hpp"
#include "gradix/core/simd.hpp"
#include "gradix/eval/bag.hpp"
#include "gradix/eval/evaluator.hpp"
#include "gradix/eval/map.hpp"
#include "gradix/eval/reduce.hpp"
#include "gradix/eval/row.hpp"
#include "gradix/expr/bag.hpp"
#include "gradix/expr/row.hpp"
#include "gradix/op/math.hpp"

#include <algorithm>
#include <cstddef>
#include <type_traits>

namespace gradix::host {

/// The value of segment sum n into row-major c: per bag, its rows added one after another
/// into the bag's row of c (the contiguous axis in SIMD packs), bags in parallel; then the
/// mean's scale. The same sums, in the same order, as the evaluator's.
template <class N, class T>
constexpr void segment_values(N const& n, T* c) {
  using S = shape_of_t<N>;
  constexpr std::size_t R = S::rank;
  index_t const nb = n.shape().extent(0), width = R == 2 ? n.shape().extent(1) : 1;
  ev::evaluator<std::remove_cvref_t<decltype(n.arg_)>> const ev(n.arg_);
  index_t const len = n.arg_.shape().extent(0);
  auto bags = [&](index_t b0, index_t b1) {
    // the operand's rows are read in order j = 0, 1, ...: at random table positions for an
    // embedding_bag, so each row is asked for `ahead` rows before it is read
    constexpr index_t ahead = 8;
    index_t const stop = b1 < nb ? n.begin(b1) : len;
    for (index_t b = b0; b < b1; ++b) {
      T* const row = c + b * width;
      for (index_t d = 0; d < width; ++d) row[d] = T(0);
      for (index_t j = n.begin(b), e = n.end(b); j < e; ++j) {
        if constexpr (R == 1) {
          row[0] += T(ev(coord<1>{j}));
        } else {
          if (!std::is_constant_evaluated() && j + ahead < stop)
            ev::prefetch_row(ev.template outer<1>(coord<2>{j + ahead, 0}), width);
          auto const in = ev.template outer<1>(coord<2>{j, 0});
          index_t d = 0;
#if defined(GRADIX_HAS_VECTOR_EXT)
          if (!std::is_constant_evaluated()) {
            constexpr int W = simd::width<T>;
            for (; d + W <= width; d += W)
              simd::store<T, W>(row + d, simd::load<T, W>(row + d) + ev::pack_as<T, W>(in, d));
          }
#endif
          for (; d < width; ++d) row[d] += T(in.elem(d));
        }
      }
      if (n.mean_ && n.end(b) > n.begin(b)) {
        T const k = T(n.end(b) - n.begin(b));
        for (index_t d = 0; d < width; ++d) row[d] = T(row[d] / k);
      }
    }
  };
  if (std::is_constant_evaluated()) {
    bags(0, nb);
  } else {
    index_t const per_bag = nb > 0 ? (len / nb + 1) * width : 1;
    parallel_ranges(nb, bags, std::max<index_t>(1, parallel_min_elements / per_bag));
  }
}

/// Per operand position j of segment sum n (expr/bag.hpp): its bag, and the bag's scale
/// (1, or 1 / the bag's length for a mean).
template <class N, class T>
constexpr void bag_positions(N const& n, index_t* bag, T* scale) {
  index_t const nb = n.shape().extent(0);
  for (index_t b = 0; b < nb; ++b) {
    T const f = n.scale(b);
    for (index_t j = n.begin(b), e = n.end(b); j < e; ++j) {
      bag[j] = b;
      scale[j] = f;
    }
  }
}

/// The rows of row node n (expr/row.hpp) over its axis into row-major c, rows in parallel.
/// softmax: three passes over the operand (the max, the exponentials written and summed,
/// the quotients; log_softmax: x - m - log(sum)); the norms: the mean (layer norm), the sum
/// of squared deviations, then (x - mean) / sqrt(var + eps), and 1 / sqrt(var + eps) per row
/// into rstd. Along a contiguous last axis the passes run in SIMD packs, the lanes of each
/// sum combined in a fixed order.
template <class N, class T>
constexpr void row_values(N const& n, T* c, T* rstd) {
  using S = shape_of_t<N>;
  constexpr std::size_t R = S::rank, Ax = N::axis;
  ev::evaluator<std::remove_cvref_t<decltype(n.arg_)>> const ev(n.arg_);
  auto const ext = n.shape().extents();
  index_t const len = ext[Ax];
  index_t const stride = ev::axis_stride<R, Ax>(ext);  // of the axis in c
  index_t const count = len > 0 ? n.shape().size() / len : 0;
  T const eps = n.eps_;
  auto rows = [&](index_t r0, index_t r1) {
    for (index_t r = r0; r < r1; ++r) {
      index_t base = 0;
      coord<R> const o = ev::row_origin<R, Ax>(ext, r, base);  // row r: the coordinates other than Ax
      T* const out = c + base;
      auto const in = ev.template outer<int(Ax)>(o);
#if defined(GRADIX_HAS_VECTOR_EXT)
      constexpr int W = simd::width<T>;
      using X = simd::pack<T, W>;
      bool packs = !std::is_constant_evaluated() && stride == 1;
#endif
      // sum over the row of f(x), f on a T or a pack
      auto row_sum = [&](auto&& f) {
        T acc = 0;
        index_t i = 0;
#if defined(GRADIX_HAS_VECTOR_EXT)
        if (packs) {
          X a{};
          for (; i + W <= len; i += W) a += f(X(ev::pack_as<T, W>(in, i)));
          for (int w = 0; w < W; ++w) acc += a[w];
        }
#endif
        for (; i < len; ++i) acc += f(T(in.elem(i)));
        return acc;
      };
      // out[i] = f(x_i), f on a T or a pack
      auto row_write = [&](auto&& f) {
        index_t i = 0;
#if defined(GRADIX_HAS_VECTOR_EXT)
        if (packs)
          for (; i + W <= len; i += W) simd::store<T, W>(out + i, f(X(ev::pack_as<T, W>(in, i))));
#endif
        for (; i < len; ++i) out[i * stride] = f(T(in.elem(i)));
      };
      if constexpr (N::norm) {
        T mean = 0;
        if constexpr (N::kind == row_kind::layer_norm) mean = T(row_sum([](auto x) { return x; }) / T(len));
        T const var = T(row_sum([&](auto x) {
                          auto d = x - mean;
                          return d * d;
                        }) /
                        T(len));
        T const sd = op::sqrt::value(T(var + eps));
        rstd[r] = T(T(1) / sd);
        row_write([&](auto x) { return decltype(x)((x - mean) / sd); });
      } else {
        T m = op::max_of::identity<T>();
        index_t i = 0;
#if defined(GRADIX_HAS_VECTOR_EXT)
        if (packs) {
          X mp = simd::splat<T, W>(op::max_of::identity<T>());
          for (; i + W <= len; i += W) mp = op::max_of::combine(mp, X(ev::pack_as<T, W>(in, i)));
          for (int w = 0; w < W; ++w) m = op::max_of::combine(m, T(mp[w]));
        }
#endif
        for (; i < len; ++i) m = op::max_of::combine(m, T(in.elem(i)));
        T sum = 0;
        i = 0;
#if defined(GRADIX_HAS_VECTOR_EXT)
        if (packs) {
          X sp{};
          for (; i + W <= len; i += W) {
            X e = op::exp::value(X(X(ev::pack_as<T, W>(in, i)) - m));
            simd::store<T, W>(out + i, e);
            sp += e;
          }
          for (int w = 0; w < W; ++w) sum += sp[w];
        }
#endif
        for (; i < len; ++i) {
          T e = op::exp::value(T(T(in.elem(i)) - m));
          out[i * stride] = e;
          sum += e;
        }
        if constexpr (N::kind == row_kind::log_softmax) {
          T const ls = op::log::value(sum);
          for (index_t k = 0; k < len; ++k) out[k * stride] = T(T(T(in.elem(k)) - m) - ls);
        } else {
          for (index_t k = 0; k < len; ++k) out[k * stride] = T(out[k * stride] / sum);
        }
      }
    }
  };
  if (std::is_constant_evaluated()) {
    rows(0, count);
  } else {
    parallel_ranges(count, rows, std::max<index_t>(1, parallel_min_elements / std::max<index_t>(1, 4 * len)));
  }
}

/// The first arg-max of max reduction n (expr/reduce.hpp) for each of its output elements
/// (row-major), its reduced coordinates in axis order into arg (popcount(mask) per element):
/// one scan per element, in parallel over the elements when there is enough work.
template <class N>
constexpr void argmax_values(N const& n, index_t* arg) {
  using S = shape_of_t<N>;
  constexpr std::size_t RO = S::rank;
  constexpr std::size_t nred = std::size_t(__builtin_popcountll(N::mask));
  using E = ev::evaluator<N>;
  index_t const count = n.shape().size();
  E const eva(n);
  auto ext = n.shape().extents();
  auto fill = [&](index_t a, index_t b) {
    for (index_t k = a; k < b; ++k) {
      coord<RO> const o = coords::unravel(ext, k);
      auto c = ev::argmax_coord(eva, o);
      std::size_t q = 0;
      for (std::size_t j = 0; j < E::in_rank; ++j)
        if (E::reduced(j)) arg[std::size_t(k) * nred + q++] = c[j];
    }
  };
  if (std::is_constant_evaluated()) {
    fill(0, count);
  } else {
    index_t per = eva.count() > 0 ? eva.count() : 1;
    parallel_ranges(count, fill, std::max<index_t>(1, parallel_min_elements / per));
  }
}

}  // namespace gradix::host
