// Matrix factorization with user and item biases on synthetic ratings with a known low-rank
// truth: rating(u, i) = mu + bu[u] + bi[i] + <P[u], Q[i]> + noise (sd 0.5). The model has the
// same form (rank 16 against the truth's 8), embedding tables with sparse gradients (a batch
// touches only its users' and items' rows) and lazy Adam, so a step costs the batch, not the
// tables. Prints the held-out RMSE each epoch and the training throughput; exits 1 unless it
// ends within 10% of the noise level (0.55), which is the best any model can do.
//
//   build/examples/recommender [--users U] [--items I] [--ratings N] [--epochs E]
//                              [--batch B] [--log run.csv] [--threads T]
//                              [--dtype f32|bf16|f16]
//                              [--fused-optimizer sgd|adagrad|rowwise_adagrad|lazy_adam]
//
// --dtype bf16 or f16 stores the two factor tables P and Q in 16 bits (half the memory;
// read as float, gradients and optimizer state in float, each update rounded once; docs/ops.md).
// --fused-optimizer X steps P and Q with optimizer X inside the backward call
// (`gx::backward(e, gx::optim::fused(opt))`, docs/optim.md: the same parameters, to the bit, as
// zero_grad + backward + step), the biases and the mean with lazy Adam as before.
#include <gradix/gradix.hpp>
#include <gradix/optim.hpp>

#include "training_log.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <numeric>
#include <string>
#include <vector>

namespace gx = gradix;
using gx::dyn;
using gx::index_t;

namespace {

struct config {
  index_t U, I, N, B;
  int epochs;
  std::string log, dtype, fused;
};

/// The synthetic ratings: N random (user, item) pairs and their ratings.
struct ratings_data {
  std::vector<std::int32_t> users, items;
  std::vector<float> ratings;
};

constexpr index_t truth_rank = 8, rank = 16;
constexpr double noise = 0.5, mu = 3.5;

ratings_data make_data(config const& c) {
  auto Pt = gx::randn<float>(gx::dims(c.U, truth_rank), 1, 0.0f, 0.35f);
  auto Qt = gx::randn<float>(gx::dims(c.I, truth_rank), 2, 0.0f, 0.35f);
  auto but = gx::randn<float>(gx::dims(c.U), 3, 0.0f, 0.3f);
  auto bit = gx::randn<float>(gx::dims(c.I), 4, 0.0f, 0.3f);
  auto pick = gx::uniform<double>(gx::dims(c.N, gx::fix<2>), 5);
  auto eps = gx::randn<float>(gx::dims(c.N), 6, 0.0f, float(noise));
  std::size_t const nn = static_cast<std::size_t>(c.N);
  ratings_data d{std::vector<std::int32_t>(nn), std::vector<std::int32_t>(nn), std::vector<float>(nn)};
  for (index_t n = 0; n < c.N; ++n) {
    index_t u = std::min(c.U - 1, index_t(pick(n, 0) * double(c.U)));
    index_t i = std::min(c.I - 1, index_t(pick(n, 1) * double(c.I)));
    double r = mu + but(u) + bit(i) + eps(n);
    for (index_t k = 0; k < truth_rank; ++k) r += double(Pt(u, k)) * double(Qt(i, k));
    d.users[std::size_t(n)] = std::int32_t(u);
    d.items[std::size_t(n)] = std::int32_t(i);
    d.ratings[std::size_t(n)] = float(r);
  }
  return d;
}

/// Trains the model with factor tables of element type T; returns the held-out RMSE.
template <class T>
double train(config const& c, ratings_data const& data) {
  auto const& users = data.users;
  auto const& items = data.items;
  auto const& ratings = data.ratings;
  index_t const N = c.N, B = c.B;
  index_t const n_test = N / 10, n_train = N - n_test;  // the last tenth is held out

  // the model: sparse-gradient tables (rows along axis 0), a global mean
  auto P = gx::param(gx::randn<T>(gx::dims(c.U, rank), 7, 0.0f, 0.1f), gx::sparse_grad<0>);
  auto Q = gx::param(gx::randn<T>(gx::dims(c.I, rank), 8, 0.0f, 0.1f), gx::sparse_grad<0>);
  auto bu = gx::param(gx::tensor<float, gx::shape<dyn>>(gx::dims(c.U)), gx::sparse_grad<0>);
  auto bi = gx::param(gx::tensor<float, gx::shape<dyn>>(gx::dims(c.I)), gx::sparse_grad<0>);
  auto m = gx::param(gx::tensor<float, gx::shape<>>{float(mu)});
  float const reg = 0.04f;  // L2 on the rows a batch reads

  // a batch's predictions, from index vectors us and is (views of the data's slices)
  // doc-snippet: predict
  auto predict = [&](auto const& us, auto const& is) {
    auto pu = gx::gather<0>(P, us);
    auto qi = gx::gather<0>(Q, is);
    return gx::sum<1>(pu * qi) + gx::gather<0>(bu, us) + gx::gather<0>(bi, is) + m;
  };
  // end doc-snippet
  auto rmse = [&](index_t from, index_t to) {
    std::vector<std::int32_t> us(users.begin() + from, users.begin() + to), is(items.begin() + from, items.begin() + to);
    gx::tensor<float, gx::shape<dyn>> r(gx::dims(to - from));
    std::copy(ratings.begin() + from, ratings.begin() + to, r.data());
    auto d = predict(us, is) - r;
    return std::sqrt(double(gx::value(gx::mean(d * d))));
  };

  std::vector<index_t> order(static_cast<std::size_t>(n_train));
  std::iota(order.begin(), order.end(), 0);
  long const steps = long((n_train + B - 1) / B);
  examples::training_log progress(c.epochs, steps, {"test_rmse"}, c.log);
  std::vector<std::int32_t> us, is;
  gx::tensor<float, gx::shape<dyn>> r;
  std::uint64_t state = 9;
  double test = 0, seconds = 0;
  long examples = 0;

  // one epoch of steps; step(loss) runs one optimizer step and returns the batch's loss
  auto epochs = [&](auto&& step) {
    for (int e = 1; e <= c.epochs; ++e) {
      for (index_t k = n_train - 1; k > 0; --k) {  // a seeded shuffle
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        std::swap(order[std::size_t(k)], order[std::size_t((state >> 33) % std::uint64_t(k + 1))]);
      }
      auto const t0 = std::chrono::steady_clock::now();
      for (long s = 0; s < steps; ++s) {
        index_t const a = index_t(s) * B, b = std::min(n_train, a + B);
        us.resize(std::size_t(b - a));
        is.resize(std::size_t(b - a));
        r = gx::tensor<float, gx::shape<dyn>>(gx::dims(b - a));
        for (index_t j = a; j < b; ++j) {
          index_t n = order[std::size_t(j)];
          us[std::size_t(j - a)] = users[std::size_t(n)];
          is[std::size_t(j - a)] = items[std::size_t(n)];
          r(j - a) = ratings[std::size_t(n)];
        }
        // doc-snippet: loss
        auto d = predict(us, is) - r;
        auto pu = gx::gather<0>(P, us);
        auto qi = gx::gather<0>(Q, is);
        auto loss = gx::mean(d * d) + reg * (gx::mean(gx::sum<1>(pu * pu)) + gx::mean(gx::sum<1>(qi * qi)));
        // end doc-snippet
        float const l = step(loss);
        progress.step(e, s, double(l), long(b - a));
      }
      seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      examples += long(n_train);
      test = rmse(n_train, N);
      progress.epoch_end(e, {test});
    }
  };

  if (c.fused.empty()) {
    gx::optim::lazy_adam opt({.lr = 0.01}, P, Q, bu, bi, m);
    // doc-snippet: step
    epochs([&](auto const& loss) {
      opt.zero_grad();
      float const l = gx::backward(loss);
      opt.step();
      return l;
    });
    // end doc-snippet
  } else {
    gx::optim::lazy_adam rest({.lr = 0.01}, bu, bi, m);  // the biases and the mean
    auto fused_with = [&](auto& tables) {
      // doc-snippet: fused_step
      epochs([&](auto const& loss) {
        rest.zero_grad();
        float const l = gx::backward(loss, gx::optim::fused(tables));  // P and Q stepped inside
        rest.step();                                                   // bu, bi, m: their gradients as by backward
        return l;
      });
      // end doc-snippet
    };
    if (c.fused == "sgd") {
      gx::optim::sgd tables({.lr = 100}, P, Q);
      fused_with(tables);
    } else if (c.fused == "adagrad") {
      gx::optim::adagrad tables({.lr = 0.1}, P, Q);
      fused_with(tables);
    } else if (c.fused == "rowwise_adagrad") {
      gx::optim::rowwise_adagrad tables({.lr = 0.1}, P, Q);
      fused_with(tables);
    } else {
      gx::optim::lazy_adam tables({.lr = 0.01}, P, Q);
      fused_with(tables);
    }
  }
  std::printf("throughput: %.0f ratings/s over %d epochs (%s factor tables, %s)\n",
              double(examples) / (seconds > 0 ? seconds : 1e-9), c.epochs, c.dtype.c_str(),
              c.fused.empty() ? "lazy Adam, separate step" : ("fused " + c.fused + " for P and Q").c_str());
  return test;
}

}  // namespace

