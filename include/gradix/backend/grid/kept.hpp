#pragma once
/// \file
/// The grid's kernels for the values the save transform keeps that are not one assign
/// (exec/save.hpp through grid::executor), and for a row use's operand adjoint: the rows of
/// a row node (softmax, log_softmax, layer and RMS norm), the bags of a segment sum, each
/// position's bag, the arg-maxes of a max reduction, and the row adjoint. One thread per row,
/// bag or output element (grid-stride loops), each writing only its own outputs, so the bits
/// do not depend on the launch. A row's sums run in index order: the same formulas as the
/// host's (backend/host/kept.hpp, row_adjoint.hpp), whose SIMD lanes sum in another order,
/// so rows agree with the host's to rounding, not bit for bit; segment sums add in the
/// host's order (bag by bag, position by position) and agree bit for bit.

#include "gradix/backend/grid/launch.hpp"
#include "gradix/config.hpp"
#include "gradix/core/coords.hpp"
#include "gradix/core/shape.hpp"
#include "gradix/eval/bag.hpp"
#include "gradix/eval/evaluator.hpp"
#include "gradix/eval/map.hpp"
#include "gradix/eval/reduce.hpp"
#include "gradix/eval/row.hpp"
#include "gradix/expr/bag.hpp"
#include "gradix/expr/row.hpp"
#include "gradix/op/math.hpp"

#include <cstddef>
#include <type_traits>

