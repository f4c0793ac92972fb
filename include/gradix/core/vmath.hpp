#pragma once
/// \file
/// gradix's own float elementary functions: one polynomial for a scalar and for a whole host
/// SIMD pack, on the host, on the device and in constant evaluation, so an element's result
/// never depends on where it falls (a pack, a loop tail, a GPU lane, a static_assert).
///
/// Each function is written once over X = float or a pack of floats, with branch-free
/// selects; the coefficients are the classic minimax fits on the reduced ranges (Cephes'
/// single-precision sets). Error bounds against a double-precision reference (in ulps of the
/// float nearest to it; for subnormal results, of their spacing), stated and asserted by
/// tests/core/vmath_test.cpp (every 997th bit pattern of the whole float range), with the
/// worst error measured over every bit pattern (g++ 12 -O2 -march=native, AVX-512;
/// docs/performance.md):
///
///   function   stated bound   worst measured
///   exp        1.02 ulp       1.010 ulp
///   log        1 ulp          0.827 ulp
///   tanh       2 ulp          1.330 ulp
///   sigmoid    2.5 ulp        2.402 ulp
///   expm1      1.5 ulp        1.281 ulp
///   log1p      1 ulp          0.898 ulp
///   sin, cos   1.5 ulp        1.309, 1.316 ulp   for |x| < 2^25 = 33,554,432; NaN beyond
///
/// sin and cos reduce x = n pi/2 + r exactly enough for every float below 2^25 (Cody-Waite in
/// double, three parts); beyond, where floats are 4 or more apart, gradix has no Payne-Hanek
/// reduction and returns NaN, as for +-inf.
///
/// Special values follow C: exp(+inf) = +inf, exp(-inf) = 0, expm1(-inf) = -1, log(0) =
/// log1p(-1) = -inf, log(x < 0) = log1p(x < -1) = NaN, log(+inf) = log1p(+inf) = +inf,
/// tanh(+-inf) = +-1, expm1, log1p and sin keep the sign of -0, NaN in gives NaN out. Double
/// precision keeps the platform's functions (math.hpp), on every path alike.

#include "gradix/config.hpp"
#include "gradix/core/simd.hpp"

#include <bit>
#include <cstdint>
#include <type_traits>

