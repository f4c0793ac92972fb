// Compile-time benchmark case (bench/compile_time.sh, case `transformer`, built at -O0 -g:
// issue 32's debug build): one pre-norm transformer block as bench/blocks.cpp writes it
// (gx::layer_norm, a causal attention head with a `where` mask and softmax, a GELU MLP, two
// residuals, the shared values bound by gx::let), its forward value and its backward.
#include <gradix/gradix.hpp>

#include <cmath>
#include <cstdio>

namespace gx = gradix;
using gx::dyn;
using gx::index_t;

int main() {
  index_t const B = 2, T = 8, D = 16, FF = 64;
  auto init = [](index_t rows, index_t cols, unsigned seed) {
    return gx::param(gx::randn<float>(gx::dims(rows, cols), seed, 0.f, 1.f / std::sqrt(float(rows))));
  };
  auto X = gx::param(gx::randn<float>(gx::dims(B, T, D), 1));
  auto Wq = init(D, D, 2), Wk = init(D, D, 3), Wv = init(D, D, 4), Wo = init(D, D, 5);
  auto W1 = init(D, FF, 6), W2 = init(FF, D, 7);
  gx::tensor<float, gx::shape<dyn, dyn>> mask(gx::dims(T, T));
  for (index_t i = 0; i < T; ++i)
    for (index_t j = 0; j < T; ++j) mask(i, j) = j <= i ? 1.f : 0.f;
  float const scale = 1.f / std::sqrt(float(D));
  auto causal_head = [&](auto const& x) {
    auto q = gx::matmul(x, Wq);
    auto k = gx::matmul(x, Wk);
    auto v = gx::matmul(x, Wv);
    auto scores = gx::matmul(q, gx::permute<0, 2, 1>(k)) * scale;
    return gx::matmul(gx::softmax<2>(gx::where(mask, scores, -1e9f)), v);
  };
  auto out = gx::let(X + gx::matmul(gx::let(gx::layer_norm(X), causal_head), Wo), [&](auto h) {
    return h + gx::matmul(gx::gelu_tanh(gx::matmul(gx::layer_norm(h), W1)), W2);
  });
  auto loss = gx::sum(gx::square(out));
  float v = gx::value(loss);
  float b = gx::backward(loss);
  std::printf("transformer block: value %g, backward %g, dWq[0] %g\n", double(v), double(b),
              double(Wq.grad().to_dense()(0, 0)));
  return v == b ? 0 : 1;
}
