// gx::backward, backward_only, grad, zero_grad, eval, value and assign on device expressions
// (api/device_entry.hpp): the same calls as on the host, run with the launcher of the
// expression's first device parameter (here the grid emulator), against the host results.
// The founding benchmark's per-term and batched forms, sum and square loss, come first.
// Suite `emulator`.
#include "cuda/device_test_util.hpp"
#include "cuda/emulator.hpp"

#include <gradix/device.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

namespace gx = gradix;
namespace grid = gradix::grid;
using namespace gradix_test::dev;

namespace {

template <class T>
void check_founding_dispatch(bool square, bool batched) {
  // (float: the host's SIMD sums and the device's fixed-order ones round differently)
  double const tol = std::is_same_v<T, float> ? 1e-5 : 1e-12;
  index_t const d = 5, na = 50, nb = 30;
  auto const ha = gx::randn<T, gx::col_major>(gx::dims(d, na), 71);
  auto const hb = gx::randn<T, gx::col_major>(gx::dims(d, nb), 72);
  std::vector<std::int32_t> ids = zipf(80, nb, 9);
  ids.push_back(3);
  ids.push_back(3);
  std::vector<std::int32_t> const js = {7, 49, 7, 0, 23};
  auto const hidx = index_tensor(ids);
  auto const hjs = index_tensor(js);

  // host
  auto hpa = gx::param(ha, gx::sparse_grad<1>);
  auto hpb = gx::param(hb, gx::sparse_grad<1>);
  T hv = 0;
  auto host_batched = [&] {
    return gx::unsqueeze<2>(hpb(gx::all, gx::indices(hidx))) + gx::unsqueeze<1>(hpa(gx::all, gx::indices(hjs)));
  };
  if (batched) {
    hv = square ? gx::backward(gx::sum(gx::square(host_batched()))) : gx::backward(gx::sum(host_batched()));
  } else {
    for (std::int32_t j : js) {
      auto block = hpb(gx::all, gx::indices(hidx)) + hpa(gx::all, gx::at(j));
      hv += square ? gx::backward(gx::sum(gx::square(block))) : gx::backward(gx::sum(block));
    }
  }
  auto const want_a = hpa.grad().to_dense();
  auto const want_b = hpb.grad().to_dense();

  // device, through gx:: (the launcher: the parameters')
  launcher l;
  {
    auto dpa = grid::param(to_device(l, ha), gx::sparse_grad<1>);
    auto dpb = grid::param(to_device(l, hb), gx::sparse_grad<1>);
    auto const didx = to_device(l, hidx);
    auto const djs = to_device(l, hjs);
    auto dev_batched = [&] {
      return gx::unsqueeze<2>(dpb(gx::all, grid::indices(didx))) + gx::unsqueeze<1>(dpa(gx::all, grid::indices(djs)));
    };
    auto dev_block = [&](std::int32_t j) { return dpb(gx::all, grid::indices(didx)) + dpa(gx::all, gx::at(j)); };
    for (int round = 0; round < 2; ++round) {  // the second after zero_grad: the same result
      gx::zero_grad(dpa, dpb);
      T dv = 0;
      if (batched) {
        dv = square ? gx::backward(gx::sum(gx::square(dev_batched()))) : gx::backward(gx::sum(dev_batched()));
      } else {
        for (std::int32_t j : js)
          dv += square ? gx::backward(gx::sum(gx::square(dev_block(j)))) : gx::backward(gx::sum(dev_block(j)));
      }
      CHECK(dv == doctest::Approx(hv).epsilon(tol));
      check_close(want_a, dpa.grad().download(), tol, "gradient of Ea");
      check_close(want_b, dpb.grad().download(), tol, "gradient of Eb");
      CHECK(dpa.grad().size() == 4);  // the distinct term columns, once each
    }
    // backward_only adds the same again
    if (batched) {
      if (square) gx::backward_only(gx::sum(gx::square(dev_batched())));
      else gx::backward_only(gx::sum(dev_batched()));
    } else {
      for (std::int32_t j : js) {
        if (square) gx::backward_only(gx::sum(gx::square(dev_block(j))));
        else gx::backward_only(gx::sum(dev_block(j)));
      }
    }
    auto twice = want_b;
    for (index_t k = 0; k < twice.size(); ++k) twice.data()[k] *= 2;
    check_close(twice, dpb.grad().download(), tol, "backward_only accumulates");
    // value: the forward alone
    T const fv = batched ? gx::value(gx::sum(dev_batched())) : gx::value(gx::sum(dev_block(js[0])));
    T const hf = batched ? gx::value(gx::sum(host_batched()))
                         : gx::value(gx::sum(hpb(gx::all, gx::indices(hidx)) + hpa(gx::all, gx::at(js[0]))));
    CHECK(fv == doctest::Approx(hf).epsilon(tol));
  }
  CHECK(l.live_allocations() == 0);
}

}  // namespace

