// An Elman RNN unrolled at compile time, h_t = tanh(x_t Wx + h_{t-1} Wh + b), at 8, 16, 32
// and 64 steps (benchmark, not a test): the time of one training step's gradient
// (zero_grad, then gx::backward of sum(square(h_S)), which returns the loss too) and of the
// forward alone (gx::value), medians of --reps runs (default 15), B 32, H 128, float, 1
// thread unless --threads N. Issue 32 asks for a step time linear in the steps: t(64) <= 2.2
// t(32). The last line is one JSON object.
#include <gradix/gradix.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace gx = gradix;
using gx::dyn;
using gx::index_t;

namespace {
using T3 = gx::tensor<float, gx::shape<dyn, dyn, dyn>>;
using P2 = gx::parameter<float, gx::shape<dyn, dyn>>;
using P1 = gx::parameter<float, gx::shape<dyn>>;

template <int S, class X>
auto elman(X const& xs, P2& Wx, P2& Wh, P1& b) {
  if constexpr (S == 1) return gx::tanh(gx::matmul(gx::select<0>(xs, 0), Wx) + b);
  else return gx::tanh(gx::matmul(gx::select<0>(xs, S - 1), Wx) + gx::matmul(elman<S - 1>(xs, Wx, Wh, b), Wh) + b);
}

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
volatile float sink = 0;

struct row {
  int steps;
  double fwd_ms, bwd_ms;
};

template <int S>
row measure(T3 const& xs, P2& Wx, P2& Wh, P1& b, int reps) {
  auto const loss = gx::sum(gx::square(elman<S>(xs, Wx, Wh, b)));
  std::vector<double> f, g;
  for (int k = 0; k < reps + 2; ++k) {
    double t0 = now();
    sink = sink + gx::value(loss);
    double t1 = now();
    gx::zero_grad(Wx, Wh, b);
    sink = sink + gx::backward(loss);
    double t2 = now();
    if (k >= 2) {
      f.push_back((t1 - t0) * 1e3);
      g.push_back((t2 - t1) * 1e3);
    }
  }
  return {S, median(f), median(g)};
}
}  // namespace

int main(int argc, char** argv) {
  int reps = 15, threads = 1;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--reps" && i + 1 < argc) reps = std::atoi(argv[++i]);
    else if (a == "--threads" && i + 1 < argc) threads = std::atoi(argv[++i]);
    else {
      std::fprintf(stderr, "usage: bench_rnn [--reps N] [--threads N]\n");
      return 2;
    }
  }
  gx::set_num_threads(threads);
  index_t const B = 32, H = 128;
  T3 xs = gx::randn<float>(gx::dims(64, B, H), 1);
  P2 Wx = gx::param(gx::randn<float>(gx::dims(H, H), 2, 0.f, 0.08f));
  P2 Wh = gx::param(gx::randn<float>(gx::dims(H, H), 3, 0.f, 0.08f));
  P1 b = gx::param(gx::randn<float>(gx::dims(H), 4, 0.f, 0.1f));
  std::vector<row> rows;
  // interleaved rounds, so that a noisy moment spreads over every length
  std::vector<std::vector<row>> rounds;
  for (int r = 0; r < 3; ++r)
    rounds.push_back({measure<8>(xs, Wx, Wh, b, reps), measure<16>(xs, Wx, Wh, b, reps),
                      measure<32>(xs, Wx, Wh, b, reps), measure<64>(xs, Wx, Wh, b, reps)});
  std::printf("Elman RNN, B %ld, H %ld, %d thread(s), medians of %d runs (median of 3 rounds)\n", long(B), long(H),
              threads, reps);
  std::printf("| steps | forward ms | backward ms | backward / forward |\n| ---: | ---: | ---: | ---: |\n");
  for (std::size_t k = 0; k < 4; ++k) {
    std::vector<double> f, g;
    for (auto const& rr : rounds) {
      f.push_back(rr[k].fwd_ms);
      g.push_back(rr[k].bwd_ms);
    }
    rows.push_back({rounds[0][k].steps, median(f), median(g)});
    std::printf("| %d | %.3f | %.3f | %.2f |\n", rows.back().steps, rows.back().fwd_ms, rows.back().bwd_ms,
                rows.back().bwd_ms / rows.back().fwd_ms);
  }
  double const r64 = rows[3].bwd_ms / rows[2].bwd_ms, r32 = rows[2].bwd_ms / rows[1].bwd_ms;
  std::printf("backward t(64)/t(32) = %.2f (issue 32: <= 2.2), t(32)/t(16) = %.2f\n", r64, r32);
  std::printf("{\"bench\":\"rnn\",\"threads\":%d,\"reps\":%d", threads, reps);
  for (auto const& r : rows) std::printf(",\"fwd_ms_%d\":%.4f,\"bwd_ms_%d\":%.4f", r.steps, r.fwd_ms, r.steps, r.bwd_ms);
  std::printf(",\"ratio_64_32\":%.3f}\n", r64);
  return 0;
}
