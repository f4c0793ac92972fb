#pragma once
/// \file
/// take_along and one_hot: index operations whose positions are tensors of the operand's
/// rank (the nodes: expr/take.hpp). In api/ because take_along checks host positions when
/// it is built, by evaluating them (eval/).
///
/// The positions are an integer operand: a tensor, a view, or an expression of them
/// (`unsqueeze<1>(labels)`). take_along checks every position when the expression is built
/// (gradix::error naming the operation, the position's coordinate, its value and the extent;
/// positions in device memory are checked by the device backend before it runs the
/// expression, grid::validate_expression) and, like gather, reads the index data in place:
/// changing it afterwards is undefined.

#include "gradix/config.hpp"
#include "gradix/core/coords.hpp"
#include "gradix/core/error.hpp"
#include "gradix/core/shape.hpp"
#include "gradix/eval/evaluator.hpp"
#include "gradix/eval/take.hpp"
#include "gradix/expr/node.hpp"
#include "gradix/expr/take.hpp"

#include <string>
#include <type_traits>

namespace gradix {

/// take_along<Axis>(x, pos): out[c] = x[c with pos[c] on axis Axis] (negative Axis counts
/// from the end). pos is an integer operand of x's rank whose extents equal x's on every
/// other axis; the result has pos's shape. Gradient: a scatter-add into x at the positions
/// read (repeated positions add), touching nothing else. For class labels y of a batch,
/// `take_along<1>(logits, unsqueeze<1>(y))` is the (B, 1) column of the labels' logits.
template <int Axis, operand X, operand P>
constexpr auto take_along(X&& x, P&& pos) {
  auto a = detail::as_node(static_cast<X&&>(x));
  auto p = detail::as_node(static_cast<P&&>(pos));
  using A = decltype(a);
  using Pn = decltype(p);
  constexpr std::size_t R = shape_of_t<A>::rank;
  using I = value_type_t<Pn>;
  static_assert(std::is_integral_v<I>, "gradix::take_along: the positions must be integers");
  static_assert(shape_of_t<Pn>::rank == R,
                "gradix::take_along: the positions must have the operand's rank (unsqueeze a "
                "vector of labels: take_along<1>(x, unsqueeze<1>(labels)))");
  if constexpr (!detail::reduction_axis_out_of_range<Axis, R>::value || !std::is_integral_v<I> ||
                shape_of_t<Pn>::rank != R) {
    return a;  // a static_assert has fired: stop here
  } else {
    constexpr std::size_t Ax = normalize_axis_v<Axis, R>;
    auto const sa = a.shape();
    auto const sp = p.shape();
    for (std::size_t j = 0; j < R; ++j)
      if (j != Ax && sa.extent(j) != sp.extent(j))
        detail::fail("gradix::take_along: the positions' extent ", sp.extent(j), " differs from the operand's ",
                     sa.extent(j), " at axis ", j, " (operand shape ", to_string(sa), ", positions shape ",
                     to_string(sp), "; only axis ", Ax, " may differ)");
    // every position, checked now (positions in device memory: by the device backend before
    // it runs the expression, grid::validate_expression, with the same message)
    index_t const n = sa.extent(Ax);
    if (sp.size() > 0 && !std::is_same_v<space_of_t<Pn>, cuda_space>) {
      ev::evaluator<Pn> const pe(p);
      auto const ext = sp.extents();
      coord<R> c{};
      for (;;) {
        auto const v = pe(c);
        bool bad;
        if constexpr (std::is_signed_v<I>) bad = v < 0 || index_t(v) >= n;
        else bad = v >= std::make_unsigned_t<index_t>(n);
        if (bad)
          detail::fail("gradix::take_along: position ", v, " at ",
                       detail::extents_to_string(c.begin(), R), " is out of range for axis ", Ax, " of extent ", n);
        if (!coords::next(c, ext)) break;
      }
    }
    return take_along_node<A, Pn, Ax>{a, p, sp};
  }
}

/// one_hot<T>(pos, n): a T expression of pos's shape with one more axis of extent n (an
/// integer, or fix<N> for a static extent): 1 where the last coordinate is pos's value, 0
/// elsewhere. A position outside [0, n) gives a row of zeros. No gradient.
template <element T = float, operand P, class N>
constexpr auto one_hot(P&& pos, N n) {
  static_assert(std::is_integral_v<N> || detail::dim_static<N>::value != dyn,
                "gradix::one_hot: the class count must be an integer or gradix::fix<N>");
  auto p = detail::as_node(static_cast<P&&>(pos));
  using Pn = decltype(p);
  static_assert(std::is_integral_v<value_type_t<Pn>>, "gradix::one_hot: the positions must be integers");
  using SP = shape_of_t<Pn>;
  constexpr std::size_t R = SP::rank;
  using S = typename detail::appended_shape<SP, detail::dim_static<N>::value>::type;
  index_t const classes = [&] {
    if constexpr (std::is_integral_v<N>) return index_t(n);
    else return detail::dim_static<N>::value;
  }();
  if (classes < 0) detail::fail("gradix::one_hot: the class count ", classes, " is negative");
  S s{};
  for (std::size_t j = 0; j < R; ++j) s.set_extent(j, p.shape().extent(j));
  s.set_extent(R, classes);
  detail::checked_size(s, "gradix::one_hot");
  return one_hot_node<T, Pn, S>{p, s};
}

}  // namespace gradix
