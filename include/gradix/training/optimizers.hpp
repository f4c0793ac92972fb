#pragma once
/// \file
/// Optimizers (gx::optim): `sgd`, `adagrad`, `rowwise_adagrad`, `adam`, `adamw`, `lazy_adam`
/// (global-norm gradient clipping, `clip_grad_norm`, is in training/clip.hpp; a backward with
/// the step fused, `gx::backward(e, optim::fused(opt))`, in training/fused.hpp).
///
/// The optimizers keep their state (momentum, moments, accumulators) in tensors of each
/// parameter's shape and layout, allocated when the optimizer is made: a step allocates
/// nothing. `step()` reads the gradients and updates the values; `zero_grad()` clears what
/// backward wrote (only the touched slices). Which elements a step visits (the slices of
/// training/slices.hpp):
///
/// - `sgd` (momentum, Nesterov, weight decay), `adagrad`: the touched slices when nothing
///   changes elsewhere (no momentum and no weight decay for sgd, no weight decay for adagrad);
///   otherwise every element of a parameter with dense storage, and still only the touched
///   slices of a sparse one (its untouched slices keep their state as it was: lazy).
/// - `adam` (`adamw` with decoupled weight decay): every element, every step, as the dense
///   algorithm defines it: an untouched element's moments decay and its value still moves.
///   With a sparse gradient this reads the whole table; use `lazy_adam` for embeddings.
/// - `lazy_adam`: only the touched slices. A slice touched at step t after its previous
///   touch at step s first catches up the moment decay of the skipped steps (m *= b1^(t-s-1),
///   v *= b2^(t-s-1): the moments dense Adam would hold), then takes the Adam update with
///   the global step's bias correction. Unlike `adam`, the value of an untouched slice does
///   not move (dense Adam would keep moving it with its decaying momentum).
///
/// Each optimizer lists its state through `visit_state(f)`, which training/checkpoint.hpp
/// saves and loads. Steps must not run while a backward call is writing the same parameters.
///
/// Part of `<gradix/optim.hpp>` (docs/optim.md), which includes this header.

