// compile_fail: gx::indices(...) of floating-point values.
// Without GRADIX_SHOULD_FAIL: indices(...) of integers.
#include <gradix/gradix.hpp>

#include <vector>

namespace gx = gradix;

int main() {
  auto m = gx::iota<float>(gx::shape<3, 4>{});
  std::vector<int> idx{2, 0};
  auto r = gx::eval(gx::gather<0>(m, gx::indices(idx)));
#ifdef GRADIX_SHOULD_FAIL
  std::vector<float> fidx{2, 0};
  // expect: gradix::indices: index values must be integers
  // doc-snippet: bad
  auto bad = gx::eval(gx::gather<0>(m, gx::indices(fidx)));
  // end doc-snippet
  (void)bad;
#endif
  return r(0, 1) == 9 && r(1, 1) == 1 ? 0 : 1;
}
