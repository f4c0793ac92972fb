#pragma once
// Test-only unary ops (for gx::unary<Op>) whose derivative is deliberately wrong, so that
// gradient checks can be shown to fail. (compile_fail/wrong_gradient.cpp keeps its own copy:
// each compile_fail case is one self-contained file.)

namespace gradix::testing {

/// y = x^2 with derivative x (half the true one) everywhere.
struct square_half_derivative {
  template <class T>
  static constexpr T value(T x) {
    return x * x;
  }
  template <class T>
  static constexpr T d_arg(T x, T) {
    return x;
  }
};

/// y = x^2 with a wrong derivative at x == 2 (0 instead of 4) and the right one (2x) elsewhere.
struct square_wrong_at_2 {
  template <class T>
  static constexpr T value(T x) {
    return x * x;
  }
  template <class T>
  static constexpr T d_arg(T x, T) {
    return x == T(2) ? T(0) : x + x;
  }
};

}  // namespace gradix::testing