#include "gradix/api/param.hpp"
#include "gradix/config.hpp"
#include "gradix/core/error.hpp"
#include "gradix/core/half.hpp"
#include "gradix/core/rng.hpp"
#include "gradix/core/simd.hpp"
#include "gradix/core/tensor.hpp"
#include "gradix/exec/run.hpp"
#include "gradix/training/adagrad_core.hpp"
#include "gradix/training/device_steps.hpp"
#include "gradix/training/optim_base.hpp"
#include "gradix/training/slices.hpp"

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace gradix {

namespace optim {

struct sgd_options {
  double lr = 1e-2;
  double momentum = 0;
  double dampening = 0;
  bool nesterov = false;
  double weight_decay = 0;
};

/// SGD as PyTorch defines it: g += weight_decay * w; with momentum, b = momentum * b +
/// (1 - dampening) * g (b = g on a slice's first step), then g = b, or g + momentum * b with
/// Nesterov; w -= lr * g.
template <class... P>
class sgd : private detail::fused_buffers<P...> {
 public:
  explicit sgd(sgd_options o, P&... p) : o_(o), p_(&p...), buf_(make_buf(p)...), first_(make_first(p)...) {
    detail::check_lr("gradix::optim::sgd", o.lr);
    if (o.momentum < 0) gradix::detail::fail("gradix::optim::sgd: momentum ", detail::num(o.momentum), " is negative");
    if (o.nesterov && (o.momentum <= 0 || o.dampening != 0))
      gradix::detail::fail("gradix::optim::sgd: Nesterov momentum needs momentum > 0 and dampening 0");
  }
  sgd_options& options() { return o_; }
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
  /// f(name, object&) for each piece of state a checkpoint keeps (gradix/checkpoint.hpp):
  /// the options, and per parameter K the momentum buffer "buf.K" (made here when momentum
  /// is on, as the next step would) and the first-step flags "first.K".
  template <class F>
  void visit_state(F&& f) {
    f(std::string("lr"), o_.lr);
    f(std::string("momentum"), o_.momentum);
    f(std::string("dampening"), o_.dampening);
    f(std::string("nesterov"), o_.nesterov);
    f(std::string("weight_decay"), o_.weight_decay);
    if (o_.momentum != 0)
      [&]<std::size_t... K>(std::index_sequence<K...>) {
        (ensure_buf(*std::get<K>(p_), std::get<K>(buf_), std::get<K>(first_)), ...);
      }(std::index_sequence_for<P...>{});
    detail::visit_indexed("buf", buf_, f);
    detail::visit_indexed("first", first_, f);
  }
  void zero_grad() {
    detail::each(p_, [](auto* p) { p->grad().zero(); });
  }

 private:
  template <class... Q>
  void step_on(bool const* skip, Q&... q) {
    [&]<std::size_t... K>(std::index_sequence<K...>) {
      ((skip && skip[K] ? void() : one(q, std::get<K>(buf_), std::get<K>(first_))), ...);
    }(std::index_sequence_for<P...>{});
  }
  /// Plain SGD over n consecutive elements from offset off: w -= lr * g (SIMD packs of the
  /// same operation for float and double; element by element for half-width values).
  template <class Val, class S, class T>
  static void plain_run(Val const& val, S* w, index_t off, T const* g, index_t n, T lr) {
    if constexpr (Val::narrow) {
      for (index_t e = 0; e < n; ++e) val.put(off + e, val.get(off + e) - lr * g[e]);
    } else {
      T* const wr = w + off;
      index_t e = 0;
#if defined(GRADIX_HAS_VECTOR_EXT)
      if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
        constexpr int W = simd::width<T>;
        auto const lv = simd::splat<T, W>(lr);
        for (; e + W <= n; e += W)
          simd::store<T, W>(wr + e, simd::load<T, W>(wr + e) - lv * simd::load<T, W>(g + e));
      }
#endif
      // (the tail as a count down: g++ 12 at -O2 -march=native otherwise warns that a far
      // iteration of `e < n` "invokes undefined behavior" once two parameters' steps are
      // inlined together)
      for (index_t left = n - e; left > 0; --left, ++e) wr[e] -= lr * g[e];
    }
  }
  /// The row-by-row form of a plain SGD step (no momentum, no weight decay) of a parameter
  /// whose slices are contiguous rows (fused_buffers::run_fused).
  template <class Q>
  struct rows_step {
    using grad_type = compute_type_t<typename Q::value_type>;
    sgd* self;
    Q* q;
    std::optional<detail::values<Q>> val;  // made before the first row: the step's rounding key
    bool eligible() const {
      return detail::flat_slices_v<Q> && self->o_.momentum == 0 && self->o_.weight_decay == 0;
    }
    void begin() {
      if (!val) val.emplace(*q);
    }
    void apply(index_t id, grad_type const* g) {
      index_t const n = detail::slice_size(*q);
      plain_run(*val, q->value().data(), id * n, g, n, grad_type(self->o_.lr));
    }
  };
  template <class... Q>
  auto rows_of(Q&... q) {
    return std::tuple<rows_step<Q>...>{rows_step<Q>{this, &q, std::nullopt}...};
  }
  // the momentum buffer, only with momentum (a static shape's empty tensor would be full size)
  template <class Q>
  std::optional<detail::value_tensor_t<Q>> make_buf(Q& q) {
    if (o_.momentum == 0) return std::nullopt;
    return std::optional<detail::value_tensor_t<Q>>(detail::state_of(q));
  }
  // the momentum buffer and first-step flags, made when momentum is on and they are not yet
  template <class Q>
  static void ensure_buf(Q& p, std::optional<detail::value_tensor_t<Q>>& buf, detail::slice_state_t<Q, unsigned char>& first) {
    if (buf) return;
    buf.emplace(detail::state_of(p));
    first = detail::slices_of<unsigned char>(p, 1);
  }
  template <class Q>
  detail::slice_state_t<Q, unsigned char> make_first(Q& q) {
    if constexpr (device::is_device_param_v<Q>) {
      // (a device array needs at least the launcher: an empty one until momentum is on)
      return o_.momentum != 0 ? detail::slices_of<unsigned char>(q, 1) : device::filled<unsigned char>(q.launcher(), 0, 1);
    } else {
      return std::vector<unsigned char>(o_.momentum != 0 ? std::size_t(gradix::detail::slice_count(q)) : 0, 1);
    }
  }
  template <class Q>
  void one(Q& p, std::optional<detail::value_tensor_t<Q>>& buf, detail::slice_state_t<Q, unsigned char>& first) {
    using S = typename Q::value_type;
    using T = compute_type_t<S>;
    T const lr = T(o_.lr), wd = T(o_.weight_decay), mu = T(o_.momentum), damp = T(1 - o_.dampening);
    S* const w = p.value().data();
    if (mu != 0) ensure_buf(p, buf, first);  // momentum set through options() after construction
    T* const b = buf ? buf->data() : nullptr;
    if constexpr (device::is_device_param_v<Q>) {
      // the touched slices of a sparse storage, every element of a dense one (file comment of
      // training/device_steps.hpp); then the visited slices are no longer fresh
      device::visit<1>(p, device::sgd_update<S>{device::rounded_values_of(p), b, mu != 0 ? first.data() : nullptr, lr,
                                                wd, mu, damp, o_.nesterov});
      if (mu != 0) device::per_slice(p, device::clear_flag{first.data()});
      return;
    } else {
    detail::values<Q> const val(p);
    if (mu == 0 && wd == 0) {  // plain SGD: w -= lr * g over the touched slices, run by run
      for_each_grad_slice(p, [&](index_t id) {
        gradix::detail::slice_runs(p, id, [&](index_t off, T const* g, index_t n) {
          if (g) plain_run(val, w, off, g, n, lr);
        });
      });
      return;
    }
    auto slice = [&](index_t id) {
      bool const fresh = mu != 0 && first[std::size_t(id)];
      if (mu != 0) first[std::size_t(id)] = 0;
      gradix::detail::slice_elements(p, id, [&](index_t off, T const* gp) {
        T g = gp ? *gp : T(0);
        T const wv = val.get(off);
        if (wd != 0) g += wd * wv;
        if (mu != 0) {
          b[off] = fresh ? g : T(mu * b[off] + damp * g);
          g = o_.nesterov ? T(g + mu * b[off]) : b[off];
        }
        val.put(off, wv - lr * g);
      });
    };
    detail::visit_slices(p, o_.momentum != 0 || o_.weight_decay != 0, slice);
    }
  }
  sgd_options o_;
  std::tuple<P*...> p_;
  std::tuple<std::optional<detail::value_tensor_t<P>>...> buf_;
  std::tuple<detail::slice_state_t<P, unsigned char>...> first_;
};
template <class... P>
sgd(sgd_options, P&...) -> sgd<P...>;

namespace detail {
/// adagrad's accumulators and updates (training/adagrad_core.hpp): one accumulator per element.
struct adagrad_elementwise {
  static constexpr char const* name = "gradix::optim::adagrad";
  template <class Q>
  using state = value_tensor_t<Q>;
  template <class Q>
  static state<Q> make(Q& q, double initial) {
    return state_of(q, compute_type_t<typename Q::value_type>(initial));
  }
  template <class Q, class S>
  static void step(adagrad_options const& o, Q& p, S& sum) {
    using T = compute_type_t<typename Q::value_type>;
    T const lr = T(o.lr), wd = T(o.weight_decay), eps = T(o.eps);
    auto* const w = p.value().data();
    T* const s = sum.data();
    if constexpr (device::is_device_param_v<Q>) {
      device::visit<1>(p, device::adagrad_update<typename Q::value_type>{device::rounded_values_of(p), s, lr, wd, eps});
    } else {
      values<Q> const val(p);
      visit_slices(p, o.weight_decay != 0, [&](index_t id) {
        gradix::detail::slice_runs(p, id, [&](index_t off, T const* g, index_t n) {
          update_run(val, w, s, off, g, n, lr, wd, eps);
        });
      });
    }
  }
  template <class Val, class Q, class S, class T>
  static void row(adagrad_options const& o, Val const& val, Q& q, S& sum, index_t id, T const* g) {
    index_t const n = slice_size(q);
    update_run(val, q.value().data(), sum.data(), id * n, g, n, T(o.lr), T(o.weight_decay), T(o.eps));
  }
  /// The Adagrad update of n consecutive elements from offset off (g null: no gradient, g =
  /// 0): SIMD packs of the element's operations, in the same order (the same bits; a
  /// half-width value widened and rounded to nearest in packs, as element by element;
  /// stochastic rounding element by element).
  template <class Val, class S, class T>
  static void update_run(Val const& val, [[maybe_unused]] S* w, T* s, index_t off, T const* g, index_t n, T lr, T wd,
                         T eps) {
    auto element = [&](index_t o, T const* gp) {
      T gv = gp ? *gp : T(0);
      T const wv = val.get(o);
      if (wd != 0) gv += wd * wv;
      s[o] += gv * gv;
      val.put(o, wv - lr * gv / (T(std::sqrt(s[o])) + eps));
    };
    index_t e = 0;
#if defined(GRADIX_HAS_VECTOR_EXT)
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
      if (g && !val.stochastic) {
        constexpr int W = simd::width<T>;
        using X = simd::pack<T, W>;
        X const lv = simd::splat<T, W>(lr), wdv = simd::splat<T, W>(wd), ev = simd::splat<T, W>(eps);
        auto* const wr = w + off;
        T* const sr = s + off;
        for (; e + W <= n; e += W) {
          X gg = simd::load<T, W>(g + e);
          X const ww = simd::load_wide<S, W>(wr + e);
          if (wd != 0) gg += wdv * ww;
          X const ss = simd::load<T, W>(sr + e) + gg * gg;
          simd::store<T, W>(sr + e, ss);
          simd::store_narrow<S, W>(wr + e, X(ww - lv * gg / (pack_sqrt<T, W>(ss) + ev)));
        }
      }
    }
#endif
    for (; e < n; ++e) element(off + e, g ? g + e : nullptr);
  }
};
}  // namespace detail

