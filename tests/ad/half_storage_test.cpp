// Half-width parameters (gx::bfloat16, gx::half; core/half.hpp): gathers widen on load, the
// gradient is float (the same bits as the float twin of the widened table), and each
// optimizer's update is computed in float and rounded once per element and step: to nearest
// (the bits of rounding the float twin's update) or stochastically (seeded: the same bits
// again for the same seed at any thread count, unbiased where rounding to nearest stalls).
#include "testing.hpp"

#include <gradix/optim.hpp>

#include <cmath>
#include <cstdint>
#include <vector>

namespace gx = gradix;
using gx::dyn;
using gx::index_t;
using gx::shape;
using S2 = shape<dyn, dyn>;

namespace {

template <class H>
gx::tensor<H, S2> table(index_t rows, index_t cols, std::uint64_t seed) {
  gx::tensor<H, S2> t(gx::dims(rows, cols));
  auto const r = gx::randn<float>(gx::dims(rows, cols), seed);
  t = r * 0.5f;
  return t;
}
template <class H>
gx::tensor<float, S2> widened(gx::tensor<H, S2> const& t) {
  gx::tensor<float, S2> f(t.shape());
  f = t.view();
  return f;
}
// a loss that reads rows with repeats (one out of the touched set twice) through a gather,
// squares and a row-sum weighted by a constant
template <class P>
auto loss_of(P& p, std::vector<int> const& rows, gx::tensor<float, S2> const& c) {
  auto g = gx::gather<0>(p, rows);
  return gx::sum(g * g * c + g * 0.25f);
}

template <class H, class Spec, class MakeOpt>
void check_against_float_twin(Spec spec, MakeOpt make_opt, int steps) {
  auto const t0 = table<H>(23, 19, 7);
  auto ph = gx::param(t0, spec);
  auto pf = gx::param(widened(t0), spec);
  auto opt_h = make_opt(ph);
  auto opt_f = make_opt(pf);
  std::vector<int> rows{4, 0, 4, 17, 22};
  auto const c = gx::randn<float>(gx::dims(5, 19), 8);
  for (int s = 0; s < steps; ++s) {
    float const lh = gx::backward(loss_of(ph, rows, c));
    float const lf = gx::backward(loss_of(pf, rows, c));
    REQUIRE(lh == lf);  // the forward reads the widened values: the same bits
    auto const gh = ph.grad().to_dense(), gf = pf.grad().to_dense();
    for (index_t i = 0; i < 23; ++i)
      for (index_t j = 0; j < 19; ++j) REQUIRE(gh(i, j) == gf(i, j));
    opt_h.step();
    opt_f.step();
    opt_h.zero_grad();
    opt_f.zero_grad();
    // the half-width value is the float twin's updated value rounded to nearest; then the
    // twin continues from the rounded values (as the half-width parameter does)
    for (index_t i = 0; i < 23; ++i)
      for (index_t j = 0; j < 19; ++j) {
        REQUIRE(ph.value()(i, j).bits() == H(pf.value()(i, j)).bits());
        pf.value()(i, j) = float(ph.value()(i, j));
      }
    rows[1] = (rows[1] + 3) % 23;  // touch another row next step
  }
}

}  // namespace

TEST_CASE_TEMPLATE("half-width parameters: gradients as the float twin's, updates rounded to nearest", H, gx::bfloat16,
                   gx::half) {
  auto sgd = [](auto& p) { return gx::optim::sgd({0.05}, p); };
  auto sgd_momentum = [](auto& p) { return gx::optim::sgd({.lr = 0.05, .momentum = 0.9, .weight_decay = 1e-3}, p); };
  auto adagrad = [](auto& p) { return gx::optim::adagrad({.lr = 0.1}, p); };
  auto adam = [](auto& p) { return gx::optim::adam({.lr = 0.01}, p); };
  auto lazy_adam = [](auto& p) { return gx::optim::lazy_adam({.lr = 0.01}, p); };
  auto rowwise = [](auto& p) { return gx::optim::rowwise_adagrad({.lr = 0.1, .weight_decay = 1e-2}, p); };
  SUBCASE("sparse storage") {
    check_against_float_twin<H>(gx::sparse_grad<0>, sgd, 4);
    check_against_float_twin<H>(gx::sparse_grad<0>, sgd_momentum, 4);
    check_against_float_twin<H>(gx::sparse_grad<0>, adagrad, 4);
    check_against_float_twin<H>(gx::sparse_grad<0>, adam, 3);
    check_against_float_twin<H>(gx::sparse_grad<0>, lazy_adam, 4);
    check_against_float_twin<H>(gx::sparse_grad<0>, rowwise, 4);
  }
  SUBCASE("dense storage") {
    check_against_float_twin<H>(gx::dense_grad<0>, sgd, 4);
    check_against_float_twin<H>(gx::dense_grad<0>, adagrad, 4);
    check_against_float_twin<H>(gx::dense_grad<0>, adam, 3);
    check_against_float_twin<H>(gx::dense_grad<0>, rowwise, 4);
  }
}

