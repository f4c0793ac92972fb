#pragma once
/// \file
/// Tensors filled with constants, ranges and seeded random values.
/// Shapes come from `dims(...)` or a shape type: `zeros<float>(dims(3, 4))`,
/// `randn<float, col_major>(dims(fix<64>, n), seed)`, `ones<double>(shape<2, 2>{})`.
/// Random fills are counter-based (core/rng.hpp): the value of an element depends only on
/// the seed and its logical row-major index, not on layout, platform or thread count.

#include "gradix/backend/host/assign.hpp"
#include "gradix/config.hpp"
#include "gradix/core/error.hpp"
#include "gradix/core/half.hpp"
#include "gradix/core/math.hpp"
#include "gradix/core/rng.hpp"
#include "gradix/core/shape.hpp"
#include "gradix/core/tensor.hpp"

#include <cstdint>
#include <type_traits>

namespace gradix {

namespace detail {
/// Fills t with f(k), k the logical row-major index of each element (parallel when large).
template <class T, class S, class L, class F>
constexpr void fill_logical(tensor<T, S, L>& t, F f) {
  constexpr std::size_t R = S::rank;
  if constexpr (R == 0) {
    t[coord<0>{}] = f(index_t(0));
  } else {
    auto ext = t.shape().extents();
    array<index_t, R> rs{};  // logical row-major strides
    index_t acc = 1;
    for (std::size_t i = R; i-- > 0;) {
      rs[i] = acc;
      acc *= ext[i];
    }
    auto v = t.view();
    constexpr std::size_t A = L::template unit_axis<R>;
    auto body = [&](index_t f0, index_t f1) {
      host::for_each_run<R, A>(ext, f0, f1, [&](coord<R> const& c, index_t len) {
        index_t k = 0;
        for (std::size_t i = 0; i < R; ++i) k += c[i] * rs[i];
        T* d = v.data() + v.offset(c);
        for (index_t i = 0; i < len; ++i) d[i] = f(k + i * rs[A]);
      });
    };
    if (std::is_constant_evaluated()) body(0, t.size());
    else host::parallel_ranges(t.size(), body);
  }
}
}  // namespace detail

/// A tensor of zeros (T may be a half-width storage type).
template <storage_element T, class Layout = row_major, class S>
  requires is_shape_v<S>
constexpr tensor<T, S, Layout> zeros(S s) {
  return tensor<T, S, Layout>(s);
}
/// A tensor filled with `value` (T may be a half-width storage type).
template <storage_element T, class Layout = row_major, class S>
  requires is_shape_v<S>
constexpr tensor<T, S, Layout> full(S s, T value) {
  tensor<T, S, Layout> t(s, detail::uninit);
  detail::fill_logical(t, [=](index_t) { return value; });
  return t;
}
/// A tensor of ones (T may be a half-width storage type).
template <storage_element T, class Layout = row_major, class S>
  requires is_shape_v<S>
constexpr tensor<T, S, Layout> ones(S s) {
  return full<T, Layout>(s, T(1.0f));
}
/// A tensor holding its own logical row-major index: 0, 1, 2, ...
template <element T, class Layout = row_major, class S>
  requires is_shape_v<S>
constexpr tensor<T, S, Layout> iota(S s) {
  tensor<T, S, Layout> t(s, detail::uninit);
  detail::fill_logical(t, [](index_t k) { return T(k); });
  return t;
}
/// The rank-1 tensor start, start + step, ... (values < stop for step > 0, > stop for
/// step < 0). Throws gradix::error for step 0.
template <element T>
constexpr tensor<T, shape<dyn>> arange(T start, T stop, T step = T(1)) {
  if (step == T(0)) detail::fail("gradix::arange: step is 0");
  index_t n = 0;
  if constexpr (std::is_integral_v<T>) {
    // in unsigned arithmetic: stop - start and -step may not fit T
    using u64 = std::uint64_t;
    u64 c = 0;
    if (step > 0 && stop > start)
      c = (u64(std::int64_t(stop)) - u64(std::int64_t(start)) - 1) / u64(std::int64_t(step)) + 1;
    if (step < 0 && stop < start)
      c = (u64(std::int64_t(start)) - u64(std::int64_t(stop)) - 1) / (u64(0) - u64(std::int64_t(step))) + 1;
    if constexpr (std::is_same_v<T, std::uint64_t> || std::is_same_v<T, unsigned long long> ||
                  std::is_same_v<T, unsigned long>) {
      if (start > T(PTRDIFF_MAX) || stop > T(PTRDIFF_MAX) || step > T(PTRDIFF_MAX))
        detail::fail("gradix::arange: from ", start, " to ", stop, " with step ", step,
                     ": a bound exceeds the largest index ", PTRDIFF_MAX);
    }
    if (c > u64(PTRDIFF_MAX))
      detail::fail("gradix::arange: from ", start, " to ", stop, " with step ", step, " gives ", c,
                   " values, more than the largest extent ", PTRDIFF_MAX);
    n = index_t(c);
  } else {
    if (!math::detail::cisfinite(double(start)) || !math::detail::cisfinite(double(stop)) ||
        !math::detail::cisfinite(double(step)))
      detail::fail("gradix::arange: from ", start, " to ", stop, " with step ", step,
                   ": the bounds and the step must be finite");
    double c = (double(stop) - double(start)) / double(step);
    if (!(c < 0x1p62))
      detail::fail("gradix::arange: from ", start, " to ", stop, " with step ", step, " gives ", c,
                   " values, too many for one tensor");
    n = c > 0 ? index_t(c) + (double(index_t(c)) < c ? 1 : 0) : 0;
  }
  tensor<T, shape<dyn>> t(dims(n), detail::uninit);
  detail::fill_logical(t, [=](index_t k) { return T(start + T(k) * step); });
  return t;
}
/// 0, 1, ..., n - 1.
template <element T>
constexpr tensor<T, shape<dyn>> arange(index_t n) {
  if (n < 0) detail::fail("gradix::arange: negative length ", n);
  return arange<T>(T(0), T(n), T(1));
}

/// A tensor whose element at coordinate c is f(c) (c: a gradix::coord of the shape's rank;
/// called once per element, in parallel for large tensors, so f must be thread-safe). T may
/// be a half-width storage type: f's value is rounded to it (to nearest, ties to even).
template <storage_element T, class Layout = row_major, class S, class F>
  requires is_shape_v<S>
tensor<T, S, Layout> generate(S s, F f) {
  tensor<T, S, Layout> t(s, detail::uninit);
  constexpr std::size_t R = S::rank;
  auto v = t.view();
  if constexpr (R == 0) {
    v[coord<0>{}] = T(f(coord<0>{}));
  } else {
    auto ext = s.extents();
    constexpr std::size_t A = Layout::template unit_axis<R>;
    host::parallel_ranges(t.size(), [&](index_t f0, index_t f1) {
      host::for_each_run<R, A>(ext, f0, f1, [&](coord<R> c, index_t len) {
        T* d = v.data() + v.offset(c);
        for (index_t i = 0; i < len; ++i, ++c[A]) d[i * v.stride(A)] = T(f(c));
      });
    });
  }
  return t;
}

/// Standard normal values (times stddev, plus mean) from `seed`. T may be a half-width
/// storage type: each element is then the float fill's value (the same seed) rounded to nearest,
/// ties to even, with no float tensor made.
template <storage_element T, class Layout = row_major, class S>
  requires is_shape_v<S>
constexpr tensor<T, S, Layout> randn(S s, std::uint64_t seed, compute_type_t<T> mean = 0,
                                     compute_type_t<T> stddev = 1) {
  using C = compute_type_t<T>;
  static_assert(std::is_floating_point_v<C>,
                "gradix::randn: the element type must be floating point (or gx::bfloat16, gx::half)");
  tensor<T, S, Layout> t(s, detail::uninit);
  detail::fill_logical(t, [=](index_t k) {
    return T(C(double(mean) + double(stddev) * rng::normal(seed, std::uint64_t(k))));
  });
  return t;
}
/// Uniform values in [lo, hi) from `seed`. T may be a half-width storage type: each element
/// is then the float fill's value rounded to nearest, ties to even, and one that rounds to hi
/// or above is lo rounded.
template <storage_element T, class Layout = row_major, class S>
  requires is_shape_v<S>
constexpr tensor<T, S, Layout> uniform(S s, std::uint64_t seed, compute_type_t<T> lo = 0, compute_type_t<T> hi = 1) {
  using C = compute_type_t<T>;
  static_assert(std::is_floating_point_v<C>,
                "gradix::uniform: the element type must be floating point (or gx::bfloat16, gx::half)");
  tensor<T, S, Layout> t(s, detail::uninit);
  detail::fill_logical(t, [=](index_t k) {
    C v = C(double(lo) + (double(hi) - double(lo)) * rng::uniform01(seed, std::uint64_t(k)));
    v = v < hi ? v : lo;  // rounding to C must not reach hi
    if constexpr (is_half_width_v<T>) {
      T const h(v);
      return C(h) < hi ? h : T(lo);
    } else {
      return v;
    }
  });
  return t;
}

}  // namespace gradix
