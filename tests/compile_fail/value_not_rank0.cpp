// compile_fail: value() of an expression that is not rank 0 (a matrix).
// Without GRADIX_SHOULD_FAIL: value() of its sum.
#include <gradix/gradix.hpp>

namespace gx = gradix;

int main() {
  auto m = gx::iota<float>(gx::shape<3, 4>{});
  float total = gx::value(gx::sum(m));
#ifdef GRADIX_SHOULD_FAIL
  // expect: gradix::value: the expression is not rank 0
  // doc-snippet: bad
  float bad = gx::value(m * 2.0f);
  // end doc-snippet
  (void)bad;
#endif
  return total == 66 ? 0 : 1;
}
