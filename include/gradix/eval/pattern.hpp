#pragma once
/// \file
/// Evaluator of pattern leaves (expr/pattern.hpp): the node's function at the coordinate and
/// its row-major linear index; along an axis, the index advances by that axis' stride.

#include "gradix/config.hpp"
#include "gradix/core/simd.hpp"
#include "gradix/eval/evaluator.hpp"
#include "gradix/eval/inner.hpp"
#include "gradix/expr/pattern.hpp"

namespace gradix::ev {

template <class F, class T, std::size_t R, int Axis>
struct pattern_inner {
  using value_type = T;
  F fn_;
  coord<R> c_;
  index_t k_;
  index_t step_;
  GRADIX_HOST_DEVICE constexpr T elem(index_t i) const {
    coord<R> d = c_;
    d[Axis] += i;
    return fn_(d, k_ + i * step_);
  }
#if defined(GRADIX_HAS_VECTOR_EXT)
  template <int W>
  GRADIX_ALWAYS_INLINE simd::pack<T, W> pack(index_t i) const {
    simd::pack<T, W> r{};
    for (int w = 0; w < W; ++w) r[w] = elem(i + w);
    return r;
  }
#endif
};

template <class T, class S, class F>
struct evaluator<pattern_node<T, S, F>> {
  using node_type = pattern_node<T, S, F>;
  using value_type = T;
  static constexpr std::size_t rank = S::rank;
  F fn_;
  array<index_t, rank> strides_;
  GRADIX_HOST_DEVICE constexpr explicit evaluator(node_type const& n) : fn_(n.fn_), strides_{} {
    index_t s = 1;
    for (std::size_t j = rank; j-- > 0;) {
      strides_[j] = s;
      s *= n.shape_.extent(j);
    }
  }
  GRADIX_HOST_DEVICE constexpr index_t linear(coord<rank> const& c) const {
    index_t k = 0;
    for (std::size_t j = 0; j < rank; ++j) k += c[j] * strides_[j];
    return k;
  }
  GRADIX_HOST_DEVICE constexpr T operator()(coord<rank> const& c) const { return fn_(c, linear(c)); }
  template <int A>
  GRADIX_HOST_DEVICE constexpr auto outer(coord<rank> const& c) const {
    if constexpr (A == invariant_axis) return const_inner<T>{(*this)(c)};
    else return pattern_inner<F, T, rank, A>{fn_, c, linear(c), strides_[std::size_t(A)]};
  }
};

}  // namespace gradix::ev
