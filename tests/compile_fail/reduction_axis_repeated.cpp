// compile_fail: a reduction that names the same axis twice (sum<0, 0>; -2 is 0 again).
// Without GRADIX_SHOULD_FAIL: sum<0, 1>, both axes.
#include <gradix/gradix.hpp>

namespace gx = gradix;

int main() {
  auto m = gx::iota<float>(gx::shape<3, 4>{});
  auto total = gx::value(gx::sum<0, 1>(m));
#ifdef GRADIX_SHOULD_FAIL
  // expect: gradix: a reduction names the same axis twice
  auto bad = gx::eval(gx::sum<0, -2>(m));
  (void)bad;
#endif
  return total == 66 ? 0 : 1;
}
