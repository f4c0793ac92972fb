// compile_fail: gx::eval of an expression over CUDA device memory in a translation unit that
// does not include the device backend (<gradix/device.hpp>). Without GRADIX_SHOULD_FAIL: the
// valid neighbour, the same expression over host memory.
#include <gradix/gradix.hpp>

namespace gx = gradix;

int main() {
  float a[4] = {1, 2, 3, 4};
  auto ha = gx::view(a, gx::shape<4>{});
  auto r = gx::eval(ha * 2.0f);
#ifdef GRADIX_SHOULD_FAIL
  auto da = gx::view<gx::row_major, gx::cuda_space>(a, gx::shape<4>{});
  // expect: gradix: this expression reads CUDA device memory; include <gradix/device.hpp>
  // doc-snippet: bad
  auto bad = gx::eval(da * 2.0f);
  // end doc-snippet
  (void)bad;
#endif
  return r(3) == 8 ? 0 : 1;
}
