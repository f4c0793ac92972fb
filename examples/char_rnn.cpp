// A character-level recurrent language model: an LSTM over the fortune files, with gx::scan.
//
// Tokens are bytes (the vocabulary: every byte the text holds); a batch is B windows of T
// consecutive bytes, read time-major (step t of every window together), their targets the
// same bytes shifted by one. The model: token embedding (one gather for the whole batch),
// one LSTM layer written once as the body of a gx::scan (gx::cells::lstm: one product of the
// concatenated input and carry for the four gates; the carry packs h and c side by side),
// and a linear map of every step's h to the vocabulary (one product for all steps);
// cross_entropy over every position; Adam with gradient-norm clipping. The number of steps
// is a run-time value: the same compiled step trains on windows of any length (--context),
// and sampling runs the same scan one byte at a time. The text is split 90 / 10 (the last
// tenth is held out); each epoch reports the held-out loss, and the run ends by sampling a
// few lines.
//
//   build/examples/char_rnn --data DIR [--files a,b] [--steps N] [--epochs E] [--batch B]
//                           [--context T] [--dim D] [--hidden H] [--lr LR] [--clip C]
//                           [--seed S] [--sample N] [--log run.csv] [--threads T]
//                           [--target LOSS] [--bench R]
//
// DIR holds fortune files (Debian's `fortunes` package installs them in
// /usr/share/games/fortunes; the tests use the sample in tests/data/fortunes). Exits 1 unless
// the held-out loss ends below --target nats per character (default: 0.8 times the loss of
// the training text's byte frequencies, a model that ignores context). --bench R times R
// steps after 3 warm-up steps and prints "step_ms <median> <least>" instead of training;
// bench/char_rnn_torch.py is its PyTorch 2 twin (nn.LSTM, same shapes and step) and
// bench/char_rnn.sh runs both side by side. tools/plot_log.py draws the --log CSV.
#include <gradix/gradix.hpp>
#include <gradix/optim.hpp>

#include "training_log.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace gx = gradix;
using gx::dyn;
using gx::index_t;

namespace {
using vec = gx::tensor<float, gx::shape<dyn>>;
using mat = gx::tensor<float, gx::shape<dyn, dyn>>;


struct model {
  index_t V, D, H;
  decltype(gx::param(std::declval<mat>())) E, W, Wout;  // embedding (V, D), gates (D + H, 4H), output (H, V)
  decltype(gx::param(std::declval<vec>())) b, bout;     // gate and output biases
  model(index_t v, index_t d, index_t h, std::uint64_t seed)
      : V(v), D(d), H(h), E(gx::param(gx::randn<float>(gx::dims(v, d), seed, 0.0f, 0.1f))),
        W(gx::param(gx::uniform<float>(gx::dims(d + h, 4 * h), seed + 1, -1.0f / std::sqrt(float(h)),
                                       1.0f / std::sqrt(float(h))))),
        Wout(gx::param(gx::uniform<float>(gx::dims(h, v), seed + 2, -1.0f / std::sqrt(float(h)),
                                          1.0f / std::sqrt(float(h))))),
        b(gx::param(gx::zeros<float>(gx::dims(4 * h)))), bout(gx::param(gx::zeros<float>(gx::dims(v)))) {
    for (index_t k = h; k < 2 * h; ++k) b.value()(k) = 1.0f;  // the forget gate starts open
  }
  template <class F>
  decltype(auto) with_params(F&& f) {
    return f(E, W, b, Wout, bout);
  }
  // doc-snippet: char_rnn_logits
  // the logits (T B, V) of B sequences of T bytes, ids time-major (ids[t B + b]), from the
  // carry hc0 ([B, 2H]: h and c); the scan's carries (T, B, 2H), of which h is the first half
  template <class C>
  auto logits(std::vector<std::int32_t> const& ids, C const& hc0, index_t T, index_t B) {
    auto xs = gx::reshape(gx::gather<0>(E, ids), gx::dims(T, B, D));
    auto hcs = gx::scan(hc0, xs, [&](auto hc, auto x) { return gx::cells::lstm(x, hc, W, b); });
    auto h = gx::slice<2>(hcs, 0, H);
    return gx::matmul(gx::reshape(h, gx::dims(T * B, H)), Wout) + bout;
  }
  // end doc-snippet
};
}  // namespace