namespace gradix::vmath {

/// GRADIX_VMATH_KERNEL marks every function that the out-of-line kernels below are made of.
/// They are pure arithmetic on values (no memory is read or written), so under
/// AddressSanitizer, ThreadSanitizer and UBSan they are left uninstrumented: all of them,
/// because g++ and clang refuse to inline (g++: an error for always_inline) a function
/// whose sanitizer attributes differ from its caller's. Without a sanitizer it changes
/// nothing. Not under nvcc (device code has no sanitizers).
#if (defined(__GNUC__) || defined(__clang__)) && !defined(__CUDACC__)
#define GRADIX_VMATH_KERNEL __attribute__((no_sanitize("address", "thread", "undefined")))
#else
#define GRADIX_VMATH_KERNEL
#endif
/// The attributes of a building block of the functions.
#define GRADIX_VMATH_FN GRADIX_HOST_DEVICE GRADIX_ALWAYS_INLINE GRADIX_VMATH_KERNEL constexpr

namespace detail {

/// Is X a float or a pack of floats?
template <class X>
inline constexpr bool is_float_like = [] {
  if constexpr (std::is_same_v<X, float>) return true;
  else if constexpr (simd::vector_ext<X>) return std::is_same_v<std::remove_cvref_t<decltype(X{}[0])>, float>;
  else return false;
}();

/// Lanes of X (1 for a scalar).
template <class X>
inline constexpr int lanes_v = int(sizeof(X) / sizeof(float));

template <class X>
GRADIX_VMATH_FN auto to_bits(X x) {
  if constexpr (simd::vector_ext<X>) {
#if defined(GRADIX_HAS_VECTOR_EXT)
    using I = simd::pack<std::int32_t, lanes_v<X>>;
    return (I)x;
#endif
  } else {
    return std::bit_cast<std::int32_t>(x);
  }
}
template <class X, class I>
GRADIX_VMATH_FN X from_bits(I i) {
  if constexpr (simd::vector_ext<X>) return (X)i;
  else return std::bit_cast<float>(i);
}
/// v in every lane of V (a scalar: v). A vector-scalar operation, not a loop over lanes:
/// unoptimised or at -O1, the loop went through memory for every constant, and a
/// store-forwarding stall for each made the functions about 20x slower (the -O1 test
/// builds, worst under the sanitizers).
template <class V, class S>
GRADIX_VMATH_FN V splat(S v) {
  if constexpr (simd::vector_ext<V>) return v - V{};  // v - 0 keeps the sign of -0
  else return V(v);
}
template <class X, class I>
GRADIX_VMATH_FN I ibroadcast(std::int32_t v) {
  return splat<I>(v);
}
/// m ? a : b lane by lane (m: a comparison of X values).
template <class X, class M>
GRADIX_VMATH_FN X sel(M m, X a, X b) {
  if constexpr (simd::vector_ext<X>) {
    auto ia = to_bits(a), ib = to_bits(b);
    return from_bits<X>((ia & m) | (ib & ~m));
  } else {
    return m ? a : b;
  }
}
template <class X>
GRADIX_VMATH_FN X c(float v) {
  return splat<X>(v);
}
/// 2^k as a float for k in [-126, 127] (k an int or an int pack).
template <class X, class I>
GRADIX_VMATH_FN X pow2(I k) {
  return from_bits<X>((k + ibroadcast<X, I>(127)) << 23);
}
/// m ? a : b lane by lane for ints (or int packs).
template <class I, class M>
GRADIX_VMATH_FN I isel(M m, I a, I b) {
  if constexpr (simd::vector_ext<I>) return (a & m) | (b & ~m);
  else return m ? a : b;
}

}  // namespace detail

namespace impl {
using namespace detail;
/// e^x for float (or a pack of floats).
template <class X>
  requires detail::is_float_like<X>
GRADIX_VMATH_FN X exp_impl(X x) {
  using namespace detail;
  // clamp so the reduction below stays in range; out-of-range lanes are fixed at the end
  // (above: 0, whose result is discarded, so that constant evaluation never overflows)
  X xc = sel(x > c<X>(88.7228394f), c<X>(0.f), x);
  xc = sel(xc < c<X>(-103.972084f), c<X>(-103.972084f), xc);
  xc = sel(x != x, c<X>(0.f), xc);
  // n = round(x / ln 2) (the 1.5 * 2^23 shift rounds to nearest on every path)
  X t = xc * c<X>(1.44269504088896341f) + c<X>(12582912.f);
  auto n = to_bits(t) - to_bits(c<X>(12582912.f));
  X nf = t - c<X>(12582912.f);
  // r = x - n ln 2 in two parts (n * 0.693359375 is exact)
  X r = xc - nf * c<X>(0.693359375f);
  r = r - nf * c<X>(-2.12194440e-4f);
  X p = c<X>(1.9875691500e-4f);
  p = p * r + c<X>(1.3981999507e-3f);
  p = p * r + c<X>(8.3334519073e-3f);
  p = p * r + c<X>(4.1665795894e-2f);
  p = p * r + c<X>(1.6666665459e-1f);
  p = p * r + c<X>(5.0000001201e-1f);
  X e = p * (r * r) + r + c<X>(1.f);
  // e * 2^n in two steps so that n in [-150, 128] stays representable
  auto n1 = n >> 1;
  auto n2 = n - n1;
  X y = e * pow2<X>(n1) * pow2<X>(n2);
  y = sel(x > c<X>(88.7228394f), c<X>(__builtin_huge_valf()), y);
  y = sel(x < c<X>(-103.972084f), c<X>(0.f), y);
  return sel(x != x, x, y);
}

/// Natural logarithm for float (or a pack of floats).
template <class X>
  requires detail::is_float_like<X>
GRADIX_VMATH_FN X log_impl(X x) {
  using namespace detail;
  // subnormals: scale by 2^23 first
  auto sub = x < c<X>(1.17549435e-38f);
  X xs = sel(sub, x * c<X>(8388608.f), x);
  auto bits = to_bits(xs);
  using I = decltype(bits);
  // x = m 2^e with m in [0.5, 1)
  I e = ((bits >> 23) & ibroadcast<X, I>(0xff)) - ibroadcast<X, I>(126);
  if constexpr (simd::vector_ext<X>) e = e - (sub & ibroadcast<X, I>(23));  // 23 when scaled
  else e = e - (sub ? 23 : 0);
  X m = from_bits<X>((bits & ibroadcast<X, I>(0x007fffff)) | ibroadcast<X, I>(0x3f000000));
  // m in [sqrt(1/2), sqrt(2)): f = m - 1
  auto small = m < c<X>(0.707106781186547524f);
  X ef = X{};
  if constexpr (simd::vector_ext<X>) ef = __builtin_convertvector(e, X);
  else ef = float(e);
  ef = sel(small, ef - c<X>(1.f), ef);
  X f = sel(small, m + m - c<X>(1.f), m - c<X>(1.f));
  X z = f * f;
  X y = c<X>(7.0376836292e-2f);
  y = y * f + c<X>(-1.1514610310e-1f);
  y = y * f + c<X>(1.1676998740e-1f);
  y = y * f + c<X>(-1.2420140846e-1f);
  y = y * f + c<X>(1.4249322787e-1f);
  y = y * f + c<X>(-1.6668057665e-1f);
  y = y * f + c<X>(2.0000714765e-1f);
  y = y * f + c<X>(-2.4999993993e-1f);
  y = y * f + c<X>(3.3333331174e-1f);
  y = y * f * z;
  y = y + ef * c<X>(-2.12194440e-4f);
  y = y - c<X>(0.5f) * z;
  X r = f + y;
  r = r + ef * c<X>(0.693359375f);
  r = sel(x == c<X>(0.f), c<X>(-__builtin_huge_valf()), r);
  r = sel(x < c<X>(0.f), c<X>(__builtin_nanf("")), r);
  r = sel(x == c<X>(__builtin_huge_valf()), x, r);
  return sel(x != x, x, r);
}

/// Hyperbolic tangent for float (or a pack of floats).
template <class X>
  requires detail::is_float_like<X>
GRADIX_VMATH_FN X tanh_impl(X x) {
  using namespace detail;
  X a = sel(x < c<X>(0.f), -x, x);
  // |x| < 0.625: odd polynomial
  X z = x * x;
  X p = c<X>(-5.70498872745e-3f);
  p = p * z + c<X>(2.06390887954e-2f);
  p = p * z + c<X>(-5.37397155531e-2f);
  p = p * z + c<X>(1.33314422036e-1f);
  p = p * z + c<X>(-3.33332819422e-1f);
  X small = p * z * x + x;
  // else 1 - 2 / (e^(2|x|) + 1), with the sign of x (1 beyond 9)
  X e = exp_impl(sel(a > c<X>(9.f), c<X>(18.f), a + a));
  X big = c<X>(1.f) - c<X>(2.f) / (e + c<X>(1.f));
  big = sel(a > c<X>(9.f), c<X>(1.f), big);
  big = sel(x < c<X>(0.f), -big, big);
  X r = sel(a < c<X>(0.625f), small, big);
  return sel(x != x, x, r);
}

/// The logistic function 1 / (1 + e^-x) for float (or a pack of floats).
template <class X>
  requires detail::is_float_like<X>
GRADIX_VMATH_FN X sigmoid_impl(X x) {
  using namespace detail;
  // e = e^-|x| never overflows: x >= 0 gives 1 / (1 + e), x < 0 gives e / (1 + e)
  X e = exp_impl(sel(x < c<X>(0.f), x, -x));
  X r = sel(x < c<X>(0.f), e, c<X>(1.f)) / (c<X>(1.f) + e);
  return sel(x != x, x, r);
}

/// e^x - 1 for float (or a pack of floats): accurate near 0, where e^x - 1 cancels.
template <class X>
  requires detail::is_float_like<X>
GRADIX_VMATH_FN X expm1_impl(X x) {
  using namespace detail;
  // the reduction and polynomial of exp: x = n ln 2 + r, e^r - 1 = r + r^2 p(r). Below -20
  // the result rounds to -1; the clamp keeps 2^n a normal float.
  X xc = sel(x > c<X>(88.7228394f), c<X>(0.f), x);  // inf: set at the end
  xc = sel(xc < c<X>(-20.f), c<X>(-20.f), xc);
  xc = sel(x != x, c<X>(0.f), xc);
  X t = xc * c<X>(1.44269504088896341f) + c<X>(12582912.f);
  auto n = to_bits(t) - to_bits(c<X>(12582912.f));
  X nf = t - c<X>(12582912.f);
  X r = xc - nf * c<X>(0.693359375f);
  r = r - nf * c<X>(-2.12194440e-4f);
  X p = c<X>(1.9875691500e-4f);
  p = p * r + c<X>(1.3981999507e-3f);
  p = p * r + c<X>(8.3334519073e-3f);
  p = p * r + c<X>(4.1665795894e-2f);
  p = p * r + c<X>(1.6666665459e-1f);
  p = p * r + c<X>(5.0000001201e-1f);
  X pr2 = p * (r * r);
  // e^x - 1 = (2^n - 1) + 2^n r + 2^n r^2 p(r): 2^n - 1 (exact for n <= 24) and 2^n r are
  // added first, so that the small term's rounding is not scaled up. n = 128 (x above
  // 88.38) has no float 2^n: (1 + r + r^2 p) 2^(n/2) 2^(n - n/2) there, as exp does.
  using I = decltype(n);
  auto top = n > ibroadcast<X, I>(127);
  X s = pow2<X>(isel(top, ibroadcast<X, I>(127), n));
  X y = ((s - c<X>(1.f)) + s * r) + s * pr2;
  auto n1 = n >> 1;
  X big = (pr2 + r + c<X>(1.f)) * pow2<X>(n1) * pow2<X>(n - n1);
  y = sel(top, big, y);
  y = sel(x > c<X>(88.7228394f), c<X>(__builtin_huge_valf()), y);
  y = sel(x == c<X>(0.f), x, y);  // keeps the sign of -0
  return sel(x != x, x, y);
}

/// log(1 + x) for float (or a pack of floats): accurate near 0.
template <class X>
  requires detail::is_float_like<X>
GRADIX_VMATH_FN X log1p_impl(X x) {
  using namespace detail;
  // log(u) for u = 1 + x as log does, plus (x - (u - 1)) / u: the rounding error of 1 + x
  // (exact below 2^24, negligible above), to first order.
  // arguments outside (-1, inf) (and NaN) compute log1p(0); their results are set below
  X xs = sel(x > c<X>(-1.f), x, c<X>(0.f));
  xs = sel(xs < c<X>(__builtin_huge_valf()), xs, c<X>(0.f));
  X u = xs + c<X>(1.f);
  X cu = xs - (u - c<X>(1.f));
  auto bits = to_bits(u);
  using I = decltype(bits);
  // u = m 2^e with m in [0.5, 1); u >= 2^-24 unless it is 0 (x = -1) or x < -1
  I e = ((bits >> 23) & ibroadcast<X, I>(0xff)) - ibroadcast<X, I>(126);
  X m = from_bits<X>((bits & ibroadcast<X, I>(0x007fffff)) | ibroadcast<X, I>(0x3f000000));
  auto small = m < c<X>(0.707106781186547524f);
  X ef = X{};
  if constexpr (simd::vector_ext<X>) ef = __builtin_convertvector(e, X);
  else ef = float(e);
  ef = sel(small, ef - c<X>(1.f), ef);
  X f = sel(small, m + m - c<X>(1.f), m - c<X>(1.f));
  X z = f * f;
  X y = c<X>(7.0376836292e-2f);
  y = y * f + c<X>(-1.1514610310e-1f);
  y = y * f + c<X>(1.1676998740e-1f);
  y = y * f + c<X>(-1.2420140846e-1f);
  y = y * f + c<X>(1.4249322787e-1f);
  y = y * f + c<X>(-1.6668057665e-1f);
  y = y * f + c<X>(2.0000714765e-1f);
  y = y * f + c<X>(-2.4999993993e-1f);
  y = y * f + c<X>(3.3333331174e-1f);
  y = y * f * z;
  y = y + ef * c<X>(-2.12194440e-4f);
  y = y - c<X>(0.5f) * z;
  y = y + cu / u;
  X r = f + y;
  r = r + ef * c<X>(0.693359375f);
  r = sel(x == c<X>(-1.f), c<X>(-__builtin_huge_valf()), r);
  r = sel(x < c<X>(-1.f), c<X>(__builtin_nanf("")), r);
  r = sel(x == c<X>(__builtin_huge_valf()), x, r);
  r = sel(x == c<X>(0.f), x, r);  // keeps the sign of -0
  return sel(x != x, x, r);
}

/// sin x (Cos false) or cos x (Cos true) for float (or a pack of floats), |x| < 2^25.
template <bool Cos, class X>
  requires detail::is_float_like<X>
GRADIX_VMATH_FN X sincos_impl(X x) {
  using namespace detail;
  // Cody-Waite reduction in double, in three parts: x = n pi/2 + r, |r| <= pi/4. The first
  // two parts of pi/2 have 28 and 25 significant bits, so n C1 and n C2 are exact for
  // |n| < 2^25 and x - n C1 is exact (Sterbenz): r is x's remainder to about 2^-52 relative
  // for every float below 2^25 (C1 + C2 + C3 is pi/2 to 2^-110). Beyond 2^25 gradix has
  // no wider reduction (Payne-Hanek): NaN there, as for +-inf.
  X a = sel(x < c<X>(0.f), -x, x);
  auto in_range = a < c<X>(33554432.f);
  X xr = sel(in_range, x, c<X>(0.f));
  using I = decltype(to_bits(x));
  X rh{}, rl{};
  I q{};
  if constexpr (simd::vector_ext<X>) {
#if defined(GRADIX_HAS_VECTOR_EXT)
    using D = simd::pack<double, lanes_v<X>>;
    using L = simd::pack<std::int64_t, lanes_v<X>>;
    D xd = __builtin_convertvector(xr, D);
    D t = xd * 0x1.45f306dc9c883p-1 + 0x1.8p52;  // 2/pi; 1.5 2^52 rounds to an integer
    D nd = t - 0x1.8p52;
    D rd = xd - nd * 0x1.921fb54p+0;
    rd = rd - nd * 0x1.10b461p-30;
    rd = rd - nd * 0x1.a62633145c06ep-58;
    rh = __builtin_convertvector(rd, X);
    rl = __builtin_convertvector(rd - __builtin_convertvector(rh, D), X);
    q = __builtin_convertvector(((L)t) & 3, I);  // n mod 4: the low bits of t
#endif
  } else {
    double xd = double(xr);
    double t = xd * 0x1.45f306dc9c883p-1 + 0x1.8p52;
    double nd = t - 0x1.8p52;
    double rd = xd - nd * 0x1.921fb54p+0;
    rd = rd - nd * 0x1.10b461p-30;
    rd = rd - nd * 0x1.a62633145c06ep-58;
    rh = float(rd);
    rl = float(rd - double(rh));
    q = std::int32_t(std::bit_cast<std::int64_t>(t) & 3);
  }
  if constexpr (Cos) q = q + ibroadcast<X, I>(1);  // cos x = sin(x + pi/2)
  // sin r and cos r on [-pi/4, pi/4] (Cephes' single-precision sets), evaluated at the
  // float rh, with the rest rl of r added to first order
  X z = rh * rh;
  X s = c<X>(-1.9515295891e-4f);
  s = s * z + c<X>(8.3321608736e-3f);
  s = s * z + c<X>(-1.6666654611e-1f);
  s = s * z * rh + rh;
  s = s + rl * (c<X>(1.f) - c<X>(0.5f) * z);
  X co = c<X>(2.443315711809948e-5f);
  co = co * z + c<X>(-1.388731625493765e-3f);
  co = co * z + c<X>(4.166664568298827e-2f);
  co = co * z * z;
  co = co - c<X>(0.5f) * z;
  co = co + c<X>(1.f);
  co = co - rl * rh;
  // quadrant: sin x = sin r, cos r, -sin r, -cos r for n mod 4 = 0, 1, 2, 3
  X y = sel((q & ibroadcast<X, I>(1)) != ibroadcast<X, I>(0), co, s);
  y = sel((q & ibroadcast<X, I>(2)) != ibroadcast<X, I>(0), -y, y);
  if constexpr (!Cos) y = sel(x == c<X>(0.f), x, y);  // keeps the sign of -0
  y = sel(in_range, y, c<X>(__builtin_nanf("")));
  return sel(x != x, x, y);
}
/// Sine for float (or a pack of floats); NaN for |x| >= 2^25.
template <class X>
  requires detail::is_float_like<X>
GRADIX_VMATH_FN X sin_impl(X x) {
  return sincos_impl<false>(x);
}
/// Cosine for float (or a pack of floats); NaN for |x| >= 2^25.
template <class X>
  requires detail::is_float_like<X>
GRADIX_VMATH_FN X cos_impl(X x) {
  return sincos_impl<true>(x);
}

}  // namespace impl

/// On the host, outside constant evaluation, the functions run out of line, once per pack
/// width: inlined into every use they made deep expressions slow to compile (each inlined
/// tanh is about a hundred instructions, and a kernel nest repeats its body several times)
/// for no measurable gain. The scalar path runs the pack code on a 4-lane pack, so the
/// compiler makes the same choices (contracting a product and a sum into an FMA, or not) for
/// a scalar, a loop tail and a full pack: an element's bits never depend on where it falls.
#if defined(GRADIX_HAS_VECTOR_EXT) && !defined(__CUDA_ARCH__)
#define GRADIX_VMATH_PUBLIC(name)                                                    \
  namespace impl {                                                                   \
  template <class X>                                                                 \
  [[gnu::noinline]] GRADIX_VMATH_KERNEL X name##_out(X x) {                          \
    return name##_impl(x);                                                           \
  }                                                                                  \
  }                                                                                  \
  template <class X>                                                                 \
    requires detail::is_float_like<X>                                                \
  GRADIX_HOST_DEVICE GRADIX_ALWAYS_INLINE constexpr X name(X x) {                    \
    if (std::is_constant_evaluated()) return impl::name##_impl(x);                   \
    if constexpr (simd::vector_ext<X>) {                                             \
      return impl::name##_out(x);                                                    \
    } else {                                                                         \
      simd::pack<float, 4> p = {x, x, x, x};                                         \
      return impl::name##_out(p)[0];                                                 \
    }                                                                                \
  }
#else
#define GRADIX_VMATH_PUBLIC(name)                                                    \
  template <class X>                                                                 \
    requires detail::is_float_like<X>                                                \
  GRADIX_HOST_DEVICE GRADIX_ALWAYS_INLINE constexpr X name(X x) {                    \
    return impl::name##_impl(x);                                                     \
  }
#endif
/// e^x
GRADIX_VMATH_PUBLIC(exp)
/// natural logarithm
GRADIX_VMATH_PUBLIC(log)
/// hyperbolic tangent
GRADIX_VMATH_PUBLIC(tanh)
/// the logistic function 1 / (1 + e^-x)
GRADIX_VMATH_PUBLIC(sigmoid)
/// e^x - 1
GRADIX_VMATH_PUBLIC(expm1)
/// log(1 + x)
GRADIX_VMATH_PUBLIC(log1p)
/// sine; NaN for |x| >= 2^25
GRADIX_VMATH_PUBLIC(sin)
/// cosine; NaN for |x| >= 2^25
GRADIX_VMATH_PUBLIC(cos)
#undef GRADIX_VMATH_PUBLIC
#undef GRADIX_VMATH_FN

}  // namespace gradix::vmath
