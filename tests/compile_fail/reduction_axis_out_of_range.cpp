// compile_fail: a reduction axis past the operand's rank (sum<2> of a matrix).
// Without GRADIX_SHOULD_FAIL: sum<1>, the last axis.
#include <gradix/gradix.hpp>

namespace gx = gradix;

int main() {
  auto m = gx::iota<float>(gx::shape<3, 4>{});
  auto r = gx::eval(gx::sum<1>(m));
#ifdef GRADIX_SHOULD_FAIL
  // expect: gradix: a reduction axis is out of range for the operand's rank
  // expect: reduction_axis_out_of_range<2, 2>
  // doc-snippet: bad
  auto bad = gx::eval(gx::sum<2>(m));
  // end doc-snippet
  (void)bad;
#endif
  return r(2) == 8 + 9 + 10 + 11 ? 0 : 1;
}
