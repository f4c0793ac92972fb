// A character-level causal language model: a small GPT trained on the fortune files.
//
// Tokens are bytes (the vocabulary: every byte the text holds); a sequence is T consecutive
// bytes of the text, its targets the same bytes shifted by one. The model: token embedding
// (gather) plus learned positions, L pre-norm blocks (multi-head causal self-attention with
// the heads as a batch axis of batched matmuls, then a GELU MLP, each around a residual),
// a final layer norm and a linear map to the vocabulary; cross_entropy over every position;
// AdamW with gradient-norm clipping. Every value read more than once is bound by gx::let
// (docs/ad.md, "Shared values"): one forward computes it once, and the backward adds all its
// adjoints into one buffer. The text is split 90 / 10 (the last tenth is held out); each
// epoch reports the held-out loss, and the run ends by sampling a few lines.
//
//   build/examples/transformer --data DIR [--files a,b] [--steps N] [--epochs E] [--batch B]
//                              [--context T] [--dim D] [--heads H] [--ff F] [--lr LR]
//                              [--clip C] [--seed S] [--sample N] [--log run.csv]
//                              [--threads T] [--target LOSS] [--every N] [--bench R]
//
// DIR holds fortune files (Debian's `fortunes` package installs them in
// /usr/share/games/fortunes; the tests use the sample in tests/data/fortunes). Exits 1 unless
// the held-out loss ends below --target nats per character (default: 0.8 times the loss of
// the training text's byte frequencies, a model that ignores context).
// --every N prints the training loss every N steps; --bench R times R steps after 3 warm-up
// steps and prints "step_ms <median> <least>" instead of training. bench/transformer_torch.py
// is its PyTorch 2 twin (same shapes, same step, same batches); bench/transformer.sh times
// the two and compares their losses.
#include <gradix/gradix.hpp>
#include <gradix/optim.hpp>

#include "training_log.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <iterator>
#include <string>
#include <vector>

namespace gx = gradix;
using gx::dyn;
using gx::index_t;

namespace {
using vec = gx::tensor<float, gx::shape<dyn>>;
using mat = gx::tensor<float, gx::shape<dyn, dyn>>;
using pvec = decltype(gx::param(std::declval<vec>()));
using pmat = decltype(gx::param(std::declval<mat>()));

// the model's sizes
struct sizes {
  index_t V, T, D, H, F;
};

pmat matrix(index_t rows, index_t cols, std::uint64_t seed, float sd) {
  return gx::param(gx::randn<float>(gx::dims(rows, cols), seed, 0.0f, sd));
}
pvec constant(index_t n, float v) {
  vec t(gx::dims(n));
  for (index_t k = 0; k < n; ++k) t(k) = v;
  return gx::param(std::move(t));
}

// one pre-norm block's parameters
struct block_params {
  pvec g1, b1;             // layer norm before attention
  pmat Wq, Wk, Wv, Wo;     // attention
  pvec g2, b2;             // layer norm before the MLP
  pmat W1, W2;             // the MLP
  pvec c1, c2;             // its biases
  block_params(sizes const& s, std::uint64_t seed, int layers)
      : g1(constant(s.D, 1)), b1(constant(s.D, 0)),
        Wq(matrix(s.D, s.D, seed + 1, 0.02f)), Wk(matrix(s.D, s.D, seed + 2, 0.02f)),
        Wv(matrix(s.D, s.D, seed + 3, 0.02f)),
        // residual projections scaled by 1/sqrt(2 L), as GPT-2 initializes them
        Wo(matrix(s.D, s.D, seed + 4, 0.02f / std::sqrt(2.0f * float(layers)))),
        g2(constant(s.D, 1)), b2(constant(s.D, 0)), W1(matrix(s.D, s.F, seed + 5, 0.02f)),
        W2(matrix(s.F, s.D, seed + 6, 0.02f / std::sqrt(2.0f * float(layers)))),
        c1(constant(s.F, 0)), c2(constant(s.D, 0)) {}
  // f(every parameter of the block...)
  template <class F>
  decltype(auto) with_params(F&& f) {
    return f(g1, b1, Wq, Wk, Wv, Wo, g2, b2, W1, W2, c1, c2);
  }
};

constexpr int layers = 2;  // the blocks (a compile-time count: each is part of the step's type)

struct model {
  sizes s;
  pmat E, P;                  // token embedding (V, D), positions (T, D)
  block_params l0, l1;
  pvec gf, bf;                // the final layer norm
  pmat Wout;                  // (D, V)
  model(sizes const& z, std::uint64_t seed)
      : s(z), E(matrix(z.V, z.D, seed, 0.02f)), P(matrix(z.T, z.D, seed + 100, 0.01f)),
        l0(z, seed + 200, layers), l1(z, seed + 300, layers), gf(constant(z.D, 1)), bf(constant(z.D, 0)),
        Wout(matrix(z.D, z.V, seed + 400, 0.02f)) {}
  // f(every parameter of the model...): the one list the optimizer and the clip read
  template <class F>
  decltype(auto) with_params(F&& f) {
    return l0.with_params([&](auto&... a) {
      return l1.with_params([&](auto&... b) -> decltype(auto) { return f(E, P, a..., b..., gf, bf, Wout); });
    });
  }

