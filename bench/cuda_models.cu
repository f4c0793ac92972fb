// Model steps on the device (issue 33; no PyTorch): the forward and backward of bench/mlp.cpp's
// MLP (batch 256, 784-512-512-10, relu, cross_entropy) and of bench/textclf.cpp's text
// classifier (embedding_bag mean of 10-50 word ids, V 6000 x D 64 table with sparse gradient,
// batch 32, 4 classes), through gradix::cuda::launcher (products by cuBLAS), against the same
// step on the host, whose gradients it checks (--check). Medians of --reps timed steps after
// a warm-up, each step zero_grad + backward + an optimizer step (Adam for the MLP, lazy Adam
// for the text classifier: training/device_steps.hpp on the device).
// The gradient check compares the last step's gradients (same start, same steps).
// Prints a table and one JSON line; exits 77 without a CUDA device. Never run yet.
//
// Usage: bench_cuda_models [--reps R] [--check]
#include <gradix/backend/cuda/launch.hpp>
#include <gradix/backend/grid/backward.hpp>
#include <gradix/backend/grid/memory.hpp>
#include <gradix/backend/grid/param.hpp>
#include <gradix/gradix.hpp>
#include <gradix/optim.hpp>

#include <cuda_runtime.h>

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
using L = gx::cuda::launcher;
using S2 = gx::shape<dyn, dyn>;
using S1 = gx::shape<dyn>;

namespace {
double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
double median(std::vector<double> t) {
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}
/// max |a - b| / (1 + |b|)
double max_rel(gx::tensor<float, S2> const& a, gx::tensor<float, S2> const& b) {
  double m = 0;
  for (index_t k = 0; k < a.size(); ++k)
    m = std::max(m, std::abs(double(a.data()[k]) - double(b.data()[k])) / (1 + std::abs(double(b.data()[k]))));
  return m;
}
template <class F>
double time_steps(F&& step, int reps) {
  for (int w = 0; w < 3; ++w) step();
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    double const t0 = now();
    step();
    t.push_back(now() - t0);
  }
  return median(t);
}
}  // namespace

