// compile_fail: an elementwise operation on static shapes that do not broadcast
// (shape<3, 4> + shape<5>). Without GRADIX_SHOULD_FAIL: the valid neighbour, + shape<4>.
#include <gradix/gradix.hpp>

namespace gx = gradix;

int main() {
  auto m = gx::iota<float>(gx::shape<3, 4>{});
  gx::tensor<float, gx::shape<4>> row{10, 20, 30, 40};
  auto r = gx::eval(m + row);
#ifdef GRADIX_SHOULD_FAIL
  gx::tensor<float, gx::shape<5>> v{};
  // expect: gradix: the static shapes of this elementwise operation do not broadcast
  // expect: static_shapes_do_not_broadcast<gradix::op::add, gradix::shape<3, 4>, gradix::shape<5>
  // doc-snippet: bad
  auto bad = gx::eval(m + v);
  // end doc-snippet
  (void)bad;
#endif
  return r(2, 3) == 11 + 40 ? 0 : 1;
}
