// Compile-time benchmark case (bench/compile_time.sh): a tanh chain of depth GRADIX_CT_DEPTH
// (the tanh-k case of bench/depth.cpp), with its forward value and its backward.
#include <gradix/gradix.hpp>

#include <cstdio>

#ifndef GRADIX_CT_DEPTH
#define GRADIX_CT_DEPTH 8
#endif

namespace gx = gradix;

template <int K, class E>
auto tanh_chain(E const& e) {
  if constexpr (K == 0) return e;
  else return tanh_chain<K - 1>(gx::tanh(e) * 0.9f + 0.05f);
}

int main() {
  auto x = gx::param(gx::uniform<float>(gx::dims(1 << 16), 1, 0.25f, 0.75f));
  auto loss = gx::sum(tanh_chain<GRADIX_CT_DEPTH>(x));
  float v = gx::value(loss);
  float b = gx::backward(loss);
  std::printf("depth %d: value %g, backward %g, grad[0] %g\n", GRADIX_CT_DEPTH, double(v),
              double(b), double(x.grad().data()[0]));
  return v == b ? 0 : 1;
}
