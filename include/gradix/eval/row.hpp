#pragma once
/// \file
/// Evaluator of the row node (expr/row.hpp): each element from its row (the statistics, then
/// its own value), O(row) per element. Calls keep the node and compute it row by row
/// instead (api/saved.hpp, keep_row); this evaluator serves the expressions read without the
/// save transform (a check naming a node's value).

#include "gradix/config.hpp"
#include "gradix/core/coords.hpp"
#include "gradix/eval/evaluator.hpp"
#include "gradix/eval/inner.hpp"
#include "gradix/expr/reduce.hpp"
#include "gradix/expr/row.hpp"
#include "gradix/op/math.hpp"

namespace gradix::ev {

/// The walk over a row node's rows (the host's and the grid's kept rows and row adjoints):
/// row r of a rank-R domain with extents ext along axis Ax: its coordinates other than Ax
/// (row-major over those axes), and the offset of its first element in a row-major buffer.
template <std::size_t R, std::size_t Ax>
GRADIX_HOST_DEVICE constexpr coord<R> row_origin(array<index_t, R> const& ext, index_t r, index_t& base) {
  coord<R> const o = coords::unravel(ext, coords::all_but<R>(Ax), r);
  base = 0;
  for (std::size_t j = 0; j < R; ++j) base = base * ext[j] + o[j];
  return o;
}
/// The stride of axis Ax in a row-major buffer of extents ext.
template <std::size_t R, std::size_t Ax>
GRADIX_HOST_DEVICE constexpr index_t axis_stride(array<index_t, R> const& ext) {
  index_t s = 1;
  for (std::size_t j = Ax + 1; j < R; ++j) s *= ext[j];
  return s;
}


template <class A, std::size_t Axis, row_kind K>
struct evaluator<row_node<A, Axis, K>> {
  using node_type = row_node<A, Axis, K>;
  using value_type = typename node_type::value_type;
  static constexpr std::size_t rank = shape_of_t<A>::rank;
  evaluator<A> arg_;
  index_t n_;
  value_type eps_;
  GRADIX_HOST_DEVICE constexpr explicit evaluator(node_type const& n)
      : arg_(n.arg_), n_(n.arg_.shape().extent(Axis)), eps_(n.eps_) {}
  GRADIX_HOST_DEVICE constexpr value_type operator()(coord<rank> const& c) const {
    using T = value_type;
    coord<rank> d = c;
    d[Axis] = 0;
    auto const in = arg_.template outer<int(Axis)>(d);
    T const x = T(in.elem(c[Axis]));
    if constexpr (K == row_kind::softmax || K == row_kind::log_softmax) {
      T m = op::max_of::identity<T>();
      for (index_t i = 0; i < n_; ++i) m = op::max_of::combine(m, T(in.elem(i)));
      T s = 0;
      for (index_t i = 0; i < n_; ++i) s += op::exp::value(T(T(in.elem(i)) - m));
      if constexpr (K == row_kind::log_softmax) return T(T(x - m) - op::log::value(s));
      else return T(op::exp::value(T(x - m)) / s);
    } else {
      T mean = 0;
      if constexpr (K == row_kind::layer_norm) {
        for (index_t i = 0; i < n_; ++i) mean += T(in.elem(i));
        mean = T(mean / T(n_));
      }
      T v = 0;
      for (index_t i = 0; i < n_; ++i) {
        T const dx = T(T(in.elem(i)) - mean);
        v += dx * dx;
      }
      v = T(v / T(n_));
      return T(T(x - mean) / op::sqrt::value(T(v + eps_)));
    }
  }
  template <int B>
  GRADIX_HOST_DEVICE constexpr auto outer(coord<rank> const& c) const {
    if constexpr (B == invariant_axis) return const_inner<value_type>{(*this)(c)};
    else return generic_inner<evaluator, rank, B>{this, c};
  }
};

}  // namespace gradix::ev
