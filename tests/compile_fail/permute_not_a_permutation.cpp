// compile_fail: permute with axes that are not a permutation of 0 .. rank-1 (<0, 0>).
// Without GRADIX_SHOULD_FAIL: permute<1, 0>, the transpose.
#include <gradix/gradix.hpp>

namespace gx = gradix;

int main() {
  auto m = gx::iota<float>(gx::shape<3, 4>{});
  auto r = gx::eval(gx::permute<1, 0>(m));
#ifdef GRADIX_SHOULD_FAIL
  // expect: gradix::permute: the axes must be a permutation of 0 .. rank-1
  auto bad = gx::eval(gx::permute<0, 0>(m));
  (void)bad;
#endif
  return r(3, 2) == 11 ? 0 : 1;
}
