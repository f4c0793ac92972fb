#pragma once
/// \file
/// Reverse mode: backward, backward_only, grad, zero_grad. Each call dispatches on where the
/// expression's leaves live: device leaves go to the grid backend (api/device.hpp), host
/// leaves run the save transform (exec/save.hpp) and the plan runner (exec/run.hpp) over
/// host::executor.
///
/// backward runs in two phases. First a serial pre-pass reserves gradient slots (sparse
/// storage) or marks touched slices (dense storage) for every update kernel; this is the
/// only place storage may grow. Then the kernels run, in a fixed order (the order of the
/// parameter uses in the expression, left to right), adding into the storage; they never
/// allocate. Index operands were validated when the expression was built, and the pre-pass
/// is undone if it fails, so a throwing call leaves parameters and gradients as they were
/// (docs/reliability.md).

#include "gradix/ad/plan.hpp"
#include "gradix/exec/checks.hpp"
#include "gradix/exec/grad.hpp"
#include "gradix/api/device.hpp"
#include "gradix/api/eval.hpp"
#include "gradix/api/param.hpp"
#include "gradix/api/saved.hpp"
#include "gradix/backend/host/executor.hpp"
#include "gradix/exec/run.hpp"
#include "gradix/config.hpp"
#include "gradix/core/tuple.hpp"

#include <algorithm>
#include <memory>
#include <new>
#include <tuple>
#include <type_traits>

