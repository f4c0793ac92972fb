// compile_fail: gx::indices(...) of a temporary std::vector (the expression would view a
// destroyed vector). Without GRADIX_SHOULD_FAIL: the vector is stored first.
#include <gradix/gradix.hpp>

#include <vector>

namespace gx = gradix;

int main() {
  auto m = gx::iota<float>(gx::shape<3, 4>{});
  std::vector<int> idx{2, 0};
  auto r = gx::eval(gx::gather<0>(m, gx::indices(idx)));
#ifdef GRADIX_SHOULD_FAIL
  // expect: gradix::indices:
  // expect: temporary
  auto bad = gx::eval(gx::gather<0>(m, gx::indices(std::vector<int>{2, 0})));
  (void)bad;
#endif
  return r(0, 1) == 9 ? 0 : 1;
}
