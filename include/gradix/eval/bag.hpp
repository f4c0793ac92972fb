#pragma once
/// \file
/// The evaluator of a segment sum (expr/bag.hpp): one element sums its bag's rows in order
/// (j = begin .. end - 1), then scales by the bag's factor.

#include "gradix/config.hpp"
#include "gradix/eval/evaluator.hpp"
#include "gradix/eval/inner.hpp"
#include "gradix/expr/bag.hpp"

namespace gradix::ev {

template <class Arg, class I>
struct evaluator<segment_sum_node<Arg, I>> {
  using node_type = segment_sum_node<Arg, I>;
  using value_type = typename node_type::value_type;
  static constexpr std::size_t rank = node_type::shape_type::rank;
  evaluator<Arg> arg_;
  index_vec<I> off_;
  index_t nb_, len_;
  bool mean_;
  GRADIX_HOST_DEVICE constexpr explicit evaluator(node_type const& n)
      : arg_(n.arg_), off_(n.idx_), nb_(n.shape().extent(0)), len_(n.arg_.shape().extent(0)), mean_(n.mean_) {}
  GRADIX_HOST_DEVICE constexpr value_type operator()(coord<rank> const& c) const {
    coord<rank> a = c;
    value_type s = 0;
    index_t const b0 = off_(c[0]), e = c[0] + 1 < nb_ ? off_(c[0] + 1) : len_;
    for (index_t j = b0; j < e; ++j) {
      a[0] = j;
      s += value_type(arg_(a));
    }
    if (mean_ && e > b0) s = value_type(s / value_type(e - b0));
    return s;
  }
  template <int A>
  GRADIX_HOST_DEVICE constexpr auto outer(coord<rank> const& c) const {
    if constexpr (A == invariant_axis) return const_inner<value_type>{(*this)(c)};
    else return generic_inner<evaluator, rank, A>{this, c};
  }
};

}  // namespace gradix::ev
