// The README's 10-line example (README.md shows it; tests/docs/docs_sync.py checks they agree).
#include <gradix/gradix.hpp>
#include <iostream>
namespace gx = gradix;
int main() {
  auto a = gx::iota<float>(gx::dims(2, 3));            // [[0 1 2] [3 4 5]], dynamic extents
  auto b = gx::tensor<float, gx::shape<3>>{1, 10, 100}; // static shape, stored inline
  auto c = gx::eval(gx::exp(-a) * b + 1.0f);             // one fused loop, b broadcast
  std::cout << c << "\nsum = " << gx::value(gx::sum(c)) << "\n";
}
