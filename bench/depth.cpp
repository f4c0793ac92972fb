// The cost of a gradient at depth (benchmark, not a test): for each expression, the time of
// gx::backward(loss) (which computes the loss value too) against the time of
// gx::value(loss), the forward pass alone. Reverse mode's promise is a small constant ratio
// whatever the depth; gradix's target is at most 3 (docs/performance.md, "Gradients at
// depth").
//
//   tanh-k    sum(chain_k(x)),  chain(e) = tanh(e) * 0.9 + 0.05          x: 1M floats
//   exp-k     sum(chain_k(x)),  chain(e) = exp(e * 0.5 - 0.5) * 0.5
//   mix-k     sum(chain_k(x)),  chain(e) = exp(tanh(e) * w - 0.5)    w: a second 1M leaf
//             (each level reads e once: a sub-expression written twice is a tree of twice
//             the size, so `e * w + tanh(e)` would double the work per level)
//   bcast-k   sum(chain_k(X)),  chain(e) = tanh(e * c + r)              X: 1024 x 1024,
//             r: 1 x 1024 (a row, broadcast down), c: 1024 x 1 (a column, broadcast across);
//             X, r and c are parameters
//   rowmax    sum(max<1>(X))                                            X: 4096 x 1024
//   logsumexp sum(log(sum<1>(exp(X - max<1>(X, keep_dims)))) + max<1>(X))
//   softmax-ce the same with the first max named by gx::saved, minus sum(X * T) (soft targets)
//   net4      sum(h4), h_i = tanh(w_i * h_(i-1) + b_i), h_0 = x: a 4-layer elementwise
//             network over 1M floats; w_i, b_i (1M each) are the 8 parameters
//
// Every case runs `--reps` times (default 9), forward and backward interleaved; the figures
// are medians. `--threads N` (default: 1 and then all threads), `--max-depth K` (default 64).
// The last line is one JSON object with every median and ratio.

#include <gradix/gradix.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace gx = gradix;
using gx::dyn;

