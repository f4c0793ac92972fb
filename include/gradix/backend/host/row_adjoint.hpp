#pragma once
/// \file
/// The host's kernel for a row use (ad::row_use: softmax, log_softmax, layer and RMS norm):
/// the operand's adjoint from the adjoint and the kept rows, host::executor's row_adjoint
/// (exec/elements.hpp runs the rest of the element).

#include "gradix/ad/product.hpp"
#include "gradix/backend/host/thread_pool.hpp"
#include "gradix/config.hpp"
#include "gradix/core/simd.hpp"
#include "gradix/eval/evaluator.hpp"
#include "gradix/eval/row.hpp"
#include "gradix/eval/saved.hpp"
#include "gradix/expr/row.hpp"
#include "gradix/op/math.hpp"

#include <algorithm>
#include <type_traits>

namespace gradix::host {

/// A row node's operand adjoint into its buffer gin, row by row from the adjoint g and the
/// kept value (expr/row.hpp has the formulas); along a contiguous last axis in SIMD packs
/// (the lanes of a row's sums combined in a fixed order); rows in parallel unless Serial.
/// The operand's plan then runs from gin (exec/elements.hpp).
template <bool Serial, class G, class PX, class SN>
constexpr void row_adjoint(ad::row_use<G, PX, SN> const& u) {
  auto const& sn = *u.node_;
  using N = typename SN::node_type;
  using T = value_type_t<N>;
  using S = shape_of_t<N>;
  constexpr std::size_t R = S::rank, Ax = N::axis;
  T* const gin = sn.extra_.gin;
  ev::evaluator<G> const ge(u.g_);
  ev::evaluator<typename SN::buffer_type> const se(sn.buf_);
  auto const ext = sn.shape().extents();
  index_t const len = ext[Ax];
  index_t const stride = ev::axis_stride<R, Ax>(ext);
  index_t const count = len > 0 ? sn.shape().size() / len : 0;
  auto rows = [&](index_t r0, index_t r1) {
    for (index_t r = r0; r < r1; ++r) {
      index_t base = 0;
      coord<R> const o = ev::row_origin<R, Ax>(ext, r, base);
      T* const out = gin + base;
      auto const gi = ge.template outer<int(Ax)>(o);
      auto const si = se.template outer<int(Ax)>(o);
      constexpr row_kind K = N::kind;
      constexpr bool need_g = K == row_kind::log_softmax || K == row_kind::layer_norm;  // sum(g)
      constexpr bool need_gs = K != row_kind::log_softmax;                              // sum(g s)
      T sg = 0, sgs = 0;
      index_t i = 0;
#if defined(GRADIX_HAS_VECTOR_EXT)
      constexpr int W = simd::width<T>;
      bool packs = !std::is_constant_evaluated() && !Serial && stride == 1;
      using X = simd::pack<T, W>;
      if (packs) {
        X ag{}, ags{};
        for (; i + W <= len; i += W) {
          X const g = ev::pack_as<T, W>(gi, i);
          if constexpr (need_g) ag += g;
          if constexpr (need_gs) ags += g * X(ev::pack_as<T, W>(si, i));
        }
        for (int w = 0; w < W; ++w) {
          sg += ag[w];
          sgs += ags[w];
        }
      }
#endif
      for (; i < len; ++i) {
        T const g = T(gi.elem(i));
        if constexpr (need_g) sg += g;
        if constexpr (need_gs) sgs += g * T(si.elem(i));
      }
      T const rs = N::norm ? sn.extra_.rstd[r] : T(1);
      T const mg = N::norm ? T(sg / T(len)) : sg, mgs = N::norm ? T(sgs / T(len)) : sgs;
      // the operand's adjoint at one element (a T or a pack): g the adjoint, s the kept value
      auto dx = [&](auto g, auto s) {
        using Y = decltype(g);
        if constexpr (K == row_kind::softmax) return Y(s * (g - sgs));
        else if constexpr (K == row_kind::log_softmax) return Y(g - op::exp::value(s) * sg);
        else if constexpr (K == row_kind::layer_norm) return Y(rs * (g - mg - s * mgs));
        else return Y(rs * (g - s * mgs));
      };
      i = 0;
#if defined(GRADIX_HAS_VECTOR_EXT)
      if (packs)
        for (; i + W <= len; i += W)
          simd::store<T, W>(out + i, dx(X(ev::pack_as<T, W>(gi, i)), X(ev::pack_as<T, W>(si, i))));
#endif
      for (; i < len; ++i) out[i * stride] = dx(T(gi.elem(i)), T(si.elem(i)));
    }
  };
  if (std::is_constant_evaluated() || Serial) {
    rows(0, count);
  } else {
    parallel_ranges(count, rows, std::max<index_t>(1, parallel_min_elements / std::max<index_t>(1, 4 * len)));
  }
}

}  // namespace gradix::host
