// compile_fail: a named gradix function applied to something that is not a gradix
// expression or tensor (a std::vector). Without GRADIX_SHOULD_FAIL: exp of a tensor.
#include <gradix/gradix.hpp>

#include <vector>

namespace gx = gradix;

int main() {
  gx::tensor<float, gx::shape<2>> x{0, 0};
  auto r = gx::eval(gx::exp(x));
#ifdef GRADIX_SHOULD_FAIL
  std::vector<float> v{1, 2};
  // expect: gradix::exp:
  // expect: not a gradix expression
  // doc-snippet: bad
  auto bad = gx::exp(v);
  // end doc-snippet
  (void)bad;
#endif
  return r(1) == 1 ? 0 : 1;
}
