// compile_fail: an elementwise operation whose operands live in different memory spaces (a
// host view and a cuda_space view). Without GRADIX_SHOULD_FAIL: the valid neighbour, two
// host views.
#include <gradix/gradix.hpp>

namespace gx = gradix;

int main() {
  float a[4] = {1, 2, 3, 4}, b[4] = {10, 20, 30, 40};
  auto ha = gx::view(a, gx::shape<4>{});
  auto hb = gx::view(b, gx::shape<4>{});
  auto r = gx::eval(ha + hb);
#ifdef GRADIX_SHOULD_FAIL
  auto db = gx::view<gx::row_major, gx::cuda_space>(b, gx::shape<4>{});
  // expect: gradix: the operands of this operation live in different memory spaces
  auto bad = ha + db;
  (void)bad;
#endif
  return r(3) == 44 ? 0 : 1;
}
