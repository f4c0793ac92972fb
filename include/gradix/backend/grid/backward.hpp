#pragma once
/// \file
/// Reverse mode on a device grid: grid::backward, backward_only, grad and zero_grad for
/// expressions over device parameters (backend/grid/param.hpp) and device views. The plan is
/// the host's (`ad::plan`: the same compile-time recursion over the expression's type); only
/// its kernels run on the device (backend/grid/update.hpp), in plan order, in the launcher's
/// stream.
///
/// A call runs in three steps:
///   1. validation: every gather by device indices is checked by a kernel (one host read per
///      index vector); an out-of-range index throws the host's message before anything is
///      written, so parameters and gradients stay as they were;
///   2. the pre-pass: sparse storages reserve their slots on the device;
///   3. the update kernels, one per parameter use (a fused pair or a multi_use: one per
///      member).
/// backward also evaluates the expression (grid::assign into a device scalar, the
/// fixed-order reduction for a sum at the root) and returns its value, which waits for the
/// device; backward_only does not wait.
///
/// Lookups (index vectors) add atomically by default; `backward_options{scatter_mode::
/// deterministic}` sorts and sums segments instead, for the same bits on every run.
/// Injective maps store without atomics, except where two uses in one fused launch write the
/// same storage (atomic mode: they run concurrently).
///
/// Since issue 33 a device call runs the save transform first (exec/save.hpp over
/// grid::executor: products by the launcher's gemm, rows, segment sums and reductions read
/// inside the expression into device buffers of the call), and a plan with buffers (matmul,
/// softmax and the norms, let, embedding_bag, staged values) runs through the plan runner
/// written once for every executor (exec/run.hpp, exec/elements.hpp); plans of plain uses
/// run whole through the executor (grid::executor::run_whole: fused launches,
/// backend/grid/plain_plan.hpp).

#include "gradix/ad/kernel.hpp"
#include "gradix/ad/plan.hpp"
#include "gradix/ad/product.hpp"
#include "gradix/ad/save.hpp"
#include "gradix/backend/grid/assign.hpp"
#include "gradix/backend/grid/executor.hpp"
#include "gradix/backend/grid/grad.hpp"
#include "gradix/backend/grid/launch.hpp"
#include "gradix/backend/grid/param.hpp"
#include "gradix/backend/grid/reduce.hpp"
#include "gradix/backend/grid/scatter.hpp"
#include "gradix/backend/grid/update.hpp"
#include "gradix/backend/grid/validate.hpp"
#include "gradix/config.hpp"
#include "gradix/core/tuple.hpp"
#include "gradix/exec/checks.hpp"
#include "gradix/exec/grad.hpp"
#include "gradix/exec/run.hpp"
#include "gradix/exec/save.hpp"

#include <atomic>
#include <memory>
#include <tuple>
#include <type_traits>
#include <utility>

