// The optimizers of optim.hpp on device parameters (issue 33; training/device_steps.hpp),
// through the grid emulator, against the same optimizer on host parameters: SGD (plain; with
// momentum, dampening, weight decay; Nesterov), Adagrad (weight decay, initial accumulator),
// Adam, AdamW and lazy Adam, each on a dense and on a sparse (rows) parameter, five steps of a
// loss whose gathered rows change from step to step (so slices are skipped, touched again,
// and touched for the first time late). Values after every step to 1e-12 relative (double).
// Half-width parameters (bfloat16, half; issue 35): the device's gradients and rounded
// values equal the host's to the bit after every step, to nearest and stochastically.
// Suite `emulator`.
#include "cuda/device_test_util.hpp"
#include "cuda/emulator.hpp"

#include <gradix/backend/grid/backward.hpp>
#include <gradix/backend/grid/memory.hpp>
#include <gradix/backend/grid/param.hpp>
#include <gradix/gradix.hpp>
#include <gradix/optim.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

namespace gx = gradix;
namespace grid = gradix::grid;
namespace optim = gradix::optim;
using namespace gradix_test::dev;

namespace {

using T = double;

template <class A, class B>
double max_rel(A const& a, B const& b) {
  double m = 0;
  for (index_t k = 0; k < a.shape().size(); ++k) {
    double const x = double(a.data()[k]), y = double(b.data()[k]);
    double const d = std::abs(x - y) / (1 + std::abs(y));
    if (!(d <= m)) m = std::isnan(d) ? std::numeric_limits<double>::infinity() : d;  // (a NaN fails)
  }
  return m;
}

// the rows each step gathers (row 7 first at step 4; rows 0 and 3 skip steps)
std::vector<std::vector<std::int32_t>> const rows_of_step = {{0, 3, 3, 5}, {1, 5}, {0, 2, 5}, {3, 7, 1}, {0, 0, 6}};

/// The loss of every step: the rows i of p, squared and scaled by c, plus the rows.
auto loss_of = [](auto& p, auto const& i, auto const& c) {
  return gx::sum(gx::square(gx::gather<0>(p, i)) * c + gx::gather<0>(p, i));
};

/// Five steps of make_opt's optimizer on a host and a device parameter (Spec: dense_grad or
/// sparse_grad<0>), comparing the values after each.
template <class Spec, class MakeOpt>
void check_optimizer(MakeOpt const& make_opt, std::string const& name) {
  auto const h0 = gx::randn<T>(gx::dims(8, 5), 3, 0.0, 0.8);
  auto const hc = gx::randn<T>(gx::dims(5), 4, 0.0, 1.0);
  auto hp = gx::param(h0, Spec{});
  auto hopt = make_opt(hp);
  launcher l;
  auto dp = grid::param(to_device(l, h0), Spec{});
  auto dc = to_device(l, hc);
  auto dopt = make_opt(dp);
  for (std::size_t step = 0; step < rows_of_step.size(); ++step) {
    INFO(name << ", step " << step);
    auto const hi = index_tensor(rows_of_step[step]);
    auto di = to_device(l, hi);
    hopt.zero_grad();
    gx::backward(loss_of(hp, hi, hc));
    hopt.step();
    dopt.zero_grad();
    grid::backward(l, loss_of(dp, di.view(), dc.view()));
    dopt.step();
    CHECK(max_rel(dp.value().download(), hp.value()) <= 1e-12);
  }
}

/// The same five steps on a half-width parameter V (float gradient and state), rounding r:
/// the device's gradient, and its values after the step, equal the host's to the bit.
template <class V, class Spec, class MakeOpt>
void check_half(MakeOpt const& make_opt, std::string const& name, gx::rounding r) {
  using S2 = gx::shape<gx::dyn, gx::dyn>;
  gx::tensor<V, S2> h0(gx::dims(8, 5));
  h0 = gx::randn<float>(gx::dims(8, 5), 3, 0.0, 0.8);
  auto const hc = gx::randn<float>(gx::dims(5), 4, 0.0, 1.0);
  auto hp = gx::param(h0, Spec{});
  hp.set_rounding(r);
  auto hopt = make_opt(hp);
  launcher l;
  {
    auto dp = grid::param(grid::device_tensor<V, S2, launcher>::from_host(l, h0), Spec{});
    dp.set_rounding(r);
    static_assert(std::is_same_v<typename decltype(dp)::storage_type::value_type, float>);
    auto dc = to_device(l, hc);
    auto dopt = make_opt(dp);
    int moved = 0;
    for (std::size_t step = 0; step < rows_of_step.size(); ++step) {
      INFO(name << ", step " << step);
      auto const hi = index_tensor(rows_of_step[step]);
      auto di = to_device(l, hi);
      hopt.zero_grad();
      gx::backward(loss_of(hp, hi, hc));
      dopt.zero_grad();
      grid::backward(l, loss_of(dp, di.view(), dc.view()));
      auto const hg = hp.grad().to_dense();
      auto const dg = dp.grad().download();
      for (index_t k = 0; k < hg.size(); ++k) REQUIRE(dg.data()[k] == hg.data()[k]);
      auto const before = dp.value().download();
      hopt.step();
      dopt.step();
      auto const got = dp.value().download();
      int same = 0;
      for (index_t k = 0; k < got.size(); ++k) {
        same += got.data()[k].bits() == hp.value().data()[k].bits();
        moved += got.data()[k].bits() != before.data()[k].bits();
      }
      CHECK(same == got.size());
    }
    CHECK(moved > 0);  // (the steps change values: the comparison is not of untouched tables)
    CHECK(dp.rounded_updates() == hp.rounded_updates());
  }
  CHECK(l.live_allocations() == 0);
}

template <class V, class Spec>
void check_half_all(std::string const& kind) {
  for (gx::rounding const r : {gx::nearest_even_rounding, gx::stochastic_rounding(17)}) {
    std::string const k = kind + (r.stochastic ? " stochastic" : " nearest");
    check_half<V, Spec>([](auto& p) { return optim::sgd({.lr = 0.1}, p); }, k + " sgd", r);
    check_half<V, Spec>([](auto& p) { return optim::sgd({.lr = 0.1, .momentum = 0.9, .dampening = 0.2, .weight_decay = 0.01}, p); },
                        k + " sgd momentum", r);
    check_half<V, Spec>([](auto& p) { return optim::adagrad({.lr = 0.1, .weight_decay = 0.02, .initial_accumulator = 0.1}, p); },
                        k + " adagrad", r);
    check_half<V, Spec>([](auto& p) { return optim::adam({.lr = 0.01}, p); }, k + " adam", r);
    check_half<V, Spec>([](auto& p) { return optim::adamw({.lr = 0.01, .weight_decay = 0.1}, p); }, k + " adamw", r);
    if constexpr (Spec::sparse)
      check_half<V, Spec>([](auto& p) { return optim::lazy_adam({.lr = 0.01, .beta1 = 0.8}, p); }, k + " lazy_adam", r);
  }
}

template <class Spec>
void check_all(char const* kind) {
  std::string const k = kind;
  check_optimizer<Spec>([](auto& p) { return optim::sgd({.lr = 0.1}, p); }, k + " sgd");
  check_optimizer<Spec>([](auto& p) { return optim::sgd({.lr = 0.1, .momentum = 0.9, .dampening = 0.2, .weight_decay = 0.01}, p); },
                        k + " sgd momentum");
  check_optimizer<Spec>([](auto& p) { return optim::sgd({.lr = 0.05, .momentum = 0.8, .nesterov = true}, p); },
                        k + " sgd nesterov");
  check_optimizer<Spec>([](auto& p) { return optim::adagrad({.lr = 0.1, .weight_decay = 0.02, .initial_accumulator = 0.1}, p); },
                        k + " adagrad");
  check_optimizer<Spec>([](auto& p) { return optim::adam({.lr = 0.01}, p); }, k + " adam");
  check_optimizer<Spec>([](auto& p) { return optim::adamw({.lr = 0.01, .weight_decay = 0.1}, p); }, k + " adamw");
}

}  // namespace

TEST_CASE("device optimizers: dense parameters against the host") { check_all<gx::dense_grad_t<0>>("dense"); }

TEST_CASE("device optimizers: sparse parameters (rows) against the host, lazy Adam included") {
  check_all<gx::sparse_grad_t<0>>("sparse");
  check_optimizer<gx::sparse_grad_t<0>>([](auto& p) { return optim::lazy_adam({.lr = 0.01, .beta1 = 0.8}, p); },
                                        "sparse lazy_adam");
}

TEST_CASE("device optimizers: bfloat16 and half parameters, the host's gradients and rounded values to the bit") {
  check_half_all<gx::bfloat16, gx::dense_grad_t<0>>("bfloat16 dense");
  check_half_all<gx::bfloat16, gx::sparse_grad_t<0>>("bfloat16 sparse");
  check_half_all<gx::half, gx::dense_grad_t<0>>("half dense");
  check_half_all<gx::half, gx::sparse_grad_t<0>>("half sparse");
}