/// Adagrad: g += weight_decay * w; s += g^2; w -= lr * g / (sqrt(s) + eps). Host and
/// device parameters.
template <class... P>
class adagrad : public detail::adagrad_core<detail::adagrad_elementwise, P...> {
 public:
  explicit adagrad(adagrad_options o, P&... p) : detail::adagrad_core<detail::adagrad_elementwise, P...>(o, p...) {}
};
template <class... P>
adagrad(adagrad_options, P&...) -> adagrad<P...>;


struct adam_options {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0;
  /// AdamW: w -= lr * weight_decay * w (decoupled) instead of g += weight_decay * w.
  bool decoupled = false;
};

namespace detail {
/// The moments m, v of every parameter, and the Adam element update.
template <class... P>
class adam_base {
 public:
  adam_base(adam_options o, char const* op, P&... p) : o_(o), p_(&p...), m_(zeros(p)...), v_(zeros(p)...) {
    check_lr(op, o.lr);
    check_beta(op, "beta1", o.beta1);
    check_beta(op, "beta2", o.beta2);
    if (!(o.eps > 0)) gradix::detail::fail(op, ": eps ", num(o.eps), " must be > 0");
  }
  adam_options& options() { return o_; }
  /// Steps taken.
  std::int64_t steps() const { return t_; }
  /// f(name, object&) for each piece of state a checkpoint keeps: the options, the step
  /// count "t", the moments "m.K" and "v.K" (and lazy_adam's "last.K").
  template <class F>
  void visit_state(F&& f) {
    f(std::string("lr"), o_.lr);
    f(std::string("beta1"), o_.beta1);
    f(std::string("beta2"), o_.beta2);
    f(std::string("eps"), o_.eps);
    f(std::string("weight_decay"), o_.weight_decay);
    f(std::string("decoupled"), o_.decoupled);
    f(std::string("t"), t_);
    visit_indexed("m", m_, f);
    visit_indexed("v", v_, f);
  }
  void zero_grad() {
    each(p_, [](auto* p) { p->grad().zero(); });
  }

