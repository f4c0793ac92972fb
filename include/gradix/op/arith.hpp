#pragma once
/// \file
/// Arithmetic functors: value and local derivatives. A functor's `value` works on scalars
/// and on host SIMD packs alike.

#include "gradix/config.hpp"

namespace gradix::op {

/// y = a + b;  dy/da = 1, dy/db = 1
struct add {
  static constexpr char const* name = "operator+";
  template <class T>
  GRADIX_HOST_DEVICE static constexpr T value(T a, T b) { return a + b; }
  template <class T>
  GRADIX_HOST_DEVICE static constexpr T d_lhs(T, T, T) { return T(1); }
  template <class T>
  GRADIX_HOST_DEVICE static constexpr T d_rhs(T, T, T) { return T(1); }
};
/// y = a - b;  dy/da = 1, dy/db = -1
struct sub {
  static constexpr char const* name = "operator-";
  template <class T>
  GRADIX_HOST_DEVICE static constexpr T value(T a, T b) { return a - b; }
  template <class T>
  GRADIX_HOST_DEVICE static constexpr T d_lhs(T, T, T) { return T(1); }
  template <class T>
  GRADIX_HOST_DEVICE static constexpr T d_rhs(T, T, T) { return T(-1); }
};
/// y = a * b;  dy/da = b, dy/db = a
struct mul {
  static constexpr char const* name = "operator*";
  template <class T>
  GRADIX_HOST_DEVICE static constexpr T value(T a, T b) { return a * b; }
  template <class T>
  GRADIX_HOST_DEVICE static constexpr T d_lhs(T, T b, T) { return b; }
  template <class T>
  GRADIX_HOST_DEVICE static constexpr T d_rhs(T a, T, T) { return a; }
};
/// y = a / b;  dy/da = 1/b, dy/db = -y/b   (integer division for integer types)
struct div {
  static constexpr char const* name = "operator/";
  template <class T>
  GRADIX_HOST_DEVICE static constexpr T value(T a, T b) { return a / b; }
  template <class T>
  GRADIX_HOST_DEVICE static constexpr T d_lhs(T, T b, T) { return T(1) / b; }
  template <class T>
  GRADIX_HOST_DEVICE static constexpr T d_rhs(T, T b, T y) { return -y / b; }
};
/// y = -x;  dy/dx = -1
struct neg {
  static constexpr char const* name = "operator-";
  template <class T>
  GRADIX_HOST_DEVICE static constexpr T value(T x) { return -x; }
  template <class T>
  GRADIX_HOST_DEVICE static constexpr T d_arg(T, T) { return T(-1); }
};

}  // namespace gradix::op
