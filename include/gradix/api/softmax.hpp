#pragma once
/// \file
/// logsumexp, softmax, log_softmax and cross_entropy, written as expressions of gradix's
/// own nodes (in api/, above ad/: ad::let decides by the cost rule of ad/save.hpp whether the
/// operand is shared), in the numerically stable form:
///
///   m = max over the axis (of the detached operand: the function does not depend on it),
///   s = sum(exp(x - m)),  logsumexp = log(s) + m,
///   softmax = exp(x - m) / s,  log_softmax = (x - m) - log(s),
///   cross_entropy row i = log(s_i) + (m_i - x[i, t_i]).
///
/// The max and the sum are reductions read per element, so a call keeps them in buffers
/// (docs/ad.md, "Saved values"): the forward pass reads x three times (max, sum, result),
/// and the backward of logsumexp is exactly softmax times the adjoint, from the same kept
/// row statistics. exp(x - m) <= 1 never overflows: logits of 1e4 are fine, and nothing is
/// computed as x - logsumexp, which would lose |logsumexp| x epsilon.
///
/// x is read through ad::let (docs/ad.md, "Shared sub-expressions"): an operand that holds a
/// matrix product, a reduction or a bag is computed once into a buffer that the three reads
/// share, and its gradient is pushed into it once, from the summed adjoint of the reads. An
/// operand that keeps nothing (a parameter, a view, elementwise nodes over them) is read
/// where it is used, as before: nothing of its size is kept.

#include "gradix/ad/save.hpp"
#include "gradix/config.hpp"
#include "gradix/core/error.hpp"
#include "gradix/expr/elementwise.hpp"
#include "gradix/expr/index.hpp"
#include "gradix/expr/param.hpp"
#include "gradix/expr/reduce.hpp"
#include "gradix/expr/saved.hpp"
#include "gradix/expr/row.hpp"
#include "gradix/api/take.hpp"
#include "gradix/expr/take.hpp"
#include "gradix/expr/view.hpp"

#include <type_traits>

