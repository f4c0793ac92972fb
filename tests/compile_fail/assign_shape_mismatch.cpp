// compile_fail: assign() into a destination whose static shape differs from the
// expression's (shape<4, 3> <- shape<3, 4>). Without GRADIX_SHOULD_FAIL: a shape<3, 4>
// destination.
#include <gradix/gradix.hpp>

namespace gx = gradix;

int main() {
  auto m = gx::iota<float>(gx::shape<3, 4>{});
  gx::tensor<float, gx::shape<3, 4>> dst;
  gx::assign(dst, m * 2.0f);
#ifdef GRADIX_SHOULD_FAIL
  gx::tensor<float, gx::shape<4, 3>> wrong;
  // expect: gradix::assign: the destination and the expression have different static shapes
  // expect: assigned_shapes_differ<gradix::shape<4, 3>, gradix::shape<3, 4>
  gx::assign(wrong, m * 2.0f);
#endif
  return dst(2, 3) == 22 ? 0 : 1;
}
