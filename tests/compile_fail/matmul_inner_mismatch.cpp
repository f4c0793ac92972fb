// compile_fail: a matrix product of static shapes whose inner extents differ
// (shape<2, 3> x shape<4, 5>). Without GRADIX_SHOULD_FAIL: the valid neighbour, x shape<3, 5>.
#include <gradix/gradix.hpp>

namespace gx = gradix;

int main() {
  gx::tensor<double, gx::shape<2, 3>> a{1, 2, 3, 4, 5, 6};
  gx::tensor<double, gx::shape<3, 5>> b{};
  auto c = gx::eval(gx::matmul(a, b));
#ifdef GRADIX_SHOULD_FAIL
  gx::tensor<double, gx::shape<4, 5>> w{};
  // expect: gradix::matmul: the static inner extents differ
  // expect: matmul_static_extents_differ<gradix::shape<2, 3>, gradix::shape<4, 5>
  auto bad = gx::eval(gx::matmul(a, w));
  (void)bad;
#endif
  return c(1, 4) == 0 ? 0 : 1;
}