int main(int argc, char** argv) {
  config c;
  c.U = std::stol(examples::arg(argc, argv, "--users", "3000"));
  c.I = std::stol(examples::arg(argc, argv, "--items", "2000"));
  c.N = std::stol(examples::arg(argc, argv, "--ratings", "800000"));
  c.epochs = std::stoi(examples::arg(argc, argv, "--epochs", "8"));
  c.B = std::stol(examples::arg(argc, argv, "--batch", "1024"));
  c.log = examples::arg(argc, argv, "--log", "");
  c.dtype = examples::arg(argc, argv, "--dtype", "f32");
  c.fused = examples::arg(argc, argv, "--fused-optimizer", "");
  if (int t = std::stoi(examples::arg(argc, argv, "--threads", "0")); t > 0) gx::set_num_threads(t);
  if (c.dtype != "f32" && c.dtype != "bf16" && c.dtype != "f16") {
    std::fprintf(stderr, "recommender: --dtype takes f32, bf16 or f16, not %s\n", c.dtype.c_str());
    return 2;
  }
  if (!c.fused.empty() && c.fused != "sgd" && c.fused != "adagrad" && c.fused != "rowwise_adagrad" &&
      c.fused != "lazy_adam") {
    std::fprintf(stderr, "recommender: --fused-optimizer takes sgd, adagrad, rowwise_adagrad or lazy_adam, not %s\n",
                 c.fused.c_str());
    return 2;
  }
  ratings_data const data = make_data(c);
  double const test = c.dtype == "bf16" ? train<gx::bfloat16>(c, data)
                      : c.dtype == "f16" ? train<gx::half>(c, data)
                                         : train<float>(c, data);
  std::printf("held-out RMSE %.4f, noise level %.2f (ratio %.3f; the target is at most 1.10)\n", test, noise, test / noise);
  return test <= 1.1 * noise ? 0 : 1;
}
