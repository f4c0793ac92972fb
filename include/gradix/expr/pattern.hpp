#pragma once
/// \file
/// Patterns: leaves whose value is a function of the coordinate alone, computed where they
/// are read (no memory, nothing stored between forward and backward), on the host and on the
/// device alike.
///
///   pattern_node<T, S, F>   out[c] = F(c, k), k the row-major linear index of c in S
///
/// The builders on top of it:
///   dropout(x, p, seed[, counter])   x * keep(seed, counter, k) / (1 - p): a counter-based
///                                    Bernoulli mask, the same in forward and backward
///   causal_mask<Q, K>(s[, fill])     s where key position <= query position, else fill
///
/// A pattern is a constant: no gradient flows into it; a product by it is an ordinary
/// product (backward multiplies by the same pattern, recomputed).

#include "gradix/config.hpp"
#include "gradix/core/array.hpp"
#include "gradix/core/error.hpp"
#include "gradix/core/rng.hpp"
#include "gradix/core/shape.hpp"
#include "gradix/expr/elementwise.hpp"
#include "gradix/expr/node.hpp"
#include "gradix/expr/reduce.hpp"

#include <cstdint>
#include <limits>
#include <type_traits>

namespace gradix {

/// out[c] = fn(c, k), k the row-major linear index of c in the node's shape.
/// backward: none (a constant)
template <class T, class S, class F>
struct pattern_node {
  using is_gradix_expression = void;
  using value_type = T;
  using shape_type = S;
  using layout_type = row_major;
  using space_type = void;  // computed, not read: valid in any memory space
  shape_type shape_;
  F fn_;
  GRADIX_HOST_DEVICE constexpr shape_type const& shape() const { return shape_; }
};
template <class N>
struct is_pattern_node : std::false_type {};
template <class T, class S, class F>
struct is_pattern_node<pattern_node<T, S, F>> : std::true_type {};

namespace detail {

/// Dropout's mask, scaled: 1 / (1 - p) where element k is kept, 0 where it is dropped.
/// Kept iff the top 53 bits of rng::bits(key, k) are at least p 2^53, so the probability of
/// dropping is p up to 2^-53, and the decision for element k depends on (seed, counter, k)
/// only: the same in every kernel that reads it, for any thread count, on host and device.
template <class T>
struct keep_pattern {
  std::uint64_t key_;
  std::uint64_t threshold_;  // p 2^53
  T scale_;
  template <std::size_t R>
  GRADIX_HOST_DEVICE constexpr T operator()(coord<R> const&, index_t k) const {
    return (rng::bits(key_, std::uint64_t(k)) >> 11) >= threshold_ ? scale_ : T(0);
  }
};

/// 1 where coordinate K <= coordinate Q (a key at or before the query), else 0.
template <class T, std::size_t Q, std::size_t K>
struct causal_pattern {
  template <std::size_t R>
  GRADIX_HOST_DEVICE constexpr T operator()(coord<R> const& c, index_t) const {
    return c[K] <= c[Q] ? T(1) : T(0);
  }
};

/// S with static extent 1 on every axis but Q and K (which keep S's).
template <class S, std::size_t Q, std::size_t K>
struct two_axis_shape {
  struct holder {
    static constexpr array<index_t, S::rank> value = [] {
      array<index_t, S::rank> r{};
      for (std::size_t j = 0; j < S::rank; ++j) r[j] = (j == Q || j == K) ? S::static_extents[j] : 1;
      return r;
    }();
  };
  using type = shape_from_array_t<holder>;
};

}  // namespace detail

/// dropout(x, p, seed, counter = 0): x * mask / (1 - p), where mask drops each element with
/// probability p. The mask is counter-based: whether element k (x's row-major linear index)
/// is dropped is a function of (seed, counter, k) alone, computed wherever the expression
/// reads it, so forward and backward see the same mask and nothing is stored. Draw a new
/// mask each step by passing the step as `counter` (and give each dropout site its own seed).
/// p = 0 keeps everything (the result equals x), p = 1 drops everything (the result is 0);
/// p outside [0, 1] or NaN throws gradix::error. Gradient: the same mask, scaled.
template <operand X>
constexpr auto dropout(X&& x, double p, std::uint64_t seed, std::uint64_t counter = 0) {
  auto a = detail::as_node(static_cast<X&&>(x));
  using A = decltype(a);
  using T = value_type_t<A>;
  static_assert(std::is_floating_point_v<T>, "gradix::dropout: the operand must have a floating-point element type");
  if (!(p >= 0.0 && p <= 1.0)) detail::fail("gradix::dropout: the drop probability p = ", p, " is outside [0, 1]");
  constexpr double two53 = 9007199254740992.0;
  std::uint64_t const thr = p >= 1.0 ? (std::uint64_t(1) << 53) : std::uint64_t(p * two53);
  T const scale = p >= 1.0 ? T(0) : T(1.0 / (1.0 - p));
  using F = detail::keep_pattern<T>;
  using P = pattern_node<T, shape_of_t<A>, F>;
  P mask{a.shape(), F{rng::bits(seed, counter), thr, scale}};
  return binary_node<op::mul, A, P>{a, mask, a.shape()};
}

/// causal_mask<QAxis, KAxis>(scores, fill = -infinity): scores where the key position (along
/// KAxis) is at or before the query position (along QAxis), fill elsewhere: the mask of a
/// causal (autoregressive) attention, before its softmax over KAxis. Negative axes count from
/// the end; the defaults are the last two axes (scores of shape (..., T query, T key)).
/// Gradient: to scores where kept. The mask is computed from the coordinates, never stored.
template <int QAxis = -2, int KAxis = -1, operand X, class F = double>
constexpr auto causal_mask(X&& scores, F fill = -std::numeric_limits<double>::infinity()) {
  auto a = detail::as_node(static_cast<X&&>(scores));
  using A = decltype(a);
  using S = shape_of_t<A>;
  using T = value_type_t<A>;
  constexpr std::size_t R = S::rank;
  static_assert(R >= 2, "gradix::causal_mask: the scores need a query axis and a key axis (rank >= 2)");
  static_assert(std::is_arithmetic_v<F>, "gradix::causal_mask: the fill value must be an arithmetic scalar");
  constexpr std::size_t Q = normalize_axis_v<QAxis, R>;
  constexpr std::size_t K = normalize_axis_v<KAxis, R>;
  static_assert(Q < R && K < R, "gradix::causal_mask: an axis is out of range for the scores' rank");
  static_assert(Q != K || R < 2, "gradix::causal_mask: the query axis and the key axis must differ");
  if constexpr (R < 2 || Q >= R || K >= R || Q == K) {
    return a;  // a static_assert has fired: stop here
  } else {
    using MS = typename detail::two_axis_shape<S, Q, K>::type;
    MS ms{};
    for (std::size_t j = 0; j < R; ++j) ms.set_extent(j, (j == Q || j == K) ? a.shape().extent(j) : 1);
    using P = pattern_node<T, MS, detail::causal_pattern<T, Q, K>>;
    return where(P{ms, {}}, a, T(fill));
  }
}

}  // namespace gradix
