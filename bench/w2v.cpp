// One word2vec step (skip-gram, negative sampling: a batch of B (word, context) pairs with K
// negatives each, two V x D tables, plain SGD) written the natural way with gradix (one loss
// expression, backward into sparse-gradient tables, an optimizer step: examples/word2vec.cpp)
// against a hand-written C++ loop doing the same step (the same batch gradient, accumulated
// into dense buffers for the rows touched, then applied to those rows and cleared),
// interleaved in one process. Ids are drawn from a Zipf-like distribution, as words are.
// Prints medians over reps of the time per step and pairs per second; the PyTorch twin is
// bench/w2v_torch.py.
//
// Usage: bench_w2v [--vocab V] [--dim D] [--batch B] [--negatives K] [--reps R] [--threads T]
#include <gradix/gradix.hpp>
#include <gradix/optim.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
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

namespace {
struct hand_w2v {
  index_t V, D;
  std::vector<float> in, out, gin, gout;
  std::vector<std::int32_t> tin, tout;  // rows touched, in first-touch order
  std::vector<unsigned char> min, mout;
  hand_w2v(index_t v, index_t d, float const* a, float const* b)
      : V(v), D(d), in(a, a + v * d), out(b, b + v * d), gin(std::size_t(v * d)), gout(std::size_t(v * d)),
        min(std::size_t(v)), mout(std::size_t(v)) {}
  static float log_sigmoid(float x) { return x >= 0 ? -std::log1p(std::exp(-x)) : x - std::log1p(std::exp(x)); }
  float step(std::int32_t const* c, std::int32_t const* o, std::int32_t const* n, index_t B, index_t K, float lr) {
    float loss = 0;
    float const scale = 1.0f / float(B);
    auto pair = [&](std::int32_t w, std::int32_t t, float label) {
      float const* v = &in[std::size_t(w * D)];
      float const* u = &out[std::size_t(t * D)];
      // the dot product in 8-lane vectors (D a multiple of 8 here), then the lanes
      typedef float v8 __attribute__((vector_size(32)));
      v8 acc = {};
      index_t d0 = 0;
      for (; d0 + 8 <= D; d0 += 8) {
        v8 a, b;
        std::memcpy(&a, v + d0, sizeof a);
        std::memcpy(&b, u + d0, sizeof b);
        acc += a * b;
      }
      float f = 0;
      for (int l = 0; l < 8; ++l) f += acc[l];
      for (; d0 < D; ++d0) f += v[d0] * u[d0];
      loss -= label > 0 ? log_sigmoid(f) : log_sigmoid(-f);
      float const g = (label - 1.0f / (1.0f + std::exp(-f))) * -scale;  // d loss / d f
      if (!min[std::size_t(w)]) min[std::size_t(w)] = 1, tin.push_back(w);
      if (!mout[std::size_t(t)]) mout[std::size_t(t)] = 1, tout.push_back(t);
      float* gv = &gin[std::size_t(w * D)];
      float* gu = &gout[std::size_t(t * D)];
      index_t d = 0;
      for (; d + 8 <= D; d += 8) {
        v8 a, b, x, y;
        std::memcpy(&a, v + d, sizeof a);
        std::memcpy(&b, u + d, sizeof b);
        std::memcpy(&x, gv + d, sizeof x);
        std::memcpy(&y, gu + d, sizeof y);
        x += g * b;
        y += g * a;
        std::memcpy(gv + d, &x, sizeof x);
        std::memcpy(gu + d, &y, sizeof y);
      }
      for (; d < D; ++d) {
        gv[d] += g * u[d];
        gu[d] += g * v[d];
      }
    };
    for (index_t i = 0; i < B; ++i) {
      pair(c[i], o[i], 1.0f);
      for (index_t k = 0; k < K; ++k) pair(c[i], n[i * K + k], 0.0f);
    }
    auto apply = [&](std::vector<float>& w, std::vector<float>& g, std::vector<std::int32_t>& t,
                     std::vector<unsigned char>& m) {
      for (std::int32_t r : t) {
        float* wr = &w[std::size_t(r * D)];
        float* gr = &g[std::size_t(r * D)];
        for (index_t d = 0; d < D; ++d) {
          wr[d] -= lr * gr[d];
          gr[d] = 0;
        }
        m[std::size_t(r)] = 0;
      }
      t.clear();
    };
    apply(in, gin, tin, min);
    apply(out, gout, tout, mout);
    return loss * scale;
  }
};
}  // namespace

