// compile_fail: a gx::scan body whose new carry has another static shape than the carry
// (shape<2, 3> becomes shape<2, 4> through a product with a shape<3, 4> weight). Without
// GRADIX_SHOULD_FAIL: the valid neighbour, a shape<3, 3> weight.
#include <gradix/gradix.hpp>

namespace gx = gradix;

int main() {
  gx::tensor<double, gx::shape<2, 3>> h0{};
  gx::tensor<double, gx::shape<gx::dyn, 2, 3>> xs(gx::dims(4, 2, 3));
  gx::tensor<double, gx::shape<3, 3>> w{};
  auto ok = gx::eval(gx::scan(h0, xs, [&](auto h, auto x) { return gx::matmul(h, w) + x; }));
#ifdef GRADIX_SHOULD_FAIL
  gx::tensor<double, gx::shape<3, 4>> wide{};
  // expect: gradix::scan: the body changes the carry's shape
  auto bad = gx::scan(h0, xs, [&](auto h, auto) { return gx::matmul(h, wide); });
  (void)bad;
#endif
  return ok(3, 1, 2) == 0 ? 0 : 1;
}