  // doc-snippet: attention
  // multi-head causal self-attention of x (B, T, D): the heads become a batch axis,
  // (B, T, D) -> (B, T, H, D/H) -> (B, H, T, D/H) -> (B H, T, D/H), and back
  template <class X>
  auto attention(block_params& p, X const& x, index_t B, index_t T) {
    index_t const H = s.H, dh = s.D / s.H;
    auto heads = [&](auto const& y) {
      return gx::reshape(gx::permute<0, 2, 1, 3>(gx::reshape(y, gx::dims(B, T, H, dh))), gx::dims(B * H, T, dh));
    };
    auto merge = [&](auto const& y) {
      return gx::reshape(gx::permute<0, 2, 1, 3>(gx::reshape(y, gx::dims(B, H, T, dh))), gx::dims(B, T, s.D));
    };
    auto q = heads(gx::matmul(x, p.Wq));
    auto k = heads(gx::matmul(x, p.Wk));
    auto v = heads(gx::matmul(x, p.Wv));
    auto scores = gx::matmul(q, gx::permute<0, 2, 1>(k)) * (1.0f / std::sqrt(float(dh)));
    return gx::matmul(merge(gx::matmul(gx::softmax<2>(gx::causal_mask(scores)), v)), p.Wo);
  }
  // end doc-snippet
  // doc-snippet: block
  // a pre-norm block: x + attention(ln(x)), then h + mlp(ln(h)); the normalized input (read by
  // three products) and h (read twice) are bound by gx::let
  template <class X>
  auto block(block_params& p, X const& x, index_t B, index_t T) {
    auto h = x + gx::let(gx::layer_norm(x, p.g1, p.b1), [&](auto xn) { return attention(p, xn, B, T); });
    return gx::let(h, [&](auto h) {
      return h + gx::matmul(gx::gelu_tanh(gx::matmul(gx::layer_norm(h, p.g2, p.b2), p.W1) + p.c1), p.W2) + p.c2;
    });
  }
  // end doc-snippet
  // the logits (B T, V) of the sequences ids (B T token ids, row by row), T <= s.T
  auto logits(std::vector<std::int32_t> const& ids, index_t B, index_t T) {
    auto x0 = gx::reshape(gx::gather<0>(E, ids), gx::dims(B, T, s.D)) + gx::slice<0>(P, 0, T);
    return gx::let(x0, [&](auto x) {
      return gx::let(block(l0, x, B, T), [&](auto x1) {
        auto out = gx::layer_norm(block(l1, x1, B, T), gf, bf);
        return gx::matmul(gx::reshape(out, gx::dims(B * T, s.D)), Wout);
      });
    });
  }
};

}  // namespace