int main(int argc, char** argv) {
  std::string const dir = examples::arg(argc, argv, "--data", "");
  auto const files = examples::split(examples::arg(argc, argv, "--files", "computers,politics,science,songs-poems"), ',');
  int const epochs = std::stoi(examples::arg(argc, argv, "--epochs", "10"));
  long const steps = std::stol(examples::arg(argc, argv, "--steps", "200"));  // per epoch
  index_t const B = std::stol(examples::arg(argc, argv, "--batch", "32"));
  index_t const T = std::stol(examples::arg(argc, argv, "--context", "64"));
  index_t const D = std::stol(examples::arg(argc, argv, "--dim", "64"));
  index_t const H = std::stol(examples::arg(argc, argv, "--hidden", "256"));
  double const lr = std::stod(examples::arg(argc, argv, "--lr", "3e-3"));
  double const clip = std::stod(examples::arg(argc, argv, "--clip", "1.0"));
  std::uint64_t const seed = std::stoull(examples::arg(argc, argv, "--seed", "1"));
  int const sample_lines = std::stoi(examples::arg(argc, argv, "--sample", "4"));
  std::string const log = examples::arg(argc, argv, "--log", "");
  double target = std::stod(examples::arg(argc, argv, "--target", "0"));
  int const bench = std::stoi(examples::arg(argc, argv, "--bench", "0"));
  if (int t = std::stoi(examples::arg(argc, argv, "--threads", "0")); t > 0) gx::set_num_threads(t);
  if (dir.empty()) {
    std::fprintf(stderr, "char_rnn: give --data DIR (a folder of fortune files)\n");
    return 2;
  }

  // the text, its bytes as tokens
  examples::byte_corpus const corpus = examples::read_byte_corpus(dir, files);
  auto const& tokens = corpus.tokens;
  auto const& byte_of = corpus.byte_of;
  std::size_t const n_train = corpus.n_train;
  double const unigram = corpus.unigram;
  index_t const V = index_t(corpus.vocabulary());
  if (n_train < std::size_t(T) + 2 || tokens.size() - n_train < std::size_t(T) + 2) {
    std::fprintf(stderr, "char_rnn: the text (%zu bytes) is too short for --context %ld\n", tokens.size(), long(T));
    return 2;
  }
  if (target <= 0) target = 0.8 * unigram;
  std::printf("%zu characters (%zu for training), vocabulary %ld; an LSTM of %ld units over embeddings of %ld; "
              "batch %ld x %ld steps\n",
              tokens.size(), n_train, long(V), long(H), long(D), long(B), long(T));

  model m(V, D, H, seed);
  auto opt = m.with_params([&](auto&... p) { return gx::optim::adam({.lr = lr}, p...); });
  auto clip_all = [&] { return m.with_params([&](auto&... p) { return gx::optim::clip_grad_norm(clip, p...); }); };
  auto const hc0 = gx::zeros<float>(gx::dims(B, 2 * H));

  std::uint64_t state = seed * 0x9E3779B97F4A7C15ull + 1;
  auto next = [&] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return state >> 33;
  };
  // a batch: B windows of T + 1 tokens, time-major
  std::vector<std::int32_t> ids(std::size_t(T * B));
  gx::tensor<std::int64_t, gx::shape<dyn>> targets(gx::dims(T * B));
  auto fill_batch = [&](std::size_t lo, std::size_t hi, std::size_t const* starts) {
    for (index_t b = 0; b < B; ++b) {
      std::size_t const a = starts ? starts[b] : lo + next() % (hi - lo - std::size_t(T));
      for (index_t t = 0; t < T; ++t) {
        ids[std::size_t(t * B + b)] = tokens[a + std::size_t(t)];
        targets(t * B + b) = tokens[a + std::size_t(t) + 1];
      }
    }
  };
  auto held_out_loss = [&] {
    std::vector<std::size_t> starts;
    for (std::size_t a = n_train; a + std::size_t(T) + 1 <= tokens.size(); a += std::size_t(T)) starts.push_back(a);
    double sum = 0;
    std::size_t n = 0;
    for (std::size_t k = 0; k + std::size_t(B) <= starts.size(); k += std::size_t(B), ++n) {
      fill_batch(0, 0, starts.data() + k);
      sum += double(gx::value(gx::cross_entropy(m.logits(ids, hc0, T, B), targets)));
    }
    return n > 0 ? sum / double(n) : 0.0;
  };
  auto train_step = [&] {
    // doc-snippet: char_rnn_step
    opt.zero_grad();
    float loss = gx::backward(gx::cross_entropy(m.logits(ids, hc0, T, B), targets));
    double norm = clip_all();
    opt.step();
    // end doc-snippet
    return std::pair<float, double>(loss, norm);
  };

  if (bench > 0) {
    std::vector<double> ms;
    for (int k = 0; k < bench + 3; ++k) {
      fill_batch(0, n_train, nullptr);
      auto const t0 = std::chrono::steady_clock::now();
      (void)train_step();
      if (k >= 3) ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(ms.begin(), ms.end());
    std::printf("step_ms %.3f %.3f\n", ms[ms.size() / 2], ms[0]);
    return 0;
  }
  examples::training_log progress(epochs, steps, {"held_out_loss", "grad_norm"}, log);
  double loss_now = 0, norm = 0;
  for (int ep = 1; ep <= epochs; ++ep) {
    for (long st = 0; st < steps; ++st) {
      fill_batch(0, n_train, nullptr);
      auto const [loss, n] = train_step();
      norm = n;
      progress.step(ep, st, double(loss), long(B * T));
    }
    loss_now = held_out_loss();
    progress.epoch_end(ep, {loss_now, norm});
  }
  std::printf("held-out loss %.3f nats per character (%.2f bits); ignoring context: %.3f; target %.3f\n", loss_now,
              loss_now / std::log(2.0), unigram, target);

  // sampling: the same scan over one byte at a time, its carry kept between bytes; each next
  // byte drawn from the softmax of the logits, starting from the first bytes of the held-out text
  if (sample_lines > 0) {
    auto hc = gx::zeros<float>(gx::dims(1, 2 * H));
    std::string out;
    std::vector<std::int32_t> one(1);
    auto feed = [&](std::int32_t tok) {
      one[0] = tok;
      auto xs = gx::reshape(gx::gather<0>(m.E, one), gx::dims(1, 1, D));
      auto hcs = gx::eval(gx::scan(hc, xs, [&](auto c, auto x) { return gx::cells::lstm(x, c, m.W, m.b); }));
      for (index_t k = 0; k < 2 * H; ++k) hc(0, k) = hcs(0, 0, k);
      return gx::eval(gx::softmax<1>(gx::matmul(gx::slice<1>(hc, 0, H), m.Wout) + m.bout));
    };
    auto p = gx::eval(gx::zeros<float>(gx::dims(1, V)));
    for (std::size_t k = 0; k < 8; ++k) {
      std::int32_t const t = tokens[n_train + k];
      out += char(byte_of[std::size_t(t)]);
      p = feed(t);
    }
    int lines = 0;
    for (int k = 0; k < 2000 && lines < sample_lines; ++k) {
      double u = double(next() % (1u << 24)) / double(1u << 24), acc = 0;
      std::int32_t pick = std::int32_t(V - 1);
      for (index_t v = 0; v < V; ++v) {
        acc += double(p(0, v));
        if (u < acc) {
          pick = std::int32_t(v);
          break;
        }
      }
      char const ch = char(byte_of[std::size_t(pick)]);
      out += ch;
      if (ch == '\n') ++lines;
      p = feed(pick);
    }
    std::printf("sample:\n%s\n", out.c_str());
  }
  return loss_now < target ? 0 : 1;
}