TEST_CASE("gx::backward on device parameters: the founding benchmark, per term and batched, sum and square") {
  check_founding_dispatch<double>(false, false);
  check_founding_dispatch<double>(true, false);
  check_founding_dispatch<double>(false, true);
  check_founding_dispatch<double>(true, true);
  check_founding_dispatch<float>(true, true);
}

TEST_CASE("gx::eval, value and assign on device expressions") {
  using T = double;
  auto const hw = gx::randn<T>(gx::dims(4, 6), 81);
  auto const hx = gx::randn<T, gx::col_major>(gx::dims(4, 6), 82);
  launcher l;
  {
    auto dp = grid::param(to_device(l, hw));
    auto const dx = to_device(l, hx);
    auto const xv = dx.cview();
    // eval: a new device tensor (row-major: the parameter is the first leaf that fixes it)
    auto r = gx::eval(gx::tanh(dp) * xv + 1.0);
    static_assert(std::is_same_v<decltype(r), grid::device_tensor<T, gx::shape<gx::dyn, gx::dyn>, launcher, gx::row_major>>);
    check_close(gx::eval(gx::tanh(hw) * hx + 1.0), r.download(), 1e-14, "eval");
    // a transpose of a row-major leaf: column-major, as on the host
    auto rt = gx::eval(gx::transpose(dp) * 2.0);
    check_close(gx::eval(gx::transpose(hw) * 2.0), rt.download(), 0, "eval of a transpose");
    // value
    CHECK(gx::value(gx::sum(dp * xv)) == doctest::Approx(gx::value(gx::sum(hw * hx))).epsilon(1e-13));
    CHECK(gx::value(gx::max(dp)) == gx::value(gx::max(hw)));
    // assign into a device tensor (its launcher) and into a device view (the parameter's)
    auto out = grid::device_tensor<T, gx::shape<gx::dyn, gx::dyn>, launcher>::zeros(l, gx::dims(4, 6));
    gx::assign(out, dp * dp - xv);
    check_close(gx::eval(hw * hw - hx), out.download(), 1e-14, "assign into a device tensor");
    gx::assign(out.view(), gx::exp(dp) + 0.0 * xv);
    check_close(gx::eval(gx::exp(hw)), out.download(), 1e-14, "assign into a device view");
    // a shape mismatch names both shapes; nothing is written
    auto small = grid::device_tensor<T, gx::shape<gx::dyn, gx::dyn>, launcher>::zeros(l, gx::dims(3, 6));
    std::string const msg = error_of([&] { gx::assign(small.view(), dp * 2.0); });
    CHECK(msg.find("[3, 6]") != std::string::npos);
    CHECK(msg.find("[4, 6]") != std::string::npos);
    auto const untouched = small.download();
    for (index_t k = 0; k < untouched.size(); ++k) REQUIRE(untouched.data()[k] == 0.0);
  }
  CHECK(l.live_allocations() == 0);
}

TEST_CASE("device tensors of bfloat16 and half: read as float, written rounded, as on the host") {
  using S2 = gx::shape<gx::dyn, gx::dyn>;
  auto const hf = gx::randn<float>(gx::dims(5, 7), 3);
  gx::tensor<gx::bfloat16, S2> hb(gx::dims(5, 7));
  hb = hf;
  launcher l;
  {
    auto db = grid::device_tensor<gx::bfloat16, S2, launcher>::from_host(l, hb);
    auto r = grid::eval(l, gx::tanh(db.cview()) * 3.0f);  // a float device tensor
    static_assert(std::is_same_v<typename decltype(r)::value_type, float>);
    check_close(gx::eval(gx::tanh(hb.view()) * 3.0f), r.download(), 1e-6, "eval over a bfloat16 device tensor");
    auto dh = grid::device_tensor<gx::half, S2, launcher>::zeros(l, gx::dims(5, 7));
    grid::assign(l, dh.view(), db.cview() * 100000.0f);  // some beyond 65504: infinity
    gx::tensor<gx::half, S2> hh(gx::dims(5, 7));
    hh = hb.view() * 100000.0f;
    auto const back = dh.download();
    int inf = 0;
    for (index_t k = 0; k < back.size(); ++k) {
      REQUIRE(back.data()[k].bits() == hh.data()[k].bits());
      inf += std::isinf(float(back.data()[k]));
    }
    CHECK(inf > 0);
  }
  CHECK(l.live_allocations() == 0);
}

