// Compile-time benchmark case (bench/compile_time.sh): nested reductions of depth
// GRADIX_CT_DEPTH (2 or 3) over a small double parameter, with backward.
#include <gradix/gradix.hpp>

#include <cstdio>

#ifndef GRADIX_CT_DEPTH
#define GRADIX_CT_DEPTH 2
#endif

namespace gx = gradix;

int main() {
#if GRADIX_CT_DEPTH == 2
  auto X = gx::param(gx::randn<double>(gx::dims(4, 6), 1));
  auto loss = gx::sum(gx::sum<1>(X));
#elif GRADIX_CT_DEPTH == 3
  auto X = gx::param(gx::randn<double>(gx::dims(4, 6, 5), 1));
  auto loss = gx::sum(gx::sum<1>(gx::sum<2>(X)));
#else
#error "GRADIX_CT_DEPTH must be 2 or 3"
#endif
  double v = gx::backward(loss);
  std::printf("nested %d: %g, grad[0] %g\n", GRADIX_CT_DEPTH, v, X.grad().data()[0]);
  return X.grad().data()[0] == 1.0 ? 0 : 1;
}