 protected:
  template <class Q>
  static value_tensor_t<Q> zeros(Q& q) {
    return state_of(q);
  }
  /// The update of one element at step t_ (m, v already decayed for skipped steps).
  template <class T>
  struct coefs {
    T lr, b1, b2, c1, c2, eps, wd, decay;  // decay: 1 - lr * wd (decoupled)
  };
  template <class T>
  coefs<T> coefs_now() const {
    double const c1 = 1 - std::pow(o_.beta1, double(t_));
    double const c2 = 1 - std::pow(o_.beta2, double(t_));
    return {T(o_.lr), T(o_.beta1), T(o_.beta2), T(1 / c1), T(1 / std::sqrt(c2)), T(o_.eps),
            T(o_.decoupled ? 0 : o_.weight_decay), T(o_.decoupled ? 1 - o_.lr * o_.weight_decay : 1)};
  }
  /// The element update of a device step (training/device_steps.hpp), last: lazy Adam's.
  template <class Q, class T>
  device::adam_update<typename Q::value_type> device_update(Q& p, coefs<T> const& k, T* m, T* v,
                                                            std::int64_t const* last) const {
    return {device::rounded_values_of(p), m, v, last, t_, o_.beta1, o_.beta2, k.lr, k.b1, k.b2, k.c1, k.c2, k.eps, k.wd, k.decay};
  }
  /// update() over n consecutive elements (SIMD packs of the same operations, in the same
  /// order: the same bits).
  template <class T>
  static void update_run(coefs<T> const& k, T* w, T* m, T* v, T const* g, index_t n) {
    index_t e = 0;
#if defined(GRADIX_HAS_VECTOR_EXT)
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
      constexpr int W = simd::width<T>;
      using X = simd::pack<T, W>;
      X const lr = simd::splat<T, W>(k.lr), b1 = simd::splat<T, W>(k.b1), b2 = simd::splat<T, W>(k.b2),
              c1 = simd::splat<T, W>(k.c1), c2 = simd::splat<T, W>(k.c2), eps = simd::splat<T, W>(k.eps),
              wd = simd::splat<T, W>(k.wd), decay = simd::splat<T, W>(k.decay), one = simd::splat<T, W>(T(1));
      for (; e + W <= n; e += W) {
        X gg = simd::load<T, W>(g + e), ww = simd::load<T, W>(w + e);
        gg = gg + wd * ww;
        X const mm = b1 * simd::load<T, W>(m + e) + (one - b1) * gg;
        X const vv = b2 * simd::load<T, W>(v + e) + (one - b2) * gg * gg;
        simd::store<T, W>(m + e, mm);
        simd::store<T, W>(v + e, vv);
        simd::store<T, W>(w + e, X(decay * ww - lr * (mm * c1) / (pack_sqrt<T, W>(vv) * c2 + eps)));
      }
    }
#endif
    for (; e < n; ++e) update(k, w[e], m[e], v[e], g[e]);
  }
  /// update() over n consecutive elements of a half-width parameter from offset off (read
  /// widened, written rounded; g null: no gradient, g = 0).
  template <class T, class V>
  static void update_values(coefs<T> const& k, V const& val, index_t off, T* m, T* v, T const* g, index_t n) {
    for (index_t e = 0; e < n; ++e) {
      T w = val.get(off + e);
      update(k, w, m[e], v[e], g ? g[e] : T(0));
      val.put(off + e, w);
    }
  }
  template <class T>
  static void update(coefs<T> const& k, T& w, T& m, T& v, T g) {
    g += k.wd * w;
    m = k.b1 * m + (T(1) - k.b1) * g;
    v = k.b2 * v + (T(1) - k.b2) * g * g;
    // w -= lr * (m / c1) / (sqrt(v / c2) + eps), as sqrt(v) / sqrt(c2)
    w = k.decay * w - k.lr * (m * k.c1) / (T(std::sqrt(v)) * k.c2 + k.eps);
  }
  adam_options o_;
  std::tuple<P*...> p_;
  std::tuple<value_tensor_t<P>...> m_, v_;
  std::int64_t t_ = 0;
};
}  // namespace detail

