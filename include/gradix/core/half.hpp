#pragma once
/// \file
/// Half-width storage types: `gx::bfloat16` (8 exponent bits, 7 mantissa bits: float's range)
/// and `gx::half` (IEEE 754 binary16: 5 exponent bits, 10 mantissa bits, largest 65504).
///
/// Storage only: an expression reads a tensor of either as float (widening is exact) and
/// computes in float; writing a float into one rounds it, to nearest with ties to even (the
/// default, and what a conversion `bfloat16(x)` does), or stochastically
/// (`round_stochastic`: up with probability equal to the distance from the lower neighbour,
/// from counter-based random bits, so the same seed gives the same bits on every thread
/// count and platform). A double is rounded to float first.
///
/// Conversions are written once as integer operations, for scalars (host, device, constant
/// evaluation) and for host SIMD packs; where the target has F16C (`__F16C__`), packs of half
/// convert with its instructions, which give the same bits (tests/core/half_test.cpp checks
/// both paths against each other). bfloat16 narrowing never uses AVX-512 BF16's VCVTNEPS2BF16:
/// it flushes subnormal inputs to zero, so its bits would differ from every other path.
/// `half_isa()` names the path in use.

#include "gradix/config.hpp"
#include "gradix/core/simd.hpp"

#include <bit>
#include <cstdint>
#include <type_traits>

#if defined(GRADIX_HAS_VECTOR_EXT) && defined(__F16C__)
#include <immintrin.h>
#define GRADIX_HAS_F16C 1
#endif

