#pragma once
/// \file
/// What the optimizers of training/optimizers.hpp share (gx::optim::detail): their state
/// tensors and per-slice state, the reads and rounded writes of a parameter's values
/// (`values`), the slice walks of a step, SIMD square roots, option checks, and the call
/// buffers of a backward with a fused step (`with_grad`, `fused_buffers`; the entry point
/// `gx::backward(e, optim::fused(opt))` is training/fused.hpp).
///
/// Part of `<gradix/optim.hpp>` (docs/optim.md).

#include "gradix/api/param.hpp"
#include "gradix/config.hpp"
#include "gradix/core/error.hpp"
#include "gradix/core/half.hpp"
#include "gradix/core/rng.hpp"
#include "gradix/core/simd.hpp"
#include "gradix/core/tensor.hpp"
#include "gradix/exec/fused_sink.hpp"
#include "gradix/exec/run.hpp"
#include "gradix/training/device_steps.hpp"
#include "gradix/training/slices.hpp"

#if defined(GRADIX_HAS_VECTOR_EXT) && (defined(__SSE2__) || defined(__AVX__))
#include <immintrin.h>
#endif

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace gradix {

namespace optim {

namespace detail {
/// A parameter's state tensor (its shape and layout, its compute type): a host tensor, or a device tensor on
/// the parameter's launcher for a device parameter (training/device_steps.hpp).
template <class P, bool Device = device::is_device_param_v<P>>
struct value_tensor {
  using type = tensor<compute_type_t<typename P::value_type>, typename P::shape_type, typename P::layout_type>;
};
template <class P>
struct value_tensor<P, true> {
  using type = grid::device_tensor<compute_type_t<typename P::value_type>, typename P::shape_type,
                                   typename P::launcher_type, typename P::layout_type>;
};
template <class P>
using value_tensor_t = typename value_tensor<P>::type;
/// Per-slice state (SGD's first-step flags, lazy Adam's last steps): a std::vector, or a
/// device array for a device parameter.
template <class P, class E, bool Device = device::is_device_param_v<P>>
struct slice_state {
  using type = std::vector<E>;
};
template <class P, class E>
struct slice_state<P, E, true> {
  using type = grid::device_tensor<E, shape<dyn>, typename P::launcher_type>;
};
template <class P, class E>
using slice_state_t = typename slice_state<P, E>::type;
/// A zeroed state tensor of parameter q (each element v).
template <class Q>
value_tensor_t<Q> state_of(Q& q, compute_type_t<typename Q::value_type> v = 0) {
  if constexpr (device::is_device_param_v<Q>) {
    return device::state_like(q, v);
  } else {
    value_tensor_t<Q> t(q.value().shape());
    if (v != 0)
      for (index_t k = 0; k < t.size(); ++k) t.data()[k] = v;
    return t;
  }
}
/// Per-slice state of q, each slice's value v.
template <class E, class Q>
slice_state_t<Q, E> slices_of(Q& q, E v) {
  if constexpr (device::is_device_param_v<Q>) return device::filled<E>(q.launcher(), device::slice_total(q), v);
  else return std::vector<E>(std::size_t(gradix::detail::slice_count(q)), v);
}

/// Reads and writes a host parameter's values in its compute type: a half-width value
/// (bfloat16, half) is widened on read and rounded on write, once per element and step, to
/// nearest (ties to even) or stochastically (the parameter's rounding(); core/half.hpp):
/// the device steps' rounded_values (training/device_steps.hpp), made for one step.
template <class Q>
struct values : device::rounded_values<typename Q::value_type> {
  static constexpr bool narrow = is_half_width_v<typename Q::value_type>;
  explicit values(Q& p) : device::rounded_values<typename Q::value_type>(device::rounded_values_of(p)) {}
};

/// f(name + "." + K, element K) for each element of a tuple of per-parameter state (the
/// names of an optimizer's state in a checkpoint: "m.0", "m.1", ...).
template <class Tuple, class F>
void visit_indexed(char const* name, Tuple& t, F& f) {
  [&]<std::size_t... K>(std::index_sequence<K...>) {
    (f(std::string(name) + "." + std::to_string(K), std::get<K>(t)), ...);
  }(std::make_index_sequence<std::tuple_size_v<Tuple>>{});
}

/// The slices a step visits: the touched ones, or every slice of a dense storage when
/// `all_dense` (the update changes untouched elements too); f(id) per slice.
template <class P, class F>
void visit_slices(P& p, bool all_dense, F&& f) {
  using G = gradix::detail::param_storage_t<P>;
  if (all_dense && !G::sparse) {
    index_t const n = gradix::detail::slice_count(p);
    for (index_t id = 0; id < n; ++id) f(id);
  } else {
    for_each_grad_slice(p, f);
  }
}
/// f(offset, grad pointer) for every element of the slices visit_slices visits.
template <class P, class F>
void visit(P& p, bool all_dense, F&& f) {
  visit_slices(p, all_dense, [&](index_t id) { gradix::detail::slice_elements(p, id, f); });
}
#if defined(GRADIX_HAS_VECTOR_EXT)
/// sqrt of each lane (one instruction on x86; lane by lane elsewhere).
template <class T, int W>
GRADIX_ALWAYS_INLINE simd::pack<T, W> pack_sqrt(simd::pack<T, W> x) {
  constexpr std::size_t bytes = sizeof(T) * std::size_t(W);
  auto via = [&](auto r, auto f) {
    std::memcpy(&r, &x, bytes);
    r = f(r);
    simd::pack<T, W> out;
    std::memcpy(&out, &r, bytes);
    return out;
  };
#if defined(__AVX512F__)
  // (g++ 12 flags the intrinsics' own undefined-value placeholder)
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
  if constexpr (bytes == 64 && std::is_same_v<T, float>) return via(__m512{}, [](__m512 a) { return _mm512_sqrt_ps(a); });
  if constexpr (bytes == 64 && std::is_same_v<T, double>) return via(__m512d{}, [](__m512d a) { return _mm512_sqrt_pd(a); });
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif
#if defined(__AVX__)
  if constexpr (bytes == 32 && std::is_same_v<T, float>) return via(__m256{}, [](__m256 a) { return _mm256_sqrt_ps(a); });
  if constexpr (bytes == 32 && std::is_same_v<T, double>) return via(__m256d{}, [](__m256d a) { return _mm256_sqrt_pd(a); });
#endif
#if defined(__SSE2__)
  if constexpr (bytes == 16 && std::is_same_v<T, float>) return via(__m128{}, [](__m128 a) { return _mm_sqrt_ps(a); });
  if constexpr (bytes == 16 && std::is_same_v<T, double>) return via(__m128d{}, [](__m128d a) { return _mm_sqrt_pd(a); });
#endif
  for (int l = 0; l < W; ++l) x[l] = T(std::sqrt(x[l]));
  return x;
}
#endif
template <class Tuple, class F>
void each(Tuple& t, F&& f) {
  std::apply([&](auto&... x) { (f(x), ...); }, t);
}

/// A host parameter seen with another gradient storage: what the step of a fused backward
/// reads (the optimizer's call buffer, training/fused.hpp) in place of p.grad(). Every other
/// member is the parameter's.
template <class Q>
struct with_grad {
  using value_type = typename Q::value_type;
  using shape_type = typename Q::shape_type;
  using layout_type = typename Q::layout_type;
  using storage_type = typename Q::storage_type;
  Q* p;
  storage_type* g;
  auto& value() { return p->value(); }
  auto const& value() const { return p->value(); }
  storage_type& grad() { return *g; }
  storage_type const& grad() const { return *g; }
  auto const& shape() const { return p->shape(); }
  gradix::rounding rounding() const { return p->rounding(); }
  std::uint64_t next_rounding_key() { return p->next_rounding_key(); }
};

/// A parameter whose step has no row-by-row form (fused_buffers::run_fused).
struct no_rows {};
/// Whether q's gradient slices are contiguous rows of its value, one after another (rank 2,
/// row-major along axis 0 or column-major along axis 1): slice id is elements [id * n, id *
/// n + n) with n = slice_size(q).
template <class Q>
inline constexpr bool flat_slices_v = [] {
  using G = gradix::detail::param_storage_t<Q>;
  using L = typename Q::layout_type;
  if constexpr (G::rank != 2) return false;
  else return std::is_same_v<L, col_major> ? G::axis == 1 : G::axis == 0;
}();
/// Elements of one gradient slice of q.
template <class Q>
index_t slice_size(Q const& q) {
  using G = gradix::detail::param_storage_t<Q>;
  index_t n = 1;
  for (std::size_t k = 0; k < G::rank; ++k)
    if (k != G::axis) n *= q.shape().extent(k);
  return n;
}

/// The call buffers of a backward with a fused step: one gradient storage per parameter (of
/// the parameter's kind), made on the first fused call and kept, empty between calls.
template <class... P>
class fused_buffers {
 protected:
  /// Runs backward() with the uses of the parameters ps redirected into the buffers (the
  /// uses of other parameters write their gradients as usual), then step(skip, with_grad
  /// views of ps over the buffers), then empties the buffers (also when backward or step
  /// throws). Returns what backward() returns.
  ///
  /// rows(views...) gives per parameter an object with `bool eligible()`, `void begin()`
  /// (once before the first row: what every row reads, made serially) and `void
  /// apply(index_t slice, T const* row)`, the step's update of one slice from its whole
  /// gradient row (thread-safe for distinct slices), or `no_rows`: an eligible parameter's buffer becomes a fused sink
  /// (exec/fused_sink.hpp), so that a kernel that alone writes it may apply its rows as it
  /// finishes them; skip[K] then tells step that parameter K's rows are all applied.
  template <class Run, class Step, class Rows>
  auto run_fused(std::tuple<P*...> const& ps, Run&& backward, Step&& step, Rows&& rows) {
    static_assert(!(device::is_device_param_v<P> || ...),
                  "gradix::backward(e, optim::fused(opt)): a fused step is written for host "
                  "parameters only; for device parameters call backward(e), then opt.step()");
    constexpr std::size_t N = sizeof...(P);
    void const* from[N];
    void* to[N];
    [&]<std::size_t... K>(std::index_sequence<K...>) {
      (([&] {
         auto& b = std::get<K>(buf_);
         if (!b) {
           try {
             b = std::make_unique<typename P::storage_type>(std::get<K>(ps)->shape());
           } catch (std::bad_alloc const&) {
             gradix::detail::fail("gradix::backward(e, optim::fused(opt)): out of memory allocating the "
                                  "gradient buffer of parameter ", K, " (shape ",
                                  to_string(std::get<K>(ps)->shape()), ")");
           }
         }
         from[K] = static_cast<void const*>(&std::get<K>(ps)->grad());
         to[K] = static_cast<void*>(b.get());
       }()),
       ...);
    }(std::index_sequence_for<P...>{});
    struct empty_after {
      fused_buffers* self;
      ~empty_after() {
        std::apply([](auto&... b) { (b->zero(), ...); }, self->buf_);
      }
    } const empty{this};
    auto views = [&]<std::size_t... K>(std::index_sequence<K...>) {
      return std::tuple<with_grad<P>...>{with_grad<P>{std::get<K>(ps), std::get<K>(buf_).get()}...};
    }(std::index_sequence_for<P...>{});
    auto steppers = std::apply(rows, views);
    gradix::detail::fused_sink sinks[N];
    std::size_t n_sinks = 0;
    std::size_t sink_of[N];
    [&]<std::size_t... K>(std::index_sequence<K...>) {
      (([&] {
         sink_of[K] = N;
         auto& r = std::get<K>(steppers);
         using R = std::remove_cvref_t<decltype(r)>;
         if constexpr (!std::is_same_v<R, no_rows>) {
           if (r.eligible()) {
             auto& k = sinks[n_sinks];
             k.storage = to[K];
             k.ctx = &r;
             k.begin = [](void* ctx) { static_cast<R*>(ctx)->begin(); };
             k.apply = [](void* ctx, index_t slice, void const* row) {
               static_cast<R*>(ctx)->apply(slice, static_cast<typename R::grad_type const*>(row));
             };
             sink_of[K] = n_sinks++;
           }
         }
       }()),
       ...);
    }(std::index_sequence_for<P...>{});
    using V = decltype(backward());
    V v{};
    {
      gradix::detail::fused_sinks const reg{sinks, n_sinks};
      struct restore {
        gradix::detail::fused_sinks const* saved;
        ~restore() { gradix::detail::current_fused_sinks() = saved; }
      } const r{gradix::detail::current_fused_sinks()};
      gradix::detail::current_fused_sinks() = &reg;
      gradix::detail::with_grad_redirect(gradix::detail::grad_redirect{from, to, N, true}, [&] { v = backward(); });
    }
    bool skip[N];
    for (std::size_t k = 0; k < N; ++k) skip[k] = sink_of[k] < N && sinks[sink_of[k]].applied;
    last_rows_ = 0;
    for (std::size_t k = 0; k < n_sinks; ++k) last_rows_ += sinks[k].rows;
    std::apply([&](auto&... q) { step(skip, q...); }, views);
    return v;
  }

 public:
  /// Rows the last fused call applied inside its scatter kernels (tests check the path).
  index_t fused_rows_applied() const { return last_rows_; }

 private:
  std::tuple<std::unique_ptr<typename P::storage_type>...> buf_;
  index_t last_rows_ = 0;
};
/// An option's value for a message: shortest %g form ("0.9", "1", "-1e-08").
inline std::string num(double x) {
  char b[32];
  std::snprintf(b, sizeof b, "%g", x);
  return b;
}
inline void check_lr(char const* op, double lr) {
  if (!(lr >= 0) || !std::isfinite(lr))
    gradix::detail::fail(op, ": the learning rate ", num(lr), " must be finite and >= 0");
}
inline void check_beta(char const* op, char const* name, double b) {
  if (!(b >= 0 && b < 1)) gradix::detail::fail(op, ": ", name, " = ", num(b), " must be in [0, 1)");
}
}  // namespace detail

}  // namespace optim

}  // namespace gradix
