// compile_fail: a test-only op whose derivative is wrong (half the true one) fails its
// compile-time gradient proof; GRADIX_STATIC_GRADCHECK makes the compiler print the
// parameter, the element and both values.
// Without GRADIX_SHOULD_FAIL: the same proof of the correct op passes.
#include <gradix/gradix.hpp>

namespace gx = gradix;

namespace {
struct square_ok {
  template <class T>
  static constexpr T value(T x) {
    return x * x;
  }
  template <class T>
  static constexpr T d_arg(T x, T) {
    return 2 * x;
  }
};
struct square_wrong {
  template <class T>
  static constexpr T value(T x) {
    return x * x;
  }
  template <class T>
  static constexpr T d_arg(T x, T) {
    return x;  // should be 2x
  }
};
constexpr gx::tensor<double, gx::shape<2, 3>> x{0.5, 1, 1.5, 2, 2.5, 3};
constexpr auto ok = gx::gradcheck([](auto const& a) { return gx::sum(gx::unary<square_ok>(a)); }, x);
GRADIX_STATIC_GRADCHECK(ok);
#ifdef GRADIX_SHOULD_FAIL
constexpr auto wrong = gx::gradcheck([](auto const& a) { return gx::sum(gx::unary<square_wrong>(a)); }, x);
// expect: gradix::gradcheck failed
// expect: == 6.0000000
// doc-snippet: bad
GRADIX_STATIC_GRADCHECK(wrong);
// end doc-snippet
#endif
}  // namespace

int main() { return ok.ok() ? 0 : 1; }
