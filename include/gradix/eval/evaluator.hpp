#pragma once
/// \file
/// evaluator<Node>: computes one element of a node at a coordinate, on the host and on the
/// device alike, in constant evaluation too. No loops over the node's domain, no allocation,
/// no exceptions. Two levels: `operator()(c)` for one element, `outer<Axis>(c)` for an inner
/// evaluator that walks one axis (see inner.hpp).

#include "gradix/config.hpp"
#include "gradix/core/array.hpp"
#include "gradix/core/layout.hpp"
#include "gradix/core/view.hpp"
#include "gradix/eval/inner.hpp"
#include "gradix/expr/node.hpp"

#include <type_traits>

namespace gradix::ev {

/// Primary template: specialized for every node kind.
template <class Node>
struct evaluator;

/// Leaf: reads memory through the view's strides (half-width storage widened to float).
template <class T, class S, class L, class Sp>
struct evaluator<tensor_view<T, S, L, Sp>> {
  using node_type = tensor_view<T, S, L, Sp>;
  using value_type = typename node_type::value_type;
  using storage_type = typename node_type::storage_type;
  static constexpr std::size_t rank = S::rank;
  storage_type const* data_;
  array<index_t, rank> strides_;

  GRADIX_HOST_DEVICE constexpr explicit evaluator(node_type const& v)
      : data_(v.data_), strides_(v.strides_) {}

  GRADIX_HOST_DEVICE constexpr index_t offset(coord<rank> const& c) const {
    index_t o = 0;
    for (std::size_t i = 0; i < rank; ++i) o += c[i] * strides_[i];
    return o;
  }
  GRADIX_HOST_DEVICE constexpr value_type operator()(coord<rank> const& c) const {
    return value_type(data_[offset(c)]);
  }
  template <int Axis>
  GRADIX_HOST_DEVICE constexpr auto outer(coord<rank> const& c) const {
    storage_type const* p = data_ + offset(c);
    if constexpr (Axis == invariant_axis) {
      return const_inner<value_type>{value_type(*p)};
    } else if constexpr (unit_stride_v<L, rank, std::size_t(Axis)>) {
      return unit_inner<value_type, storage_type>{p};
    } else {
      return strided_inner<value_type, storage_type>{p, strides_[Axis]};
    }
  }
};

/// A C++ scalar.
template <class T>
struct evaluator<scalar_node<T>> {
  using value_type = T;
  T v_;
  GRADIX_HOST_DEVICE constexpr explicit evaluator(scalar_node<T> const& n) : v_(n.value_) {}
  GRADIX_HOST_DEVICE constexpr T operator()(coord<0> const&) const { return v_; }
  template <int Axis>
  GRADIX_HOST_DEVICE constexpr const_inner<T> outer(coord<0> const&) const {
    return {v_};
  }
};

}  // namespace gradix::ev
