// compile_fail: a gather axis past the operand's rank (gather<2> of a matrix).
// Without GRADIX_SHOULD_FAIL: gather<1>, the last axis.
#include <gradix/gradix.hpp>

#include <vector>

namespace gx = gradix;

int main() {
  auto m = gx::iota<float>(gx::shape<3, 4>{});
  std::vector<int> idx{2, 0};
  auto r = gx::eval(gx::gather<1>(m, idx));
#ifdef GRADIX_SHOULD_FAIL
  // expect: gradix: an index or view axis is out of range for the operand's rank
  // expect: index_axis_out_of_range<2, 2>
  auto bad = gx::eval(gx::gather<2>(m, idx));
  (void)bad;
#endif
  return r(1, 0) == 6 && r(1, 1) == 4 ? 0 : 1;
}
