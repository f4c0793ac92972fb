// compile_fail: an arithmetic operator with a gradix tensor on one side and a type that is
// neither a gradix expression nor a scalar on the other. Without GRADIX_SHOULD_FAIL: + a
// scalar.
#include <gradix/gradix.hpp>

namespace gx = gradix;

struct not_a_tensor {
  float value = 1;
};

int main() {
  gx::tensor<float, gx::shape<2>> x{1, 2};
  auto r = gx::eval(x + 1.0f);
#ifdef GRADIX_SHOULD_FAIL
  not_a_tensor s;
  // expect: gradix::operator+:
  // expect: not a gradix expression
  auto bad = x + s;
  (void)bad;
#endif
  return r(1) == 3 ? 0 : 1;
}
