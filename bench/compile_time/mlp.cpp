// Compile-time benchmark case (bench/compile_time.sh): a two-layer MLP-like expression, two
// levels of reductions with elementwise work between them, with backward:
//   loss = sum(tanh(sum<1>(V * tanh(sum<1>(W * x) + b))))
// W: 16 x 8, x: 8, b: 16, V: 4 x 16 (double; x and the row vectors broadcast along axis 0).
#include <gradix/gradix.hpp>

#include <cstdio>

namespace gx = gradix;

int main() {
  auto W = gx::param(gx::randn<double>(gx::dims(16, 8), 1));
  auto b = gx::param(gx::randn<double>(gx::dims(16), 2));
  auto V = gx::param(gx::randn<double>(gx::dims(4, 16), 3));
  auto x = gx::randn<double>(gx::dims(8), 4);
  auto h = gx::tanh(gx::sum<1>(W * x) + b);
  auto loss = gx::sum(gx::tanh(gx::sum<1>(V * h)));
  double v = gx::value(loss);
  double g = gx::backward(loss);
  std::printf("mlp: value %g, backward %g, dW[0] %g, dV[0] %g\n", v, g, W.grad().data()[0],
              V.grad().data()[0]);
  return v == g ? 0 : 1;
}