namespace gradix {

namespace detail {
// the names of these functions' lets (expr/let.hpp, let_name)
struct logsumexp_let {};
struct cross_entropy_let {};

template <class A>
constexpr void check_softmax_operand() {
  static_assert(std::is_floating_point_v<value_type_t<A>>,
                "gradix::logsumexp / softmax / log_softmax / cross_entropy: the operand must be "
                "floating point (use cast<float>(e))");
}
/// The row shift: the max over Axis of the detached operand (no gradient, no arg-max kept).
template <int Axis, class A>
constexpr auto softmax_shift(A const& a) {
  check_softmax_operand<A>();
  return max<Axis>(detach(a), keep_dims);
}
/// sum(exp(x - m)) over Axis, kept dims: at least 1, never overflows.
template <int Axis, class A>
constexpr auto softmax_sum(A const& a) {
  return sum<Axis>(exp(a - softmax_shift<Axis>(a)), keep_dims);
}
template <int Axis, class A>
constexpr auto logsumexp_keep(A const& a) {
  return log(softmax_sum<Axis>(a)) + softmax_shift<Axis>(a);
}
}  // namespace detail

/// log(sum(exp(x))) over one axis (negative counts from the end), stable for large |x|; the
/// axis is dropped (keep_dims keeps it with extent 1). Gradient: softmax over the axis.
template <int Axis, operand X>
constexpr auto logsumexp(X&& x) {
  auto a = detail::as_node(static_cast<X&&>(x));
  constexpr std::size_t R = shape_of_t<decltype(a)>::rank;
  static_assert(R > 0, "gradix::logsumexp: the operand has no axis");
  constexpr int Ax = int(normalize_axis_v<Axis, R>);
  return ad::let<detail::logsumexp_let>(a, [](auto const& v) { return select<Ax>(detail::logsumexp_keep<Ax>(v), 0); });
}
template <int Axis, operand X>
constexpr auto logsumexp(X&& x, keep_dims_t) {
  return ad::let<detail::logsumexp_let>(detail::as_node(static_cast<X&&>(x)), [](auto const& v) { return detail::logsumexp_keep<Axis>(v); });
}

namespace detail {
template <int Axis, row_kind K, class X>
constexpr auto make_softmax(X&& x) {
  auto a = as_node(static_cast<X&&>(x));
  using A = decltype(a);
  check_softmax_operand<A>();
  constexpr std::size_t R = shape_of_t<A>::rank;
  static_assert(R > 0, "gradix::softmax / log_softmax: the operand has no axis");
  static_assert(R == 0 || normalize_axis_v<Axis, R> < R, "gradix::softmax / log_softmax: the axis is out of range");
  if constexpr (R == 0 || normalize_axis_v<Axis, R> >= R) return a;  // a static_assert has fired
  else return row_node<A, normalize_axis_v<Axis, R>, K>{a, value_type_t<A>(0)};
}
}  // namespace detail

/// exp(x) / sum(exp(x)) over one axis, computed as exp(x - m) / sum(exp(x - m)) (m the max:
/// exp(x - logsumexp) would lose |logsumexp| x epsilon to the rounding of logsumexp). Every
/// call keeps the result (one pass for the max, one for the exponentials and their sum, one
/// for the quotients), and the backward reads it (expr/row.hpp): s (g - sum(g s)).
template <int Axis, operand X>
constexpr auto softmax(X&& x) {
  return detail::make_softmax<Axis, row_kind::softmax>(static_cast<X&&>(x));
}

/// x - logsumexp(x) over one axis, computed as (x - m) - log(sum(exp(x - m))): the log of
/// softmax without its rounding near 0, and exact where x is the max. Kept as softmax is;
/// backward g - exp(l) sum(g).
template <int Axis, operand X>
constexpr auto log_softmax(X&& x) {
  return detail::make_softmax<Axis, row_kind::log_softmax>(static_cast<X&&>(x));
}

namespace detail {
/// The checks both cross_entropy overloads make, and the (B, 1) per-row loss
/// log(s_i) + (m_i - z[i, t_i]) they share; y1 is unsqueeze<1>(targets).
template <class Z, class Y>
constexpr void check_cross_entropy(Z const& z, Y const& y) {
  static_assert(shape_of_t<Z>::rank == 2, "gradix::cross_entropy: logits must be (batch, classes)");
  static_assert(shape_of_t<Y>::rank == 1, "gradix::cross_entropy: targets must be a vector of class indices");
  if (y.shape().extent(0) != z.shape().extent(0))
    detail::fail("gradix::cross_entropy: ", y.shape().extent(0), " targets for a batch of ",
                 z.shape().extent(0), " logits rows");
}
template <class Z, class Y1>
constexpr auto cross_entropy_rows(Z const& z, Y1 const& y1) {
  return log(softmax_sum<1>(z)) + (softmax_shift<1>(z) - take_along<1>(z, y1));
}
}  // namespace detail

/// The mean over a batch of -log softmax(logits)[i, targets[i]]: logits (B, C) floating
/// point, targets a rank-1 integer operand of B class indices (each checked to be in [0, C)
/// when the expression is built: gradix::error naming the position and the value). The
/// backward is (softmax - one_hot(targets)) / B, from the kept row max and sum and one
/// scatter at the targets; nothing of size B x C is kept.
template <operand L, operand Y>
constexpr auto cross_entropy(L&& logits, Y&& targets) {
  auto z = detail::as_node(static_cast<L&&>(logits));
  auto y = detail::as_node(static_cast<Y&&>(targets));
  detail::check_cross_entropy(z, y);
  if (z.shape().extent(0) == 0) detail::fail("gradix::cross_entropy: an empty batch has no mean");
  auto y1 = unsqueeze<1>(y);
  return mean(ad::let<detail::cross_entropy_let>(z, [&](auto const& v) { return detail::cross_entropy_rows(v, y1); }));
}

/// Cross-entropy with per-class weights w (a vector of C), as PyTorch defines it: the sum
/// over the batch of w[t_i] * -log softmax(logits)[i, t_i], divided by the sum of w[t_i].
template <operand L, operand Y, operand W>
constexpr auto cross_entropy(L&& logits, Y&& targets, W&& weights) {
  auto z = detail::as_node(static_cast<L&&>(logits));
  auto y = detail::as_node(static_cast<Y&&>(targets));
  auto w = detail::as_node(static_cast<W&&>(weights));
  detail::check_cross_entropy(z, y);
  static_assert(shape_of_t<decltype(w)>::rank == 1, "gradix::cross_entropy: weights must be a vector of C");
  if (w.shape().extent(0) != z.shape().extent(1))
    detail::fail("gradix::cross_entropy: ", w.shape().extent(0), " class weights for ",
                 z.shape().extent(1), " classes");
  auto y1 = unsqueeze<1>(y);
  auto wt = detach(take_along<0>(unsqueeze<1>(w), y1));  // (B, 1): w[t_i]
  return sum(wt * ad::let<detail::cross_entropy_let>(z, [&](auto const& v) { return detail::cross_entropy_rows(v, y1); })) / sum(wt);
}

}  // namespace gradix
