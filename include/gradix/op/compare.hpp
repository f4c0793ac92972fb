#pragma once
/// \file
/// Comparison and selection functors. A comparison gives a 0/1 mask in its operands'
/// (promoted) element type: 1 where it holds, 0 where not (a NaN compares unequal to
/// everything, itself included, as in C++). A mask selects where it is nonzero.
///
/// No gradient flows through a comparison (`no_partial`), nor into the mask of a selection:
/// `keep_if(m, a)` is a where m selects and -0 elsewhere, `keep_unless(m, b)` the other way
/// round, so `where(m, a, b) = keep_if(m, a) + keep_unless(m, b)` has exactly a's or b's bits
/// (x + -0 is x for every x, -0, NaN and infinities included); d/da is 1 where m selects
/// and 0 elsewhere.

#include "gradix/config.hpp"
#include "gradix/core/simd.hpp"

namespace gradix::op {

#define GRADIX_COMPARISON(NAME, SPELLING, EXPR)                                               \
  struct NAME {                                                                               \
    static constexpr char const* name = SPELLING;                                             \
    static constexpr bool no_partial_lhs = true;                                              \
    static constexpr bool no_partial_rhs = true;                                              \
    template <class T>                                                                        \
    GRADIX_HOST_DEVICE static constexpr T value(T a, T b) {                                   \
      return simd::lanewise(                                                                  \
          [](auto x, auto y) { return (EXPR) ? decltype(x)(1) : decltype(x)(0); }, a, b);     \
    }                                                                                         \
    template <class T>                                                                        \
    GRADIX_HOST_DEVICE static constexpr T d_lhs(T, T, T) { return T(0); }                     \
    template <class T>                                                                        \
    GRADIX_HOST_DEVICE static constexpr T d_rhs(T, T, T) { return T(0); }                     \
  };

/// 1 where a < b (and so on), else 0
GRADIX_COMPARISON(less, "operator<", x < y)
GRADIX_COMPARISON(less_equal, "operator<=", x <= y)
GRADIX_COMPARISON(greater, "operator>", x > y)
GRADIX_COMPARISON(greater_equal, "operator>=", x >= y)
GRADIX_COMPARISON(equal, "operator==", x == y)
GRADIX_COMPARISON(not_equal, "operator!=", x != y)
#undef GRADIX_COMPARISON

/// keep<true>: y = m != 0 ? a : -0 (dy/da = m != 0 ? 1 : 0);
/// keep<false>: y = m != 0 ? -0 : a (dy/da = m != 0 ? 0 : 1). No partial into the mask m.
template <bool WhereSelected>
struct keep {
  static constexpr char const* name = "where";
  static constexpr bool no_partial_lhs = true;
  template <class T>
  GRADIX_HOST_DEVICE static constexpr T value(T m, T a) {
    return simd::lanewise(
        [](auto x, auto y) {
          return (x != decltype(x)(0)) == WhereSelected ? y : -decltype(x)(0);
        },
        m, a);
  }
  template <class T>
  GRADIX_HOST_DEVICE static constexpr T d_lhs(T, T, T) { return T(0); }
  template <class T>
  GRADIX_HOST_DEVICE static constexpr T d_rhs(T m, T, T) {
    if constexpr (WhereSelected)
      return m != T(0) ? T(1) : T(0);
    else
      return m != T(0) ? T(0) : T(1);
  }
};
using keep_if = keep<true>;
using keep_unless = keep<false>;

}  // namespace gradix::op
