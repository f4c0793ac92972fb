// Matrix factorization with user and item biases on synthetic ratings with a known low-rank
// truth: rating(u, i) = mu + bu[u] + bi[i] + <P[u], Q[i]> + noise (sd 0.5). The model has the
// same form (rank 16 against the truth's 8), embedding tables with sparse gradients (a batch
// touches only its users' and items' rows) and lazy Adam, so a step costs the batch, not the
// tables. Prints the held-out RMSE each epoch; exits 1 unless it ends within 10% of the
// noise level (0.55), which is the best any model can do.
//
//   build/examples/recommender [--users U] [--items I] [--ratings N] [--epochs E]
//                              [--batch B] [--log run.csv] [--threads T]
#include <gradix/gradix.hpp>
#include <gradix/optim.hpp>

#include "training_log.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <numeric>
#include <string>
#include <vector>

namespace gx = gradix;
using gx::dyn;
using gx::index_t;

int main(int argc, char** argv) {
  index_t const U = std::stol(examples::arg(argc, argv, "--users", "3000"));
  index_t const I = std::stol(examples::arg(argc, argv, "--items", "2000"));
  index_t const N = std::stol(examples::arg(argc, argv, "--ratings", "800000"));
  int const epochs = std::stoi(examples::arg(argc, argv, "--epochs", "8"));
  index_t const B = std::stol(examples::arg(argc, argv, "--batch", "1024"));
  std::string const log = examples::arg(argc, argv, "--log", "");
  if (int t = std::stoi(examples::arg(argc, argv, "--threads", "0")); t > 0) gx::set_num_threads(t);
  constexpr index_t truth_rank = 8, rank = 16;
  double const noise = 0.5, mu = 3.5;

  // the truth, and N ratings of random (user, item) pairs
  auto Pt = gx::randn<float>(gx::dims(U, truth_rank), 1, 0.0f, 0.35f);
  auto Qt = gx::randn<float>(gx::dims(I, truth_rank), 2, 0.0f, 0.35f);
  auto but = gx::randn<float>(gx::dims(U), 3, 0.0f, 0.3f);
  auto bit = gx::randn<float>(gx::dims(I), 4, 0.0f, 0.3f);
  auto pick = gx::uniform<double>(gx::dims(N, gx::fix<2>), 5);
  auto eps = gx::randn<float>(gx::dims(N), 6, 0.0f, float(noise));
  std::size_t const nn = static_cast<std::size_t>(N);
  std::vector<std::int32_t> users(nn), items(nn);
  std::vector<float> ratings(nn);
  for (index_t n = 0; n < N; ++n) {
    index_t u = std::min(U - 1, index_t(pick(n, 0) * double(U))), i = std::min(I - 1, index_t(pick(n, 1) * double(I)));
    double r = mu + but(u) + bit(i) + eps(n);
    for (index_t k = 0; k < truth_rank; ++k) r += double(Pt(u, k)) * double(Qt(i, k));
    users[std::size_t(n)] = std::int32_t(u);
    items[std::size_t(n)] = std::int32_t(i);
    ratings[std::size_t(n)] = float(r);
  }
  index_t const n_test = N / 10, n_train = N - n_test;  // the last tenth is held out

  // the model: sparse-gradient tables (rows along axis 0), a global mean
  auto P = gx::param(gx::randn<float>(gx::dims(U, rank), 7, 0.0f, 0.1f), gx::sparse_grad<0>);
  auto Q = gx::param(gx::randn<float>(gx::dims(I, rank), 8, 0.0f, 0.1f), gx::sparse_grad<0>);
  auto bu = gx::param(gx::tensor<float, gx::shape<dyn>>(gx::dims(U)), gx::sparse_grad<0>);
  auto bi = gx::param(gx::tensor<float, gx::shape<dyn>>(gx::dims(I)), gx::sparse_grad<0>);
  auto m = gx::param(gx::tensor<float, gx::shape<>>{float(mu)});
  gx::optim::lazy_adam opt({.lr = 0.01}, P, Q, bu, bi, m);
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
  examples::training_log progress(epochs, steps, {"test_rmse"}, log);
  std::vector<std::int32_t> us, is;
  gx::tensor<float, gx::shape<dyn>> r;
  std::uint64_t state = 9;
  double test = 0;
  for (int e = 1; e <= epochs; ++e) {
    for (index_t k = n_train - 1; k > 0; --k) {  // a seeded shuffle
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      std::swap(order[std::size_t(k)], order[std::size_t((state >> 33) % std::uint64_t(k + 1))]);
    }
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
      // doc-snippet: step
      auto d = predict(us, is) - r;
      auto pu = gx::gather<0>(P, us);
      auto qi = gx::gather<0>(Q, is);
      opt.zero_grad();
      float loss = gx::backward(gx::mean(d * d) + reg * (gx::mean(gx::sum<1>(pu * pu)) + gx::mean(gx::sum<1>(qi * qi))));
      opt.step();
      // end doc-snippet
      progress.step(e, s, double(loss), long(b - a));
    }
    test = rmse(n_train, N);
    progress.epoch_end(e, {test});
  }
  std::printf("held-out RMSE %.4f, noise level %.2f (ratio %.3f; the target is at most 1.10)\n", test, noise, test / noise);
  return test <= 1.1 * noise ? 0 : 1;
}
