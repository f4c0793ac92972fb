// compile_fail: sparse gradient storage for a rank-0 parameter (it has no axis to be sparse
// along; this used to compile and overflow the stack).
// Without GRADIX_SHOULD_FAIL: the same parameter with dense storage.
#include <gradix/gradix.hpp>

namespace gx = gradix;

int main() {
  auto ok = gx::param(gx::tensor<float, gx::shape<>>{1.f});
  gx::backward(ok * ok);
#ifdef GRADIX_SHOULD_FAIL
  // expect: gradix::param: the gradient axis is out of range for the tensor's rank
  auto bad = gx::param(gx::tensor<float, gx::shape<>>{1.f}, gx::sparse_grad<0>);
  (void)bad;
#endif
  return ok.grad().dense()() == 2.f ? 0 : 1;
}
