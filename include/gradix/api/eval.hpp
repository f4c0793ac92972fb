#pragma once
/// \file
/// Running expressions on the host: eval (to a new tensor), assign (into an existing tensor
/// or view), value (a rank-0 result).

#include "gradix/exec/checks.hpp"
#include "gradix/api/device.hpp"
#include "gradix/exec/finite.hpp"
#include "gradix/api/saved.hpp"
#include "gradix/backend/host/assign.hpp"
#include "gradix/config.hpp"
#include "gradix/core/error.hpp"
#include "gradix/core/tensor.hpp"
#include "gradix/expr/matmul.hpp"
#include "gradix/expr/node.hpp"

#include <type_traits>

namespace gradix {

namespace detail {
template <class E>
struct expression_reads_device_memory {
  static constexpr bool value = !std::is_same_v<space_of_t<E>, cuda_space>;
  static_assert(value,
                "gradix: this expression reads CUDA device memory but the destination is in host "
                "memory; evaluate it on the device (gx::eval, with <gradix/device.hpp>) and "
                "download the result");
};
template <class DS, class ES>
struct assigned_shapes_differ {
  static constexpr bool value = [] {
    if constexpr (DS::rank != ES::rank) {
      return false;
    } else {
      for (std::size_t i = 0; i < DS::rank; ++i)
        if (DS::static_extents[i] != dyn && ES::static_extents[i] != dyn &&
            DS::static_extents[i] != ES::static_extents[i])
          return false;
      return true;
    }
  }();
  static_assert(value,
                "gradix::assign: the destination and the expression have different static "
                "shapes; see assigned_shapes_differ<destination shape, expression shape>");
};

/// Layout of eval's result: column-major when the expression's contiguous axis is the first
/// of several, else row-major (strided leaves and scalars give row-major).
template <class L, std::size_t R>
using result_layout_t =
    std::conditional_t<std::is_same_v<L, col_major> ||
                           (R > 1 && !std::is_same_v<L, row_major> && !std::is_same_v<L, strided> &&
                            L::template unit_axis<R> == 0),
                       col_major, row_major>;
}  // namespace detail

/// Evaluates e elementwise into dst, which must have e's shape (run-time check: throws
/// gradix::error naming both shapes; nothing is written then). One fused pass, no
/// temporaries, no allocation, when dst is not read by e, or read only at the coordinate
/// being written (`x = x * 2 + 1` stays in place). When e reads dst's memory any other way
/// (`x = transpose(x)`, a gather or reversed slice of x, an overlapping view), e is first
/// evaluated into a temporary and then copied: the result is always that of evaluating e
/// before writing anything.
template <class DT, class DS, class DL, class DSp, operand E>
constexpr void assign(tensor_view<DT, DS, DL, DSp> const& dst, E const& e_in) {
  static_assert(!std::is_const_v<DT>, "gradix::assign: the destination view is read-only");
  auto e = detail::prepared_node(e_in, "gradix::assign");
  using N = decltype(e);
  if constexpr (std::is_same_v<DSp, cuda_space>) {  // the device backend (api/device.hpp)
    static_assert(detail::reads_cuda_memory_v<N> || std::is_void_v<space_of_t<N>>,
                  "gradix::assign: the destination is in CUDA memory but the expression reads host "
                  "memory; copy the data to the device first (grid::device_tensor::from_host)");
    if constexpr (detail::check_device_entry<N>()) detail::device_entry<N>::assign(dst, e);
  } else if constexpr (detail::expression_reads_device_memory<N>::value &&
                detail::assigned_shapes_differ<DS, shape_of_t<N>>::value) {
    if (!(dst.shape() == e.shape()))
      detail::fail("gradix::assign: destination shape ", to_string(dst.shape()),
                   " differs from expression shape ", to_string(e.shape()));
    if (detail::aliases(dst, e)) {
      // through a temporary of dst's own type (the same loop nest as the direct path),
      // then copied
      using TL = std::conditional_t<std::is_same_v<DL, strided>, row_major, DL>;
      tensor<DT, DS, TL> tmp(dst.shape(), detail::uninit);
      detail::run_with_saved<false>(e, "gradix::assign", [&](auto const& e2) { host::assign(tmp.view(), e2); });
      if constexpr (std::is_same_v<DL, strided>) {
        host::assign(dst, tmp.view());
      } else {
        for (index_t k = 0, n = tmp.size(); k < n; ++k) dst.data()[k] = tmp.data()[k];
      }
    } else if constexpr (is_matmul_node<N>::value && std::is_same_v<DL, row_major>) {
      detail::product_into(e, dst.data(), "gradix::assign");  // the gemm writes dst (contiguous)
    } else {
      // (kept values are computed before the first element of dst is written)
      detail::run_with_saved<false>(e, "gradix::assign", [&](auto const& e2) { host::assign(dst, e2); });
    }
    if (!std::is_constant_evaluated() && check_finite())
      detail::check_finite_forward("gradix::assign", dst, e);
  }
}
/// Evaluates e into an existing tensor of the same shape (see assign(view, e)).
template <class T, class S, class L, operand E>
constexpr void assign(tensor<T, S, L>& dst, E const& e) {
  assign(dst.view(), e);
}

/// Evaluates e into a new tensor of its shape, element type and layout (row-major unless
/// e's leaves are column-major: see docs/ops.md). One allocation for a dynamic or large
/// result (its buffer), none for a small static one.
template <operand E>
constexpr auto eval(E const& e_in) {
  auto e = detail::prepared_node(e_in, "gradix::eval");
  using N = decltype(e);
  using T = value_type_t<N>;
  using L = detail::result_layout_t<layout_of_t<N>, shape_of_t<N>::rank>;
  if constexpr (detail::reads_cuda_memory_v<N>) {  // the device backend (api/device.hpp)
    if constexpr (detail::check_device_entry<N>()) return detail::device_entry<N>::eval(e);
    else return 0;
  } else {
  tensor<T, shape_of_t<N>, L> out(e.shape(), detail::uninit);
  if constexpr (is_matmul_node<N>::value && std::is_same_v<L, row_major>)
    detail::product_into(e, out.data(), "gradix::eval");  // the gemm writes the result
  else
    detail::run_with_saved<false>(e, "gradix::eval", [&](auto const& e2) { host::assign(out.view(), e2); });
  if (!std::is_constant_evaluated() && check_finite())
    detail::check_finite_forward("gradix::eval", out.view(), e);
  return out;
  }
}

/// The value of a rank-0 expression (a full reduction, typically).
template <operand E>
constexpr auto value(E const& e_in) {
  auto e = detail::prepared_node(e_in, "gradix::value");
  using N = decltype(e);
  static_assert(shape_of_t<N>::rank == 0,
                "gradix::value: the expression is not rank 0; reduce it (sum, mean, max) or "
                "use eval");
  if constexpr (shape_of_t<N>::rank == 0 && detail::reads_cuda_memory_v<N>) {
    if constexpr (detail::check_device_entry<N>()) return detail::device_entry<N>::value(e);
    else return value_type_t<N>{};
  } else if constexpr (shape_of_t<N>::rank == 0) {
    auto v = detail::run_with_saved<false>(e, "gradix::value", [](auto const& e2) { return host::value(e2); });
    if (!std::is_constant_evaluated() && check_finite())
      detail::check_finite_value("gradix::value", v, e);
    return v;
  } else {
    return value_type_t<N>{};  // the static_assert above has fired
  }
}

}  // namespace gradix
