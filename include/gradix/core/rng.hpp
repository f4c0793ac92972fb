#pragma once
/// \file
/// gradix's counter-based random number generator.
///
/// The value at element k of a tensor filled with seed s is a pure function of (s, k), where
/// k is the element's logical row-major linear index (whatever the storage layout). So the
/// same seed gives the same values on every platform, for any thread count and layout.
///
///   k            = mix(s + 0x9E3779B97F4A7C15)                       mix: the SplitMix64 finalizer
///   bits(s, c)   = mix(mix(c * 0xD1B54A32D192ED03 + k) ^ k)        (all arithmetic mod 2^64)
///   uniform01(k) = (bits(s, k) >> 11) * 2^-53                       in [0, 1)
///   normal(k)    = sqrt(-2 log u1) cos(2 pi u2),  u1 = 1 - uniform01 of counter 2k (in (0, 1]),
///                                                 u2 = uniform01 of counter 2k + 1
/// computed in double with gradix's own log, cos and sqrt (IEEE basic operations in a fixed
/// order, no platform libm), then rounded to the element type.

#include "gradix/config.hpp"
#include "gradix/core/math.hpp"

#include <cstdint>

namespace gradix::rng {

GRADIX_HOST_DEVICE constexpr std::uint64_t mix(std::uint64_t z) {
  z ^= z >> 30;
  z *= 0xBF58476D1CE4E5B9ULL;
  z ^= z >> 27;
  z *= 0x94D049BB133111EBULL;
  z ^= z >> 31;
  return z;
}

/// 64 random bits for counter c under seed s.
GRADIX_HOST_DEVICE constexpr std::uint64_t bits(std::uint64_t s, std::uint64_t c) {
  std::uint64_t k = mix(s + 0x9E3779B97F4A7C15ULL);
  return mix(mix(c * 0xD1B54A32D192ED03ULL + k) ^ k);
}

/// Uniform in [0, 1) with 53 random bits.
GRADIX_HOST_DEVICE constexpr double uniform01(std::uint64_t s, std::uint64_t c) {
  return double(bits(s, c) >> 11) * (1.0 / 9007199254740992.0);
}

/// Standard normal for element k (Box-Muller, cosine branch).
GRADIX_HOST_DEVICE constexpr double normal(std::uint64_t s, std::uint64_t k) {
  double u1 = 1.0 - uniform01(s, 2 * k);  // (0, 1]: log stays finite
  double u2 = uniform01(s, 2 * k + 1);
  return math::detail::csqrt(-2.0 * math::detail::clog(u1)) * math::detail::ccos_turns(u2);
}

}  // namespace gradix::rng