namespace gradix {

namespace detail {
/// run_plan_on over the host's executor.
template <class Plan>
constexpr void run_plan(Plan const& p, char const* op) {
  host::executor ex;
  run_plan_on<host::executor>(ex, p, op);
}
}  // namespace detail

/// Evaluates the rank-0 expression e, adds d e / d p into the gradient of every parameter p
/// that e reads, and returns the value.
template <operand E>
constexpr auto backward(E const& e_in) {
  auto e = detail::prepared_node(e_in, "gradix::backward");
  using N = decltype(e);
  if constexpr (detail::reads_cuda_memory_v<N>) {  // the device backend (api/device.hpp)
    if constexpr (detail::check_device_entry<N>()) return detail::device_entry<N>::backward(e);
    else return value_type_t<N>{};
  } else {
  return detail::run_with_saved<true>(e, "gradix::backward", [&](auto const& e2) {
    host::executor host_ex;
    using E2 = std::remove_cvref_t<decltype(e2)>;
    constexpr int C = detail::loss_carrier<host::executor, E2, decltype(ad::plan(e2))>::value;
    if constexpr (C >= 0) {
      if (!std::is_constant_evaluated() && !check_finite())
        return detail::run_plan_carrying<host::executor, C>(host_ex, e2, ad::plan(e2), "gradix::backward");
    }
    if constexpr (detail::split_sum_v<E2>) {
      if (!std::is_constant_evaluated() && !check_finite() && detail::split_sum_pays(e2)) {
        auto v = detail::split_sum_value<host::executor>(host_ex, e2);
        detail::run_plan(ad::plan(e2), "gradix::backward");
        return v;
      }
    }
    auto v = host::value(e2);
    if (!std::is_constant_evaluated() && check_finite())
      detail::check_finite_value("gradix::backward", v, e);
    detail::run_plan(ad::plan(e2), "gradix::backward");
    return v;
  });
  }
}

/// Like backward(e), without computing the value.
template <operand E>
constexpr void backward_only(E const& e_in) {
  auto e = detail::prepared_node(e_in, "gradix::backward_only");
  using N = decltype(e);
  if constexpr (detail::reads_cuda_memory_v<N>) {
    if constexpr (detail::check_device_entry<N>()) detail::device_entry<N>::backward_only(e);
  } else {
    detail::run_with_saved<true>(e, "gradix::backward_only", [](auto const& e2) {
      detail::run_plan(ad::plan(e2), "gradix::backward_only");
    });
  }
}

/// Adds seed-weighted gradients of a non-scalar e: d <seed, e> / d p. The seed is a tensor
/// or view of e's shape (gradix::error otherwise).
template <operand E, operand S>
constexpr void backward(E const& e_in, S const& seed_in) {
  auto e = detail::prepared_node(e_in, "gradix::backward");
  auto seed = detail::prepared_node(seed_in, "gradix::backward");
  static_assert(shape_of_t<decltype(seed)>::rank == shape_of_t<decltype(e)>::rank,
                "gradix::backward: the seed must have the expression's rank");
  if (!(seed.shape() == e.shape()))
    detail::fail("gradix::backward: seed shape ", to_string(seed.shape()),
                 " differs from expression shape ", to_string(e.shape()));
  using ES = shape_of_t<decltype(e)>;
  if constexpr (detail::reads_cuda_memory_v<decltype(e)>) {
    if constexpr (detail::check_device_entry<decltype(e)>()) detail::device_entry<decltype(e)>::backward_seeded(e, seed);
  } else {
    detail::run_with_saved<true>(e, "gradix::backward", [&](auto const& e2) {
      if constexpr (std::is_same_v<shape_of_t<decltype(seed)>, ES>) {
        detail::run_plan(ad::plan(e2, seed), "gradix::backward");
      } else {  // same extents (checked above), another shape type: view it with e's
        detail::run_plan(ad::plan(e2, broadcast_node<decltype(seed), ES>{seed, e.shape()}),
                         "gradix::backward");
      }
    });
  }
}

/// Gradients of the rank-0 expression e with respect to the given parameters, returned as
/// new gradient storage objects (of each parameter's kind); the parameters' own gradients
/// are untouched. A parameter that e does not read gets an empty (zero) gradient. One
/// parameter: its gradient; several: a std::tuple of them.
template <operand E, parameter_object... P>
constexpr auto grad(E const& e_in, P const&... params) {
  auto e = detail::prepared_node(e_in, "gradix::grad");
  if constexpr (detail::reads_cuda_memory_v<decltype(e)>) {
    if constexpr (detail::check_device_entry<decltype(e)>()) return detail::device_entry<decltype(e)>::grad(e, params...);
    else return 0;
  } else {
  detail::check_distinct_params("gradix::grad", params...);
  auto out = [&] {
    try {
      return std::tuple<typename P::storage_type...>(typename P::storage_type(params.shape())...);
    } catch (std::bad_alloc const&) {
      detail::fail("gradix::grad: out of memory allocating the returned gradients");
    }
  }();
  // every parameter node of e writes into the returned storage of its parameter, or
  // nowhere (uses of other parameters are skipped): the plans built where they run (product
  // operands, lets) see the same targets
  auto const redirect = [&](auto* g) {
    using G = std::remove_cvref_t<decltype(*g)>;
    G* redirected = nullptr;
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      (([&] {
         using GI = std::tuple_element_t<I, std::tuple<typename P::storage_type...>>;
         if constexpr (std::is_same_v<G, GI>) {
           auto const& param = std::get<I>(std::forward_as_tuple(params...));
           if (g == &param.grad()) redirected = &std::get<I>(out);
         }
       }()),
       ...);
    }(std::index_sequence_for<P...>{});
    return redirected;
  };
  if (std::is_constant_evaluated()) {
    if constexpr (detail::node_count_v<decltype(e)> <= detail::constexpr_grad_nodes) {
      auto const er = detail::redirect_params(e, redirect);
      detail::run_with_saved<true>(er, "gradix::grad", [&](auto const& e2) {
        detail::run_plan(ad::plan(e2), "gradix::grad");
      });
    } else {
      detail::fail("gradix::grad: in constant evaluation, an expression of at most ",
                   detail::constexpr_grad_nodes, " nodes (this one has ", detail::node_count_v<decltype(e)>, ")");
    }
  } else {
    // at run time the uses are redirected where they are made (exec/grad.hpp)
    detail::run_redirected(out, std::forward_as_tuple(params...), [&] {
      detail::run_with_saved<true>(e, "gradix::grad", [&](auto const& e2) {
        detail::run_plan(ad::plan(e2), "gradix::grad");
      });
    });
  }
  if constexpr (sizeof...(P) == 1) return std::move(std::get<0>(out));
  else return out;
  }
}

/// Clears the gradients of the given parameters (only what backward wrote). Throws
/// gradix::error, clearing nothing, when another thread is in a backward or zero_grad on
/// one of them.
template <parameter_object... P>
constexpr void zero_grad(P&... params) {
  detail::clear_grads("gradix::zero_grad", params...);
}

}  // namespace gradix
