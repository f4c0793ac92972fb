// Softmax regression on three Gaussian blobs: logits = x W + b (a matrix product and a
// broadcast bias), cross_entropy as the loss, Adam from gradix/optim.hpp,
// and the accuracy as an expression (argmax == labels). Exits 1 unless the held-out
// accuracy beats 90% (the blobs are well separated; the majority class is 33%).
//
//   build/examples/softmax_regression [--steps N]
#include <gradix/gradix.hpp>
#include <gradix/optim.hpp>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace gx = gradix;

namespace {
constexpr gx::index_t D = 2, C = 3;  // features, classes

// n points per class around three centres, seeded; labels 0, 1, 2
void make_blobs(gx::index_t n, std::uint64_t seed, gx::tensor<float, gx::shape<gx::dyn, D>>& x,
                gx::tensor<std::int64_t, gx::shape<gx::dyn>>& y) {
  float const centre[C][D] = {{-2.f, 0.f}, {2.f, 0.f}, {0.f, 2.5f}};
  auto noise = gx::randn<float>(gx::dims(n * C, gx::fix<D>), seed);
  x = gx::tensor<float, gx::shape<gx::dyn, D>>(gx::dims(n * C, gx::fix<D>));
  y = gx::tensor<std::int64_t, gx::shape<gx::dyn>>(gx::dims(n * C));
  for (gx::index_t i = 0; i < n * C; ++i) {
    gx::index_t c = i % C;
    y(i) = c;
    for (gx::index_t d = 0; d < D; ++d) x(i, d) = centre[c][d] + 0.8f * noise(i, d);
  }
}
}  // namespace

int main(int argc, char** argv) {
  int steps = 200;
  for (int a = 1; a + 1 < argc; ++a)
    if (std::strcmp(argv[a], "--steps") == 0) steps = std::atoi(argv[a + 1]);

  gx::tensor<float, gx::shape<gx::dyn, D>> x, xt;
  gx::tensor<std::int64_t, gx::shape<gx::dyn>> y, yt;
  make_blobs(200, 1, x, y);   // training set: 600 points
  make_blobs(100, 2, xt, yt);  // held out: 300 points

  // doc-snippet: train
  auto W = gx::param(gx::tensor<float, gx::shape<D, C>>{});
  auto b = gx::param(gx::tensor<float, gx::shape<1, C>>{});
  gx::init::xavier_uniform(W, 3);

  // logits[i, c] = sum_d x[i, d] W[d, c] + b[c]
  auto logits = [&](auto const& inputs) { return gx::matmul(inputs, W) + b; };

  gx::optim::adam opt({.lr = 0.05}, W, b);
  float loss = 0;
  for (int s = 1; s <= steps; ++s) {
    opt.zero_grad();
    loss = gx::backward(gx::cross_entropy(logits(x), y));
    opt.step();
    if (s == 1 || s % 50 == 0) std::printf("step %4d  loss %.4f\n", s, double(loss));
  }
  // end doc-snippet
  float const acc = gx::value(gx::mean(gx::cast<float>(gx::argmax<1>(logits(xt)) == yt)));
  std::printf("held-out accuracy %.1f%% (majority class 33.3%%)\n", 100.0 * acc);
  return acc > 0.9f ? 0 : 1;
}