int main(int argc, char** argv) {
  index_t V = 18000, D = 64, B = 512, K = 5;
  int reps = 200, threads = 1;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--vocab") == 0) V = std::atol(argv[++i]);
    else if (std::strcmp(argv[i], "--dim") == 0) D = std::atol(argv[++i]);
    else if (std::strcmp(argv[i], "--batch") == 0) B = std::atol(argv[++i]);
    else if (std::strcmp(argv[i], "--negatives") == 0) K = std::atol(argv[++i]);
    else if (std::strcmp(argv[i], "--reps") == 0) reps = std::atoi(argv[++i]);
    else if (std::strcmp(argv[i], "--threads") == 0) threads = std::atoi(argv[++i]);
  }
  gx::set_num_threads(threads);
  // ids: Zipf-like (rank r drawn with weight 1 / (r + 10)), seeded; a fresh batch per rep
  std::vector<double> cdf(static_cast<std::size_t>(V));
  double z = 0;
  for (index_t r = 0; r < V; ++r) cdf[std::size_t(r)] = (z += 1.0 / double(r + 10));
  std::uint64_t s = 5;
  auto draw = [&] {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    double u = double(s >> 11) / 9007199254740992.0 * z;
    return std::int32_t(std::lower_bound(cdf.begin(), cdf.end(), u) - cdf.begin());
  };
  int const nbatches = 16;
  std::vector<std::vector<std::int32_t>> cs(nbatches), os(nbatches), cns(nbatches), ns(nbatches);
  for (int q = 0; q < nbatches; ++q) {
    for (index_t i = 0; i < B; ++i) {
      cs[q].push_back(draw());
      os[q].push_back(draw());
      for (index_t k = 0; k < K; ++k) ns[q].push_back(draw());
    }
    for (index_t i = 0; i < B; ++i)
      for (index_t k = 0; k < K; ++k) cns[q].push_back(cs[q][std::size_t(i)]);
  }
  auto Win = gx::param(gx::uniform<float>(gx::dims(V, D), 1, -0.5f / float(D), 0.5f / float(D)), gx::sparse_grad<0>);
  auto Wout = gx::param(gx::uniform<float>(gx::dims(V, D), 2, -0.5f / float(D), 0.5f / float(D)), gx::sparse_grad<0>);
  hand_w2v hand(V, D, Win.value().data(), Wout.value().data());
  float const lr = 0.025f * float(B);
  gx::optim::sgd opt({.lr = lr}, Win, Wout);
  auto gx_step = [&](int q) {
    auto const& c = cs[q];
    auto const& o = os[q];
    auto const& cn = cns[q];
    auto const& n = ns[q];
    auto pos = gx::sum<1>(gx::gather<0>(Win, c) * gx::gather<0>(Wout, o));
    auto neg = gx::sum<1>(gx::gather<0>(Win, cn) * gx::gather<0>(Wout, n));
    opt.zero_grad();
    float l = gx::backward(-(gx::sum(gx::log_sigmoid(pos)) + gx::sum(gx::log_sigmoid(-neg))) / float(B));
    opt.step();
    return l;
  };
  float lg = 0, lh = 0;
  for (int w = 0; w < 5; ++w) {
    lg = gx_step(w % nbatches);
    lh = hand.step(cs[w % nbatches].data(), os[w % nbatches].data(), ns[w % nbatches].data(), B, K, lr);
  }
  std::vector<double> tg, th;
  for (int r = 0; r < reps; ++r) {
    int q = r % nbatches;
    double t0 = now();
    lg = gx_step(q);
    double t1 = now();
    lh = hand.step(cs[q].data(), os[q].data(), ns[q].data(), B, K, lr);
    double t2 = now();
    tg.push_back(t1 - t0);
    th.push_back(t2 - t1);
  }
  std::sort(tg.begin(), tg.end());
  std::sort(th.begin(), th.end());
  double const mg = tg[tg.size() / 2], mh = th[th.size() / 2];
  std::printf("w2v V %ld D %ld B %ld K %ld threads %d: gradix %.1f us/step (%.0f pairs/s), hand %.1f us/step (%.0f pairs/s), "
              "gradix/hand %.2f; last losses %.4f %.4f\n",
              long(V), long(D), long(B), long(K), threads, mg * 1e6, double(B) / mg, mh * 1e6, double(B) / mh, mg / mh,
              double(lg), double(lh));
  return 0;
}
