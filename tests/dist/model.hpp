// The model of the distributed tests (dist_test.cpp, dist_train.cpp): two row-sharded tables
// E and F (lazy Adam on their owners) and a dense vector W (data parallel, Adam); a step
// reads rows of E and F per sample, with skewed ids so that blocks repeat rows.
#pragma once

#include <gradix/dist.hpp>
#include <gradix/gradix.hpp>
#include <gradix/optim.hpp>

#include <cstdint>
#include <functional>
#include <vector>

namespace gx = gradix;
namespace dist = gradix::dist;
using gx::dyn;
using gx::index_t;

namespace dist_model {

inline std::uint64_t mix(std::uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  return x ^ (x >> 33);
}
// a deterministic initial value of element x of row id of table t
inline float init_value(int t, index_t id, index_t x) {
  return float(double(mix(std::uint64_t(t) * 1000003u + std::uint64_t(id) * 131u + std::uint64_t(x)) % 20001) /
               10000.0 - 1.0) * 0.5f;
}

// The data of step s: sample i reads row a[i] of E and b[i] of F; labels +-1. Ids are skewed
// (a Zipf-like mix: half the samples use one of 3 rows) so blocks repeat rows.
struct batch {
  std::vector<std::int64_t> a, b;
  std::vector<float> y;
};
inline batch make_batch(int step, index_t n, index_t rows) {
  batch B;
  for (index_t i = 0; i < n; ++i) {
    std::uint64_t h = mix(std::uint64_t(step) * 7919u + std::uint64_t(i));
    B.a.push_back(h % 2 ? std::int64_t(h / 2 % 3) : std::int64_t(h / 2 % std::uint64_t(rows)));
    B.b.push_back(std::int64_t(mix(h) % std::uint64_t(rows)));
    B.y.push_back(mix(h + 1) % 2 ? 1.f : -1.f);
  }
  return B;
}

constexpr index_t kRows = 37, kDim = 6, kBatch = 40, kBlock = 7, kSteps = 3;

// loss of one block: -sum log_sigmoid(y * sum_x tanh(E[a]) F[b] W) / n
template <class EA, class FB>
auto block_loss(EA const& ea, FB const& fb, gx::parameter<float, gx::shape<dyn>>& W,
                gx::tensor<float, gx::shape<dyn>> const& y) {
  return -gx::sum(gx::log_sigmoid(gx::sum<1>(gx::tanh(ea) * fb * W) * y)) / float(kBatch);
}

inline gx::tensor<float, gx::shape<dyn>> labels(batch const& B, index_t lo, index_t hi) {
  gx::tensor<float, gx::shape<dyn>> y(gx::dims(hi - lo));
  for (index_t i = lo; i < hi; ++i) y(i - lo) = B.y[std::size_t(i)];
  return y;
}
inline gx::tensor<float, gx::shape<dyn, dyn>> full_table(int t) {
  gx::tensor<float, gx::shape<dyn, dyn>> v(gx::dims(kRows, kDim));
  for (index_t r = 0; r < kRows; ++r)
    for (index_t x = 0; x < kDim; ++x) v(r, x) = init_value(t, r, x);
  return v;
}
inline gx::tensor<float, gx::shape<dyn>> initial_w() {
  gx::tensor<float, gx::shape<dyn>> w(gx::dims(kDim));
  for (index_t x = 0; x < kDim; ++x) w(x) = 0.5f + 0.1f * float(x);
  return w;
}


// The distributed model on a communicator; step(s) trains on batch s and returns the loss.
struct sharded_model {
  dist::communicator& world;
  dist::block_split split;
  dist::sharded_table<float> E, F;
  gx::parameter<float, gx::shape<dyn>> W{initial_w()};
  gx::optim::lazy_adam<dist::sharded_table<float>::local_type, dist::sharded_table<float>::local_type> opt;
  gx::optim::adam<gx::parameter<float, gx::shape<dyn>>> optw;
  dist::data_parallel<float> dp;

  static std::function<void(index_t, std::span<float>)> init(int t) {
    return [t](index_t id, std::span<float> row) {
      for (index_t x = 0; x < kDim; ++x) row[std::size_t(x)] = init_value(t, id, x);
    };
  }
  explicit sharded_model(dist::communicator& c, dist::placement place = dist::placement::block, bool exact = true)
      : world(c), split(c, kBatch, kBlock), E(c, kRows, kDim, place, init(1)), F(c, kRows, kDim, place, init(2)),
        opt({.lr = 0.05}, E.local(), F.local()), optw({.lr = 0.02}, W),
        dp(c, split, dist::data_parallel_options{.exact = exact}, W) {}

  // forward and backward of batch s, gradients summed on the owners and in W's gradient;
  // returns the loss (no optimizer step)
  // (mid_step, when set, runs after the backward passes, before the pushes: the fault test
  // kills a rank there, after the step's first exchanges)
  std::function<void()> mid_step;
  dist::push_options push_opt{};
  double gradients(int s) {
    // doc-snippet: step
    batch const B = make_batch(s, kBatch, kRows);
    std::vector<std::int64_t> a(B.a.begin() + split.first_sample(), B.a.begin() + split.end_sample());
    std::vector<std::int64_t> b(B.b.begin() + split.first_sample(), B.b.begin() + split.end_sample());
    std::vector<index_t> offsets;
    for (index_t j = split.first_block(); j <= split.end_block(); ++j)
      offsets.push_back(split.block_begin(j) - split.first_sample());
    auto la = E.fetch(a, offsets, split);
    auto lb = F.fetch(b, offsets, split);
    std::vector<double> block_losses;
    for (index_t j = split.first_block(); j < split.end_block(); ++j) {
      auto const y = labels(B, split.block_begin(j), split.block_end(j));
      block_losses.push_back(double(gx::backward(
          block_loss(gx::gather<0>(la.rows(), la.block(j)), gx::gather<0>(lb.rows(), lb.block(j)), W, y))));
      dp.keep(j);
    }
    // end doc-snippet
    if (mid_step) mid_step();
    // doc-snippet: step-push
    E.push(la, push_opt);
    F.push(lb, push_opt);
    dp.reduce();
    return dist::ordered_sum(world, split, block_losses);
    // end doc-snippet
  }
  void update() {
    opt.step();
    optw.step();
    opt.zero_grad();
    optw.zero_grad();
  }
};

}  // namespace dist_model
