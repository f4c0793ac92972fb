#pragma once
/// \file
/// What `gx::optim::adagrad` (training/optimizers.hpp) and `gx::optim::rowwise_adagrad`
/// (training/rowwise.hpp) share: their options, their constructor checks, their
/// checkpointed state, `step` / `zero_grad` / the fused step, and the row-by-row form of the
/// step that a backward with the step fused applies inside its scatter kernels
/// (training/fused.hpp). The two differ only in their accumulator (one per element, one per
/// slice) and in the update it drives, which a policy gives.
///
/// Part of `<gradix/optim.hpp>` (docs/optim.md).

#include "gradix/api/param.hpp"
#include "gradix/config.hpp"
#include "gradix/core/error.hpp"
#include "gradix/core/half.hpp"
#include "gradix/training/optim_base.hpp"

#include <cstddef>
#include <optional>
#include <string>
#include <tuple>
#include <utility>

namespace gradix {

namespace optim {

/// The options of `adagrad` and `rowwise_adagrad`.
struct adagrad_options {
  double lr = 1e-2;
  double eps = 1e-10;
  double weight_decay = 0;
  double initial_accumulator = 0;
};

namespace detail {

/// An Adagrad-family optimizer over parameters P... . Policy gives:
/// - `name`, the optimizer's name for messages;
/// - `state<Q>` and `make(q, initial)`: a parameter's accumulators;
/// - `step(o, q, state)`: the step of one parameter (q a parameter or a with_grad view);
/// - `row(o, values, q, state, slice, g)`: the update of one slice of a parameter whose
///   slices are contiguous rows (flat_slices_v) from its whole gradient row g, with the bits
///   of `step` on that slice.
template <class Policy, class... P>
class adagrad_core : private fused_buffers<P...> {
 public:
  explicit adagrad_core(adagrad_options o, P&... p)
      : o_(o), p_(&p...), sum_(Policy::make(p, o.initial_accumulator)...) {
    check_lr(Policy::name, o.lr);
    if (!(o.eps > 0)) gradix::detail::fail(Policy::name, ": eps ", num(o.eps), " must be > 0");
  }
  adagrad_options& options() { return o_; }
  /// f(name, object&) for each piece of state a checkpoint keeps: the options and the
  /// accumulators "sum.K".
  template <class F>
  void visit_state(F&& f) {
    f(std::string("lr"), o_.lr);
    f(std::string("eps"), o_.eps);
    f(std::string("weight_decay"), o_.weight_decay);
    f(std::string("initial_accumulator"), o_.initial_accumulator);
    visit_indexed("sum", sum_, f);
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
  using fused_buffers<P...>::fused_rows_applied;
  void zero_grad() {
    each(p_, [](auto* p) { p->grad().zero(); });
  }

 private:
  template <class... Q>
  void step_on(bool const* skip, Q&... q) {
    [&]<std::size_t... K>(std::index_sequence<K...>) {
      ((skip && skip[K] ? void() : Policy::step(o_, q, std::get<K>(sum_))), ...);
    }(std::index_sequence_for<P...>{});
  }
  /// The row-by-row form of the step (fused_buffers::run_fused): eligible when the slices
  /// are contiguous rows and the step visits only the touched slices (sparse storage, or
  /// no weight decay).
  template <class Q>
  struct rows_step {
    using grad_type = compute_type_t<typename Q::value_type>;
    adagrad_options const* o;
    Q* q;
    typename Policy::template state<Q>* sum;
    std::optional<values<Q>> val;  // made before the first row: the step's rounding key
    bool eligible() const {
      return flat_slices_v<Q> && (gradix::detail::param_storage_t<Q>::sparse || o->weight_decay == 0);
    }
    void begin() {
      if (!val) val.emplace(*q);
    }
    void apply(index_t id, grad_type const* g) {
      Policy::row(*o, *val, *q, *sum, id, g);
    }
  };
  template <class... Q>
  auto rows_of(Q&... q) {
    return [&]<std::size_t... K>(std::index_sequence<K...>) {
      return std::tuple<rows_step<Q>...>{rows_step<Q>{&o_, &q, &std::get<K>(sum_), std::nullopt}...};
    }(std::index_sequence_for<Q...>{});
  }
  adagrad_options o_;
  std::tuple<P*...> p_;
  std::tuple<typename Policy::template state<P>...> sum_;
};

}  // namespace detail

}  // namespace optim

}  // namespace gradix