namespace gradix::grid {


/// The rows of row node n_ into row-major c_ (and, for the norms, 1 / sqrt(var + eps) per row
/// into rstd_): expr/row.hpp's formulas, one thread per row.
template <class N, class T>
struct rows_kernel {
  static constexpr bool uses_barriers = false;
  N n_;
  T* c_;
  T* rstd_;
  GRADIX_KERNEL_BODY
  template <class Ctx>
  GRADIX_HOST_DEVICE void operator()(Ctx const& c) const {
    using S = shape_of_t<N>;
    constexpr std::size_t R = S::rank, Ax = N::axis;
    ev::evaluator<std::remove_cvref_t<decltype(n_.arg_)>> const ev(n_.arg_);
    auto const ext = n_.shape().extents();
    index_t const len = ext[Ax], stride = ev::axis_stride<R, Ax>(ext);
    index_t const count = len > 0 ? n_.shape().size() / len : 0;
    T const eps = n_.eps_;
    for (index_t r = grid_first(c); r < count; r += grid_step(c)) {
      index_t base = 0;
      coord<R> co = ev::row_origin<R, Ax>(ext, r, base);
      T* const out = c_ + base;
      auto x = [&](index_t i) {
        co[Ax] = i;
        return T(ev(co));
      };
      if constexpr (N::norm) {
        T mean = 0;
        if constexpr (N::kind == row_kind::layer_norm) {
          T s = 0;
          for (index_t i = 0; i < len; ++i) s += x(i);
          mean = T(s / T(len));
        }
        T ss = 0;
        for (index_t i = 0; i < len; ++i) {
          T const d = x(i) - mean;
          ss += d * d;
        }
        T const sd = op::sqrt::value(T(T(ss / T(len)) + eps));
        rstd_[r] = T(T(1) / sd);
        for (index_t i = 0; i < len; ++i) out[i * stride] = T((x(i) - mean) / sd);
      } else {
        T m = op::max_of::identity<T>();
        for (index_t i = 0; i < len; ++i) m = op::max_of::combine(m, x(i));
        T sum = 0;
        for (index_t i = 0; i < len; ++i) {
          T const e = op::exp::value(T(x(i) - m));
          out[i * stride] = e;
          sum += e;
        }
        if constexpr (N::kind == row_kind::log_softmax) {
          T const ls = op::log::value(sum);
          for (index_t i = 0; i < len; ++i) out[i * stride] = T(T(x(i) - m) - ls);
        } else {
          for (index_t i = 0; i < len; ++i) out[i * stride] = T(out[i * stride] / sum);
        }
      }
    }
  }
};

/// The bags of segment sum n_ into row-major c_: one thread per output element (bag, column),
/// the bag's rows added in order, then the mean's scale (the host's sums, bit for bit).
template <class N, class T>
struct segments_kernel {
  static constexpr bool uses_barriers = false;
  N n_;
  T* c_;
  GRADIX_KERNEL_BODY
  template <class Ctx>
  GRADIX_HOST_DEVICE void operator()(Ctx const& c) const {
    constexpr std::size_t R = shape_of_t<N>::rank;
    ev::evaluator<std::remove_cvref_t<decltype(n_.arg_)>> const ev(n_.arg_);
    index_t const nb = n_.shape().extent(0), width = R == 2 ? n_.shape().extent(1) : 1;
    index_t const total = nb * width;
    for (index_t k = grid_first(c); k < total; k += grid_step(c)) {
      index_t const b = k / width, d = k % width;
      T acc = T(0);
      for (index_t j = n_.begin(b), e = n_.end(b); j < e; ++j) {
        if constexpr (R == 1) acc += T(ev(coord<1>{j}));
        else acc += T(ev(coord<2>{j, d}));
      }
      if (n_.mean_ && n_.end(b) > n_.begin(b)) acc = T(acc / T(n_.end(b) - n_.begin(b)));
      c_[k] = acc;
    }
  }
};

/// Per operand position of segment sum n_: its bag and the bag's scale (one thread per bag).
template <class N, class T>
struct bags_kernel {
  static constexpr bool uses_barriers = false;
  N n_;
  index_t* bag_;
  T* scale_;
  GRADIX_KERNEL_BODY
  template <class Ctx>
  GRADIX_HOST_DEVICE void operator()(Ctx const& c) const {
    index_t const nb = n_.shape().extent(0);
    for (index_t b = grid_first(c); b < nb; b += grid_step(c)) {
      T const f = n_.scale(b);
      for (index_t j = n_.begin(b), e = n_.end(b); j < e; ++j) {
        bag_[j] = b;
        scale_[j] = f;
      }
    }
  }
};

/// The first arg-max of max reduction n_ for each output element (row-major): its reduced
/// coordinates in axis order into arg_ (one thread per output element).
template <class N>
struct argmax_kernel {
  static constexpr bool uses_barriers = false;
  N n_;
  index_t* arg_;
  GRADIX_KERNEL_BODY
  template <class Ctx>
  GRADIX_HOST_DEVICE void operator()(Ctx const& c) const {
    using E = ev::evaluator<N>;
    constexpr std::size_t RO = shape_of_t<N>::rank;
    constexpr std::size_t nred = std::size_t(__builtin_popcountll(N::mask));
    E const eva(n_);
    auto const ext = n_.shape().extents();
    index_t const count = n_.shape().size();
    for (index_t k = grid_first(c); k < count; k += grid_step(c)) {
      coord<RO> const o = coords::unravel(ext, k);
      auto const a = ev::argmax_coord(eva, o);
      std::size_t q = 0;
      for (std::size_t j = 0; j < E::in_rank; ++j)
        if (E::reduced(j)) arg_[std::size_t(k) * nred + q++] = a[j];
    }
  }
};

/// A row node's operand adjoint into row-major gin_, from the adjoint g_ (an expression over
/// the node's shape) and the kept rows s_ (expr/row.hpp's formulas), one thread per row.
template <row_kind K, std::size_t Ax, class G, class SV, class T, class S>
struct row_adjoint_kernel {
  static constexpr bool uses_barriers = false;
  G g_;
  SV s_;
  T const* rstd_;
  T* gin_;
  S shape_;
  GRADIX_KERNEL_BODY
  template <class Ctx>
  GRADIX_HOST_DEVICE void operator()(Ctx const& c) const {
    constexpr std::size_t R = S::rank;
    constexpr bool norm = K == row_kind::layer_norm || K == row_kind::rms_norm;
    ev::evaluator<G> const ge(g_);
    ev::evaluator<SV> const se(s_);
    auto const ext = shape_.extents();
    index_t const len = ext[Ax], stride = ev::axis_stride<R, Ax>(ext);
    index_t const count = len > 0 ? shape_.size() / len : 0;
    for (index_t r = grid_first(c); r < count; r += grid_step(c)) {
      index_t base = 0;
      coord<R> co = ev::row_origin<R, Ax>(ext, r, base);
      T* const out = gin_ + base;
      T sg = 0, sgs = 0;
      for (index_t i = 0; i < len; ++i) {
        co[Ax] = i;
        T const g = T(ge(co));
        if constexpr (K == row_kind::log_softmax || K == row_kind::layer_norm) sg += g;
        if constexpr (K != row_kind::log_softmax) sgs += g * T(se(co));
      }
      T const rs = norm ? rstd_[r] : T(1);
      T const mg = norm ? T(sg / T(len)) : sg, mgs = norm ? T(sgs / T(len)) : sgs;
      for (index_t i = 0; i < len; ++i) {
        co[Ax] = i;
        T const g = T(ge(co)), s = T(se(co));
        T dx;
        if constexpr (K == row_kind::softmax) dx = T(s * (g - sgs));
        else if constexpr (K == row_kind::log_softmax) dx = T(g - op::exp::value(s) * sg);
        else if constexpr (K == row_kind::layer_norm) dx = T(rs * (g - mg - s * mgs));
        else dx = T(rs * (g - s * mgs));
        out[i * stride] = dx;
      }
    }
  }
};

}  // namespace gradix::grid
