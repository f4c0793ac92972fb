#pragma once
/// \file
/// Row-wise Adagrad (gx::optim::rowwise_adagrad): FBGEMM's EXACT_ROWWISE_ADAGRAD, one
/// accumulator per row of an embedding table, with its row-by-row form for a backward with
/// the step fused (training/fused.hpp).
///
/// Part of `<gradix/optim.hpp>` (docs/optim.md).

#include "gradix/api/param.hpp"
#include "gradix/config.hpp"
#include "gradix/core/error.hpp"
#include "gradix/core/half.hpp"
#include "gradix/core/simd.hpp"
#include "gradix/training/adagrad_core.hpp"
#include "gradix/training/optim_base.hpp"
#include "gradix/training/slices.hpp"

#include <cmath>
#include <cstddef>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace gradix {

namespace optim {

/// rowwise_adagrad's options: those of adagrad (the accumulator starts at initial_accumulator).
using rowwise_adagrad_options = adagrad_options;

namespace detail {
/// rowwise_adagrad's accumulators and updates (training/adagrad_core.hpp): one accumulator
/// per slice of the parameter's gradient axis.
struct adagrad_rowwise {
  static constexpr char const* name = "gradix::optim::rowwise_adagrad";
  template <class Q>
  using state = std::vector<compute_type_t<typename Q::value_type>>;
  template <class Q>
  static state<Q> make(Q& q, double initial) {
    return state<Q>(std::size_t(gradix::detail::slice_count(q)), compute_type_t<typename Q::value_type>(initial));
  }
  template <class Q, class S>
  static void step(adagrad_options const& o, Q& p, S& sum) {
    using T = compute_type_t<typename Q::value_type>;
    T const lr = T(o.lr), wd = T(o.weight_decay), eps = T(o.eps);
    values<Q> const val(p);
    auto* const w = p.value().data();
    visit_slices(p, o.weight_decay != 0, [&](index_t id) {
      T ss = 0;
      index_t n = 0;
      gradix::detail::slice_runs(p, id, [&](index_t off, T const* g, index_t len) {
        square_sum(val, w, off, g, len, wd, ss);
        n += len;
      });
      if (n == 0) return;
      T const mult = accumulate(sum[std::size_t(id)], ss, n, lr, eps);
      gradix::detail::slice_runs(p, id, [&](index_t off, T const* g, index_t len) { update(val, w, off, g, len, wd, mult); });
    });
  }
  template <class Val, class Q, class S, class T>
  static void row(adagrad_options const& o, Val const& val, Q& q, S& sum, index_t id, T const* g) {
    index_t const n = slice_size(q);
    if (n == 0) return;
    auto* const w = q.value().data();
    T const wd = T(o.weight_decay);
    T ss = 0;
    square_sum(val, w, id * n, g, n, wd, ss);
    T const mult = accumulate(sum[std::size_t(id)], ss, n, T(o.lr), T(o.eps));
    update(val, w, id * n, g, n, wd, mult);
  }
  /// Adds the sum of g^2 over n consecutive elements from offset off to ss (g += wd * w
  /// first): SIMD lanes summed in lane order, then the tail.
  template <class Val, class S, class T>
  static void square_sum(Val const& val, [[maybe_unused]] S* w, index_t off, T const* g, index_t len, T wd, T& ss) {
    index_t e = 0;
#if defined(GRADIX_HAS_VECTOR_EXT)
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
      constexpr int W = simd::width<T>;
      using X = simd::pack<T, W>;
      if (g && len >= W) {
        X const wdv = simd::splat<T, W>(wd);
        X acc{};
        for (; e + W <= len; e += W) {
          X gg = simd::load<T, W>(g + e);
          if (wd != 0) gg += wdv * simd::load_wide<S, W>(w + off + e);
          acc += gg * gg;
        }
        for (int l = 0; l < W; ++l) ss += acc[l];
      }
    }
#endif
    for (; e < len; ++e) {
      T gv = g ? g[e] : T(0);
      if (wd != 0) gv += wd * val.get(off + e);
      ss += gv * gv;
    }
  }
  /// The row's accumulator takes the mean square; returns the row's step lr / (sqrt(s) + eps).
  template <class T>
  static T accumulate(T& s, T ss, index_t n, T lr, T eps) {
    s += ss / T(n);
    return lr / (T(std::sqrt(s)) + eps);
  }
  /// w -= mult * g over n consecutive elements from offset off (g += wd * w first).
  template <class Val, class S, class T>
  static void update(Val const& val, [[maybe_unused]] S* w, index_t off, T const* g, index_t len, T wd, T mult) {
    index_t e = 0;
#if defined(GRADIX_HAS_VECTOR_EXT)
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
      constexpr int W = simd::width<T>;
      using X = simd::pack<T, W>;
      if (g && !val.stochastic) {
        X const wdv = simd::splat<T, W>(wd), mv = simd::splat<T, W>(mult);
        for (; e + W <= len; e += W) {
          X gg = simd::load<T, W>(g + e);
          X const ww = simd::load_wide<S, W>(w + off + e);
          if (wd != 0) gg += wdv * ww;
          simd::store_narrow<S, W>(w + off + e, X(ww - mv * gg));
        }
      }
    }
#endif
    for (; e < len; ++e) {
      T gv = g ? g[e] : T(0);
      T const wv = val.get(off + e);
      if (wd != 0) gv += wd * wv;
      val.put(off + e, wv - mult * gv);
    }
  }
};
}  // namespace detail

/// Row-wise Adagrad (FBGEMM's EXACT_ROWWISE_ADAGRAD): one accumulator per slice of the
/// parameter's gradient axis (a row of an embedding table) instead of one per element. Per
/// visited slice: g += weight_decay * w; s += (sum over the slice of g^2) / (elements in the
/// slice); w -= (lr / (sqrt(s) + eps)) * g. The sum is taken in a fixed order (SIMD lanes, then
/// lane by lane, then the tail): the same bits at any thread count. Visits the touched
/// slices, or every slice of a dense storage when weight_decay != 0. Host parameters only.
template <class... P>
class rowwise_adagrad : public detail::adagrad_core<detail::adagrad_rowwise, P...> {
  static_assert(!(device::is_device_param_v<P> || ...),
                "gradix::optim::rowwise_adagrad: host parameters only (device parameters: adagrad)");

 public:
  explicit rowwise_adagrad(adagrad_options o, P&... p) : detail::adagrad_core<detail::adagrad_rowwise, P...>(o, p...) {}
};
template <class... P>
rowwise_adagrad(adagrad_options, P&...) -> rowwise_adagrad<P...>;

}  // namespace optim

}  // namespace gradix