/// Adam (AdamW with `decoupled`), the dense algorithm: every element of every parameter is
/// updated each step (an element without gradient has g = 0).
template <class... P>
class adam : public detail::adam_base<P...>, private detail::fused_buffers<P...> {
  using base = detail::adam_base<P...>;

 public:
  explicit adam(adam_options o, P&... p) : base(o, "gradix::optim::adam", p...) {}
  void step() {
    std::apply([&](auto*... p) { step_on(*p...); }, this->p_);
  }
  /// backward() with this step fused (training/fused.hpp; gradix::backward(e, optim::fused(opt))).
  template <class Run>
  auto fused_step(Run&& backward) {
    return this->run_fused(
        this->p_, backward, [&](bool const*, auto&... q) { step_on(q...); },
        [](auto&... q) { return std::tuple{(void(q), detail::no_rows{})...}; });
  }
  using detail::fused_buffers<P...>::fused_rows_applied;  // 0: no row-by-row form

 private:
  template <class... Q>
  void step_on(Q&... q) {
    ++this->t_;
    [&]<std::size_t... K>(std::index_sequence<K...>) {
      (one(q, std::get<K>(this->m_), std::get<K>(this->v_)), ...);
    }(std::index_sequence_for<P...>{});
  }
  template <class Q>
  void one(Q& p, detail::value_tensor_t<Q>& mt, detail::value_tensor_t<Q>& vt) {
    using T = compute_type_t<typename Q::value_type>;
    auto const k = this->template coefs_now<T>();
    auto* const w = p.value().data();
    T* const m = mt.data();
    T* const v = vt.data();
    if constexpr (device::is_device_param_v<Q>) {  // every element (the dense algorithm)
      device::visit<2>(p, this->device_update(p, k, m, v, nullptr));
    } else if constexpr (detail::values<Q>::narrow) {
      detail::values<Q> const val(p);
      index_t const n = gradix::detail::slice_count(p);
      for (index_t id = 0; id < n; ++id)
        gradix::detail::slice_runs(p, id, [&](index_t off, T const* g, index_t len) {
          base::update_values(k, val, off, m + off, v + off, g, len);
        });
    } else {
      index_t const n = gradix::detail::slice_count(p);
      for (index_t id = 0; id < n; ++id)
        gradix::detail::slice_runs(p, id, [&](index_t off, T const* g, index_t len) {
          if (g) {
            base::update_run(k, w + off, m + off, v + off, g, len);
          } else {  // a slice without a gradient (sparse storage): g = 0
            for (index_t e = 0; e < len; ++e) base::update(k, w[off + e], m[off + e], v[off + e], T(0));
          }
        });
    }
  }
};
template <class... P>
adam(adam_options, P&...) -> adam<P...>;

