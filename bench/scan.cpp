// gx::scan (issue 34): an Elman recurrence of run-time length, batch 32, input 64, hidden
// 128, float, 1 thread. Per number of steps T and per way of writing the body: the forward
// (value of the mean square of every carry) and the step (backward: the loss and every
// gradient, its forward included), medians over repeats. The ratios issue 34 bounds:
// time(1024 steps) / time(512 steps) (linear: <= 2.1) and a step's backward over its
// forward, where a step's backward is the backward call's time less the forward's (the
// reverse sweep). Bodies: "plain" tanh(x Wx + h Wh + b) (gx::scan binds its pre-activation
// by a let itself: api/scan.hpp, share_region); "let" the same with the let written by hand;
// "recompute" the plain body with gx::recompute_steps.
// Run: ninja -C build bench/bench_scan && build/bench/bench_scan [--reps=N]
#include <gradix/gradix.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace gx = gradix;
using gx::index_t;

namespace {
template <class F>
double median_ms(int reps, F&& f) {
  std::vector<double> t;
  f();  // warm: the workspace grows
  for (int r = 0; r < reps; ++r) {
    auto a = std::chrono::steady_clock::now();
    f();
    auto b = std::chrono::steady_clock::now();
    t.push_back(std::chrono::duration<double, std::milli>(b - a).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}
}  // namespace

int main(int argc, char** argv) {
  int reps = 7;
  for (int i = 1; i < argc; ++i)
    if (std::strncmp(argv[i], "--reps=", 7) == 0) reps = std::atoi(argv[i] + 7);
  gx::set_num_threads(1);
  index_t const B = 32, D = 64, H = 128;
  auto wx = gx::param(gx::uniform<float>(gx::dims(D, H), 2, -0.1f, 0.1f));
  auto wh = gx::param(gx::uniform<float>(gx::dims(H, H), 3, -0.1f, 0.1f));
  auto b = gx::param(gx::uniform<float>(gx::dims(H), 4, -0.1f, 0.1f));
  auto h0 = gx::zeros<float>(gx::dims(B, H));
  std::printf("body, steps, forward_ms, backward_ms, sweep/forward, per_step_forward_us, per_step_sweep_us\n");
  auto run = [&](char const* name, auto make_loss) {
    double f512 = 0, b512 = 0;
    for (index_t T : {128, 256, 512, 1024}) {
      auto xs = gx::uniform<float>(gx::dims(T, B, D), 1, -1.0f, 1.0f);
      float v = 0;
      double const f = median_ms(reps, [&] { v = gx::value(make_loss(xs)); });
      double const g = median_ms(reps, [&] { v = gx::backward(make_loss(xs)); });
      std::printf("%s, %lld, %.3f, %.3f, %.2f, %.2f, %.2f\n", name, (long long)T, f, g, (g - f) / f,
                  1e3 * f / double(T), 1e3 * (g - f) / double(T));
      if (T == 512) {
        f512 = f;
        b512 = g;
      }
      if (T == 1024)
        std::printf("# %s: 1024 / 512 steps: forward %.2f, backward %.2f (loss %g)\n", name, f / f512, g / b512,
                    double(v));
    }
  };
  run("plain", [&](auto const& xs) {
    return gx::mean(gx::square(gx::scan(h0, xs, [&](auto h, auto x) {
      return gx::tanh(gx::matmul(x, wx) + gx::matmul(h, wh) + b);
    })));
  });
  run("let", [&](auto const& xs) {
    return gx::mean(gx::square(gx::scan(h0, xs, [&](auto h, auto x) {
      return gx::let(gx::matmul(x, wx) + gx::matmul(h, wh) + b, [](auto z) { return gx::tanh(z); });
    })));
  });
  run("recompute", [&](auto const& xs) {
    return gx::mean(gx::square(gx::scan(
        h0, xs, [&](auto h, auto x) { return gx::tanh(gx::matmul(x, wx) + gx::matmul(h, wh) + b); },
        gx::recompute_steps)));
  });
  return 0;
}
