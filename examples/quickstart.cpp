// The smallest real gradix program: build expressions over tensors and evaluate them (no
// gradients; the README's main example, with backward, is seed_embedding.cpp).
#include <gradix/gradix.hpp>

#include <iostream>

namespace gx = gradix;

int main() {
  // A 3 x 4 matrix with a dynamic row count and a static column count, and a row vector.
  auto x = gx::randn<float>(gx::dims(3, gx::fix<4>), /*seed=*/42);
  auto w = gx::tensor<float, gx::shape<4>>{0.5f, -1.0f, 2.0f, 0.25f};

  // One expression: nothing runs yet; its type is the expression graph.
  auto e = gx::tanh(x * w + 1.0f) - gx::mean<1>(x, gx::keep_dims);

  // eval runs it as one fused loop into a new tensor.
  auto y = gx::eval(e);
  std::cout << "x =\n" << x << "\n\ny = tanh(x * w + 1) - mean over axis 1 of x =\n" << y << "\n";

  // value() runs a rank-0 expression: a fused reduction.
  float total = gx::value(gx::sum(gx::square(e)));
  std::cout << "\nsum(y^2) = " << total << "\n";
  return 0;
}