TEST_CASE("gx::grad and the seeded gx::backward on device expressions") {
  using T = double;
  auto const hw = gx::randn<T>(gx::dims(4, 6), 91);
  auto const hv = gx::randn<T>(gx::dims(6), 92);
  auto const hseed = gx::randn<T>(gx::dims(4, 6), 93);
  auto const hidx = index_tensor({5, 0, 5, 2, 5});
  launcher l;
  {
    auto hp = gx::param(hw, gx::sparse_grad<1>);
    auto hq = gx::param(hv);
    auto dp = grid::param(to_device(l, hw), gx::sparse_grad<1>);
    auto dq = grid::param(to_device(l, hv));
    auto const didx = to_device(l, hidx);
    // grad: new storages; the parameters' own gradients stay empty
    auto [hgp, hgq] = gx::grad(gx::sum(gx::square(hp(gx::all, gx::indices(hidx)) * hq(gx::indices(hidx)))), hp, hq);
    auto [dgp, dgq] = gx::grad(gx::sum(gx::square(dp(gx::all, grid::indices(didx)) * dq(grid::indices(didx)))), dp, dq);
    check_close(hgp.to_dense(), dgp.download(), 1e-12, "grad: the sparse parameter");
    check_close(hgq.to_dense(), dgq.download(), 1e-12, "grad: the dense parameter");
    CHECK(dgp.size() == 3);
    CHECK(dp.grad().size() == 0);
    auto const own = dq.grad().download();
    for (index_t k = 0; k < own.size(); ++k) REQUIRE(own.data()[k] == 0.0);
    // seeded backward of a rank-2 expression: d <seed, e> / d p
    auto const dseed = to_device(l, hseed);
    gx::backward(gx::tanh(hp) * hq, hseed);
    gx::backward(gx::tanh(dp) * dq, dseed.cview());
    check_close(hp.grad().to_dense(), dp.grad().download(), 1e-12, "seeded backward: the sparse parameter");
    check_close(hq.grad().to_dense(), dq.grad().download(), 1e-12, "seeded backward: the broadcast parameter");
    // a seed of the wrong shape: an error naming both shapes, nothing written
    auto const bad_seed = grid::device_tensor<T, gx::shape<gx::dyn, gx::dyn>, launcher>::zeros(l, gx::dims(6, 4));
    std::string const msg = error_of([&] { gx::backward(gx::tanh(dp) * dq, bad_seed.cview()); });
    CHECK(msg == "gradix::backward: seed shape [6, 4] differs from expression shape [4, 6]");
    check_close(hq.grad().to_dense(), dq.grad().download(), 1e-12, "after the refused seed");
    // an out-of-range device index through gx::backward: the host's message, nothing written
    auto const bad = to_device(l, index_tensor({1, 6}));
    CHECK(error_of([&] { gx::backward(gx::sum(dq(grid::indices(bad)))); }) ==
          "gradix::gather: index 6 (position 1) is out of range for axis 0 of extent 6");
    check_close(hq.grad().to_dense(), dq.grad().download(), 1e-12, "after the refused index");
  }
  CHECK(l.live_allocations() == 0);
}

TEST_CASE("a device parameter's gradient in use by another call: an error, nothing written") {
  using T = double;
  auto const hw = gx::randn<T>(gx::dims(3, 4), 95);
  launcher l;
  {
    auto dp = grid::param(to_device(l, hw), gx::sparse_grad<1>);
    auto dq = grid::param(to_device(l, hw));
    auto const idx = to_device(l, index_tensor({1, 3, 1}));
    // another thread's backward holds dp's storage (its busy flag, as the lock leaves it)
    dp.grad().busy_flag() = true;
    std::string const want =
        "a device parameter's gradient is in use by another thread (a concurrent backward, grad or zero_grad on the "
        "same parameter); give each thread its own parameters or serialise the calls";
    CHECK(error_of([&] { gx::backward(gx::sum(dq * 2.0) + gx::sum(dp(gx::all, grid::indices(idx)))); }) ==
          "gradix::grid::backward: " + want);
    CHECK(error_of([&] { grid::backward_only(l, gx::sum(dp(gx::all, grid::indices(idx)))); }) ==
          "gradix::grid::backward_only: " + want);
    CHECK(error_of([&] { gx::zero_grad(dq, dp); }) == "gradix::zero_grad: " + want);
    CHECK(error_of([&] { grid::zero_grad(dp); }) == "gradix::grid::zero_grad: " + want);
    // nothing written, and the other storage's flag was given back
    CHECK(dp.grad().size() == 0);
    CHECK_FALSE(dq.grad().busy_flag());
    auto const g = dq.grad().download();
    for (index_t k = 0; k < g.size(); ++k) REQUIRE(g.data()[k] == 0.0);
    // once the other call is done, the same calls run, and leave the flags free
    dp.grad().busy_flag() = false;
    gx::backward(gx::sum(dq * 2.0) + gx::sum(dp(gx::all, grid::indices(idx))));
    CHECK(dp.grad().size() == 2);
    CHECK_FALSE(dp.grad().busy_flag());
    CHECK_FALSE(dq.grad().busy_flag());
    gx::zero_grad(dp, dq);
    CHECK(dp.grad().size() == 0);
  }
  CHECK(l.live_allocations() == 0);
}
