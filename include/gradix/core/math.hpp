#pragma once
/// \file
/// Elementary functions usable in constant evaluation, on the host and on the device.
///
/// At run time they call the platform's functions (std:: on the host, CUDA's on the device).
/// In constant evaluation they use gradix's own implementations (clang rejects std::exp in
/// a constant expression), which are accurate to a few ulp in double precision. The
/// `detail::c*` functions use only IEEE basic operations in a fixed order; the RNG uses them
/// at run time too, so random values are the same on every platform.

#include "gradix/config.hpp"

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

namespace gradix::math {
namespace detail {

GRADIX_HOST_DEVICE constexpr double pow2i(int k) {
  // 2^k exactly, for k in [-1074, 1023]; inf/0 outside.
  if (k > 1023) return std::numeric_limits<double>::infinity();
  if (k < -1074) return 0.0;
  if (k >= -1022) return std::bit_cast<double>(std::uint64_t(k + 1023) << 52);
  return std::bit_cast<double>(std::uint64_t(1) << (k + 1074));
}

GRADIX_HOST_DEVICE constexpr bool cisnan(double x) { return x != x; }
/// Neither NaN nor infinite.
GRADIX_HOST_DEVICE constexpr bool cisfinite(double x) {
  return x == x && x - x == 0.0;
}

/// exp(x) - 1 by its Taylor series, for |x| <= 0.75 (about 1 ulp).
GRADIX_HOST_DEVICE constexpr double expm1_small(double x) {
  double term = x, sum = 0.0;
  for (int n = 2; n < 24; ++n) {
    sum += term;
    term *= x / n;
  }
  return sum;
}

GRADIX_HOST_DEVICE constexpr double cexp(double x) {
  if (cisnan(x)) return x;
  if (x > 709.782712893384) return std::numeric_limits<double>::infinity();
  if (x < -745.2) return 0.0;
  constexpr double ln2_hi = 6.93147180369123816490e-01;
  constexpr double ln2_lo = 1.90821492927058770002e-10;
  constexpr double inv_ln2 = 1.44269504088896338700e+00;
  double kd = x * inv_ln2;
  int k = int(kd < 0 ? kd - 0.5 : kd + 0.5);
  double r = (x - k * ln2_hi) - k * ln2_lo;  // |r| <= ln2/2
  double e = 1.0 + expm1_small(r);
  // split the scale so subnormal results stay exact where possible
  if (k < -1000) return (e * pow2i(k + 200)) * pow2i(-200);
  if (k > 1000) return (e * pow2i(k - 100)) * pow2i(100);
  return e * pow2i(k);
}

GRADIX_HOST_DEVICE constexpr double cexpm1(double x) {
  if (x == 0) return x;  // keeps the sign of -0
  if (x > -0.75 && x < 0.75) return expm1_small(x);
  return cexp(x) - 1.0;
}

GRADIX_HOST_DEVICE constexpr double clog(double x) {
  if (cisnan(x) || x < 0) return std::numeric_limits<double>::quiet_NaN();
  if (x == 0) return -std::numeric_limits<double>::infinity();
  if (x == std::numeric_limits<double>::infinity()) return x;
  int e = 0;
  if (x < 2.2250738585072014e-308) {  // subnormal: scale up first
    x *= pow2i(64);
    e -= 64;
  }
  std::uint64_t bits = std::bit_cast<std::uint64_t>(x);
  e += int((bits >> 52) & 0x7ff) - 1023;
  double m = std::bit_cast<double>((bits & 0x000fffffffffffffULL) | 0x3ff0000000000000ULL);
  if (m > 1.4142135623730951) {
    m *= 0.5;
    ++e;
  }
  // log(m) = 2 atanh(s), s = (m - 1) / (m + 1), |s| <= 0.1716
  double s = (m - 1.0) / (m + 1.0);
  double s2 = s * s, term = s, sum = 0.0;
  for (int n = 1; n < 40; n += 2) {
    sum += term / n;
    term *= s2;
  }
  constexpr double ln2_hi = 6.93147180369123816490e-01;
  constexpr double ln2_lo = 1.90821492927058770002e-10;
  return (e * ln2_hi + 2.0 * sum) + e * ln2_lo;
}

GRADIX_HOST_DEVICE constexpr double csqrt(double x) {
  if (cisnan(x) || x < 0) return std::numeric_limits<double>::quiet_NaN();
  if (x == 0 || x == std::numeric_limits<double>::infinity()) return x;
  // initial guess from the exponent, then Newton; a final correction rounds to nearest.
  std::uint64_t bits = std::bit_cast<std::uint64_t>(x);
  double y = std::bit_cast<double>((bits >> 1) + (std::uint64_t(1023) << 51));
  for (int i = 0; i < 8; ++i) y = 0.5 * (y + x / y);
  return y;
}

GRADIX_HOST_DEVICE constexpr double ctanh(double x) {
  if (cisnan(x)) return x;
  double a = x < 0 ? -x : x;
  double r;
  if (a > 20.0) {
    r = 1.0;
  } else {
    double u = cexpm1(2.0 * a);
    r = u / (u + 2.0);
  }
  return x < 0 ? -r : r;
}

/// log(1 + x): 2 atanh(x / (2 + x)) by its series near 0 (|s| <= 1/7), else log(1 + x).
GRADIX_HOST_DEVICE constexpr double clog1p(double x) {
  if (cisnan(x) || x < -1) return std::numeric_limits<double>::quiet_NaN();
  if (x == -1) return -std::numeric_limits<double>::infinity();
  if (x == std::numeric_limits<double>::infinity()) return x;
  if (x == 0) return x;  // keeps the sign of -0
  if (x < -0.25 || x > 0.25) return clog(1.0 + x);
  double s = x / (2.0 + x), s2 = s * s, term = s, sum = 0.0;
  for (int n = 1; n < 40; n += 2) {
    sum += term / n;
    term *= s2;
  }
  return 2.0 * sum;
}

/// erf x by its Maclaurin series, for |x| < 3 (at most about 3 digits of cancellation
/// there: ~1e-13 relative).
GRADIX_HOST_DEVICE constexpr double erf_series(double x) {
  constexpr double two_over_sqrt_pi = 1.1283791670955125739;
  double const x2 = x * x;
  double term = x, sum = 0.0;  // term = (-1)^n x^(2n+1) / n!
  for (int n = 0; n < 80; ++n) {
    double const t = term / (2 * n + 1);
    sum += t;
    if ((t < 0 ? -t : t) < 1e-17 * (sum < 0 ? -sum : sum)) break;
    term *= -x2 / (n + 1);
  }
  return two_over_sqrt_pi * sum;
}
/// erfc x: for x >= 1.5 its continued fraction (Laplace), summed from the tail (150 terms:
/// ~1e-16 relative from x = 1.5 on); 2 - erfc(-x) below -1.5; else 1 - erf x (at most 1.5
/// digits of cancellation).
GRADIX_HOST_DEVICE constexpr double cerfc(double x) {
  if (cisnan(x)) return x;
  if (x < -1.5) return 2.0 - cerfc(-x);
  if (x < 1.5) return 1.0 - erf_series(x);
  if (x > 27.3) return 0.0;  // below the least subnormal
  // erfc x = e^-x^2 / sqrt(pi) * 1 / (x + (1/2) / (x + 1 / (x + (3/2) / (x + ...))))
  double f = x;
  for (int k = 150; k >= 1; --k) f = x + (k * 0.5) / f;
  return cexp(-x * x) / (f * 1.7724538509055160273);
}
/// erf x: the series for |x| < 3, else +-(1 - erfc |x|).
GRADIX_HOST_DEVICE constexpr double cerf(double x) {
  if (cisnan(x)) return x;
  if (x > -3.0 && x < 3.0) return erf_series(x);
  return x < 0 ? cerfc(-x) - 1.0 : 1.0 - cerfc(x);
}

/// sin x (cosine = false) or cos x: x = n pi/2 + r by Cody-Waite in three parts (fdlibm's
/// 33-bit pieces of pi/2; a few ulp for |x| < 2^20 pi/2, less accurate beyond), then Taylor
/// series on |r| <= pi/4. NaN for an infinite or NaN argument and for |x| >= 2^52.
GRADIX_HOST_DEVICE constexpr double csincos(double x, bool cosine) {
  if (!cisfinite(x) || x >= 4503599627370496.0 || x <= -4503599627370496.0)
    return std::numeric_limits<double>::quiet_NaN();
  if (x == 0) return cosine ? 1.0 : x;
  double kd = x * 6.36619772367581382433e-01;
  double nd = double(std::int64_t(kd < 0 ? kd - 0.5 : kd + 0.5));
  double r = ((x - nd * 1.57079632673412561417e+00) - nd * 6.07710050650619224932e-11) -
             nd * 2.02226624871116645580e-21;
  int q = int(std::int64_t(nd) & 3) + (cosine ? 1 : 0);
  double r2 = r * r;
  double sum = 0.0;
  if (q & 1) {  // cos r
    double term = 1.0;
    for (int n = 0; n < 12; ++n) {
      sum += term;
      term *= -r2 / ((2 * n + 1) * (2 * n + 2));
    }
  } else {  // sin r
    double term = r;
    for (int n = 0; n < 12; ++n) {
      sum += term;
      term *= -r2 / ((2 * n + 2) * (2 * n + 3));
    }
  }
  return (q & 2) ? -sum : sum;
}
GRADIX_HOST_DEVICE constexpr double csin(double x) { return csincos(x, false); }
GRADIX_HOST_DEVICE constexpr double ccos(double x) { return csincos(x, true); }

/// cos(2 pi u) for u in [0, 1): exact quarter-turn reduction, then Taylor series.
GRADIX_HOST_DEVICE constexpr double ccos_turns(double u) {
  constexpr double two_pi = 6.283185307179586476925286766559;
  // reduce to v in [-1/8, 1/8] turn around the nearest quarter turn q
  int q = int(u * 4.0 + 0.5);
  double v = (u - q * 0.25) * two_pi;  // u - q/4 is exact
  double v2 = v * v;
  auto cos_series = [&] {
    double term = 1.0, sum = 0.0;
    for (int n = 0; n < 12; ++n) {
      sum += term;
      term *= -v2 / ((2 * n + 1) * (2 * n + 2));
    }
    return sum;
  };
  auto sin_series = [&] {
    double term = v, sum = 0.0;
    for (int n = 0; n < 12; ++n) {
      sum += term;
      term *= -v2 / ((2 * n + 2) * (2 * n + 3));
    }
    return sum;
  };
  switch (q & 3) {
    case 0: return cos_series();
    case 1: return -sin_series();
    case 2: return -cos_series();
    default: return sin_series();
  }
}

}  // namespace detail

template <class T>
concept floating = std::is_floating_point_v<T>;

#define GRADIX_MATH_UNARY(name, cimpl, stdname)                          \
  template <floating T>                                                  \
  GRADIX_HOST_DEVICE constexpr T name(T x) {                             \
    if (std::is_constant_evaluated()) return T(detail::cimpl(double(x))); \
    return stdname(x);                                                   \
  }

#if defined(__CUDA_ARCH__)
GRADIX_MATH_UNARY(exp, cexp, ::exp)
GRADIX_MATH_UNARY(log, clog, ::log)
GRADIX_MATH_UNARY(sqrt, csqrt, ::sqrt)
GRADIX_MATH_UNARY(tanh, ctanh, ::tanh)
GRADIX_MATH_UNARY(expm1, cexpm1, ::expm1)
GRADIX_MATH_UNARY(log1p, clog1p, ::log1p)
GRADIX_MATH_UNARY(sin, csin, ::sin)
GRADIX_MATH_UNARY(cos, ccos, ::cos)
GRADIX_MATH_UNARY(erf, cerf, ::erf)
GRADIX_MATH_UNARY(erfc, cerfc, ::erfc)
#else
GRADIX_MATH_UNARY(exp, cexp, std::exp)
GRADIX_MATH_UNARY(log, clog, std::log)
GRADIX_MATH_UNARY(sqrt, csqrt, std::sqrt)
GRADIX_MATH_UNARY(tanh, ctanh, std::tanh)
GRADIX_MATH_UNARY(expm1, cexpm1, std::expm1)
GRADIX_MATH_UNARY(log1p, clog1p, std::log1p)
GRADIX_MATH_UNARY(sin, csin, std::sin)
GRADIX_MATH_UNARY(cos, ccos, std::cos)
GRADIX_MATH_UNARY(erf, cerf, std::erf)
GRADIX_MATH_UNARY(erfc, cerfc, std::erfc)
#endif
#undef GRADIX_MATH_UNARY

/// x^y. In constant evaluation: exp(y log |x|), with the sign of x for integral y.
template <floating T>
GRADIX_HOST_DEVICE constexpr T pow(T x, T y) {
  if (std::is_constant_evaluated()) {
    double xd = x, yd = y;
    if (yd == 0) return T(1);
    if (xd == 0) return yd > 0 ? T(0) : std::numeric_limits<T>::infinity();
    if (xd > 0) return T(detail::cexp(yd * detail::clog(xd)));
    // negative base: defined for integral exponents only
    double yi = double(std::int64_t(yd));
    if (yi != yd) return std::numeric_limits<T>::quiet_NaN();
    double r = detail::cexp(yd * detail::clog(-xd));
    return T((std::int64_t(yd) & 1) ? -r : r);
  }
#if defined(__CUDA_ARCH__)
  return ::pow(x, y);
#else
  return std::pow(x, y);
#endif
}

}  // namespace gradix::math
