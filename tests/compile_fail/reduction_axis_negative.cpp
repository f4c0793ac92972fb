// compile_fail: a negative reduction axis past the front (sum<-3> of a matrix: -1 and -2
// are its axes). Without GRADIX_SHOULD_FAIL: sum<-2>, the first axis.
#include <gradix/gradix.hpp>

namespace gx = gradix;

int main() {
  auto m = gx::iota<float>(gx::shape<3, 4>{});
  auto r = gx::eval(gx::sum<-2>(m));
#ifdef GRADIX_SHOULD_FAIL
  // expect: gradix: a reduction axis is out of range for the operand's rank
  // expect: reduction_axis_out_of_range<-3, 2>
  auto bad = gx::eval(gx::sum<-3>(m));
  (void)bad;
#endif
  return r(3) == 3 + 7 + 11 ? 0 : 1;
}