namespace {

template <int K, class E>
auto tanh_chain(E const& e) {
  if constexpr (K == 0) return e;
  else return tanh_chain<K - 1>(gx::tanh(e) * 0.9f + 0.05f);
}
template <int K, class E>
auto exp_chain(E const& e) {
  if constexpr (K == 0) return e;
  else return exp_chain<K - 1>(gx::exp(e * 0.5f - 0.5f) * 0.5f);
}
template <int K, class E, class W>
auto mix_chain(E const& e, W const& w) {
  if constexpr (K == 0) return e;
  else return mix_chain<K - 1>(gx::exp(gx::tanh(e) * w - 0.5f), w);
}
template <int K, class E, class C, class R>
auto bcast_chain(E const& e, C const& c, R const& r) {
  if constexpr (K == 0) return e;
  else return bcast_chain<K - 1>(gx::tanh(e * c + r), c, r);
}

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct result {
  std::string name;
  int threads;
  double fwd_ms, bwd_ms, bo_ms;
};
std::vector<result> results;
volatile float sink = 0;

// forward: value(loss); backward: backward(loss) (value included); gradient only:
// backward_only(loss). Interleaved repeats. The last column, backward / (value +
// backward_only), says whether returning the value with the gradient costs more than two
// calls would (issue 31: it must not, for any plan).
template <class F, class B, class G>
void measure(std::string const& name, int threads, int reps, F&& fwd, B&& bwd, G&& bo) {
  fwd();  // warm: first-touch of the gradient storages, thread start-up
  bwd();
  bo();
  std::vector<double> tf, tb, tg;
  for (int r = 0; r < reps; ++r) {
    double t0 = now();
    fwd();
    double t1 = now();
    bwd();
    double t2 = now();
    bo();
    double t3 = now();
    tf.push_back(t1 - t0);
    tb.push_back(t2 - t1);
    tg.push_back(t3 - t2);
  }
  result res{name, threads, median(tf) * 1e3, median(tb) * 1e3, median(tg) * 1e3};
  std::printf("%-14s threads %2d  forward %9.3f ms  backward %9.3f ms  ratio %6.2f  backward_only "
              "%9.3f ms  backward/(forward+backward_only) %5.2f\n",
              name.c_str(), threads, res.fwd_ms, res.bwd_ms, res.bwd_ms / res.fwd_ms, res.bo_ms,
              res.bwd_ms / (res.fwd_ms + res.bo_ms));
  std::fflush(stdout);
  results.push_back(res);
}

template <class Loss, class... P>
void run_case(std::string const& name, int threads, int reps, Loss const& loss, P&... params) {
  measure(name, threads, reps, [&] { sink = sink + float(gx::value(loss)); },
          [&] { sink = sink + float(gx::backward(loss)); }, [&] { gx::backward_only(loss); });
  (gx::zero_grad(params), ...);
}

using vec = gx::tensor<float, gx::shape<dyn>>;
using mat = gx::tensor<float, gx::shape<dyn, dyn>>;

// The deepest chain compiled: 64 by default; -DGRADIX_BENCH_MAX_DEPTH=16 for a quick build
// (the depth-64 chains take many minutes and several GB to compile with g++ -O3 today).
#ifndef GRADIX_BENCH_MAX_DEPTH
#define GRADIX_BENCH_MAX_DEPTH 64
#endif

template <int K>
void chains(int threads, int reps, int max_depth, gx::parameter<float, gx::shape<dyn>>& x,
            gx::parameter<float, gx::shape<dyn>>& w) {
  if constexpr (K <= GRADIX_BENCH_MAX_DEPTH) {
    if (K > max_depth) return;
    run_case("tanh-" + std::to_string(K), threads, reps, gx::sum(tanh_chain<K>(x)), x);
    run_case("exp-" + std::to_string(K), threads, reps, gx::sum(exp_chain<K>(x)), x);
    run_case("mix-" + std::to_string(K), threads, reps, gx::sum(mix_chain<K>(x, w)), x, w);
    chains<K * 2>(threads, reps, max_depth, x, w);
  }
}

void run_all(int threads, int reps, int max_depth) {
  gx::set_num_threads(threads);
  constexpr gx::index_t n = 1 << 20;
  auto x = gx::param(gx::uniform<float>(gx::dims(n), 1, 0.25f, 0.75f));
  auto w = gx::param(gx::uniform<float>(gx::dims(n), 2, 0.f, 0.5f));
  chains<1>(threads, reps, max_depth, x, w);

  auto X = gx::param(gx::uniform<float>(gx::dims(1024, 1024), 3));
  auto r = gx::param(gx::uniform<float>(gx::dims(gx::fix<1>, 1024), 4, 0.f, 0.1f));
  auto c = gx::param(gx::uniform<float>(gx::dims(1024, gx::fix<1>), 5, 0.5f, 1.f));
  run_case("bcast-4", threads, reps, gx::sum(bcast_chain<4>(X, c, r)), X, r, c);
  run_case("bcast-16", threads, reps, gx::sum(bcast_chain<16>(X, c, r)), X, r, c);

  auto M = gx::param(gx::randn<float>(gx::dims(4096, 1024), 6));
  auto T = gx::uniform<float>(gx::dims(4096, 1024), 8, 0.f, 1.f / 512);  // soft targets
  run_case("rowmax", threads, reps, gx::sum(gx::max<1>(M)), M);

  auto h0 = gx::uniform<float>(gx::dims(n), 7);
  auto mk = [&](int s, float scale) { return gx::param(gx::uniform<float>(gx::dims(n), std::uint64_t(s), 0.f, scale)); };
  auto w1 = mk(11, 1.f), b1 = mk(12, .1f), w2 = mk(13, 1.f), b2 = mk(14, .1f);
  auto w3 = mk(15, 1.f), b3 = mk(16, .1f), w4 = mk(17, 1.f), b4 = mk(18, .1f);
  auto h1 = gx::tanh(w1 * h0 + b1);
  auto h2 = gx::tanh(w2 * h1 + b2);
  auto h3 = gx::tanh(w3 * h2 + b3);
  auto h4 = gx::tanh(w4 * h3 + b4);
  run_case("net4", threads, reps, gx::sum(h4), w1, b1, w2, b2, w3, b3, w4, b4);

  // The reductions read inside it are kept (docs/ad.md, "Saved values"): max<1>(M) with its
  // arg-max and the row sums, once per call.
  run_case("logsumexp", threads, reps,
           gx::sum(gx::log(gx::sum<1>(gx::exp(M - gx::max<1>(M, gx::keep_dims)))) + gx::max<1>(M)), M);
  run_case("softmax-ce", threads, reps,
           gx::sum(gx::log(gx::sum<1>(gx::exp(M - gx::saved(gx::max<1>(M, gx::keep_dims))))) +
                   gx::max<1>(M)) - gx::sum(M * T), M);
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 9, max_depth = 64;
  std::vector<int> thread_counts;
  for (int a = 1; a < argc; ++a) {
    auto arg = [&](char const* key) -> char const* {
      std::size_t k = std::strlen(key);
      if (std::strncmp(argv[a], key, k) == 0 && argv[a][k] == '=') return argv[a] + k + 1;
      if (std::strcmp(argv[a], key) == 0 && a + 1 < argc) return argv[++a];
      return nullptr;
    };
    if (char const* v = arg("--reps")) reps = std::atoi(v);
    else if (char const* v2 = arg("--threads")) thread_counts.push_back(std::atoi(v2));
    else if (char const* v3 = arg("--max-depth")) max_depth = std::atoi(v3);
    else {
      std::fprintf(stderr, "usage: %s [--reps N] [--threads N]... [--max-depth K]\n", argv[0]);
      return 2;
    }
  }
  if (thread_counts.empty()) {
    thread_counts.push_back(1);
    int all = int(std::thread::hardware_concurrency());
    if (all > 1) thread_counts.push_back(all);
  }
  std::printf("gradix bench/depth: %s, backward(loss) / value(loss), medians of %d\n",
              gx::simd::isa(), reps);
  for (int t : thread_counts) run_all(t, reps, max_depth);
  std::printf("{\"reps\": %d, \"results\": [", reps);
  for (std::size_t i = 0; i < results.size(); ++i)
    std::printf("%s{\"case\": \"%s\", \"threads\": %d, \"forward_ms\": %.4f, \"backward_ms\": %.4f, "
                "\"ratio\": %.3f, \"backward_only_ms\": %.4f, \"vs_two_calls\": %.3f}",
                i ? ", " : "", results[i].name.c_str(), results[i].threads, results[i].fwd_ms,
                results[i].bwd_ms, results[i].bwd_ms / results[i].fwd_ms, results[i].bo_ms,
                results[i].bwd_ms / (results[i].fwd_ms + results[i].bo_ms));
  std::printf("]}\n");
}
