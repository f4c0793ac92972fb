// gradix's side of bench/tbe_torch.py (FBGEMM's table-batched embedding, issue 35): the same
// two training steps, each timed three ways: the forward alone (gx::value), backward + a
// separate optimizer step (zero_grad; backward; step), and the step fused into backward
// (gx::backward(e, optim::fused(opt))). Medians over --reps after --warmup steps.
//
//   founding:    the founding benchmark batched (docs/performance.md): Ea 64 x 1,000,000 and
//                Eb 64 x 65,535 column-major (a column is a table row), 100 terms, loss =
//                sum(Eb(:, 0..4999) + Ea(:, j_t)) over the terms, as one expression;
//                optimizers rowwise_adagrad and sgd.
//   recommender: 8 tables of 1,000,000 x 64 (row-major), batch 2048, bags of 20 random rows
//                (seeded), sum pooling; loss = sum over tables of sum(pooled_t * v_t), v a
//                fixed random 512-vector (FBGEMM's (concat(pooled) @ v).sum());
//                rowwise_adagrad.
//
// Element types: --dtype f32|bf16|f16|all (bfloat16 / half tables keep float gradients and
// optimizer state). Usage: bench_tbe [--case founding|recommender|all] [--dtype ...]
// [--reps 7] [--warmup 2] [--threads 1]
#include <gradix/gradix.hpp>
#include <gradix/optim.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <numeric>
#include <string>
#include <vector>

namespace gx = gradix;
using gx::dyn;
using gx::index_t;

