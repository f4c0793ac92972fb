#pragma once
/// \file
/// Inner evaluators: what `evaluator<E>::outer<Axis>(c)` returns. An inner evaluator reads
/// the node along one axis starting at coordinate c: `elem(i)` is the value at c + i e_Axis
/// (one CUDA lane, or a host scalar), `pack<W>(i)` the W values from i on (a host SIMD pack).
/// Index lookups and offsets are computed once in `outer`, not per element.

#include "gradix/config.hpp"
#include "gradix/core/array.hpp"
#include "gradix/core/half.hpp"
#include "gradix/core/simd.hpp"

#include <type_traits>

namespace gradix::ev {

/// Axis argument of `outer` meaning "the loop runs along an axis this node does not depend
/// on" (a broadcast axis): the inner evaluator is constant.
inline constexpr int invariant_axis = -1;

/// Contiguous memory of S read as T: S is T, or a half-width storage type (gx::bfloat16,
/// gx::half) read as float (widened, in packs by simd::widen).
template <class T, class S = T>
struct unit_inner {
  using value_type = T;
  S const* p_;
  GRADIX_HOST_DEVICE constexpr T elem(index_t i) const { return T(p_[i]); }
#if defined(GRADIX_HAS_VECTOR_EXT)
  template <int W>
  GRADIX_ALWAYS_INLINE simd::pack<T, W> pack(index_t i) const {
    static_assert(std::is_same_v<compute_type_t<S>, T>, "unit_inner<T, S>: S is T or a half-width type read as float");
    return simd::load_wide<S, W>(p_ + i);
  }
#endif
};

/// Memory with a run-time stride, of S read as T (as unit_inner).
template <class T, class S = T>
struct strided_inner {
  using value_type = T;
  S const* p_;
  index_t stride_;
  GRADIX_HOST_DEVICE constexpr T elem(index_t i) const { return T(p_[i * stride_]); }
#if defined(GRADIX_HAS_VECTOR_EXT)
  template <int W>
  GRADIX_ALWAYS_INLINE simd::pack<T, W> pack(index_t i) const {
    simd::pack<T, W> r{};
    for (int w = 0; w < W; ++w) r[w] = T(p_[(i + w) * stride_]);
    return r;
  }
#endif
};

/// Hints the memory system to fetch elements [0, n) of an inner evaluator that reads
/// contiguous memory (unit_inner; nothing for the other kinds): loops over rows at random
/// positions (a bag's table rows) call it a few rows ahead, so that the rows' cache and TLB
/// misses overlap. Host only; it changes no value.
template <class Inner>
GRADIX_ALWAYS_INLINE void prefetch_row([[maybe_unused]] Inner const& in, [[maybe_unused]] index_t n) {}
template <class T, class S>
GRADIX_ALWAYS_INLINE void prefetch_row([[maybe_unused]] unit_inner<T, S> const& in, [[maybe_unused]] index_t n) {
#if defined(__GNUC__) && !defined(__CUDA_ARCH__)
  char const* const p = reinterpret_cast<char const*>(in.p_);
  std::size_t const bytes = std::size_t(n) * sizeof(S);
  for (std::size_t b = 0; b < bytes; b += 64) __builtin_prefetch(p + b);
#endif
}

/// A value that does not change along the loop axis.
template <class T>
struct const_inner {
  using value_type = T;
  T v_;
  GRADIX_HOST_DEVICE constexpr T elem(index_t) const { return v_; }
#if defined(GRADIX_HAS_VECTOR_EXT)
  template <int W>
  GRADIX_ALWAYS_INLINE simd::pack<T, W> pack(index_t) const {
    return simd::splat<T, W>(v_);
  }
#endif
};

/// Fallback: evaluates the node at each coordinate (used by reductions inside expressions).
template <class Ev, std::size_t R, int Axis>
struct generic_inner {
  using value_type = typename Ev::value_type;
  Ev const* ev_;
  coord<R> c_;
  GRADIX_HOST_DEVICE constexpr value_type elem(index_t i) const {
    coord<R> d = c_;
    d[Axis] += i;
    return (*ev_)(d);
  }
#if defined(GRADIX_HAS_VECTOR_EXT)
  template <int W>
  GRADIX_ALWAYS_INLINE simd::pack<value_type, W> pack(index_t i) const {
    simd::pack<value_type, W> r{};
    for (int w = 0; w < W; ++w) r[w] = elem(i + w);
    return r;
  }
#endif
};

#if defined(GRADIX_HAS_VECTOR_EXT)
/// Converts a pack to another element type (lane by lane).
template <class To, int W, class V>
GRADIX_ALWAYS_INLINE simd::pack<To, W> convert(V const& v) {
  if constexpr (std::is_same_v<V, simd::pack<To, W>>) return v;
  else return __builtin_convertvector(v, simd::pack<To, W>);
}
/// W values of an inner evaluator from i on, as a pack of To. An operand of another element
/// size is read lane by lane: a pack of it would be wider than a register, which g++ flags
/// (-Wpsabi) and which buys nothing.
template <class To, int W, class Inner>
GRADIX_ALWAYS_INLINE simd::pack<To, W> pack_as(Inner const& in, index_t i) {
  using From = typename Inner::value_type;
  if constexpr (std::is_same_v<From, To>) {
    return in.template pack<W>(i);
  } else if constexpr (sizeof(From) == sizeof(To)) {
    return convert<To, W>(in.template pack<W>(i));
  } else {
    simd::pack<To, W> r{};
    for (int w = 0; w < W; ++w) r[w] = To(in.elem(i + w));
    return r;
  }
}
#endif

/// Either of two inner evaluators, chosen once per row.
template <class IL, class IR>
struct either_inner {
  using value_type = typename IL::value_type;
  IL l_;
  IR r_;
  bool left_;
  GRADIX_HOST_DEVICE constexpr value_type elem(index_t i) const { return left_ ? value_type(l_.elem(i)) : value_type(r_.elem(i)); }
#if defined(GRADIX_HAS_VECTOR_EXT)
  template <int W>
  GRADIX_ALWAYS_INLINE simd::pack<value_type, W> pack(index_t i) const {
    return left_ ? pack_as<value_type, W>(l_, i) : pack_as<value_type, W>(r_, i);
  }
#endif
};

/// A row along a concat's joined axis (eval/concat.hpp), from position p0 = c[Axis]: the
/// left operand's inner evaluator for positions before split, the right one's after (made at
/// right position r0 = max(p0 - split, 0), so never before its first element). A pack that
/// lies in one operand is that operand's pack; one across the split is built lane by lane.
template <class IL, class IR>
struct split_inner {
  using value_type = typename IL::value_type;
  IL l_;
  IR r_;
  index_t left_;   // the row's elements from the left operand: split - p0 (may be <= 0)
  index_t shift_;  // row index i reads the right operand's inner at i - shift_
  GRADIX_HOST_DEVICE constexpr value_type elem(index_t i) const {
    return i < left_ ? value_type(l_.elem(i)) : value_type(r_.elem(i - shift_));
  }
#if defined(GRADIX_HAS_VECTOR_EXT)
  template <int W>
  GRADIX_ALWAYS_INLINE simd::pack<value_type, W> pack(index_t i) const {
    if (i + W <= left_) return pack_as<value_type, W>(l_, i);
    if (i >= left_) return pack_as<value_type, W>(r_, i - shift_);
    simd::pack<value_type, W> r{};
    for (int w = 0; w < W; ++w) r[w] = elem(i + w);
    return r;
  }
#endif
};

}  // namespace gradix::ev
