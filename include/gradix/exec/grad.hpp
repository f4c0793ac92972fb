#pragma once
/// \file
/// The parts of grad() and zero_grad that do not depend on where the parameters live,
/// written once for the host entry points (api/backward.hpp) and the grid's
/// (backend/grid/backward.hpp):
///   - check_distinct_params: a parameter given twice is an error naming the call;
///   - run_redirected: runs a backward with every use of the given parameters redirected
///     into the returned storages (the uses are redirected where ad::push makes them, on this
///     thread, for the duration of the call: detail::redirect_target, exec/run.hpp), so
///     the parameters' own gradients are untouched;
///   - clear_grads: zero_grad's body: the storages guarded against a concurrent backward
///     (host storages by the storage guard, device storages by the busy lock), then cleared.

#include "gradix/config.hpp"
#include "gradix/core/error.hpp"
#include "gradix/exec/checks.hpp"
#include "gradix/exec/run.hpp"

#include <cstddef>
#include <tuple>
#include <utility>

namespace gradix::detail {

/// Fails (gradix::error naming op) when a parameter is given twice.
template <class... P>
constexpr void check_distinct_params(char const* op, P const&... params) {
  void const* addr[] = {static_cast<void const*>(&params.grad())..., nullptr};
  for (std::size_t a = 0; a < sizeof...(P); ++a)
    for (std::size_t b = a + 1; b < sizeof...(P); ++b)
      if (addr[a] == addr[b])
        fail(op, ": parameter ", a, " and parameter ", b, " are the same parameter; give each parameter once");
}

/// Runs run() with the uses of params[i] redirected into std::get<i>(out) (run time only:
/// with_grad_redirect).
template <class Out, class... P, class F>
void run_redirected(Out& out, std::tuple<P const&...> params, F&& run) {
  void const* from[sizeof...(P)] = {};
  void* to[sizeof...(P)] = {};
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    ((from[I] = static_cast<void const*>(&std::get<I>(params).grad())), ...);
    ((to[I] = static_cast<void*>(&std::get<I>(out))), ...);
  }(std::index_sequence_for<P...>{});
  with_grad_redirect(grad_redirect{from, to, sizeof...(P)}, std::forward<F>(run));
}

/// zero_grad's body: takes every storage (gradix::error naming op, clearing nothing, when
/// another thread is in a backward or zero_grad on one of them), then clears them (dense:
/// the touched slices, or all; sparse: forgets the stored slices).
template <class... P>
constexpr void clear_grads(char const* op, P&... params) {
  storage_guard<sizeof...(P)> guard(op);
  busy_lock<sizeof...(P)> device_lock(op);  // device storages (grid::param)
  ([&] {
    if constexpr (requires { typename P::launcher_type; }) device_lock.take(&params.grad());
    else guard.take(&params.grad());
  }(), ...);
  (params.grad().zero(), ...);
}

}  // namespace gradix::detail
