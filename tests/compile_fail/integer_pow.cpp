// compile_fail: pow (a floating-point binary function) of an integer tensor and an integer.
// Without GRADIX_SHOULD_FAIL: pow of the tensor cast to float.
#include <gradix/gradix.hpp>

namespace gx = gradix;

int main() {
  gx::tensor<int, gx::shape<3>> k{1, 2, 3};
  auto r = gx::eval(gx::pow(gx::cast<float>(k), 2.0f));
#ifdef GRADIX_SHOULD_FAIL
  // expect: gradix: this function needs a floating-point operand
  // expect: needs_floating_point<gradix::op::pow, int>
  auto bad = gx::eval(gx::pow(k, 2));
  (void)bad;
#endif
  return r(2) == 9 ? 0 : 1;
}