namespace {

struct options {
  std::string which = "all", dtype = "all";
  int reps = 7, warmup = 2, threads = 1;
};

double median_ms(int warmup, int reps, std::function<void(int)> const& f) {
  for (int w = 0; w < warmup; ++w) f(w);
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    auto const t0 = std::chrono::steady_clock::now();
    f(warmup + r);
    t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

double peak_rss_mib() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;
  return 0;
}

std::uint64_t mix(std::uint64_t& s) {
  s = s * 6364136223846793005ull + 1442695040888963407ull;
  return s >> 11;
}

void report(char const* which, char const* opt, char const* dtype, options const& o, double fwd, double unfused,
            double fused) {
  std::printf("%-12s %-16s %-5s threads %d: forward %8.3f ms, backward+step %8.3f ms, fused %8.3f ms (fused / unfused %.2f)\n",
              which, opt, dtype, o.threads, fwd, unfused, fused, fused / unfused);
}

template <class Elem>
void founding(options const& o, char const* dtype) {
  using L = gx::col_major;
  auto Ea = gx::param(gx::uniform<Elem, L>(gx::dims(gx::fix_t<64>{}, 1'000'000), 1, -0.05f, 0.05f), gx::sparse_grad<1>);
  auto Eb = gx::param(gx::uniform<Elem, L>(gx::dims(gx::fix_t<64>{}, 65'535), 2, -0.05f, 0.05f), gx::sparse_grad<1>);
  std::vector<std::uint16_t> i(5000);
  std::iota(i.begin(), i.end(), std::uint16_t(0));
  std::vector<std::vector<std::int32_t>> js(4, std::vector<std::int32_t>(100));
  std::uint64_t s = 17;
  for (auto& v : js)
    for (auto& j : v) j = std::int32_t(mix(s) % 1'000'000);
  auto loss = [&](int r) {
    auto const& j = js[std::size_t(r) % js.size()];
    return gx::sum(gx::unsqueeze<2>(Eb(gx::all, gx::indices(i))) + gx::unsqueeze<1>(Ea(gx::all, gx::indices(j))));
  };
  auto run = [&](char const* name, auto& opt) {
    double const fwd = median_ms(o.warmup, o.reps, [&](int r) { (void)gx::value(loss(r)); });
    double const unfused = median_ms(o.warmup, o.reps, [&](int r) {
      opt.zero_grad();
      (void)gx::backward(loss(r));
      opt.step();
    });
    opt.zero_grad();
    double const fused = median_ms(o.warmup, o.reps, [&](int r) { (void)gx::backward(loss(r), gx::optim::fused(opt)); });
    report("founding", name, dtype, o, fwd, unfused, fused);
  };
  gx::optim::rowwise_adagrad ada({.lr = 0.01, .eps = 1e-8}, Ea, Eb);
  run("rowwise_adagrad", ada);
  gx::optim::sgd sgd({.lr = 0.01}, Ea, Eb);
  run("sgd", sgd);
  std::printf("  peak RSS %.0f MiB\n", peak_rss_mib());
}

template <class Elem>
void recommender(options const& o, char const* dtype) {
  constexpr int T = 8;
  constexpr index_t R = 1'000'000, D = 64, B = 2048, Lb = 20;
  using Table = decltype(gx::param(gx::uniform<Elem>(gx::dims(R, D), 0, -0.05f, 0.05f), gx::sparse_grad<0>));
  std::vector<Table> E;
  for (int t = 0; t < T; ++t) E.push_back(gx::param(gx::uniform<Elem>(gx::dims(R, D), std::uint64_t(3 + t), -0.05f, 0.05f), gx::sparse_grad<0>));
  std::vector<gx::tensor<float, gx::shape<1, dyn>>> v;
  for (int t = 0; t < T; ++t) v.push_back(gx::randn<float>(gx::dims(gx::fix_t<1>{}, D), std::uint64_t(40 + t)));
  // 4 input sets of T x B bags of Lb rows
  std::vector<std::vector<std::vector<std::int32_t>>> idx(4, std::vector<std::vector<std::int32_t>>(T));
  std::uint64_t s = 17;
  for (auto& set : idx)
    for (auto& x : set) {
      x.resize(std::size_t(B * Lb));
      for (auto& r : x) r = std::int32_t(mix(s) % std::uint64_t(R));
    }
  std::vector<std::int32_t> offsets(static_cast<std::size_t>(B));
  for (index_t b = 0; b < B; ++b) offsets[std::size_t(b)] = std::int32_t(b * Lb);
  auto loss = [&](int r, int t) {
    return gx::sum(gx::embedding_bag(E[std::size_t(t)], idx[std::size_t(r) % 4][std::size_t(t)], offsets, gx::bag_mode::sum) *
                   v[std::size_t(t)]);
  };
  std::vector<gx::optim::rowwise_adagrad<Table>> opt;
  for (int t = 0; t < T; ++t) opt.emplace_back(gx::optim::rowwise_adagrad_options{.lr = 0.01, .eps = 1e-8}, E[std::size_t(t)]);
  double const fwd = median_ms(o.warmup, o.reps, [&](int r) {
    for (int t = 0; t < T; ++t) (void)gx::value(loss(r, t));
  });
  double const unfused = median_ms(o.warmup, o.reps, [&](int r) {
    for (int t = 0; t < T; ++t) {
      opt[std::size_t(t)].zero_grad();
      (void)gx::backward(loss(r, t));
      opt[std::size_t(t)].step();
    }
  });
  for (auto& x : opt) x.zero_grad();
  double const fused = median_ms(o.warmup, o.reps, [&](int r) {
    for (int t = 0; t < T; ++t) (void)gx::backward(loss(r, t), gx::optim::fused(opt[std::size_t(t)]));
  });
  report("recommender", "rowwise_adagrad", dtype, o, fwd, unfused, fused);
  std::printf("  peak RSS %.0f MiB\n", peak_rss_mib());
}

template <class Elem>
void run_all(options const& o, char const* dtype) {
  if (o.which == "all" || o.which == "founding") founding<Elem>(o, dtype);
  if (o.which == "all" || o.which == "recommender") recommender<Elem>(o, dtype);
}

}  // namespace

int main(int argc, char** argv) {
  options o;
  for (int k = 1; k + 1 < argc; ++k) {
    if (std::strcmp(argv[k], "--case") == 0) o.which = argv[++k];
    else if (std::strcmp(argv[k], "--dtype") == 0) o.dtype = argv[++k];
    else if (std::strcmp(argv[k], "--reps") == 0) o.reps = std::atoi(argv[++k]);
    else if (std::strcmp(argv[k], "--warmup") == 0) o.warmup = std::atoi(argv[++k]);
    else if (std::strcmp(argv[k], "--threads") == 0) o.threads = std::atoi(argv[++k]);
  }
  if (o.reps < 1) o.reps = 1;
  gx::set_num_threads(o.threads);
  if (o.dtype == "all" || o.dtype == "f32") run_all<float>(o, "f32");
  if (o.dtype == "all" || o.dtype == "bf16") run_all<gx::bfloat16>(o, "bf16");
  if (o.dtype == "all" || o.dtype == "f16") run_all<gx::half>(o, "f16");
  return 0;
}
