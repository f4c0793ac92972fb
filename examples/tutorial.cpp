// The tutorial (docs/tutorial.md shows its regions, in order): tensors, expressions,
// parameters and gradients, a gather into a sparse gradient, a gradient check, then a model
// trained to classify bags of tokens. Exits 1 if a step does not give what the tutorial says.
//
//   build/examples/tutorial
#include <gradix/gradix.hpp>
#include <gradix/optim.hpp>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <vector>

namespace gx = gradix;
using gx::dyn;
using gx::index_t;

namespace {
int failures = 0;
void expect(bool ok, char const* what) {
  if (!ok) {
    std::printf("tutorial: NOT as described: %s\n", what);
    ++failures;
  }
}
}  // namespace

int main() {
  // doc-snippet: tensors
  // A static shape is part of the type; a dynamic extent is stored in the object.
  gx::tensor<float, gx::shape<2, 3>> a{1, 2, 3, 4, 5, 6};      // 2 x 3, values in row-major order
  auto b = gx::iota<float>(gx::dims(2, gx::fix<3>));         // shape<dyn, 3>: 0 1 2 / 3 4 5
  auto noise = gx::randn<float>(gx::dims(2, 3), /*seed=*/7);  // shape<dyn, dyn>, seeded
  std::cout << a << "\n" << b << "\n";
  // end doc-snippet
  expect(a(1, 2) == 6 && b(1, 0) == 3 && noise.extent(1) == 3, "tensors");

  // doc-snippet: expressions
  auto e = gx::exp(-a) * b + 1.0f;          // nothing runs yet: e's type is the expression
  auto c = gx::eval(e);                     // one fused loop into a new 2 x 3 tensor
  float s = gx::value(gx::sum(c * c));      // a rank-0 expression: one fused reduction
  auto rows = gx::eval(gx::sum<1>(a));      // reduce axis 1: shape<2>
  auto centred = gx::eval(a - gx::mean<0>(a, gx::keep_dims));  // broadcasting a 1 x 3 row
  // end doc-snippet
  expect(std::abs(c(0, 1) - (std::exp(-2.0f) * 1 + 1)) < 1e-6f && s > 0 && rows(1) == 15 &&
             centred(0, 0) == -1.5f,
         "expressions");

  // doc-snippet: gradients
  auto w = gx::param(gx::tensor<double, gx::shape<3>>{0.5, -1.0, 2.0});
  auto x = gx::tensor<double, gx::shape<4, 3>>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  double loss = gx::backward(gx::sum(gx::square(x * w)));  // value, and d loss / d w into w.grad()
  auto g = w.grad().to_dense();                            // g(j) = sum_i 2 x(i, j)^2 w(j)
  auto g2 = gx::grad(gx::sum(gx::square(x * w)), w);       // the same, into a new storage
  gx::zero_grad(w);
  // end doc-snippet
  expect(loss > 0 && g(0) == 2 * (1 + 16 + 49 + 100) * 0.5 && g2.to_dense()(2) == g(2), "gradients");

  // doc-snippet: gather
  // An embedding table of 1000 rows; a batch reads rows 3, 7 and 3 again.
  auto table = gx::param(gx::randn<float>(gx::dims(1000, gx::fix<8>), /*seed=*/1), gx::sparse_grad<0>);
  std::vector<int> ids{3, 7, 3};
  gx::backward(gx::sum(gx::tanh(table(gx::indices(ids), gx::all))));
  // The gradient holds only the rows the forward read: 2 slices, row 3's the sum of two reads.
  std::cout << table.grad().size() << " rows with a gradient: " << table.grad().id(0) << ", "
            << table.grad().id(1) << "\n";
  // end doc-snippet
  expect(table.grad().size() == 2 && table.grad().id(0) == 3 && table.grad().id(1) == 7, "gather");

  // doc-snippet: check
  auto r = gx::gradcheck([&](auto const& t) { return gx::sum(gx::tanh(t(gx::indices(ids), gx::all))); },
                         table);
  std::cout << r << "\n";  // gradcheck passed: ...
  // end doc-snippet
  expect(r.ok(), "gradcheck");

  // The model: a document is 5 tokens out of 40; tokens 0-19 lean "no", 20-39 lean "yes", and
  // the label is the majority. The model averages the tokens' embeddings (embedding_bag) and
  // applies a linear layer; the table has a sparse gradient, trained by lazy Adam.
  // doc-snippet: data
  index_t const V = 40, D = 8, C = 2, N = 2000, L = 5;
  auto draw = gx::uniform<float>(gx::dims(N, L), /*seed=*/11, 0.0f, float(V));
  std::vector<std::int32_t> tokens(static_cast<std::size_t>(N * L));
  std::vector<std::int32_t> offsets(static_cast<std::size_t>(N));
  gx::tensor<std::int64_t, gx::shape<dyn>> labels(gx::dims(N));
  for (index_t n = 0; n < N; ++n) {
    int yes = 0;
    for (index_t k = 0; k < L; ++k) {
      auto t = std::int32_t(draw(n, k));
      tokens[std::size_t(n * L + k)] = t;
      yes += t >= V / 2;
    }
    offsets[std::size_t(n)] = std::int32_t(n * L);
    labels(n) = yes > L / 2 ? 1 : 0;
  }
  // end doc-snippet

  // doc-snippet: model
  auto E = gx::param(gx::randn<float>(gx::dims(V, D), /*seed=*/2, 0.0f, 0.1f), gx::sparse_grad<0>);
  auto W = gx::param(gx::tensor<float, gx::shape<dyn, dyn>>(gx::dims(D, C)));
  auto bias = gx::param(gx::tensor<float, gx::shape<dyn>>(gx::dims(C)));
  gx::init::xavier_uniform(W, /*seed=*/3);
  auto logits = [&] { return gx::matmul(gx::embedding_bag(E, tokens, offsets, gx::bag_mode::mean), W) + bias; };
  // end doc-snippet

  // doc-snippet: train
  gx::optim::lazy_adam opt({.lr = 0.05}, E, W, bias);
  for (int step = 1; step <= 60; ++step) {
    opt.zero_grad();
    float xent = gx::backward(gx::cross_entropy(logits(), labels));
    opt.step();
    if (step % 20 == 0) std::printf("step %d  loss %.4f\n", step, double(xent));
  }
  float accuracy = gx::value(gx::mean(gx::cast<float>(gx::argmax<1>(logits()) == labels)));
  std::printf("accuracy %.1f%%\n", 100.0 * double(accuracy));
  // end doc-snippet
  expect(accuracy > 0.95f, "training reaches 95% accuracy");

  return failures == 0 ? 0 : 1;
}
