#pragma once
/// \file
/// User functors written for scalars. gradix evaluates elementwise functors on whole SIMD
/// packs; a functor whose `value` is one plain function (`static float value(float x)`)
/// cannot take a pack, so `unary<Op>` and `binary<Op>` wrap it in `lane_lifted<Op>`, which
/// calls it lane by lane on a pack (and as it is on a scalar). A functor whose `value` is a
/// template, or an overload set with a pack overload, gets whole packs (gradix's own
/// functors are templates). The result has the operand's element type (the promoted type of
/// both operands for binary). Derivatives are unchanged: they are called on scalars unless the
/// functor declares `pack_derivative = true` (unary; binary partials are always per lane).

#include "gradix/config.hpp"
#include "gradix/core/simd.hpp"

#include <type_traits>

namespace gradix::op {

/// Whether Op's `value` is a single non-template function: one that takes scalars only.
template <class Op>
inline constexpr bool scalar_only_v = requires { &Op::value; };

template <class Op>
struct lane_lifted : Op {
  template <class T>
  GRADIX_HOST_DEVICE static constexpr T value(T x) {
    if constexpr (simd::vector_ext<T>) {
      return simd::lanewise([](auto v) { return decltype(v)(Op::value(v)); }, x);
    } else {
      return T(Op::value(x));
    }
  }
  template <class T>
  GRADIX_HOST_DEVICE static constexpr T value(T a, T b) {
    if constexpr (simd::vector_ext<T>) {
      return simd::lanewise([](auto x, auto y) { return decltype(x)(Op::value(x, y)); }, a, b);
    } else {
      return T(Op::value(a, b));
    }
  }
};

/// The functor unary<Op> and binary<Op> use: Op itself, or lane_lifted<Op>.
template <class Op>
using user_functor_t = std::conditional_t<scalar_only_v<Op>, lane_lifted<Op>, Op>;

}  // namespace gradix::op
