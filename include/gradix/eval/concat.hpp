#pragma once
/// \file
/// Evaluator of concat (expr/concat.hpp): one operand or the other by the coordinate along
/// the joined axis. Along another axis every element of a row comes from the same operand:
/// that operand's own inner evaluator; along the joined axis, a branch per element.

#include "gradix/config.hpp"
#include "gradix/core/simd.hpp"
#include "gradix/eval/evaluator.hpp"
#include "gradix/eval/inner.hpp"
#include "gradix/expr/concat.hpp"

#include <type_traits>

namespace gradix::ev {

template <class L, class R, std::size_t Axis>
struct evaluator<concat_node<L, R, Axis>> {
  using node_type = concat_node<L, R, Axis>;
  using value_type = typename node_type::value_type;
  static constexpr std::size_t rank = node_type::shape_type::rank;
  evaluator<L> lhs_;
  evaluator<R> rhs_;
  index_t split_;
  GRADIX_HOST_DEVICE constexpr explicit evaluator(node_type const& n) : lhs_(n.lhs_), rhs_(n.rhs_), split_(n.split()) {}
  GRADIX_HOST_DEVICE constexpr value_type operator()(coord<rank> const& c) const {
    if (c[Axis] < split_) return value_type(lhs_(c));
    coord<rank> d = c;
    d[Axis] -= split_;
    return value_type(rhs_(d));
  }
  template <int A>
  GRADIX_HOST_DEVICE constexpr auto outer(coord<rank> const& c) const {
    if constexpr (A == invariant_axis) {
      return const_inner<value_type>{(*this)(c)};
    } else if constexpr (std::size_t(A) == Axis) {
      // the row crosses the split at most once: each side's own inner evaluator (the left
      // one made at c when the row starts before the split, the right one at the split's
      // first position the row reaches)
      using IL = decltype(lhs_.template outer<A>(c));
      using IR = decltype(rhs_.template outer<A>(c));
      index_t const left = split_ - c[Axis];
      coord<rank> d = c;
      d[Axis] = left > 0 ? 0 : -left;
      index_t const shift = left > 0 ? left : 0;
      return split_inner<IL, IR>{left > 0 ? lhs_.template outer<A>(c) : IL{}, rhs_.template outer<A>(d), left, shift};
    } else {
      // the row lies in one operand: only its inner evaluator is made (the other one is
      // value-initialized, never read)
      using IL = decltype(lhs_.template outer<A>(c));
      using IR = decltype(rhs_.template outer<A>(c));
      if (c[Axis] < split_) return either_inner<IL, IR>{lhs_.template outer<A>(c), IR{}, true};
      coord<rank> d = c;
      d[Axis] -= split_;
      return either_inner<IL, IR>{IL{}, rhs_.template outer<A>(d), false};
    }
  }
};

}  // namespace gradix::ev
