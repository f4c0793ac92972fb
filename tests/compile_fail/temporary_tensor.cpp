// compile_fail: a temporary owning tensor inside an expression (the expression would keep a
// view of a destroyed tensor). Without GRADIX_SHOULD_FAIL: the tensor is stored first.
#include <gradix/gradix.hpp>

namespace gx = gradix;

int main() {
  auto z = gx::zeros<float>(gx::dims(3));
  auto r = gx::eval(gx::exp(z));
#ifdef GRADIX_SHOULD_FAIL
  // expect: gradix: a temporary tensor cannot be used in an expression
  // doc-snippet: bad
  auto bad = gx::exp(gx::zeros<float>(gx::dims(3)));
  // end doc-snippet
  (void)bad;
#endif
  return r(2) == 1 ? 0 : 1;
}