/// AdamW: Adam with decoupled weight decay (`weight_decay`, applied as w *= 1 - lr * wd).
template <class... P>
class adamw : public adam<P...> {
 public:
  explicit adamw(adam_options o, P&... p) : adam<P...>(decoupled(o), p...) {}

 private:
  static adam_options decoupled(adam_options o) {
    o.decoupled = true;
    return o;
  }
};
template <class... P>
adamw(adam_options, P&...) -> adamw<P...>;

/// Lazy Adam: only the touched slices are updated (see the file's comment): the step cost
/// follows the gradient's size, not the table's.
template <class... P>
class lazy_adam : public detail::adam_base<P...>, private detail::fused_buffers<P...> {
  using base = detail::adam_base<P...>;

 public:
  explicit lazy_adam(adam_options o, P&... p)
      : base(o, "gradix::optim::lazy_adam", p...), last_(detail::slices_of<std::int64_t>(p, 0)...) {}
  void step() {
    std::apply([&](auto*... p) { step_on(*p...); }, this->p_);
  }
  /// backward() with this step fused (training/fused.hpp; gradix::backward(e, optim::fused(opt))).
  /// The step count advances before the backward (rows applied inside its kernels use it) and
  /// goes back when the call fails.
  template <class Run>
  auto fused_step(Run&& backward) {
    ++this->t_;
    struct undo {
      std::int64_t* t;
      bool done = false;
      ~undo() {
        if (!done) --*t;
      }
    } u{&this->t_};
    auto r = this->run_fused(
        this->p_, backward, [&](bool const* skip, auto&... q) { steps(skip, q...); },
        [&](auto&... q) { return rows_of(q...); });
    u.done = true;
    return r;
  }
  using detail::fused_buffers<P...>::fused_rows_applied;
  /// adam's state and the step at which each slice was last updated ("last.K").
  template <class F>
  void visit_state(F&& f) {
    base::visit_state(f);
    detail::visit_indexed("last", last_, f);
  }

