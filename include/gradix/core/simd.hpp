#pragma once
/// \file
/// Host SIMD packs (GCC/clang vector extensions). Loops use packs for reduction tiles
/// because g++ 12 keeps scalar accumulator arrays in memory (see docs/performance.md).
/// Packs are never used in constant evaluation or in device code.

#include "gradix/config.hpp"

#include <cstddef>
#include <cstring>
#include <type_traits>

namespace gradix::simd {

/// Bytes per pack: one vector register of the target (64 with AVX-512, 32 with AVX, else 16).
/// The lanes of a sum do not depend on it (eval/reduce.hpp), so neither do its bits.
#if defined(__AVX512F__)
inline constexpr int pack_bytes = 64;
#elif defined(__AVX__)
inline constexpr int pack_bytes = 32;
#else
inline constexpr int pack_bytes = 16;
#endif
/// Lanes per pack for element type T.
template <class T>
inline constexpr int width = int(pack_bytes / sizeof(T)) > 0 ? int(pack_bytes / sizeof(T)) : 1;

/// The widest instruction set this translation unit was compiled for, as packs use it (for
/// the first line of examples and benchmarks).
inline constexpr char const* isa() {
#if defined(__AVX512F__)
  return "AVX-512 (64-byte packs)";
#elif defined(__AVX2__) && defined(__FMA__)
  return "AVX2+FMA (32-byte packs)";
#elif defined(__AVX__)
  return "AVX (32-byte packs)";
#elif defined(__SSE2__) || defined(__aarch64__)
  return "SSE2/NEON baseline (16-byte packs)";
#else
  return "no SIMD";
#endif
}

#if defined(GRADIX_HAS_VECTOR_EXT)
inline constexpr bool enabled = true;

template <class T, int W>
struct pack_type {
  typedef T type __attribute__((vector_size(sizeof(T) * W)));
};
/// A pack of W lanes of T.
template <class T, int W>
using pack = typename pack_type<T, W>::type;

template <class T, int W>
GRADIX_ALWAYS_INLINE pack<T, W> load(T const* p) {
  pack<T, W> r;
  std::memcpy(&r, p, sizeof(r));
  return r;
}
/// A pack of W lanes of T at the alignment of T (for stores to unaligned element memory).
template <class T, int W>
struct unaligned_pack_type {
  typedef T type __attribute__((vector_size(sizeof(T) * W), aligned(alignof(T))));
};
/// Stores through a pointer of the pack's own type (not memcpy, which g++ treats as a
/// store that may alias any object, so loop state would be reloaded after every store).
template <class T, int W>
GRADIX_ALWAYS_INLINE void store(T* p, pack<T, W> const& v) {
  *reinterpret_cast<typename unaligned_pack_type<T, W>::type*>(p) = v;
}
template <class T, int W>
GRADIX_ALWAYS_INLINE pack<T, W> splat(T x) {
  pack<T, W> r{};
  for (int w = 0; w < W; ++w) r[w] = x;
  return r;
}
#else
inline constexpr bool enabled = false;
#endif

#if defined(GRADIX_HAS_VECTOR_EXT)
// A pack type is any vector-extension type; detect it through subscripting a non-class.
template <class T>
concept vector_ext = !std::is_class_v<T> && !std::is_arithmetic_v<T> && !std::is_pointer_v<T> &&
                     requires(T v) { v[0]; };
#else
template <class T>
concept vector_ext = false;
#endif

/// The constant c as a V: a scalar, or a pack with c in every lane.
template <class V>
GRADIX_HOST_DEVICE GRADIX_ALWAYS_INLINE constexpr V constant(double c) {
  if constexpr (vector_ext<V>) {
    V r{};
    constexpr int W = int(sizeof(V) / sizeof(r[0]));
    for (int w = 0; w < W; ++w) r[w] = c;
    return r;
  } else {
    return V(c);
  }
}

/// Applies a scalar function to every lane of a pack (or to a scalar).
template <class F, class V>
GRADIX_HOST_DEVICE GRADIX_ALWAYS_INLINE constexpr V lanewise(F f, V x) {
  if constexpr (vector_ext<V>) {
    constexpr int W = int(sizeof(V) / sizeof(x[0]));
    V r{};
    for (int w = 0; w < W; ++w) r[w] = f(x[w]);
    return r;
  } else {
    return f(x);
  }
}
template <class F, class V>
GRADIX_HOST_DEVICE GRADIX_ALWAYS_INLINE constexpr V lanewise(F f, V x, V y) {
  if constexpr (vector_ext<V>) {
    constexpr int W = int(sizeof(V) / sizeof(x[0]));
    V r{};
    for (int w = 0; w < W; ++w) r[w] = f(x[w], y[w]);
    return r;
  } else {
    return f(x, y);
  }
}

}  // namespace gradix::simd
