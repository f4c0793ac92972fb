#pragma once
/// \file
/// Elementwise functions: value and local derivative d_arg(x, y) where y = value(x).
/// Subgradients at kinks: relu'(0) = 0, abs'(0) = 0.

#include "gradix/config.hpp"
#include "gradix/core/math.hpp"
#include "gradix/core/simd.hpp"
#include "gradix/core/vmath.hpp"

#include <limits>

namespace gradix::op {

#define GRADIX_LANEWISE(expr) \
  simd::lanewise([](auto v) { return expr; }, x)
/// float (and packs of float): gradix's own polynomial (core/vmath.hpp), the same bits on
/// every path; double: the platform's function, lane by lane.
#define GRADIX_VMATH_OR_LANEWISE(fn, expr)                                      \
  if constexpr (vmath::detail::is_float_like<T>) return vmath::fn(x);            \
  else return GRADIX_LANEWISE(expr)

/// y = exp(x);  dy/dx = y
struct exp {
  static constexpr char const* name = "exp";
  static constexpr bool needs_floating = true;
  template <class T>
  GRADIX_HOST_DEVICE static constexpr T value(T x) {
    GRADIX_VMATH_OR_LANEWISE(exp, math::exp(v));
  }
  static constexpr bool pack_derivative = true;
  template <class T>
  GRADIX_HOST_DEVICE static constexpr T d_arg(T, T y) { return y; }
};
/// y = log(x);  dy/dx = 1/x
struct log {
  static constexpr char const* name = "log";
  static constexpr bool needs_floating = true;
  template <class T>
  GRADIX_HOST_DEVICE static constexpr T value(T x) {
    GRADIX_VMATH_OR_LANEWISE(log, math::log(v));
  }
  static constexpr bool pack_derivative = true;
  template <class T>
  GRADIX_HOST_DEVICE static constexpr T d_arg(T x, T) { return simd::constant<T>(1) / x; }
};
/// y = tanh(x);  dy/dx = 1 - y^2
struct tanh {
  static constexpr char const* name = "tanh";
  static constexpr bool needs_floating = true;
  template <class T>
  GRADIX_HOST_DEVICE static constexpr T value(T x) {
    GRADIX_VMATH_OR_LANEWISE(tanh, math::tanh(v));
  }
  static constexpr bool pack_derivative = true;
  template <class T>
  GRADIX_HOST_DEVICE static constexpr T d_arg(T, T y) { return simd::constant<T>(1) - y * y; }
};
/// y = 1 / (1 + exp(-x));  dy/dx = y (1 - y)
struct sigmoid {
  static constexpr char const* name = "sigmoid";
  static constexpr bool needs_floating = true;
  template <class T>
  GRADIX_HOST_DEVICE static constexpr T value(T x) {
    GRADIX_VMATH_OR_LANEWISE(sigmoid, decltype(v)(1) / (decltype(v)(1) + math::exp(-v)));
  }
  static constexpr bool pack_derivative = true;
  template <class T>
  GRADIX_HOST_DEVICE static constexpr T d_arg(T, T y) { return y * (simd::constant<T>(1) - y); }
};
namespace detail {
/// v, or 0 where |v| is below 16 times the least normal value of its element type: GELU's
/// tail factors (a sigmoid, an erfc, a Gaussian) would otherwise give subnormal results
/// for x << 0, and a matrix product over subnormal operands runs several times slower (the
/// result there is below 1e-36 in float: 0, as 1 + tanh(u) gives in PyTorch).
template <class T>
GRADIX_HOST_DEVICE GRADIX_ALWAYS_INLINE constexpr T flush_tiny(T x) {
  return GRADIX_LANEWISE(v < std::numeric_limits<decltype(v)>::min() * decltype(v)(16) ? decltype(v)(0) : v);
}
}  // namespace detail
/// y = x Phi(x) = x/2 erfc(-x / sqrt 2) (GELU, the exact form; erfc rather than 1 + erf
/// keeps the digits of the tail x << 0); dy/dx = Phi(x) + x phi(x), phi(x) = e^(-x^2/2) /
/// sqrt(2 pi). Lane by lane (the platform's erfc and exp), float included. Factors below
/// 16x the least normal value are 0 (detail::flush_tiny).
struct gelu {
  static constexpr char const* name = "gelu";
  static constexpr bool needs_floating = true;
  template <class T>
  GRADIX_HOST_DEVICE static constexpr T value(T x) {
    return x * detail::flush_tiny(GRADIX_LANEWISE(decltype(v)(0.5) * math::erfc(v * decltype(v)(-0.70710678118654752440))));
  }
  static constexpr bool pack_derivative = true;
  template <class T>
  GRADIX_HOST_DEVICE static constexpr T d_arg(T x, T) {
    T const phi = detail::flush_tiny(GRADIX_LANEWISE(decltype(v)(0.39894228040143267794) * math::exp(decltype(v)(-0.5) * v * v)));
    return detail::flush_tiny(GRADIX_LANEWISE(decltype(v)(0.5) * math::erfc(v * decltype(v)(-0.70710678118654752440)))) + x * phi;
  }
};
/// y = x/2 (1 + tanh(u)) = x sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3) (GELU, the tanh
/// approximation: PyTorch's approximate='tanh'; the sigmoid form has no cancellation for
/// x << 0); dy/dx = s + 2 x s (1 - s) du/dx, s = sigmoid(2u) (recomputed from x; below 16x
/// the least normal value, 0: detail::flush_tiny)
struct gelu_tanh {
  static constexpr char const* name = "gelu_tanh";
  static constexpr bool needs_floating = true;
  template <class T>
  GRADIX_HOST_DEVICE static constexpr T sig(T x, T x2) {
    return detail::flush_tiny(
        sigmoid::value(simd::constant<T>(2 * 0.79788456080286535588) * (x + simd::constant<T>(0.044715) * x2 * x)));
  }
  template <class T>
  GRADIX_HOST_DEVICE static constexpr T value(T x) {
    return x * sig(x, x * x);
  }
  static constexpr bool pack_derivative = true;
  template <class T>
  GRADIX_HOST_DEVICE static constexpr T d_arg(T x, T) {
    T const x2 = x * x;
    T const s = sig(x, x2);
    T const du2 = simd::constant<T>(2 * 0.79788456080286535588) * (simd::constant<T>(1) + simd::constant<T>(3 * 0.044715) * x2);
    return s + x * s * (simd::constant<T>(1) - s) * du2;
  }
};
/// y = exp(x) - 1, accurate near 0;  dy/dx = exp(x) (recomputed: y + 1 loses the digits of
/// a small e^x for x << 0)
struct expm1 {
  static constexpr char const* name = "expm1";
  static constexpr bool needs_floating = true;
  template <class T>
  GRADIX_HOST_DEVICE static constexpr T value(T x) {
    GRADIX_VMATH_OR_LANEWISE(expm1, math::expm1(v));
  }
  static constexpr bool pack_derivative = true;
  template <class T>
  GRADIX_HOST_DEVICE static constexpr T d_arg(T x, T) {
    GRADIX_VMATH_OR_LANEWISE(exp, math::exp(v));
  }
};
/// y = log(1 + x), accurate near 0;  dy/dx = 1 / (1 + x)
struct log1p {
  static constexpr char const* name = "log1p";
  static constexpr bool needs_floating = true;
  template <class T>
  GRADIX_HOST_DEVICE static constexpr T value(T x) {
    GRADIX_VMATH_OR_LANEWISE(log1p, math::log1p(v));
  }
  static constexpr bool pack_derivative = true;
  template <class T>
  GRADIX_HOST_DEVICE static constexpr T d_arg(T x, T) {
    return simd::constant<T>(1) / (simd::constant<T>(1) + x);
  }
};
/// y = log(1 + e^x), computed as max(x, 0) + log1p(e^-|x|): no overflow for large x, no
/// loss of a tiny result for very negative x;  dy/dx = sigmoid(x)
struct softplus {
  static constexpr char const* name = "softplus";
  static constexpr bool needs_floating = true;
  template <class T>
  GRADIX_HOST_DEVICE static constexpr T value(T x) {
    T const neg_abs = GRADIX_LANEWISE(v < decltype(v)(0) ? v : -v);  // -|x| (NaN stays NaN)
    T const pos = GRADIX_LANEWISE(v > decltype(v)(0) ? v : decltype(v)(0));
    return pos + log1p::value(exp::value(neg_abs));
  }
  static constexpr bool pack_derivative = true;
  template <class T>
  GRADIX_HOST_DEVICE static constexpr T d_arg(T x, T) { return sigmoid::value(x); }
};
/// y = log(sigmoid(x)) = min(x, 0) - log1p(e^-|x|) (stable at both ends);
/// dy/dx = 1 - sigmoid(x) = sigmoid(-x)
struct log_sigmoid {
  static constexpr char const* name = "log_sigmoid";
  static constexpr bool needs_floating = true;
  template <class T>
  GRADIX_HOST_DEVICE static constexpr T value(T x) {
    T const neg_abs = GRADIX_LANEWISE(v < decltype(v)(0) ? v : -v);
    T const neg = GRADIX_LANEWISE(v < decltype(v)(0) ? v : decltype(v)(0));
    return neg - log1p::value(exp::value(neg_abs));
  }
  static constexpr bool pack_derivative = true;
  template <class T>
  GRADIX_HOST_DEVICE static constexpr T d_arg(T x, T) { return sigmoid::value(-x); }
};
/// y = sin(x);  dy/dx = cos(x). Float: NaN for |x| >= 2^25 (core/vmath.hpp).
struct sin {
  static constexpr char const* name = "sin";
  static constexpr bool needs_floating = true;
  template <class T>
  GRADIX_HOST_DEVICE static constexpr T value(T x) {
    GRADIX_VMATH_OR_LANEWISE(sin, math::sin(v));
  }
  static constexpr bool pack_derivative = true;
  template <class T>
  GRADIX_HOST_DEVICE static constexpr T d_arg(T x, T) {
    GRADIX_VMATH_OR_LANEWISE(cos, math::cos(v));
  }
};
/// y = cos(x);  dy/dx = -sin(x). Float: NaN for |x| >= 2^25 (core/vmath.hpp).
struct cos {
  static constexpr char const* name = "cos";
  static constexpr bool needs_floating = true;
  template <class T>
  GRADIX_HOST_DEVICE static constexpr T value(T x) {
    GRADIX_VMATH_OR_LANEWISE(cos, math::cos(v));
  }
  static constexpr bool pack_derivative = true;
  template <class T>
  GRADIX_HOST_DEVICE static constexpr T d_arg(T x, T) {
    if constexpr (vmath::detail::is_float_like<T>) return -vmath::sin(x);
    else return GRADIX_LANEWISE(-math::sin(v));
  }
};
/// y = max(x, 0);  dy/dx = 1 if x > 0 else 0 (relu'(0) = 0)
struct relu {
  static constexpr char const* name = "relu";
  static constexpr bool needs_floating = false;
  template <class T>
  GRADIX_HOST_DEVICE static constexpr T value(T x) {
    return GRADIX_LANEWISE(v > decltype(v)(0) ? v : decltype(v)(0));
  }
  template <class T>
  GRADIX_HOST_DEVICE static constexpr T d_arg(T x, T) { return x > T(0) ? T(1) : T(0); }
};
/// y = sqrt(x);  dy/dx = 1 / (2 y)
struct sqrt {
  static constexpr char const* name = "sqrt";
  static constexpr bool needs_floating = true;
  template <class T>
  GRADIX_HOST_DEVICE static constexpr T value(T x) { return GRADIX_LANEWISE(math::sqrt(v)); }
  static constexpr bool pack_derivative = true;
  template <class T>
  GRADIX_HOST_DEVICE static constexpr T d_arg(T, T y) { return simd::constant<T>(0.5) / y; }
};
/// y = x^2;  dy/dx = 2x
struct square {
  static constexpr char const* name = "square";
  static constexpr bool needs_floating = false;
  template <class T>
  GRADIX_HOST_DEVICE static constexpr T value(T x) { return x * x; }
  static constexpr bool pack_derivative = true;
  template <class T>
  GRADIX_HOST_DEVICE static constexpr T d_arg(T x, T) { return x + x; }
};
/// y = |x|;  dy/dx = sign(x) (abs'(0) = 0)
struct abs {
  static constexpr char const* name = "abs";
  static constexpr bool needs_floating = false;
  template <class T>
  GRADIX_HOST_DEVICE static constexpr T value(T x) {
    return GRADIX_LANEWISE(v < decltype(v)(0) ? -v : v);
  }
  template <class T>
  GRADIX_HOST_DEVICE static constexpr T d_arg(T x, T) {
    return x > T(0) ? T(1) : (x < T(0) ? T(-1) : T(0));
  }
};
#undef GRADIX_LANEWISE
#undef GRADIX_VMATH_OR_LANEWISE

/// y = a^b;  dy/da = b a^(b-1), dy/db = y log(a)
struct pow {
  static constexpr char const* name = "pow";
  static constexpr bool needs_floating = true;
  template <class T>
  GRADIX_HOST_DEVICE static constexpr T value(T a, T b) {
    return simd::lanewise([](auto x, auto y) { return math::pow(x, y); }, a, b);
  }
  template <class T>
  GRADIX_HOST_DEVICE static constexpr T d_lhs(T a, T b, T) { return b * math::pow(a, b - T(1)); }
  template <class T>
  GRADIX_HOST_DEVICE static constexpr T d_rhs(T a, T, T y) {
    return a > T(0) ? y * math::log(a) : T(0);
  }
};

/// y = max(a, b); the derivative goes to the first operand on ties:
/// dy/da = 1 if a >= b else 0, dy/db = 1 if b > a else 0. A NaN operand gives NaN.
struct max {
  static constexpr char const* name = "max";
  static constexpr bool needs_floating = false;
  template <class T>
  GRADIX_HOST_DEVICE static constexpr T value(T a, T b) {
    return simd::lanewise([](auto x, auto y) { return (x >= y || x != x) ? x : y; }, a, b);
  }
  template <class T>
  GRADIX_HOST_DEVICE static constexpr T d_lhs(T a, T b, T) { return a >= b ? T(1) : T(0); }
  template <class T>
  GRADIX_HOST_DEVICE static constexpr T d_rhs(T a, T b, T) { return a >= b ? T(0) : T(1); }
};
/// y = min(a, b); ties go to the first operand, as for max. A NaN operand gives NaN.
struct min {
  static constexpr char const* name = "min";
  static constexpr bool needs_floating = false;
  template <class T>
  GRADIX_HOST_DEVICE static constexpr T value(T a, T b) {
    return simd::lanewise([](auto x, auto y) { return (x <= y || x != x) ? x : y; }, a, b);
  }
  template <class T>
  GRADIX_HOST_DEVICE static constexpr T d_lhs(T a, T b, T) { return a <= b ? T(1) : T(0); }
  template <class T>
  GRADIX_HOST_DEVICE static constexpr T d_rhs(T a, T b, T) { return a <= b ? T(0) : T(1); }
};

/// y = U(x): element type conversion; dy/dx = 1 (0 for a conversion to an integer type).
template <class U>
struct cast {
  static constexpr char const* name = "cast";
  static constexpr bool needs_floating = false;
  using result_type = U;
  template <class T>
  GRADIX_HOST_DEVICE static constexpr U value(T x) { return static_cast<U>(x); }
};

}  // namespace gradix::op