 private:
  template <class Q>
  void one(Q& p, detail::value_tensor_t<Q>& mt, detail::value_tensor_t<Q>& vt, detail::slice_state_t<Q, std::int64_t>& last) {
    using T = compute_type_t<typename Q::value_type>;
    auto const k = this->template coefs_now<T>();
    auto* const w = p.value().data();
    T* const m = mt.data();
    T* const v = vt.data();
    if constexpr (device::is_device_param_v<Q>) {
      // the stored slices of a sparse storage (every slice of a dense one), then their last step
      device::visit<1>(p, this->device_update(p, k, m, v, last.data()));
      device::per_slice(p, device::set_last{last.data(), this->t_});
    } else {
      detail::values<Q> const val(p);
      for_each_grad_slice(p, [&](index_t id) {
        slice_step(k, val, w, m, v, last, id,
                   [&](auto&& run) { gradix::detail::slice_runs(p, id, run); });
      });
    }
  }
  /// The step of slice id, its runs given by runs(f) as f(offset, gradient or null, length):
  /// the moments catch up the skipped steps' decay, then the Adam update.
  template <class T, class Val, class S, class Last, class Runs>
  void slice_step(typename base::template coefs<T> const& k, Val const& val, S* w, T* m, T* v, Last& last, index_t id,
                  Runs&& runs) const {
    std::int64_t const skipped = this->t_ - last[std::size_t(id)] - 1;
    last[std::size_t(id)] = this->t_;
    T const d1 = skipped > 0 ? T(std::pow(this->o_.beta1, double(skipped))) : T(1);
    T const d2 = skipped > 0 ? T(std::pow(this->o_.beta2, double(skipped))) : T(1);
    runs([&](index_t off, T const* g, index_t n) {
      T* const mr = m + off;
      T* const vr = v + off;
      if (skipped > 0)
        for (index_t e = 0; e < n; ++e) {
          mr[e] *= d1;
          vr[e] *= d2;
        }
      if constexpr (Val::narrow) base::update_values(k, val, off, mr, vr, g, n);
      else base::update_run(k, w + off, mr, vr, g, n);
    });
  }
  template <class... Q>
  void step_on(Q&... q) {
    ++this->t_;
    steps(nullptr, q...);
  }
  /// k = the coefficients at the current step count (nvcc's front end does not take
  /// `self->template coefs_now<T>()` from a nested class).
  template <class K>
  void coefs_into(std::optional<K>& k) const {
    k.emplace(this->template coefs_now<decltype(K::lr)>());
  }
  /// The step at the current step count (skip[K]: parameter K's rows are all applied).
  template <class... Q>
  void steps(bool const* skip, Q&... q) {
    [&]<std::size_t... K>(std::index_sequence<K...>) {
      ((skip && skip[K] ? void() : one(q, std::get<K>(this->m_), std::get<K>(this->v_), std::get<K>(last_))), ...);
    }(std::index_sequence_for<P...>{});
  }
  /// The row-by-row form of the step (fused_buffers::run_fused): a parameter whose slices are
  /// contiguous rows, with sparse storage (a dense storage's step may visit every slice, and
  /// a visited slice's moments decay even without a gradient).
  template <class Q>
  struct rows_step {
    using grad_type = compute_type_t<typename Q::value_type>;
    lazy_adam* self;
    Q* q;
    detail::value_tensor_t<Q>* m;
    detail::value_tensor_t<Q>* v;
    detail::slice_state_t<Q, std::int64_t>* last;
    std::optional<detail::values<Q>> val;  // made before the first row: the step's rounding key
    std::optional<typename base::template coefs<grad_type>> k;
    bool eligible() const { return detail::flat_slices_v<Q> && gradix::detail::param_storage_t<Q>::sparse; }
    void begin() {
      if (!val) val.emplace(*q);
      if (!k) self->coefs_into(k);
    }
    void apply(index_t id, grad_type const* g) {
      index_t const n = detail::slice_size(*q);
      self->slice_step(*k, *val, q->value().data(), m->data(), v->data(), *last, id,
                       [&](auto&& run) { run(id * n, g, n); });
    }
  };
  template <class... Q>
  auto rows_of(Q&... q) {
    return [&]<std::size_t... K>(std::index_sequence<K...>) {
      return std::tuple<rows_step<Q>...>{rows_step<Q>{this, &q, &std::get<K>(this->m_), &std::get<K>(this->v_),
                                                      &std::get<K>(last_), std::nullopt, std::nullopt}...};
    }(std::index_sequence_for<Q...>{});
  }
  std::tuple<detail::slice_state_t<P, std::int64_t>...> last_;
};
template <class... P>
lazy_adam(adam_options, P&...) -> lazy_adam<P...>;

}  // namespace optim

}  // namespace gradix
