// compile_fail: gx::value of an expression over CUDA device views alone, outside a CUDA
// translation unit: no device parameter gives a launcher, and there is no default one
// (gradix::cuda::default_launcher needs nvcc). Without GRADIX_SHOULD_FAIL: the valid
// neighbour, the same expression over host memory.
#include <gradix/device.hpp>

namespace gx = gradix;

int main() {
  float a[4] = {1, 2, 3, 4};
  auto ha = gx::view(a, gx::shape<4>{});
  float const v = gx::value(gx::sum(ha * 2.0f));
#ifdef GRADIX_SHOULD_FAIL
  auto da = gx::view<gx::row_major, gx::cuda_space>(a, gx::shape<4>{});
  // expect: gradix: this device expression has no device parameter (grid::param)
  float const bad = gx::value(gx::sum(da * 2.0f));
  (void)bad;
#endif
  return v == 20.0f ? 0 : 1;
}