int main(int argc, char** argv) {
  int reps = 20;
  bool check = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--reps") == 0 && i + 1 < argc) reps = std::atoi(argv[++i]);
    else if (std::strcmp(argv[i], "--check") == 0) check = true;
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("bench_cuda_models: no CUDA device\n");
    return 77;
  }
  int failures = 0;
  gx::set_num_threads(1);
  L l;

  // the MLP
  index_t const B = 256, d0 = 784, d1 = 512, d2 = 512, d3 = 10;
  auto const hx = gx::uniform<float>(gx::dims(B, d0), 1, 0.0f, 1.0f);
  gx::tensor<std::int32_t, S1> hy(gx::dims(B));
  for (index_t i = 0; i < B; ++i) hy(i) = std::int32_t((i * 7) % d3);
  auto const hw1 = gx::randn<float>(gx::dims(d0, d1), 11, 0.0f, 0.05f);
  auto const hw2 = gx::randn<float>(gx::dims(d1, d2), 12, 0.0f, 0.06f);
  auto const hw3 = gx::randn<float>(gx::dims(d2, d3), 13, 0.0f, 0.06f);
  auto mlp = [](auto const& x, auto const& y, auto& w1, auto& w2, auto& w3) {
    return gx::cross_entropy(gx::matmul(gx::relu(gx::matmul(gx::relu(gx::matmul(x, w1)), w2)), w3), y);
  };
  auto p1 = gx::param(hw1);
  auto p2 = gx::param(hw2);
  auto p3 = gx::param(hw3);
  gx::optim::adam host_sgd({.lr = 1e-3}, p1, p2, p3);
  double const host_mlp = time_steps([&] {
    host_sgd.zero_grad();
    gx::backward(mlp(hx, hy, p1, p2, p3));
    host_sgd.step();
  }, reps);
  auto dx = gx::grid::device_tensor<float, S2, L>::from_host(l, hx);
  auto dy = gx::grid::device_tensor<std::int32_t, S1, L>::from_host(l, hy);
  auto q1 = gx::grid::param(gx::grid::device_tensor<float, S2, L>::from_host(l, hw1));
  auto q2 = gx::grid::param(gx::grid::device_tensor<float, S2, L>::from_host(l, hw2));
  auto q3 = gx::grid::param(gx::grid::device_tensor<float, S2, L>::from_host(l, hw3));
  gx::optim::adam dev_sgd({.lr = 1e-3}, q1, q2, q3);
  double const dev_mlp = time_steps([&] {
    dev_sgd.zero_grad();
    gx::grid::backward(l, mlp(dx.view(), dy.view(), q1, q2, q3));
    dev_sgd.step();
    l.synchronize();
  }, reps);
  if (check) {
    double const e = std::max({max_rel(q1.grad().download(), p1.grad().to_dense()),
                               max_rel(q2.grad().download(), p2.grad().to_dense()),
                               max_rel(q3.grad().download(), p3.grad().to_dense())});
    std::printf("check: MLP gradients, device against host: max rel diff %.3g\n", e);
    if (!(e <= 1e-3)) ++failures;
  }

  // the text classifier
  index_t const V = 6000, D = 64, NB = 32, C = 4;
  std::vector<std::int32_t> words, offsets;
  std::uint64_t s = 7;
  auto next = [&] { return s = s * 6364136223846793005ULL + 1442695040888963407ULL; };
  for (index_t b = 0; b < NB; ++b) {
    offsets.push_back(std::int32_t(words.size()));
    index_t const len = 10 + index_t(next() >> 33) % 41;
    for (index_t k = 0; k < len; ++k) words.push_back(std::int32_t((next() >> 33) % std::uint64_t(V)));
  }
  gx::tensor<std::int32_t, S1> hw(gx::dims(index_t(words.size()))), ho(gx::dims(NB)), hl(gx::dims(NB));
  for (std::size_t k = 0; k < words.size(); ++k) hw(index_t(k)) = words[k];
  for (index_t b = 0; b < NB; ++b) {
    ho(b) = offsets[std::size_t(b)];
    hl(b) = std::int32_t(b % C);
  }
  auto const he = gx::randn<float>(gx::dims(V, D), 2, 0.0f, 0.1f);
  auto const hwc = gx::randn<float>(gx::dims(D, C), 3, 0.0f, 0.1f);
  auto clf = [](auto& e, auto const& w, auto const& o, auto& wc, auto const& y) {
    return gx::cross_entropy(gx::matmul(gx::embedding_bag(e, w, o, gx::bag_mode::mean), wc), y);
  };
  auto pe = gx::param(he, gx::sparse_grad<0>);
  auto pc = gx::param(hwc);
  gx::optim::lazy_adam host_ada({.lr = 1e-2}, pe, pc);
  double const host_clf = time_steps([&] {
    host_ada.zero_grad();
    gx::backward(clf(pe, hw, ho, pc, hl));
    host_ada.step();
  }, reps);
  auto dw = gx::grid::device_tensor<std::int32_t, S1, L>::from_host(l, hw);
  auto dof = gx::grid::device_tensor<std::int32_t, S1, L>::from_host(l, ho);
  auto dl = gx::grid::device_tensor<std::int32_t, S1, L>::from_host(l, hl);
  auto qe = gx::grid::param(gx::grid::device_tensor<float, S2, L>::from_host(l, he), gx::sparse_grad<0>);
  auto qc = gx::grid::param(gx::grid::device_tensor<float, S2, L>::from_host(l, hwc));
  gx::optim::lazy_adam dev_ada({.lr = 1e-2}, qe, qc);
  double const dev_clf = time_steps([&] {
    dev_ada.zero_grad();
    gx::grid::backward(l, clf(qe, dw.view(), dof.view(), qc, dl.view()));
    dev_ada.step();
    l.synchronize();
  }, reps);
  if (check) {
    double const e = std::max(max_rel(qe.grad().download(), pe.grad().to_dense()), max_rel(qc.grad().download(), pc.grad().to_dense()));
    std::printf("check: text classifier gradients, device against host: max rel diff %.3g\n", e);
    if (!(e <= 1e-3)) ++failures;
  }

  cudaDeviceProp prop{};
  (void)cudaGetDeviceProperties(&prop, 0);
  std::printf("device: %s\n\n| training step (zero_grad, backward, optimizer step) | host 1 thread ms | device ms |\n| --- | ---: | ---: |\n", prop.name);
  std::printf("| MLP 256 x 784-512-512-10 | %.3f | %.3f |\n", host_mlp * 1e3, dev_mlp * 1e3);
  std::printf("| text classifier 6000 x 64, 32 bags | %.3f | %.3f |\n", host_clf * 1e3, dev_clf * 1e3);
  std::printf("{\"bench\": \"cuda_models\", \"reps\": %d, \"mlp_host_ms\": %.4f, \"mlp_device_ms\": %.4f, "
              "\"textclf_host_ms\": %.4f, \"textclf_device_ms\": %.4f, \"failures\": %d}\n",
              reps, host_mlp * 1e3, dev_mlp * 1e3, host_clf * 1e3, dev_clf * 1e3, failures);
  return failures ? 1 : 0;
}
