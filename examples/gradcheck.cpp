// Checking gradients at run time with gx::gradcheck (docs/gradcheck.md): a small model with an
// embedding table (sparse gradient), a weight matrix and a bias, checked element by element,
// then a large table checked along random directions. Exits with 1 if a check fails.
#include <gradix/gradix.hpp>

#include <iostream>
#include <vector>

namespace gx = gradix;

int main() {
  // doc-snippet: small
  // Embeddings (8 x 10, columns gathered, sparse along axis 1), a 3 x 8 weight, a bias of 3.
  auto E = gx::param(gx::randn<float>(gx::dims(8, 10), /*seed=*/1), gx::sparse_grad<1>);
  auto W = gx::param(gx::randn<float>(gx::dims(3, 8), /*seed=*/2, 0.0f, 0.5f));
  auto b = gx::param(gx::zeros<float>(gx::dims(3)));
  std::vector<int> tokens{4, 7, 4, 1};  // a repeated index: its gradient slice adds up

  // The loss as a generic callable: gradcheck calls it with the parameters and again with
  // double copies of them (the numeric derivative is computed in double).
  auto loss = [&](auto const& emb, auto const& w, auto const& bias) {
    auto h = emb(gx::all, gx::indices(tokens));                            // 8 x 4
    auto ctx = gx::unsqueeze<0>(gx::sum<1>(h));                            // 1 x 8: bag of embeddings
    auto y = gx::tanh(gx::sum<1>(w * ctx) + bias);                         // 3
    return gx::mean(gx::square(y - 0.5f)) + 0.01f * gx::sum(gx::square(h));  // rank 0
  };

  auto r = gx::gradcheck(loss, E, W, b);  // 80 + 24 + 3 elements: checked one by one
  std::cout << r << "\n";
  // end doc-snippet

  // A large table: the fast mode compares (f(x + hv) - f(x - hv)) / 2h with <grad f, v> for a
  // few seeded random directions v (automatic beyond max_elements elements, or asked for).
  auto T = gx::param(gx::uniform<float>(gx::dims(64, 20000), /*seed=*/3, -1.0f, 1.0f), gx::sparse_grad<1>);
  std::vector<int> rows;
  for (int k = 0; k < 1000; ++k) rows.push_back((k * 7919) % 20000);
  auto r2 = gx::gradcheck([&](auto const& t) { return gx::sum(gx::sigmoid(t(gx::all, gx::indices(rows)))); },
                          {.directions = 8, .seed = 7}, T);
  std::cout << r2 << "\n";

  return r.ok() && r2.ok() ? 0 : 1;
}
