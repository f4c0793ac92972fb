#pragma once
/// \file
/// The evaluator of a matrix product (expr/matmul.hpp) that was not computed into a buffer:
/// one element is a dot product over the inner axis, k = 0 .. K-1 in order. The API always
/// computes a product into a buffer first (api/saved.hpp), so this runs only where an
/// expression is evaluated without the API's save transform (a device expression, a test of
/// the evaluators); its sums are sequential, not gemm's.

#include "gradix/config.hpp"
#include "gradix/eval/evaluator.hpp"
#include "gradix/eval/inner.hpp"
#include "gradix/expr/matmul.hpp"

namespace gradix::ev {

template <class Lhs, class Rhs>
struct evaluator<matmul_node<Lhs, Rhs>> {
  using node_type = matmul_node<Lhs, Rhs>;
  using value_type = typename node_type::value_type;
  static constexpr std::size_t rank = node_type::rank;
  static constexpr std::size_t ra = shape_of_t<Lhs>::rank, rb = shape_of_t<Rhs>::rank;
  evaluator<Lhs> lhs_;
  evaluator<Rhs> rhs_;
  index_t k_;
  GRADIX_HOST_DEVICE constexpr explicit evaluator(node_type const& n)
      : lhs_(n.lhs_), rhs_(n.rhs_), k_(n.inner()) {}
  GRADIX_HOST_DEVICE constexpr value_type operator()(coord<rank> const& c) const {
    coord<ra> a{};
    coord<rb> b{};
    if constexpr (ra == 3) a[0] = c[0];
    if constexpr (rb == 3) b[0] = c[0];
    a[ra - 2] = c[rank - 2];
    b[rb - 1] = c[rank - 1];
    value_type s = 0;
    for (index_t k = 0; k < k_; ++k) {
      a[ra - 1] = k;
      b[rb - 2] = k;
      s += value_type(lhs_(a)) * value_type(rhs_(b));
    }
    return s;
  }
  template <int A>
  GRADIX_HOST_DEVICE constexpr auto outer(coord<rank> const& c) const {
    if constexpr (A == invariant_axis) return const_inner<value_type>{(*this)(c)};
    else return generic_inner<evaluator, rank, A>{this, c};
  }
};

}  // namespace gradix::ev
