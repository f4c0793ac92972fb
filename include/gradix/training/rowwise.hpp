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

struct rowwise_adagrad_options {
  double lr = 1e-2;
  double eps = 1e-10;
  double weight_decay = 0;
  double initial_accumulator = 0;
};

/// Row-wise Adagrad (FBGEMM's EXACT_ROWWISE_ADAGRAD): one accumulator per slice of the
/// parameter's gradient axis (a row of an embedding table) instead of one per element. Per
/// visited slice: g += weight_decay * w; s += (sum over the slice of g^2) / (elements in the
/// slice); w -= (lr / (sqrt(s) + eps)) * g. The sum is taken in a fixed order (SIMD lanes, then
/// lane by lane, then the tail): the same bits at any thread count. Visits the touched
/// slices, or every slice of a dense storage when weight_decay != 0. Host parameters only.
template <class... P>
class rowwise_adagrad : private detail::fused_buffers<P...> {
  static_assert(!(device::is_device_param_v<P> || ...),
                "gradix::optim::rowwise_adagrad: host parameters only (device parameters: adagrad)");

 public:
  explicit rowwise_adagrad(rowwise_adagrad_options o, P&... p)
      : o_(o), p_(&p...),
        sum_(std::vector<compute_type_t<typename P::value_type>>(
            std::size_t(gradix::detail::slice_count(p)), compute_type_t<typename P::value_type>(o.initial_accumulator))...) {
    detail::check_lr("gradix::optim::rowwise_adagrad", o.lr);
    if (!(o.eps > 0)) gradix::detail::fail("gradix::optim::rowwise_adagrad: eps ", detail::num(o.eps), " must be > 0");
  }
  rowwise_adagrad_options& options() { return o_; }
  /// f(name, object&) for each piece of state a checkpoint keeps: the options and the
  /// per-slice accumulators "sum.K".
  template <class F>
  void visit_state(F&& f) {
    f(std::string("lr"), o_.lr);
    f(std::string("eps"), o_.eps);
    f(std::string("weight_decay"), o_.weight_decay);
    f(std::string("initial_accumulator"), o_.initial_accumulator);
    detail::visit_indexed("sum", sum_, f);
  }
  void step() {
    std::apply([&](auto*... p) { step_on(nullptr, *p...); }, p_);
  }
  /// backward() with this step fused (training/fused.hpp; gradix::backward(e, optim::fused(opt))).
  template <class Run>
  auto fused_step(Run&& backward) {
    return this->run_fused(
        p_, backward, [&](bool const* skip, auto&... q) { step_on(skip, q...); },
        [&](auto&... q) { return rows_of(q...); });
  }
  using detail::fused_buffers<P...>::fused_rows_applied;
  void zero_grad() {
    detail::each(p_, [](auto* p) { p->grad().zero(); });
  }

 private:
  template <class... Q>
  void step_on(bool const* skip, Q&... q) {
    [&]<std::size_t... K>(std::index_sequence<K...>) { ((skip && skip[K] ? void() : one(q, std::get<K>(sum_))), ...); }(
        std::index_sequence_for<P...>{});
  }
  template <class Q>
  void one(Q& p, std::vector<compute_type_t<typename Q::value_type>>& sum) {
    using T = compute_type_t<typename Q::value_type>;
    T const lr = T(o_.lr), wd = T(o_.weight_decay), eps = T(o_.eps);
    detail::values<Q> const val(p);
    auto* const w = p.value().data();
    detail::visit_slices(p, o_.weight_decay != 0, [&](index_t id) {
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
          if (wd != 0) gg += wdv * detail::load_values<W>(w + off + e);
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
      if (g && !val.stochastic_) {
        X const wdv = simd::splat<T, W>(wd), mv = simd::splat<T, W>(mult);
        for (; e + W <= len; e += W) {
          X gg = simd::load<T, W>(g + e);
          X const ww = detail::load_values<W>(w + off + e);
          if (wd != 0) gg += wdv * ww;
          detail::store_values<W>(w + off + e, X(ww - mv * gg));
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
  /// The row-by-row form of the step of a parameter whose slices are contiguous rows, when
  /// the step visits only the touched slices (fused_buffers::run_fused).
  template <class Q>
  struct rows_step {
    using grad_type = compute_type_t<typename Q::value_type>;
    rowwise_adagrad* self;
    Q* q;
    std::vector<grad_type>* sum;
    std::optional<detail::values<Q>> val;  // made by the first row: the step's rounding key
    bool eligible() const {
      return detail::flat_slices_v<Q> && (gradix::detail::param_storage_t<Q>::sparse || self->o_.weight_decay == 0);
    }
    void apply(index_t id, grad_type const* g) {
      using T = grad_type;
      if (!val) val.emplace(*q);
      index_t const n = detail::slice_size(*q);
      if (n == 0) return;
      auto* const w = q->value().data();
      T const wd = T(self->o_.weight_decay);
      T ss = 0;
      square_sum(*val, w, id * n, g, n, wd, ss);
      T const mult = accumulate((*sum)[std::size_t(id)], ss, n, T(self->o_.lr), T(self->o_.eps));
      update(*val, w, id * n, g, n, wd, mult);
    }
  };
  template <class... Q>
  auto rows_of(Q&... q) {
    return [&]<std::size_t... K>(std::index_sequence<K...>) {
      return std::tuple<rows_step<Q>...>{rows_step<Q>{this, &q, &std::get<K>(sum_), std::nullopt}...};
    }(std::index_sequence_for<Q...>{});
  }
  rowwise_adagrad_options o_;
  std::tuple<P*...> p_;
  std::tuple<std::vector<compute_type_t<typename P::value_type>>...> sum_;
};
template <class... P>
rowwise_adagrad(rowwise_adagrad_options, P&...) -> rowwise_adagrad<P...>;

}  // namespace optim

}  // namespace gradix