namespace gradix {

namespace half_detail {

GRADIX_HOST_DEVICE constexpr std::uint32_t bits_of(float f) { return std::bit_cast<std::uint32_t>(f); }
GRADIX_HOST_DEVICE constexpr float float_of(std::uint32_t u) { return std::bit_cast<float>(u); }

/// bfloat16 bits -> float (exact).
GRADIX_HOST_DEVICE constexpr float bf16_to_float(std::uint16_t b) { return float_of(std::uint32_t(b) << 16); }
/// float -> bfloat16 bits, to nearest, ties to even; a NaN stays a NaN (made quiet).
GRADIX_HOST_DEVICE constexpr std::uint16_t float_to_bf16(float f) {
  std::uint32_t u = bits_of(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return std::uint16_t((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return std::uint16_t(u >> 16);
}
/// float -> bfloat16 bits, rounding up (away from zero) with probability (|f| - lower) /
/// (upper - lower), r: 16 random bits (the low 16 of r are used). Exact values stay exact.
GRADIX_HOST_DEVICE constexpr std::uint16_t float_to_bf16_stochastic(float f, std::uint32_t r) {
  std::uint32_t u = bits_of(f);
  if ((u & 0x7fffffffu) >= 0x7f800000u) return float_to_bf16(f);  // inf, NaN
  u += r & 0xffffu;
  return std::uint16_t(u >> 16);
}

/// binary16 bits -> float (exact); a NaN keeps its payload and is made quiet (as F16C does).
GRADIX_HOST_DEVICE constexpr float half_to_float(std::uint16_t h) {
  std::uint32_t const s = std::uint32_t(h & 0x8000u) << 16;
  std::uint32_t const e = (h >> 10) & 0x1fu;
  std::uint32_t const m = h & 0x3ffu;
  if (e == 0x1f) return float_of(s | 0x7f800000u | (m << 13) | (m ? 0x400000u : 0u));
  if (e == 0) {
    float const v = float(m) * 5.9604644775390625e-8f;  // m * 2^-24, exact
    return s ? -v : v;
  }
  return float_of(s | ((e + 112u) << 23) | (m << 13));
}
/// float -> binary16 bits, to nearest, ties to even (overflow to infinity, subnormal
/// results rounded on their own grid); a NaN keeps its payload's top bits and is made quiet.
GRADIX_HOST_DEVICE constexpr std::uint16_t float_to_half(float f) {
  std::uint32_t const u = bits_of(f);
  std::uint16_t const s = std::uint16_t((u >> 16) & 0x8000u);
  std::uint32_t const a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return std::uint16_t(s | 0x7e00u | ((a >> 13) & 0x3ffu));
  if (a >= 0x477ff000u) return std::uint16_t(s | 0x7c00u);  // >= 65520: infinity
  if (a < 0x38800000u) {                                    // below 2^-14: subnormal or zero
    std::uint32_t const e = a >> 23;
    std::uint32_t const shift = 126u - e;  // value * 2^24 = m * 2^-(126 - e)
    if (e == 0 || shift > 24u) return s;   // below 2^-25 (or exactly it: ties to 0)
    std::uint32_t const m = (a & 0x7fffffu) | 0x800000u;
    std::uint32_t r = m >> shift;
    std::uint32_t const rem = m & ((1u << shift) - 1u), halfway = 1u << (shift - 1u);
    if (rem > halfway || (rem == halfway && (r & 1u))) ++r;
    return std::uint16_t(s | r);
  }
  std::uint32_t v = a - 0x38000000u;  // exponent rebiased from 127 to 15
  v += 0xfffu + ((v >> 13) & 1u);
  return std::uint16_t(s | (v >> 13));
}
/// float -> binary16 bits, rounding away from zero with probability (|f| - lower) /
/// (upper - lower); r: 32 random bits. Exact values stay exact; NaN and infinity as rounding
/// to nearest; beyond 65504 the upper neighbour is infinity.
GRADIX_HOST_DEVICE constexpr std::uint16_t float_to_half_stochastic(float f, std::uint32_t r) {
  std::uint32_t const u = bits_of(f);
  std::uint32_t const a = u & 0x7fffffffu;
  if (a >= 0x47800000u) return float_to_half(f);  // >= 65536 (infinity), inf, NaN
  if (a >= 0x38800000u) {  // normal: 13 dropped bits, the carry moves into the exponent
    std::uint32_t const t = (u + (r & 0x1fffu)) & ~0x1fffu;
    return float_to_half(float_of(t));  // exact (or 65536: infinity)
  }
  // subnormal: the grid is 2^-24; up with probability frac(|f| * 2^24)
  float const sc = float_of(a) * 16777216.0f;  // exact
  float const lo = float(std::uint32_t(sc));
  double const frac = double(sc - lo);  // exact
  std::uint32_t const q = std::uint32_t(lo) + (double(r) < frac * 4294967296.0 ? 1u : 0u);
  return std::uint16_t(((u >> 16) & 0x8000u) | q);
}

}  // namespace half_detail

/// 16-bit brain floating point (storage; see the file comment). A float converts to it by
/// rounding to nearest, ties to even; it converts to float exactly.
struct bfloat16 {
  std::uint16_t bits_;  // (trivial default construction, as float's: bfloat16{} is 0)
  constexpr bfloat16() = default;
  GRADIX_HOST_DEVICE constexpr bfloat16(float f) : bits_(half_detail::float_to_bf16(f)) {}
  GRADIX_HOST_DEVICE constexpr operator float() const { return half_detail::bf16_to_float(bits_); }
  GRADIX_HOST_DEVICE static constexpr bfloat16 from_bits(std::uint16_t b) {
    bfloat16 r{};
    r.bits_ = b;
    return r;
  }
  GRADIX_HOST_DEVICE constexpr std::uint16_t bits() const { return bits_; }
};

/// IEEE 754 binary16 (storage; see the file comment). A float converts to it by rounding to
/// nearest, ties to even (beyond 65504: infinity); it converts to float exactly.
struct half {
  std::uint16_t bits_;  // (trivial default construction, as float's: half{} is 0)
  constexpr half() = default;
  GRADIX_HOST_DEVICE constexpr half(float f) : bits_(half_detail::float_to_half(f)) {}
  GRADIX_HOST_DEVICE constexpr operator float() const { return half_detail::half_to_float(bits_); }
  GRADIX_HOST_DEVICE static constexpr half from_bits(std::uint16_t b) {
    half r{};
    r.bits_ = b;
    return r;
  }
  GRADIX_HOST_DEVICE constexpr std::uint16_t bits() const { return bits_; }
};

static_assert(sizeof(bfloat16) == 2 && sizeof(half) == 2 && std::is_trivial_v<bfloat16> && std::is_trivial_v<half>);

/// True for gx::bfloat16 and gx::half (cv-qualified too).
template <class T>
inline constexpr bool is_half_width_v =
    std::is_same_v<std::remove_cv_t<T>, bfloat16> || std::is_same_v<std::remove_cv_t<T>, half>;

/// The type an expression computes a stored T in: float for the half-width types, T otherwise.
template <class T>
using compute_type_t = std::conditional_t<is_half_width_v<T>, float, std::remove_cv_t<T>>;

/// Rounds f into a half-width type H, stochastically: `r` random bits (32; bfloat16 uses 16).
template <class H>
GRADIX_HOST_DEVICE constexpr H round_stochastic(float f, std::uint32_t r) {
  static_assert(is_half_width_v<H>, "gradix::round_stochastic: the target is gx::bfloat16 or gx::half");
  if constexpr (std::is_same_v<H, bfloat16>) return bfloat16::from_bits(half_detail::float_to_bf16_stochastic(f, r));
  else return half::from_bits(half_detail::float_to_half_stochastic(f, r));
}

/// How an optimizer's update rounds into a half-width parameter (`p.set_rounding(r)`):
/// to nearest, ties to even (the default), or stochastically from counter-based random bits:
/// the bits for element k at a parameter's n-th update are rng::bits(rng::bits(seed, n), k)
/// (core/rng.hpp), k the element's offset in the value tensor: the same for any thread count.
struct rounding {
  bool stochastic = false;
  std::uint64_t seed = 0;
  friend constexpr bool operator==(rounding const&, rounding const&) = default;
};
/// Round to nearest, ties to even.
inline constexpr rounding nearest_even_rounding{};
/// Seeded stochastic rounding.
constexpr rounding stochastic_rounding(std::uint64_t seed) { return rounding{true, seed}; }

/// How host packs of half-width values convert in this translation unit.
inline constexpr char const* half_isa() {
#if defined(GRADIX_HAS_F16C) && defined(__AVX512F__)
  return "half: F16C (AVX-512, 16 lanes); bfloat16: AVX-512 zero-extension to 16 lanes, integer packs to round";
#elif defined(GRADIX_HAS_F16C)
  return "half: F16C; bfloat16: integer packs";
#elif defined(GRADIX_HAS_VECTOR_EXT) && defined(__AVX512F__)
  return "half: integer packs; bfloat16: AVX-512 zero-extension to 16 lanes, integer packs to round";
#elif defined(GRADIX_HAS_VECTOR_EXT)
  return "half, bfloat16: integer packs";
#else
  return "half, bfloat16: scalar";
#endif
}

#if defined(GRADIX_HAS_VECTOR_EXT)
namespace simd {

/// W half-width values from p, widened to a pack of float.
template <class H, int W>
GRADIX_ALWAYS_INLINE pack<float, W> widen(H const* p) {
  static_assert(is_half_width_v<H>);
  using U16 = pack<std::uint16_t, W>;
  using U32 = pack<std::uint32_t, W>;
  U16 b;
  std::memcpy(&b, p, sizeof(b));
  if constexpr (std::is_same_v<std::remove_cv_t<H>, bfloat16>) {
#if defined(__AVX512F__)
    if constexpr (W == 16) {
      // one zero-extension of all 16 lanes and a shift (g++ 12 lowers the portable form
      // below into two 8-lane extensions and an insert at this width); zero-masked forms
      // with every lane on, as for half below (the unmasked ones merge into an undefined
      // register that g++ 12 reports as maybe-uninitialized)
      __m256i h;
      std::memcpy(&h, &b, sizeof(h));
      __m512i const u =
          _mm512_maskz_slli_epi32(__mmask16(0xFFFF), _mm512_maskz_cvtepu16_epi32(__mmask16(0xFFFF), h), 16);
      pack<float, W> r;
      std::memcpy(&r, &u, sizeof(r));
      return r;
    }
#endif
    U32 const u = __builtin_convertvector(b, U32) << 16;
    pack<float, W> r;
    std::memcpy(&r, &u, sizeof(r));
    return r;
  } else {
#if defined(GRADIX_HAS_F16C)
    if constexpr (W == 8) {
      __m128i h;
      std::memcpy(&h, &b, sizeof(h));
      __m256 const f = _mm256_cvtph_ps(h);
      pack<float, W> r;
      std::memcpy(&r, &f, sizeof(r));
      return r;
    }
#if defined(__AVX512F__)
    if constexpr (W == 16) {
      __m256i h;
      std::memcpy(&h, &b, sizeof(h));
      // (the zero-masked form with every lane on: the same instruction and result;
      // _mm512_cvtph_ps passes _mm512_undefined_ps() as the merge source, which g++ 12
      // reports as maybe-uninitialized where it is inlined, an error with -Werror)
      __m512 const f = _mm512_maskz_cvtph_ps(__mmask16(0xFFFF), h);
      pack<float, W> r;
      std::memcpy(&r, &f, sizeof(r));
      return r;
    }
#endif
#endif
    pack<float, W> r{};
    for (int w = 0; w < W; ++w) r[w] = half_detail::half_to_float(b[w]);
    return r;
  }
}

/// A pack of float rounded to nearest (ties to even) into W half-width values at p.
template <class H, int W>
GRADIX_ALWAYS_INLINE void narrow(H* p, pack<float, W> const& v) {
  static_assert(is_half_width_v<H>);
  using U32 = pack<std::uint32_t, W>;
  using U16 = pack<std::uint16_t, W>;
  if constexpr (std::is_same_v<H, bfloat16>) {
    U32 u;
    std::memcpy(&u, &v, sizeof(u));
    U32 const a = u & 0x7fffffffu;
    U32 const nan = (u >> 16) | 0x40u;
    U32 const rne = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    U32 const r = (a > 0x7f800000u) ? nan : rne;  // (vector ?: selects lane by lane)
    U16 const h = __builtin_convertvector(r, U16);
    std::memcpy(static_cast<void*>(p), &h, sizeof(h));
  } else {
#if defined(GRADIX_HAS_F16C)
    if constexpr (W == 8) {
      __m256 f;
      std::memcpy(&f, &v, sizeof(f));
      __m128i const h = _mm256_cvtps_ph(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      std::memcpy(static_cast<void*>(p), &h, sizeof(h));
      return;
    }
#if defined(__AVX512F__)
    if constexpr (W == 16) {
      __m512 f;
      std::memcpy(&f, &v, sizeof(f));
      // (zero-masked with every lane on, as widen's conversion above)
      __m256i const h = _mm512_maskz_cvtps_ph(__mmask16(0xFFFF), f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      std::memcpy(static_cast<void*>(p), &h, sizeof(h));
      return;
    }
#endif
#endif
    U16 h{};
    for (int w = 0; w < W; ++w) h[w] = half_detail::float_to_half(v[w]);
    std::memcpy(static_cast<void*>(p), &h, sizeof(h));
  }
}

/// W values of storage type S at p as its compute type: a plain load, or widened (exact)
/// when S is half-width. What every SIMD path reading stored values uses.
template <class S, int W>
GRADIX_ALWAYS_INLINE pack<compute_type_t<S>, W> load_wide(S const* p) {
  if constexpr (is_half_width_v<S>) return widen<std::remove_cv_t<S>, W>(p);
  else return load<std::remove_cv_t<S>, W>(p);
}

/// Stores a pack of S's compute type as W values of S at p: a plain store, or rounded to
/// nearest (ties to even) when S is half-width, the bits of S(x) element by element.
template <class S, int W>
GRADIX_ALWAYS_INLINE void store_narrow(S* p, pack<compute_type_t<S>, W> const& v) {
  if constexpr (is_half_width_v<S>) narrow<S, W>(p, v);
  else store<S, W>(p, v);
}

}  // namespace simd
#endif

}  // namespace gradix
