// One training step of an MLP (batch 256, 784-512-512-10, relu, cross_entropy, plain SGD),
// written the natural way: one loss expression, backward, an optimizer step. The PyTorch twin
// is bench/mlp_torch.py (same shapes, same step); tools/bench_training.sh runs both, 1 thread and
// all threads, and docs/performance.md has the table. Prints the median step time in ms.
//
// Usage: bench_mlp [--reps R] [--threads N] [--batch B]
#include <gradix/gradix.hpp>
#include <gradix/optim.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

namespace gx = gradix;
using gx::dyn;
using gx::index_t;

static double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

int main(int argc, char** argv) {
  int reps = 30, threads = 1;
  index_t batch = 256;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--reps") == 0) reps = std::atoi(argv[++i]);
    else if (std::strcmp(argv[i], "--threads") == 0) threads = std::atoi(argv[++i]);
    else if (std::strcmp(argv[i], "--batch") == 0) batch = std::atol(argv[++i]);
  }
  gx::set_num_threads(threads);
  index_t const d0 = 784, d1 = 512, d2 = 512, d3 = 10;
  auto x = gx::uniform<float>(gx::dims(batch, d0), 1, 0.0f, 1.0f);
  gx::tensor<std::int64_t, gx::shape<dyn>> y(gx::dims(batch));
  for (index_t i = 0; i < batch; ++i) y(i) = (i * 7) % d3;
  auto W1 = gx::param(gx::tensor<float, gx::shape<dyn, dyn>>(gx::dims(d0, d1)));
  auto b1 = gx::param(gx::tensor<float, gx::shape<dyn>>(gx::dims(d1)));
  auto W2 = gx::param(gx::tensor<float, gx::shape<dyn, dyn>>(gx::dims(d1, d2)));
  auto b2 = gx::param(gx::tensor<float, gx::shape<dyn>>(gx::dims(d2)));
  auto W3 = gx::param(gx::tensor<float, gx::shape<dyn, dyn>>(gx::dims(d2, d3)));
  auto b3 = gx::param(gx::tensor<float, gx::shape<dyn>>(gx::dims(d3)));
  gx::init::kaiming_uniform(W1, 11);
  gx::init::kaiming_uniform(W2, 12);
  gx::init::kaiming_uniform(W3, 13);
  gx::optim::sgd opt({.lr = 0.01}, W1, b1, W2, b2, W3, b3);
  auto step = [&] {
    opt.zero_grad();
    auto h1 = gx::relu(gx::matmul(x, W1) + b1);
    auto h2 = gx::relu(gx::matmul(h1, W2) + b2);
    float l = gx::backward(gx::cross_entropy(gx::matmul(h2, W3) + b3, y));
    opt.step();
    return l;
  };
  float first = step(), last = first;
  for (int w = 0; w < 3; ++w) last = step();
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    double t0 = now();
    last = step();
    t.push_back(now() - t0);
  }
  std::sort(t.begin(), t.end());
  std::printf("gradix mlp batch %ld threads %d: median step %.3f ms (loss %.4f -> %.4f)\n", long(batch), threads,
              t[t.size() / 2] * 1e3, double(first), double(last));
  return 0;
}
