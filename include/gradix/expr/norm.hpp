#pragma once
/// \file
/// Normalization layers over one axis (docs/ops.md, "Normalization"): row nodes
/// (expr/row.hpp), kept by every call, each row's statistics computed once, the backward read
/// from the kept value and the per-row factor:
///
///   layer_norm<Axis>(x, eps)                 (x - mean(x)) / sqrt(mean((x - mean)^2) + eps)
///   layer_norm<Axis>(x, gamma, beta, eps)    the same, times gamma, plus beta
///   rms_norm<Axis>(x, eps)                   x / sqrt(mean(x^2) + eps)
///   rms_norm<Axis>(x, gamma, eps)            the same, times gamma
///
/// The statistics are over axis Axis (default -1, the last; negative counts from the end);
/// gamma and beta are vectors with that axis's extent, broadcast along the other axes. The
/// variance is the biased one (divided by the extent), as in PyTorch's LayerNorm; eps
/// defaults to 1e-5 (LayerNorm's) for layer_norm and 1e-6 for rms_norm. The affine
/// parameters are an elementwise product and sum around the row node.

#include "gradix/config.hpp"
#include "gradix/core/error.hpp"
#include "gradix/core/shape.hpp"
#include "gradix/expr/elementwise.hpp"
#include "gradix/expr/node.hpp"
#include "gradix/expr/reduce.hpp"
#include "gradix/expr/row.hpp"
#include "gradix/expr/view.hpp"

#include <cstddef>
#include <type_traits>

namespace gradix {

namespace detail {
/// The normalized axis of a rank-R operand, with a readable error for a bad one.
template <int Axis, std::size_t R>
constexpr std::size_t norm_axis() {
  static_assert(R > 0, "gradix::layer_norm / rms_norm: the operand has no axis to normalize over");
  static_assert(normalize_axis_v<Axis, R> < R,
                "gradix::layer_norm / rms_norm: the axis is out of range for the operand's rank");
  return normalize_axis_v<Axis, R>;
}

/// v with N trailing axes of extent 1.
template <std::size_t N, class V>
constexpr auto trailing_unit_axes(V const& v) {
  if constexpr (N == 0) return v;
  else return trailing_unit_axes<N - 1>(unsqueeze<-1>(v));
}

/// An affine vector (gamma or beta) as an operand that broadcasts along every axis of the
/// rank-R operand x but Ax (R - 1 - Ax trailing axes of extent 1). Its extent is checked
/// against x's: statically where both are static, else a gradix::error naming op.
template <std::size_t Ax, class X, class G>
constexpr auto affine_operand(X const& x, G&& g, char const* op, char const* name) {
  auto v = as_node(static_cast<G&&>(g));
  using V = decltype(v);
  constexpr std::size_t R = shape_of_t<X>::rank;
  static_assert(shape_of_t<V>::rank == 1, "gradix::layer_norm / rms_norm: gamma and beta must be vectors (rank 1)");
  constexpr index_t sx = shape_of_t<X>::static_extents[Ax];
  constexpr index_t sv = shape_of_t<V>::static_extents[0];
  static_assert(sx == dyn || sv == dyn || sx == sv,
                "gradix::layer_norm / rms_norm: gamma and beta must have the normalized axis's extent");
  if (v.shape().extent(0) != x.shape().extent(Ax))
    fail("gradix::", op, ": ", name, " has extent ", v.shape().extent(0), ", but axis ", Ax,
         " of the operand (the normalized axis) has extent ", x.shape().extent(Ax), " (shape ",
         to_string(x.shape()), ")");
  return trailing_unit_axes<R - 1 - Ax>(v);
}

template <std::size_t Ax, class X, class T>
constexpr auto layer_norm_of(X const& x, T eps) {
  return row_node<X, Ax, row_kind::layer_norm>{x, value_type_t<X>(eps)};
}
template <std::size_t Ax, class X, class T>
constexpr auto rms_norm_of(X const& x, T eps) {
  return row_node<X, Ax, row_kind::rms_norm>{x, value_type_t<X>(eps)};
}
}  // namespace detail

/// (x - mean) / sqrt(var + eps) over axis Axis (biased variance).
template <int Axis = -1, operand X>
constexpr auto layer_norm(X&& x, value_type_t<detail::node_t<X>> eps = value_type_t<detail::node_t<X>>(1e-5)) {
  auto a = detail::as_node(static_cast<X&&>(x));
  constexpr std::size_t Ax = detail::norm_axis<Axis, shape_of_t<decltype(a)>::rank>();
  static_assert(std::is_floating_point_v<value_type_t<decltype(a)>>, "gradix::layer_norm: the operand must be floating-point");
  return detail::layer_norm_of<Ax>(a, eps);
}
/// layer_norm(x) * gamma + beta, gamma and beta vectors of axis Axis's extent.
template <int Axis = -1, operand X, operand G, operand B>
constexpr auto layer_norm(X&& x, G&& gamma, B&& beta,
                          value_type_t<detail::node_t<X>> eps = value_type_t<detail::node_t<X>>(1e-5)) {
  auto a = detail::as_node(static_cast<X&&>(x));
  constexpr std::size_t Ax = detail::norm_axis<Axis, shape_of_t<decltype(a)>::rank>();
  static_assert(std::is_floating_point_v<value_type_t<decltype(a)>>, "gradix::layer_norm: the operand must be floating-point");
  auto g = detail::affine_operand<Ax>(a, static_cast<G&&>(gamma), "layer_norm", "gamma");
  auto b = detail::affine_operand<Ax>(a, static_cast<B&&>(beta), "layer_norm", "beta");
  return detail::layer_norm_of<Ax>(a, eps) * g + b;
}
/// x / sqrt(mean(x^2) + eps) over axis Axis.
template <int Axis = -1, operand X>
constexpr auto rms_norm(X&& x, value_type_t<detail::node_t<X>> eps = value_type_t<detail::node_t<X>>(1e-6)) {
  auto a = detail::as_node(static_cast<X&&>(x));
  constexpr std::size_t Ax = detail::norm_axis<Axis, shape_of_t<decltype(a)>::rank>();
  static_assert(std::is_floating_point_v<value_type_t<decltype(a)>>, "gradix::rms_norm: the operand must be floating-point");
  return detail::rms_norm_of<Ax>(a, eps);
}
/// rms_norm(x) * gamma, gamma a vector of axis Axis's extent.
template <int Axis = -1, operand X, operand G>
constexpr auto rms_norm(X&& x, G&& gamma, value_type_t<detail::node_t<X>> eps = value_type_t<detail::node_t<X>>(1e-6)) {
  auto a = detail::as_node(static_cast<X&&>(x));
  constexpr std::size_t Ax = detail::norm_axis<Axis, shape_of_t<decltype(a)>::rank>();
  static_assert(std::is_floating_point_v<value_type_t<decltype(a)>>, "gradix::rms_norm: the operand must be floating-point");
  auto g = detail::affine_operand<Ax>(a, static_cast<G&&>(gamma), "rms_norm", "gamma");
  return detail::rms_norm_of<Ax>(a, eps) * g;
}

}  // namespace gradix