namespace gradix::grid {

/// Evaluates the rank-0 device expression e, adds d e / d p into the gradient of every
/// parameter p that e reads, and returns the value (waits for the device). The values e
/// keeps (products, rows, segment sums, lets, reductions read inside it) are computed first
/// into device buffers of the call (exec/save.hpp over grid::executor).
template <class L, operand E>
auto backward(L& l, E const& e_in, backward_options o = {}) {
  auto e = ::gradix::detail::prepared_node(e_in, "gradix::grid::backward");
  using N = decltype(e);
  static_assert(shape_of_t<N>::rank == 0,
                "gradix::grid::backward: the expression is not rank 0 (reduce it to a scalar first)");
  using T = value_type_t<N>;
  if constexpr (detail::check_device_backward<N>()) {
    validate_expression(l, e, o.launch);
    executor<L> ex(l, o);
    return ::gradix::detail::run_with_saved_on<executor<L>, true>(ex, e, "gradix::grid::backward", [&](auto const& e2) {
      detail::device_buffer<L> out(l, sizeof(T));
      tensor_view<T, shape<>, row_major, cuda_space> ov(out.template as<T>(), shape<>{});
      assign(l, ov, e2, o.launch);
      ::gradix::detail::run_plan_on(ex, ad::plan(e2), "gradix::grid::backward");
      T v{};
      l.copy_to_host(&v, out.p_, sizeof v);
      return v;
    });
  } else {
    return T{};
  }
}

/// Like backward(l, e), without computing the value (does not wait for the device, unless e
/// gathers by device indices: their validation reads one flag each).
template <class L, operand E>
void backward_only(L& l, E const& e_in, backward_options o = {}) {
  auto e = ::gradix::detail::prepared_node(e_in, "gradix::grid::backward_only");
  using N = decltype(e);
  static_assert(shape_of_t<N>::rank == 0,
                "gradix::grid::backward_only: the expression is not rank 0 (reduce it to a scalar first)");
  if constexpr (detail::check_device_backward<N>()) {
    validate_expression(l, e, o.launch);
    executor<L> ex(l, o);
    ::gradix::detail::run_with_saved_on<executor<L>, true>(ex, e, "gradix::grid::backward_only", [&](auto const& e2) {
      ::gradix::detail::run_plan_on(ex, ad::plan(e2), "gradix::grid::backward_only");
    });
  }
}

/// Adds seed-weighted gradients of the device expression e, d <seed, e> / d p, for any rank:
/// the seed is a device view or tensor of e's shape (gradix::error otherwise, nothing written).
template <class L, operand E, operand S>
  requires(!std::is_same_v<std::remove_cvref_t<S>, backward_options>)
void backward(L& l, E const& e_in, S const& seed_in, backward_options o = {}) {
  auto e = ::gradix::detail::prepared_node(e_in, "gradix::grid::backward");
  auto seed = ::gradix::detail::prepared_node(seed_in, "gradix::grid::backward");
  using N = decltype(e);
  using SN = decltype(seed);
  static_assert(shape_of_t<SN>::rank == shape_of_t<N>::rank,
                "gradix::grid::backward: the seed must have the expression's rank");
  static_assert(std::is_same_v<space_of_t<SN>, cuda_space>,
                "gradix::grid::backward: the seed must be in device memory (a device tensor or view)");
  if (!(seed.shape() == e.shape()))
    ::gradix::detail::fail("gradix::grid::backward: seed shape ", to_string(seed.shape()),
                           " differs from expression shape ", to_string(e.shape()));
  if constexpr (detail::check_device_backward<N>()) {
    validate_expression(l, e, o.launch);
    using ES = shape_of_t<N>;
    executor<L> ex(l, o);
    ::gradix::detail::run_with_saved_on<executor<L>, true>(ex, e, "gradix::grid::backward", [&](auto const& e2) {
      if constexpr (std::is_same_v<shape_of_t<SN>, ES>) {
        ::gradix::detail::run_plan_on(ex, ad::plan(e2, seed), "gradix::grid::backward");
      } else {  // same extents (checked above), another shape type: view it with e's
        ::gradix::detail::run_plan_on(ex, ad::plan(e2, broadcast_node<SN, ES>{seed, e.shape()}), "gradix::grid::backward");
      }
    });
  }
}

/// Gradients of the rank-0 device expression e with respect to the given device parameters,
/// as new device storage objects (of each parameter's kind); the parameters' own gradients
/// are untouched. One parameter: its gradient; several: a std::tuple of them.
template <class L, operand E, class... P>
auto grad(L& l, E const& e_in, P const&... params) {
  static_assert(sizeof...(P) > 0, "gradix::grid::grad: give at least one parameter");
  auto e = ::gradix::detail::prepared_node(e_in, "gradix::grid::grad");
  using N = decltype(e);
  static_assert(shape_of_t<N>::rank == 0, "gradix::grid::grad: the expression is not rank 0");
  ::gradix::detail::check_distinct_params("gradix::grid::grad", params...);
  auto const storage_of = [&](auto const& q) {
    using G = typename std::remove_cvref_t<decltype(q)>::storage_type;
    return G(l, q.shape());
  };
  std::tuple<typename P::storage_type...> out(storage_of(params)...);
  if constexpr (detail::check_device_backward<N>()) {
    // the parameters' uses are redirected where they are made (ad::push, redirect_target), as
    // on the host: operand plans of products and lets are built where they run
    validate_expression(l, e, backward_options{}.launch);
    ::gradix::detail::run_redirected(out, std::forward_as_tuple(params...), [&] {
      executor<L> ex(l, backward_options{});
      ::gradix::detail::run_with_saved_on<executor<L>, true>(ex, e, "gradix::grid::grad", [&](auto const& e2) {
        ::gradix::detail::run_plan_on(ex, ad::plan(e2), "gradix::grid::grad");
      });
    });
  }
  if constexpr (sizeof...(P) == 1) return std::move(std::get<0>(out));
  else return out;
}

/// Clears the gradients of the given device parameters (dense: all of it; sparse: forgets the
/// stored slices), in their launchers' order.
template <class... P>
void zero_grad(P&... params) {
  ::gradix::detail::clear_grads("gradix::grid::zero_grad", params...);
}

}  // namespace gradix::grid
