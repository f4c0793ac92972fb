// One training step of the text classifier of examples/text_classifier.cpp (embedding_bag of
// word vectors, mean, a linear layer, cross_entropy, lazy Adam) on synthetic bags: Zipf-like
// word ids, bags of 10 to 50 words, batch B, V x D table, C classes. Prints the median time
// per step and quotes per second; the PyTorch twin is bench/textclf_torch.py.
//
// Usage: bench_textclf [--vocab V] [--dim D] [--batch B] [--classes C] [--reps R] [--threads T]
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
  index_t V = 6000, D = 64, B = 32, C = 4;
  int reps = 300, threads = 1;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--vocab") == 0) V = std::atol(argv[++i]);
    else if (std::strcmp(argv[i], "--dim") == 0) D = std::atol(argv[++i]);
    else if (std::strcmp(argv[i], "--batch") == 0) B = std::atol(argv[++i]);
    else if (std::strcmp(argv[i], "--classes") == 0) C = std::atol(argv[++i]);
    else if (std::strcmp(argv[i], "--reps") == 0) reps = std::atoi(argv[++i]);
    else if (std::strcmp(argv[i], "--threads") == 0) threads = std::atoi(argv[++i]);
  }
  gx::set_num_threads(threads);
  std::vector<double> cdf(static_cast<std::size_t>(V));
  double z = 0;
  for (index_t r = 0; r < V; ++r) cdf[std::size_t(r)] = (z += 1.0 / double(r + 10));
  std::uint64_t s = 3;
  auto next = [&] {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    return s >> 11;
  };
  auto draw = [&] {
    double u = double(next()) / 9007199254740992.0 * z;
    return std::int32_t(std::lower_bound(cdf.begin(), cdf.end(), u) - cdf.begin());
  };
  int const nbatches = 16;
  std::vector<std::vector<std::int32_t>> words(nbatches), offsets(nbatches);
  std::vector<gx::tensor<std::int64_t, gx::shape<dyn>>> labels;
  for (int q = 0; q < nbatches; ++q) {
    labels.emplace_back(gx::dims(B));
    for (index_t i = 0; i < B; ++i) {
      offsets[q].push_back(std::int32_t(words[q].size()));
      index_t len = 10 + index_t(next() % 41);
      for (index_t k = 0; k < len; ++k) words[q].push_back(draw());
      labels[std::size_t(q)](i) = std::int64_t(next() % std::uint64_t(C));
    }
  }
  auto E = gx::param(gx::randn<float>(gx::dims(V, D), 2, 0.0f, 0.1f), gx::sparse_grad<0>);
  auto W = gx::param(gx::tensor<float, gx::shape<dyn, dyn>>(gx::dims(D, C)));
  auto b = gx::param(gx::tensor<float, gx::shape<dyn>>(gx::dims(C)));
  gx::init::xavier_uniform(W, 3);
  gx::optim::lazy_adam opt({.lr = 0.01}, E, W, b);
  auto step = [&](int q) {
    auto logits = gx::matmul(gx::embedding_bag(E, words[q], offsets[q], gx::bag_mode::mean), W) + b;
    opt.zero_grad();
    float l = gx::backward(gx::cross_entropy(logits, labels[std::size_t(q)]));
    opt.step();
    return l;
  };
  float l = 0;
  for (int w = 0; w < 5; ++w) l = step(w % nbatches);
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    double t0 = now();
    l = step(r % nbatches);
    t.push_back(now() - t0);
  }
  std::sort(t.begin(), t.end());
  double const m = t[t.size() / 2];
  std::printf("gradix textclf V %ld D %ld B %ld C %ld threads %d: %.1f us/step (%.0f quotes/s); last loss %.4f\n",
              long(V), long(D), long(B), long(C), threads, m * 1e6, double(B) / m, double(l));
  return 0;
}
