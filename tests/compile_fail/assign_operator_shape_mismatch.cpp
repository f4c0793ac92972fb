// compile_fail: tensor = expression with different static shapes (shape<4> <- shape<3, 4>;
// the destination of an assignment never broadcasts). Without GRADIX_SHOULD_FAIL: a
// shape<3, 4> destination.
#include <gradix/gradix.hpp>

namespace gx = gradix;

int main() {
  auto m = gx::iota<float>(gx::shape<3, 4>{});
  gx::tensor<float, gx::shape<3, 4>> dst;
  dst = m + 1.0f;
#ifdef GRADIX_SHOULD_FAIL
  gx::tensor<float, gx::shape<4>> row;
  // expect: gradix::assign: the destination and the expression have different static shapes
  // expect: assigned_shapes_differ<gradix::shape<4>, gradix::shape<3, 4>
  row = m + 1.0f;
#endif
  return dst(2, 3) == 12 ? 0 : 1;
}