int main(int argc, char** argv) {
  std::string const dir = examples::arg(argc, argv, "--data", "");
  auto const files = examples::split(examples::arg(argc, argv, "--files", "computers,politics,science,songs-poems"), ',');
  int const epochs = std::stoi(examples::arg(argc, argv, "--epochs", "10"));
  long const steps = std::stol(examples::arg(argc, argv, "--steps", "200"));  // per epoch
  index_t const B = std::stol(examples::arg(argc, argv, "--batch", "16"));
  sizes z{0, std::stol(examples::arg(argc, argv, "--context", "64")), std::stol(examples::arg(argc, argv, "--dim", "128")),
          std::stol(examples::arg(argc, argv, "--heads", "4")), std::stol(examples::arg(argc, argv, "--ff", "512"))};
  double const lr = std::stod(examples::arg(argc, argv, "--lr", "1e-3"));
  double const clip = std::stod(examples::arg(argc, argv, "--clip", "1.0"));
  std::uint64_t seed = std::stoull(examples::arg(argc, argv, "--seed", "1"));
  int const sample_lines = std::stoi(examples::arg(argc, argv, "--sample", "4"));
  std::string const log = examples::arg(argc, argv, "--log", "");
  double target = std::stod(examples::arg(argc, argv, "--target", "0"));
  int const bench = std::stoi(examples::arg(argc, argv, "--bench", "0"));
  long const every = std::stol(examples::arg(argc, argv, "--every", "0"));
  if (int t = std::stoi(examples::arg(argc, argv, "--threads", "0")); t > 0) gx::set_num_threads(t);
  if (dir.empty()) {
    std::fprintf(stderr, "transformer: give --data DIR (a folder of fortune files)\n");
    return 2;
  }
  if (z.D % z.H != 0) {
    std::fprintf(stderr, "transformer: --dim %ld is not a multiple of --heads %ld\n", long(z.D), long(z.H));
    return 2;
  }

  // the text, its bytes as tokens
  examples::byte_corpus const corpus = examples::read_byte_corpus(dir, files);
  auto const& tokens = corpus.tokens;
  auto const& byte_of = corpus.byte_of;
  std::size_t const n_train = corpus.n_train;
  double const unigram = corpus.unigram;
  z.V = index_t(corpus.vocabulary());
  if (n_train < std::size_t(z.T) + 2 || tokens.size() - n_train < std::size_t(z.T) + 2) {
    std::fprintf(stderr, "transformer: the text (%zu bytes) is too short for --context %ld\n", tokens.size(), long(z.T));
    return 2;
  }
  if (target <= 0) target = 0.8 * unigram;
  std::printf("%zu characters (%zu for training), vocabulary %ld; context %ld, %d blocks of dimension %ld, %ld "
              "heads, MLP %ld; batch %ld\n",
              tokens.size(), n_train, long(z.V), long(z.T), layers, long(z.D), long(z.H), long(z.F), long(B));

  model m(z, seed);
  auto opt = m.with_params([&](auto&... p) { return gx::optim::adamw({.lr = lr, .weight_decay = 0.01}, p...); });
  auto clip_all = [&] { return m.with_params([&](auto&... p) { return gx::optim::clip_grad_norm(clip, p...); }); };

  // a batch: B windows of T + 1 tokens starting at random positions of [lo, hi)
  std::uint64_t state = seed * 0x9E3779B97F4A7C15ull + 1;
  auto next = [&] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return state >> 33;
  };
  std::vector<std::int32_t> ids(std::size_t(B * z.T));
  gx::tensor<std::int64_t, gx::shape<dyn>> targets(gx::dims(B * z.T));
  auto fill_batch = [&](std::size_t lo, std::size_t hi, std::size_t const* starts) {
    for (index_t b = 0; b < B; ++b) {
      std::size_t const a = starts ? starts[b] : lo + next() % (hi - lo - std::size_t(z.T));
      for (index_t t = 0; t < z.T; ++t) {
        ids[std::size_t(b * z.T + t)] = tokens[a + std::size_t(t)];
        targets(b * z.T + t) = tokens[a + std::size_t(t) + 1];
      }
    }
  };
  // the held-out loss: the mean over fixed windows covering the held-out tenth
  auto held_out_loss = [&] {
    std::vector<std::size_t> starts;
    for (std::size_t a = n_train; a + std::size_t(z.T) + 1 <= tokens.size(); a += std::size_t(z.T)) starts.push_back(a);
    double sum = 0;
    std::size_t n = 0;
    for (std::size_t k = 0; k + std::size_t(B) <= starts.size(); k += std::size_t(B), ++n) {
      fill_batch(0, 0, starts.data() + k);
      sum += double(gx::value(gx::cross_entropy(m.logits(ids, B, z.T), targets)));
    }
    return n > 0 ? sum / double(n) : 0.0;
  };

  if (bench > 0) {
    // 3 warm-up steps, then `bench` timed ones: the median and the least time per step
    std::vector<double> ms;
    for (int k = 0; k < bench + 3; ++k) {
      fill_batch(0, n_train, nullptr);
      auto const t0 = std::chrono::steady_clock::now();
      opt.zero_grad();
      (void)gx::backward(gx::cross_entropy(m.logits(ids, B, z.T), targets));
      (void)clip_all();
      opt.step();
      if (k >= 3) ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(ms.begin(), ms.end());
    std::printf("step_ms %.3f %.3f\n", ms[ms.size() / 2], ms[0]);
    return 0;
  }
  examples::training_log progress(epochs, steps, {"held_out_loss", "grad_norm"}, log);
  long global = 0;
  double loss_now = 0, norm = 0;
  for (int ep = 1; ep <= epochs; ++ep) {
    for (long st = 0; st < steps; ++st) {
      fill_batch(0, n_train, nullptr);
      // doc-snippet: step
      opt.zero_grad();
      float loss = gx::backward(gx::cross_entropy(m.logits(ids, B, z.T), targets));
      norm = clip_all();
      opt.step();
      // end doc-snippet
      progress.step(ep, st, double(loss), long(B * z.T));
      if (++global; every > 0 && (global % every == 0 || global == 1)) std::printf("step %ld loss %.4f\n", global, double(loss));
    }
    loss_now = held_out_loss();
    progress.epoch_end(ep, {loss_now, norm});
  }
  std::printf("held-out loss %.3f nats per character (%.2f bits); ignoring context: %.3f; target %.3f\n", loss_now,
              loss_now / std::log(2.0), unigram, target);

  // sampling: each next byte drawn from the softmax of the last position's logits (the
  // context: the last T bytes), starting from the first bytes of the held-out text
  if (sample_lines > 0) {
    std::vector<std::int32_t> ctx(tokens.begin() + std::ptrdiff_t(n_train), tokens.begin() + std::ptrdiff_t(n_train) + 8);
    std::string out;
    for (std::int32_t t : ctx) out += char(byte_of[std::size_t(t)]);
    int lines = 0;
    for (int k = 0; k < 2000 && lines < sample_lines; ++k) {
      index_t const t = index_t(std::min<std::size_t>(ctx.size(), std::size_t(z.T)));
      std::vector<std::int32_t> window(ctx.end() - t, ctx.end());
      auto lg = gx::eval(gx::softmax<1>(gx::slice<0>(m.logits(window, 1, t), t - 1, t)));
      double u = double(next() % (1u << 24)) / double(1u << 24), acc = 0;
      std::int32_t pick = std::int32_t(z.V - 1);
      for (index_t v = 0; v < z.V; ++v) {
        acc += double(lg(0, v));
        if (u < acc) {
          pick = std::int32_t(v);
          break;
        }
      }
      ctx.push_back(pick);
      char const ch = char(byte_of[std::size_t(pick)]);
      out += ch;
      if (ch == '\n') ++lines;
    }
    std::printf("sample:\n%s\n", out.c_str());
  }
  return loss_now < target ? 0 : 1;
}
