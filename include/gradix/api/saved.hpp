#pragma once
/// \file
/// The save transform for host calls: exec/save.hpp over host::executor. A call (eval,
/// assign, value, backward, grad) on a host expression computes every value the cost rule
/// keeps (ad/save.hpp) once into a buffer of the calling thread's workspace, and runs the
/// expression that reads those buffers (docs/ad.md, "Saved values").

#include "gradix/backend/host/executor.hpp"
#include "gradix/config.hpp"
#include "gradix/exec/save.hpp"

#include <cstddef>
#include <utility>

namespace gradix {

namespace detail {

/// The buffers of a host call.
using saved_space_host = saved_space<host::executor>;

/// run_with_saved_on over the host's executor (exec/save.hpp).
template <bool Backward, class E, class F>
constexpr decltype(auto) run_with_saved(E const& e, char const* op, F&& f) {
  host::executor ex;
  return run_with_saved_on<host::executor, Backward>(ex, e, op, std::forward<F>(f));
}
/// product_into_on over the host's executor: a product at the root of a forward call,
/// straight into dst (row-major, contiguous, e's shape, not read by e).
template <class N>
constexpr void product_into(N const& n, value_type_t<N>* dst, char const* op) {
  host::executor ex;
  product_into_on<host::executor>(ex, n, dst, op);
}
/// The calling thread's workspace for host calls.
inline exec::call_workspace& thread_workspace() { return host::executor::workspace(); }

}  // namespace detail

/// Bytes of workspace a backward or grad call on e uses for the values it keeps
/// (ad::buffer_count_v; docs/ad.md, "Saved values"): the kept values, the arg-max
/// coordinates of kept max reductions, each kind rounded up to 64 bytes. 0 when nothing is
/// kept. (eval and value need no arg-max: at most this.)
template <operand E>
std::size_t workspace_bytes(E const& e) {
  return detail::saved_sizes_of<host::executor>(detail::as_node(e), true).bytes();
}

/// The expression a call on E runs: E with every value it keeps read from a buffer.
template <operand E>
using saved_expr_t = decltype(detail::with_saved<true>(std::declval<detail::node_t<E> const&>(),
                                                        std::declval<detail::saved_space_host&>()));
/// The backward plan a call on the rank-0 expression E runs (its update kernels; the buffers
/// it reads are ad::buffer_count_v<E>).
template <operand E>
using backward_plan_t = decltype(ad::plan(std::declval<saved_expr_t<E> const&>()));

/// Bytes the calling thread's workspace holds now (it only grows; a warm call reuses it).
inline std::size_t workspace_capacity() { return detail::thread_workspace().cap_; }

}  // namespace gradix