TEST_CASE("half-width parameters: a dense layer of bfloat16 weights trains (matmul, bias, softmax)") {
  auto w = gx::param(table<gx::bfloat16>(8, 5, 3));
  auto const x = gx::randn<float>(gx::dims(16, 8), 4);
  gx::tensor<int, shape<dyn>> labels(gx::dims(16));
  for (int i = 0; i < 16; ++i) labels(i) = i % 5;
  auto opt = gx::optim::adam({.lr = 0.05}, w);
  float first = 0, last = 0;
  for (int s = 0; s < 30; ++s) {
    float const l = gx::backward(gx::mean(gx::cross_entropy(gx::matmul(x, w), labels)));
    if (s == 0) first = l;
    last = l;
    opt.step();
    opt.zero_grad();
  }
  CHECK(last < 0.8f * first);
}

TEST_CASE("half-width parameters: stochastic rounding") {
  // w = 1 in bfloat16 (spacing 2^-7 above 1), lr * g = 1e-3 per step: rounding to nearest
  // never moves it, stochastic rounding moves it by 1e-3 per step on average
  auto make = [] {
    return gx::param(gx::ones<gx::bfloat16>(gx::dims(64, 32)), gx::sparse_grad<0>);
  };
  std::vector<int> rows(64);
  for (int i = 0; i < 64; ++i) rows[std::size_t(i)] = i;
  auto run = [&](auto& p, int steps, int threads) {
    gx::set_num_threads(threads);
    auto opt = gx::optim::sgd({1e-3}, p);
    for (int s = 0; s < steps; ++s) {
      gx::backward(-gx::sum(gx::gather<0>(p, rows)));  // gradient -1 everywhere
      opt.step();
      opt.zero_grad();
    }
    gx::set_num_threads(gx::host::default_num_threads());
  };
  auto nearest = make();
  run(nearest, 50, 1);
  // doc-snippet: stochastic_rounding
  // a bfloat16 table whose updates round stochastically: a step smaller than half the
  // spacing still moves the values on average
  auto table = gx::param(gx::ones<gx::bfloat16>(gx::dims(64, 32)), gx::sparse_grad<0>);
  table.set_rounding(gx::stochastic_rounding(42));  // seed 42; the default is to nearest, ties to even
  // end doc-snippet
  run(table, 50, 1);
  CHECK(table.rounded_updates() == 50);
  CHECK(float(nearest.value()(3, 3)) == 1.0f);
  auto sr1 = make();
  sr1.set_rounding(gx::stochastic_rounding(42));
  run(sr1, 50, 1);
  double mean = 0;
  for (index_t i = 0; i < 64; ++i)
    for (index_t j = 0; j < 32; ++j) mean += float(sr1.value()(i, j));
  mean /= 64 * 32;
  CHECK(mean == doctest::Approx(1.05).epsilon(0.01));  // 1 + 50 * 1e-3
  CHECK(sr1.rounded_updates() == 50);
  // the same seed: the same bits, at any thread count
  auto sr3 = make();
  sr3.set_rounding(gx::stochastic_rounding(42));
  run(sr3, 50, 3);
  for (index_t i = 0; i < 64; ++i)
    for (index_t j = 0; j < 32; ++j) REQUIRE(sr1.value()(i, j).bits() == sr3.value()(i, j).bits());
  // another seed: other bits
  auto other = make();
  other.set_rounding(gx::stochastic_rounding(43));
  run(other, 50, 1);
  int differ = 0;
  for (index_t i = 0; i < 64; ++i)
    for (index_t j = 0; j < 32; ++j) differ += sr1.value()(i, j).bits() != other.value()(i, j).bits();
  CHECK(differ > 100);
  CHECK(sr1.rounding() == gx::stochastic_rounding(42));
  CHECK(nearest.rounding() == gx::nearest_even_rounding);
}
