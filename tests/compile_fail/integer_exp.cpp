// compile_fail: exp (floating point only) of an integer tensor.
// Without GRADIX_SHOULD_FAIL: exp of the tensor cast to float.
#include <gradix/gradix.hpp>

namespace gx = gradix;

int main() {
  gx::tensor<int, gx::shape<3>> k{0, 0, 0};
  auto r = gx::eval(gx::exp(gx::cast<float>(k)));
#ifdef GRADIX_SHOULD_FAIL
  // expect: gradix: this function needs a floating-point operand
  // expect: needs_floating_point<gradix::op::exp, int>
  auto bad = gx::eval(gx::exp(k));
  (void)bad;
#endif
  return r(0) == 1 ? 0 : 1;
}
