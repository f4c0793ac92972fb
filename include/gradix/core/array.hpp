#pragma once
/// \file
/// A device-safe, trivially copyable fixed-size array (std::array is not usable in
/// __device__ code without relaxed constexpr, and its zero-size case is not empty).

#include "gradix/config.hpp"

#include <cstddef>

namespace gradix {

template <class T, std::size_t N>
struct array {
  T v_[N];
  GRADIX_HOST_DEVICE constexpr T& operator[](std::size_t i) { return v_[i]; }
  GRADIX_HOST_DEVICE constexpr T const& operator[](std::size_t i) const { return v_[i]; }
  GRADIX_HOST_DEVICE static constexpr std::size_t size() { return N; }
  GRADIX_HOST_DEVICE constexpr T* begin() { return v_; }
  GRADIX_HOST_DEVICE constexpr T* end() { return v_ + N; }
  GRADIX_HOST_DEVICE constexpr T const* begin() const { return v_; }
  GRADIX_HOST_DEVICE constexpr T const* end() const { return v_ + N; }
  friend constexpr bool operator==(array const&, array const&) = default;
};

template <class T>
struct array<T, 0> {
  // Never called at run time (loops over zero axes); present so generic code compiles.
  GRADIX_HOST_DEVICE T& operator[](std::size_t) { return *reinterpret_cast<T*>(this); }
  GRADIX_HOST_DEVICE T const& operator[](std::size_t) const {
    return *reinterpret_cast<T const*>(this);
  }
  GRADIX_HOST_DEVICE static constexpr std::size_t size() { return 0; }
  GRADIX_HOST_DEVICE constexpr T* begin() { return nullptr; }
  GRADIX_HOST_DEVICE constexpr T* end() { return nullptr; }
  GRADIX_HOST_DEVICE constexpr T const* begin() const { return nullptr; }
  GRADIX_HOST_DEVICE constexpr T const* end() const { return nullptr; }
  friend constexpr bool operator==(array const&, array const&) = default;
};

/// A coordinate of a rank-R node: one index per axis.
template <std::size_t R>
using coord = array<index_t, R>;

namespace detail {
/// coord<R> from R integers (R may be 0).
template <std::size_t R, class... I>
GRADIX_HOST_DEVICE constexpr coord<R> to_coord(I... i) {
  coord<R> c{};
  [[maybe_unused]] std::size_t k = 0;
  ((c[k++] = index_t(i)), ...);
  return c;
}
}  // namespace detail

}  // namespace gradix
