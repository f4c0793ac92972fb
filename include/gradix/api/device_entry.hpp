#pragma once
/// \file
/// The device half of gx::backward, backward_only, grad, eval, value and assign (api layer:
/// it includes the grid backend): when an expression's leaves are in cuda_space, those
/// calls land here (api/device.hpp declares the entry, this header defines it) and run the grid:: functions with the launcher of the
/// expression's first device parameter, so in its stream. Without a device parameter, nvcc's
/// translation units use gradix::cuda::default_launcher() (cudaStreamPerThread); other
/// translation units (the emulator tests) get a compile error that names grid::eval,
/// grid::value and grid::assign, which take a launcher.
///
/// Also grid::eval(l, e) (a new device tensor) and grid::value(l, e) (a rank-0 expression's
/// value, read back to the host).

#include "gradix/api/device.hpp"
#include "gradix/api/eval.hpp"
#include "gradix/backend/grid/assign.hpp"
#include "gradix/backend/grid/backward.hpp"
#include "gradix/backend/grid/memory.hpp"
#include "gradix/backend/grid/reduce.hpp"
#include "gradix/config.hpp"
#include "gradix/core/view.hpp"
#include "gradix/expr/node.hpp"
#include "gradix/expr/scan.hpp"
#include "gradix/expr/visit.hpp"

#if defined(__CUDACC__)
#include "gradix/backend/cuda/launch.hpp"
#endif

#include <type_traits>
#include <utility>

namespace gradix::detail {
/// Whether device expression N holds a scan: it has no evaluator (its steps run one after
/// another), so a forward call runs it as backward does, through the save transform over
/// grid::executor: the steps' kept values and carries in device buffers of the call.
template <class N>
inline constexpr bool runs_steps_v = any_node_v<N, is_scan_node>;
/// f(e2) with e2 the device expression e with its scans (and the values they need) computed
/// into the call's buffers on launcher l; index vectors in device memory checked first.
template <class L, class E, class F>
decltype(auto) run_steps_on(L& l, E const& e, grid::launch_options o, char const* op, F&& f) {
  grid::validate_expression(l, e, o);
  grid::executor<L> ex(l, grid::backward_options{grid::scatter_mode::atomic, o});
  return run_with_saved_on<grid::executor<L>, false>(ex, e, op, f);
}
}  // namespace gradix::detail

namespace gradix::grid {

/// Evaluates the device expression e into a new device tensor of its shape, element type and
/// layout (as gx::eval: column-major when e's contiguous axis is the first of several), in
/// l's order.
template <class L, operand E>
auto eval(L& l, E const& e_in, launch_options o = {}) {
  auto e = ::gradix::detail::prepared_node(e_in, "gradix::grid::eval");
  using N = decltype(e);
  using T = value_type_t<N>;
  using S = shape_of_t<N>;
  using Lay = ::gradix::detail::result_layout_t<layout_of_t<N>, S::rank>;
  device_tensor<T, S, L, Lay> out(l, e.shape());
  if constexpr (::gradix::detail::runs_steps_v<N>) {
    ::gradix::detail::run_steps_on(l, e, o, "gradix::grid::eval", [&](auto const& e2) { assign(l, out.view(), e2, o); });
  } else {
    assign(l, out.view(), e, o);
  }
  return out;
}

/// The value of the rank-0 device expression e (waits for the device).
template <class L, operand E>
auto value(L& l, E const& e_in, launch_options o = {}) {
  auto e = ::gradix::detail::prepared_node(e_in, "gradix::grid::value");
  using N = decltype(e);
  static_assert(shape_of_t<N>::rank == 0,
                "gradix::grid::value: the expression is not rank 0; reduce it (sum, mean, max) or use eval");
  if constexpr (::gradix::detail::runs_steps_v<N>)
    return ::gradix::detail::run_steps_on(l, e, o, "gradix::grid::value",
                                          [&](auto const& e2) { return detail::read_scalar(l, e2, o); });
  else
    return detail::read_scalar(l, e, o);
}

}  // namespace gradix::grid

namespace gradix::detail {

/// The launcher a gx:: call on the device expression N runs with.
template <class N>
decltype(auto) device_call_launcher(N const& e) {
  using L = device_launcher_t<N>;
  if constexpr (!std::is_void_v<L>) {
    return device_launcher_of<L>(e);
  } else {
#if defined(__CUDACC__)
    (void)e;
    return ::gradix::cuda::default_launcher();
#endif
  }
}

template <class N>
struct device_entry {
  using T = value_type_t<N>;
  static T backward(N const& e) {
    if constexpr (device_launcher_available<N>()) return grid::backward(device_call_launcher(e), e);
    else return T{};
  }
  static void backward_only(N const& e) {
    if constexpr (device_launcher_available<N>()) grid::backward_only(device_call_launcher(e), e);
  }
  template <class S>
  static void backward_seeded(N const& e, S const& seed) {
    if constexpr (device_launcher_available<N>()) grid::backward(device_call_launcher(e), e, seed);
  }
  template <class... P>
  static auto grad(N const& e, P const&... params) {
    // (grad takes device parameters, so N has one)
    return grid::grad(device_call_launcher(e), e, params...);
  }
  static auto eval(N const& e) {
    if constexpr (device_launcher_available<N>()) return grid::eval(device_call_launcher(e), e);
    else return 0;
  }
  static T value(N const& e) {
    if constexpr (device_launcher_available<N>()) return grid::value(device_call_launcher(e), e);
    else return T{};
  }
  template <class DT, class DS, class DL>
  static void assign(tensor_view<DT, DS, DL, cuda_space> const& dst, N const& e) {
    if constexpr (device_launcher_available<N>()) {
      auto&& l = device_call_launcher(e);
      if constexpr (runs_steps_v<N>)
        run_steps_on(l, e, {}, "gradix::assign", [&](auto const& e2) { grid::assign(l, dst, e2); });
      else
        grid::assign(l, dst, e);
    }
  }
};

}  // namespace gradix::detail

namespace gradix {

/// gx::assign into a device tensor: runs in the tensor's launcher (stream).
template <class T, class S, class L, class Lay, operand E>
void assign(grid::device_tensor<T, S, L, Lay>& dst, E const& e) {
  grid::assign(dst.launcher(), dst.view(), e);
}

}  // namespace gradix
