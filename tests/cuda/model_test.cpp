// Model plans on the device (issue 33): the save transform and the plan runner over
// grid::executor (exec/save.hpp, exec/run.hpp, exec/elements.hpp), through the grid emulator,
// against the host backward of the same expressions. Matrix products (the launcher's gemm),
// softmax and log_softmax rows, layer norm, gx::let, a reduction broadcast back (a staged
// value), a whole MLP step, and the tutorial's model (examples/tutorial.cpp) trained for 12
// steps by lazy Adam on both; values and gradients to rounding (the device sums a row in
// index order, the host in SIMD lanes; products agree to the gemm's rounding), for every
// launch configuration of the suite, and grad() beside backward(). A scan's forward
// (grid::eval, grid::value) and its launches per step. Suite `emulator`.
#include "cuda/device_test_util.hpp"
#include "cuda/emulator.hpp"

#include <gradix/backend/grid/backward.hpp>
#include <gradix/backend/grid/memory.hpp>
#include <gradix/backend/grid/param.hpp>
#include <gradix/device.hpp>
#include <gradix/gradix.hpp>
#include <gradix/optim.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <cstdint>
#include <string>
#include <vector>

namespace gx = gradix;
namespace grid = gradix::grid;
using namespace gradix_test::dev;

namespace {

using T = double;

/// The largest |a - b| / (1 + |b|) over two tensors of one shape.
template <class A, class B>
double max_rel(A const& a, B const& b) {
  double m = 0;
  auto const n = a.shape().size();
  REQUIRE(n == b.shape().size());
  for (index_t k = 0; k < n; ++k) {
    double const x = double(a.data()[k]), y = double(b.data()[k]);
    double const d = std::abs(x - y) / (1 + std::abs(y));
    if (!(d <= m)) m = std::isnan(d) ? std::numeric_limits<double>::infinity() : d;  // (a NaN fails)
  }
  return m;
}

/// Builds the same loss on host parameters and on device parameters (f(x, y, w1, w2, b) with
/// host or device operands; y a one-hot (6, 4) target matrix), runs backward on both, and compares the values and gradients;
/// then grid::grad on the device against the host's gradients.
template <class F>
void check_model(F const& f, char const* name) {
  auto const hx = gx::randn<T>(gx::dims(6, 5), 1, 0.0, 0.7);
  auto const hw1 = gx::randn<T>(gx::dims(5, 7), 2, 0.0, 0.5);
  auto const hw2 = gx::randn<T>(gx::dims(7, 4), 3, 0.0, 0.5);
  auto const hb = gx::randn<T>(gx::dims(4), 4, 0.0, 0.5);
  gx::tensor<T, gx::shape<gx::dyn, gx::dyn>> hy(gx::dims(6, 4));
  for (index_t i = 0; i < 6; ++i)
    for (index_t j = 0; j < 4; ++j) hy(i, j) = j == i % 4 ? 1.0 : 0.0;
  auto pw1 = gx::param(hw1);
  auto pw2 = gx::param(hw2);
  auto pb = gx::param(hb);
  T const hv = gx::backward(f(hx, hy, pw1, pw2, pb));
  auto const g1 = pw1.grad().to_dense();
  auto const g2 = pw2.grad().to_dense();
  auto const gb = pb.grad().to_dense();
  for (config c : configs) {
    INFO(std::string(name) << ": threads " << c.threads << ", max_blocks " << c.max_blocks << ", shuffled " << c.shuffle);
    launcher l = make_launcher(c);
    {
      auto dx = to_device(l, hx);
      auto dy = to_device(l, hy);
      auto dw1 = grid::param(to_device(l, hw1));
      auto dw2 = grid::param(to_device(l, hw2));
      auto db = grid::param(to_device(l, hb));
      grid::backward_options const o{mode::atomic, {c.threads, c.max_blocks}};
      T const dv = grid::backward(l, f(dx.view(), dy.view(), dw1, dw2, db), o);
      CHECK(std::abs(dv - hv) <= 1e-12 * (1 + std::abs(hv)));
      CHECK(max_rel(dw1.grad().download(), g1) <= 1e-12);
      CHECK(max_rel(dw2.grad().download(), g2) <= 1e-12);
      CHECK(max_rel(db.grad().download(), gb) <= 1e-12);
      // grad(): the same gradients, the parameters' own untouched (a second backward doubles)
      auto [r1, rb] = grid::grad(l, f(dx.view(), dy.view(), dw1, dw2, db), dw1, db);
      CHECK(max_rel(r1.download(), g1) <= 1e-12);
      CHECK(max_rel(rb.download(), gb) <= 1e-12);
      grid::backward(l, f(dx.view(), dy.view(), dw1, dw2, db), o);
      auto g1_twice = g1;
      for (index_t k = 0; k < g1.shape().size(); ++k) g1_twice.data()[k] = 2 * g1.data()[k];
      CHECK(max_rel(dw1.grad().download(), g1_twice) <= 1e-12);
    }
    CHECK(l.live_allocations() == 0);  // every buffer of the calls went back to the launcher
  }
}

}  // namespace

TEST_CASE("device models: an MLP step (two products, bias, tanh, log_softmax) against the host") {
  check_model(
      [](auto const& x, auto const& y, auto& w1, auto& w2, auto& b) {
        auto z = gx::matmul(gx::tanh(gx::matmul(x, w1)), w2) + b;
        return -gx::sum(y * gx::log_softmax<1>(z)) / T(6);
      },
      "mlp");
}

TEST_CASE("device models: a recurrence (gx::scan) whose body holds a product, read by a product") {
  // xs: x as 3 steps of 2 rows; the carry (2, 7); the body's product and the carry's
  // adjoint through the steps run on the device as on the host (issue 34)
  check_model(
      [](auto const& x, auto const& y, auto& w1, auto& w2, auto& b) {
        auto xs = gx::reshape(x, gx::dims(3, 2, 5));
        auto h0 = gx::tanh(gx::matmul(gx::select<0>(xs, 0), w1));
        auto hs = gx::scan(h0, xs, [&](auto h, auto xt) { return gx::tanh(gx::matmul(xt, w1) + h * T(0.5)); });
        auto z = gx::matmul(gx::reshape(hs, gx::dims(6, 7)), w2) + b;
        return gx::sum(gx::square(z - y));
      },
      "scan");
}

TEST_CASE("device models: a scan's forward (grid::value, grid::eval) and its launches per step") {
  // an Elman layer with its input's product taken out of the loop (xw = x Wx for every step
  // at once, as cuDNN does): a step is one product and one elementwise kernel forward; the
  // reverse sweep's step is one kernel and one product (the carry's adjoint, accumulated
  // straight into its buffer: nothing copied per step); Wh's gradient is one product over
  // every step when the sweep ends (exec/sweep.hpp, sweep_deferral)
  auto const hwh = gx::randn<float>(gx::dims(6, 6), 4, 0.0, 0.3);
  auto const hc0 = gx::randn<float>(gx::dims(4, 6), 2, 0.0, 0.5);
  index_t fwd[2] = {0, 0}, bwd[2] = {0, 0};
  for (index_t steps : {4, 8}) {
    INFO("steps " << steps);
    auto const hxw = gx::randn<float>(gx::dims(steps, 4, 6), 1, 0.0, 0.5);
    auto hp = gx::param(hwh);
    auto body = [](auto& wh) { return [&wh](auto h, auto xt) { return gx::tanh(xt + gx::matmul(h, wh)); }; };
    auto const hs = gx::eval(gx::scan(hc0, hxw, body(hp)));
    float const hv = gx::backward(gx::sum(gx::square(gx::scan(hc0, hxw, body(hp)))));
    auto const hg = hp.grad().to_dense();
    launcher l;
    {
      auto dxw = to_device(l, hxw);
      auto dc0 = to_device(l, hc0);
      auto dp = grid::param(to_device(l, hwh));
      index_t a = l.launches();
      auto const ds = grid::eval(l, gx::scan(dc0.view(), dxw.view(), body(dp)));
      fwd[steps == 8] = l.launches() - a;
      CHECK(max_rel(ds.download(), hs) <= 1e-5);
      float const dv = grid::value(l, gx::sum(gx::square(gx::scan(dc0.view(), dxw.view(), body(dp)))));
      CHECK(std::abs(dv - hv) <= 1e-5 * (1 + std::abs(hv)));
      a = l.launches();
      float const db = grid::backward(l, gx::sum(gx::square(gx::scan(dc0.view(), dxw.view(), body(dp)))));
      bwd[steps == 8] = l.launches() - a;
      CHECK(std::abs(db - hv) <= 1e-5 * (1 + std::abs(hv)));
      CHECK(max_rel(dp.grad().download(), hg) <= 1e-5);
    }
    CHECK(l.live_allocations() == 0);
  }
  // launches that four more steps add, per step
  CHECK((fwd[1] - fwd[0]) / 4 == 2);          // the product h Wh, then tanh(xw_t + .) into the carry
  CHECK((bwd[1] - bwd[0]) / 4 == 2 + 2);      // the forward's two, then the sweep's two
  CHECK((fwd[1] - fwd[0]) % 4 == 0);
  CHECK((bwd[1] - bwd[0]) % 4 == 0);
}

TEST_CASE("device models: an LSTM cell's scan (gx::cells::lstm_projected): values, gradients and launches per step") {
  // the carry hc = [h, c] (4 x 2H), xw_t the input's product for the four gates (4 x 4H),
  // taken out of the loop. Forward per step: the product h Wh (h, a slice of the carry, read
  // in place: lda = 2H), the gates let, the c2 let, and the concat [o tanh(c2), c2] computed
  // straight into the carry (no buffer and copy); a forward call's step (nothing kept for a
  // sweep) is the product and one kernel: the lets' operands recomputed where they are read
  index_t const H = 5;
  auto const hwh = gx::randn<float>(gx::dims(H, 4 * H), 4, 0.0, 0.3);
  auto const hc0 = gx::randn<float>(gx::dims(4, 2 * H), 2, 0.0, 0.5);
  index_t fwd[2] = {0, 0}, bwd[2] = {0, 0}, rec[2] = {0, 0};
  for (index_t steps : {4, 8}) {
    INFO("steps " << steps);
    auto const hxw = gx::randn<float>(gx::dims(steps, 4, 4 * H), 1, 0.0, 0.5);
    auto hp = gx::param(hwh);
    auto body = [](auto& wh) { return [&wh](auto hc, auto xt) { return gx::cells::lstm_projected(xt, hc, wh); }; };
    auto const hs = gx::eval(gx::scan(hc0, hxw, body(hp)));
    float const hv = gx::backward(gx::sum(gx::square(gx::scan(hc0, hxw, body(hp)))));
    auto const hg = hp.grad().to_dense();
    launcher l;
    {
      auto dxw = to_device(l, hxw);
      auto dc0 = to_device(l, hc0);
      auto dp = grid::param(to_device(l, hwh));
      index_t a = l.launches();
      auto const ds = grid::eval(l, gx::scan(dc0.view(), dxw.view(), body(dp)));
      fwd[steps == 8] = l.launches() - a;
      CHECK(max_rel(ds.download(), hs) <= 1e-5);
      a = l.launches();
      float const db = grid::backward(l, gx::sum(gx::square(gx::scan(dc0.view(), dxw.view(), body(dp)))));
      bwd[steps == 8] = l.launches() - a;
      CHECK(std::abs(db - hv) <= 1e-5 * (1 + std::abs(hv)));
      CHECK(max_rel(dp.grad().download(), hg) <= 1e-5);
      // the same with gx::recompute_steps: the same value and gradient
      auto dq = grid::param(to_device(l, hwh));
      a = l.launches();
      float const dr =
          grid::backward(l, gx::sum(gx::square(gx::scan(dc0.view(), dxw.view(), body(dq), gx::recompute_steps))));
      rec[steps == 8] = l.launches() - a;
      CHECK(std::abs(dr - hv) <= 1e-5 * (1 + std::abs(hv)));
      CHECK(max_rel(dq.grad().download(), hg) <= 1e-5);
    }
    CHECK(l.live_allocations() == 0);
  }
  MESSAGE("lstm_projected launches per step: forward ", (fwd[1] - fwd[0]) / 4, ", backward (forward + sweep) ",
          (bwd[1] - bwd[0]) / 4, ", backward with gx::recompute_steps ", (rec[1] - rec[0]) / 4);
  // a forward call keeps no step: the lets' elementwise operands are read where they are
  // used, the concat written into the carry: the product and one kernel
  CHECK((fwd[1] - fwd[0]) / 4 == 2);
  CHECK((fwd[1] - fwd[0]) % 4 == 0);
  CHECK((bwd[1] - bwd[0]) % 4 == 0);
  // a backward call: the forward keeps each step's lets, written with the concat into the
  // carry by one launch after the product (exec/save_scan.hpp, with_saved_together: 2; 4
  // one assign after another before); the sweep's step is its elementwise adjoint in one launch
  // (the c2 let is pointwise: its adjoint is written and read element by element, so its
  // body's uses and its operand's run as members of one launch, exec/elements.hpp
  // pointwise_let; 7 launches before) and the product accumulating h's adjoint straight
  // into the carry's (a column slice: ldc = 2H), Wh's gradient one product over every step
  // when the sweep ends
  CHECK((bwd[1] - bwd[0]) / 4 == 2 + 2);
  // recompute_steps: the forward keeps no step (2), the sweep recomputes each step as the
  // forward keeps it (2) and takes Wh's gradient step by step (3)
  CHECK((rec[1] - rec[0]) / 4 == 2 + 2 + 3);
  CHECK((rec[1] - rec[0]) % 4 == 0);
}

TEST_CASE("device models: a GRU cell's scan in PyTorch's form (gx::cells::gru_projected): values, gradients and launches per step") {
  // the carry h (4 x H), xw_t the input's product for the three gates (4 x 3H), taken out of
  // the loop; per step the product a = h Wh + bh (its let), the gates and the new carry
  index_t const H = 5;
  auto const hwh = gx::randn<float>(gx::dims(H, 3 * H), 4, 0.0, 0.3);
  auto const hbh = gx::randn<float>(gx::dims(3 * H), 5, 0.0, 0.2);
  auto const hh0 = gx::randn<float>(gx::dims(4, H), 2, 0.0, 0.5);
  index_t fwd[2] = {0, 0}, bwd[2] = {0, 0}, rec[2] = {0, 0};
  for (index_t steps : {4, 8}) {
    INFO("steps " << steps);
    auto const hxw = gx::randn<float>(gx::dims(steps, 4, 3 * H), 1, 0.0, 0.5);
    auto hp = gx::param(hwh);
    auto hb = gx::param(hbh);
    auto body = [](auto& wh, auto& bh) { return [&wh, &bh](auto h, auto xt) { return gx::cells::gru_projected(xt, h, wh, bh); }; };
    auto const hs = gx::eval(gx::scan(hh0, hxw, body(hp, hb)));
    float const hv = gx::backward(gx::sum(gx::square(gx::scan(hh0, hxw, body(hp, hb)))));
    auto const hg = hp.grad().to_dense();
    auto const hgb = hb.grad().to_dense();
    launcher l;
    {
      auto dxw = to_device(l, hxw);
      auto dh0 = to_device(l, hh0);
      auto dp = grid::param(to_device(l, hwh));
      auto db = grid::param(to_device(l, hbh));
      index_t a = l.launches();
      auto const ds = grid::eval(l, gx::scan(dh0.view(), dxw.view(), body(dp, db)));
      fwd[steps == 8] = l.launches() - a;
      CHECK(max_rel(ds.download(), hs) <= 1e-5);
      a = l.launches();
      float const dv = grid::backward(l, gx::sum(gx::square(gx::scan(dh0.view(), dxw.view(), body(dp, db)))));
      bwd[steps == 8] = l.launches() - a;
      CHECK(std::abs(dv - hv) <= 1e-5 * (1 + std::abs(hv)));
      CHECK(max_rel(dp.grad().download(), hg) <= 1e-5);
      CHECK(max_rel(db.grad().download(), hgb) <= 1e-5);
      auto dq = grid::param(to_device(l, hwh));
      auto dc = grid::param(to_device(l, hbh));
      a = l.launches();
      float const dr =
          grid::backward(l, gx::sum(gx::square(gx::scan(dh0.view(), dxw.view(), body(dq, dc), gx::recompute_steps))));
      rec[steps == 8] = l.launches() - a;
      CHECK(std::abs(dr - hv) <= 1e-5 * (1 + std::abs(hv)));
      CHECK(max_rel(dq.grad().download(), hg) <= 1e-5);
      CHECK(max_rel(dc.grad().download(), hgb) <= 1e-5);
    }
    CHECK(l.live_allocations() == 0);
  }
  MESSAGE("gru_projected launches per step: forward ", (fwd[1] - fwd[0]) / 4, ", backward (forward + sweep) ",
          (bwd[1] - bwd[0]) / 4, ", backward with gx::recompute_steps ", (rec[1] - rec[0]) / 4);
  CHECK((fwd[1] - fwd[0]) % 4 == 0);
  CHECK((bwd[1] - bwd[0]) % 4 == 0);
  CHECK((rec[1] - rec[0]) % 4 == 0);
  // forward: the product, then one kernel (the let read where it is used; in a backward
  // call its buffer and the carry written by one launch, with_saved_together)
  CHECK((fwd[1] - fwd[0]) / 4 == 2);
  // a backward call: those two, then the sweep's elementwise adjoint in one launch (its
  // parameters take more than 4 KiB: kernel_param_bytes) and the gemm of h's adjoint; bh's
  // gradient (the batch's sum of the let's adjoint) is taken over every step in one launch
  // when the sweep ends, as Wh's is (exec/sweep.hpp, defer_row_sum; 3 a step before)
  CHECK((bwd[1] - bwd[0]) / 4 == 2 + 2);
  // recompute_steps: the forward (2), the step again (2), the three, Wh's gradient (1)
  CHECK((rec[1] - rec[0]) / 4 == 2 + 2 + 3 + 1);
}

TEST_CASE("device models: the cells that concatenate the input and the carry (elman, lstm, gru): values, gradients and launches per step") {
  // [x, h] W taken apart when the scan is built (api/scan_hoist.hpp): x W_x of every step is
  // one product before the loop (the scan's input), a step keeps h W_h; the gradients of W
  // (both halves), b, the inputs (a parameter) and the initial carry against the host's
  index_t const D = 3, H = 4, B = 2;
  auto const hW = gx::randn<T>(gx::dims(D + H, 4 * H), 4, 0.0, 0.4);
  auto const hb = gx::randn<T>(gx::dims(4 * H), 5, 0.0, 0.2);
  auto const hWn = gx::randn<T>(gx::dims(D + H, H), 6, 0.0, 0.4);
  auto const hbn = gx::randn<T>(gx::dims(H), 7, 0.0, 0.2);
  // each cell: its name, its carry's width, and the body over the weights given
  auto run = [&](char const* name, index_t cw, index_t wcols, auto body, index_t want_fwd, index_t want_bwd, index_t want_rec) {
    INFO(name);
    auto const hc0 = gx::randn<T>(gx::dims(B, cw), 2, 0.0, 0.5);
    auto const hw = gx::eval(gx::slice<1>(hW, 0, wcols));
    auto const hbb = gx::eval(gx::slice<0>(hb, 0, wcols));
    index_t fwd[2] = {0, 0}, bwd[2] = {0, 0}, rec[2] = {0, 0};
    for (index_t steps : {4, 8}) {
      INFO("steps " << steps);
      auto const hxs = gx::randn<T>(gx::dims(steps, B, D), 1, 0.0, 0.5);
      auto pw = gx::param(hw);
      auto pb = gx::param(hbb);
      auto pn = gx::param(hWn);
      auto pbn = gx::param(hbn);
      auto px = gx::param(hxs);
      auto pc = gx::param(hc0);
      auto const hs = gx::eval(gx::scan(hc0, hxs, body(pw, pb, pn, pbn)));
      T const hv = gx::backward(gx::sum(gx::square(gx::scan(pc, px, body(pw, pb, pn, pbn)))));
      launcher l;
      {
        auto dxs = to_device(l, hxs);
        auto dc0 = to_device(l, hc0);
        auto dw = grid::param(to_device(l, hw));
        auto db = grid::param(to_device(l, hbb));
        auto dn = grid::param(to_device(l, hWn));
        auto dbn = grid::param(to_device(l, hbn));
        auto dx = grid::param(to_device(l, hxs));
        auto dc = grid::param(to_device(l, hc0));
        index_t a = l.launches();
        auto const ds = grid::eval(l, gx::scan(dc0.view(), dxs.view(), body(dw, db, dn, dbn)));
        fwd[steps == 8] = l.launches() - a;
        CHECK(max_rel(ds.download(), hs) <= 1e-12);
        a = l.launches();
        T const dv = grid::backward(l, gx::sum(gx::square(gx::scan(dc, dx, body(dw, db, dn, dbn)))));
        bwd[steps == 8] = l.launches() - a;
        CHECK(std::abs(dv - hv) <= 1e-12 * (1 + std::abs(hv)));
        CHECK(max_rel(dw.grad().download(), pw.grad().to_dense()) <= 1e-12);
        CHECK(max_rel(db.grad().download(), pb.grad().to_dense()) <= 1e-12);
        CHECK(max_rel(dx.grad().download(), px.grad().to_dense()) <= 1e-12);
        CHECK(max_rel(dc.grad().download(), pc.grad().to_dense()) <= 1e-12);
        auto dw2 = grid::param(to_device(l, hw));
        auto db2 = grid::param(to_device(l, hbb));
        a = l.launches();
        T const dr = grid::backward(
            l, gx::sum(gx::square(gx::scan(dc0.view(), dxs.view(), body(dw2, db2, dn, dbn), gx::recompute_steps))));
        rec[steps == 8] = l.launches() - a;
        CHECK(std::abs(dr - hv) <= 1e-12 * (1 + std::abs(hv)));
        CHECK(max_rel(dw2.grad().download(), pw.grad().to_dense()) <= 1e-12);
        CHECK(max_rel(db2.grad().download(), pb.grad().to_dense()) <= 1e-12);
      }
      CHECK(l.live_allocations() == 0);
    }
    MESSAGE(std::string(name), " launches per step: forward ", (fwd[1] - fwd[0]) / 4, ", backward (forward + sweep) ",
            (bwd[1] - bwd[0]) / 4, ", backward with gx::recompute_steps ", (rec[1] - rec[0]) / 4);
    CHECK((fwd[1] - fwd[0]) % 4 == 0);
    CHECK((bwd[1] - bwd[0]) % 4 == 0);
    CHECK((rec[1] - rec[0]) % 4 == 0);
    CHECK((fwd[1] - fwd[0]) / 4 == want_fwd);
    CHECK((bwd[1] - bwd[0]) / 4 == want_bwd);
    CHECK((rec[1] - rec[0]) / 4 == want_rec);
  };
  // Elman and LSTM as their projected forms: forward the carry's product and one launch;
  // the sweep's step its elementwise adjoint (the input's adjoint a member of the same
  // launch, exec/fusion.hpp partly_pointwise_let, or added over every step when the sweep
  // ends, exec/elements.hpp defer_add) and the carry's gemm; W_h's gradient (a block of W's
  // rows) and b's over every step at once; recompute_steps adds the step again and W_h's
  // gradient per step (were 3 / 4 and 3 / 3 before the split, counted by a program not in
  // the tree)
  run("elman", H, H, [](auto& w, auto& b, auto&, auto&) { return [&w, &b](auto h, auto x) { return gx::cells::elman(x, h, w, b); }; },
      2, 2 + 2, 8);
  // Elman with two weights, tanh(x Wx + h Wh + b): x Wx out of the loop whole
  run("elman, x Wx + h Wh", H, H, [&](auto& w, auto& b, auto&, auto&) {
    auto const wx = gx::index(w, gx::range(0, D), gx::all);  // W's first D rows, then its last H
    auto const wh = gx::index(w, gx::range(D, D + H), gx::all);
    return [wx, wh, &b](auto h, auto x) { return gx::tanh(gx::matmul(x, wx) + gx::matmul(h, wh) + b); };
  }, 2, 2 + 2, 8);
  run("lstm", 2 * H, 4 * H, [](auto& w, auto& b, auto&, auto&) { return [&w, &b](auto hc, auto x) { return gx::cells::lstm(x, hc, w, b); }; },
      2, 2 + 2, 9);
  // PyTorch's GRU from the step's raw input, gru_projected(x Wx + bx, h, Wh, bh) in the body:
  // x Wx out of the loop whole, then as gru_projected; its sweep's elementwise adjoint is 13
  // uses (the input's and the bias's through the gates' slices besides the let's), one
  // launch since a fused launch takes up to 16 (backend/grid/plain_plan.hpp fuse_uses_max;
  // 8 before: 14 launches a step in the sweep)
  run("gru_projected(x Wx + b, h, Wh, b)", H, 3 * H, [&](auto& w, auto& b, auto&, auto&) {
    auto const wx = gx::index(w, gx::range(0, D), gx::all);
    auto const wh = gx::index(w, gx::range(D, D + H), gx::all);
    return [wx, wh, &b](auto h, auto x) { return gx::cells::gru_projected(gx::matmul(x, wx) + b, h, wh, b); };
  }, 2, 2 + 2, 8);
  // Cho's GRU applies its reset gate before its second product: the product of r h waits for
  // the first product's gates, so a step is two products with elementwise launches between
  // (gru_projected, PyTorch's form, is the GRU of two launches a step); 5 / 10 before
  run("gru", H, 2 * H, [](auto& w, auto& b, auto& wn, auto& bn) {
    return [&w, &b, &wn, &bn](auto h, auto x) { return gx::cells::gru(x, h, w, b, wn, bn); };
  }, 4, 4 + 10, 19);
}

TEST_CASE("device models: an LSTM scan's sweep in every launch configuration and both scatter modes") {
  // the c2 let of gx::cells::lstm_projected is pointwise: its body's uses and its operand's
  // run as members of one launch on the same blocks (exec/fusion.hpp pointwise_let,
  // grid::executor::run_pointwise_let), each thread writing c2's adjoint at its elements and
  // then reading it there; in deterministic mode the gates' adjoint, which members of both
  // plans add into, keeps the plans apart. Double precision, against the host; with few
  // threads and few blocks (a grid-stride walk), and blocks and threads in shuffled orders
  index_t const H = 6, B = 5, steps = 7;
  auto const hwh = gx::randn<T>(gx::dims(H, 4 * H), 4, 0.0, 0.4);
  auto const hc0 = gx::randn<T>(gx::dims(B, 2 * H), 2, 0.0, 0.5);
  auto const hxw = gx::randn<T>(gx::dims(steps, B, 4 * H), 1, 0.0, 0.6);
  auto body = [](auto& wh) { return [&wh](auto hc, auto xt) { return gx::cells::lstm_projected(xt, hc, wh); }; };
  auto hp = gx::param(hwh);
  T const hv = gx::backward(gx::sum(gx::square(gx::scan(hc0, hxw, body(hp)))));
  auto const hg = hp.grad().to_dense();
  for (config c : configs) {
    index_t launches[2] = {0, 0};
    for (auto sm : {mode::atomic, mode::deterministic}) {
      INFO("threads " << c.threads << ", max_blocks " << c.max_blocks << ", shuffled " << c.shuffle << ", "
                      << (sm == mode::atomic ? "atomic" : "deterministic"));
      launcher l = make_launcher(c);
      {
        auto dxw = to_device(l, hxw);
        auto dc0 = to_device(l, hc0);
        auto dp = grid::param(to_device(l, hwh));
        grid::backward_options const o{sm, {c.threads, c.max_blocks}};
        index_t const a = l.launches();
        T const dv = grid::backward(l, gx::sum(gx::square(gx::scan(dc0.view(), dxw.view(), body(dp)))), o);
        launches[sm == mode::deterministic] = l.launches() - a;
        CHECK(std::abs(dv - hv) <= 1e-12 * (1 + std::abs(hv)));
        CHECK(max_rel(dp.grad().download(), hg) <= 1e-12);
      }
      CHECK(l.live_allocations() == 0);
    }
    // deterministic: the c2 let's body is two launches (its two adds into c2's adjoint apart)
    // and its operand three (the gates' i, f, g slices each in a launch of their own, the
    // carry's c beside the last), where atomic mode takes one for both: 4 more per step
    CHECK(launches[1] - launches[0] == 4 * steps);
  }
}

TEST_CASE("device models: a GRU scan (gru_projected) in every launch configuration and both scatter modes, its bias summed over the steps") {
  // the one launch writing a kept step's let and carry (with_saved_together), the
  // elementwise adjoint's launch (parameters over 4 KiB) and bh's gradient taken over every
  // step when the sweep ends (defer_row_sum, ordered_block_sum_kernel: one thread per column, rows in
  // order); double precision against the host, with few threads and few blocks, and blocks
  // and threads in shuffled orders; the deterministic bits the same in every configuration
  index_t const H = 6, B = 5, steps = 7;
  auto const hwh = gx::randn<T>(gx::dims(H, 3 * H), 4, 0.0, 0.4);
  auto const hbh = gx::randn<T>(gx::dims(3 * H), 6, 0.0, 0.3);
  auto const hh0 = gx::randn<T>(gx::dims(B, H), 2, 0.0, 0.5);
  auto const hxw = gx::randn<T>(gx::dims(steps, B, 3 * H), 1, 0.0, 0.6);
  auto body = [](auto& wh, auto& bh) { return [&wh, &bh](auto h, auto xt) { return gx::cells::gru_projected(xt, h, wh, bh); }; };
  auto hp = gx::param(hwh);
  auto hb = gx::param(hbh);
  T const hv = gx::backward(gx::sum(gx::square(gx::scan(hh0, hxw, body(hp, hb)))));
  auto const hg = hp.grad().to_dense();
  auto const hgb = hb.grad().to_dense();
  std::vector<T> first;  // bh's gradient in deterministic mode, first configuration
  for (config c : configs) {
    for (auto sm : {mode::atomic, mode::deterministic}) {
      INFO("threads " << c.threads << ", max_blocks " << c.max_blocks << ", shuffled " << c.shuffle << ", "
                      << (sm == mode::atomic ? "atomic" : "deterministic"));
      launcher l = make_launcher(c);
      {
        auto dxw = to_device(l, hxw);
        auto dh0 = to_device(l, hh0);
        auto dp = grid::param(to_device(l, hwh));
        auto db = grid::param(to_device(l, hbh));
        grid::backward_options const o{sm, {c.threads, c.max_blocks}};
        T const dv = grid::backward(l, gx::sum(gx::square(gx::scan(dh0.view(), dxw.view(), body(dp, db)))), o);
        CHECK(std::abs(dv - hv) <= 1e-12 * (1 + std::abs(hv)));
        CHECK(max_rel(dp.grad().download(), hg) <= 1e-12);
        auto const gb = db.grad().download();
        CHECK(max_rel(gb, hgb) <= 1e-12);
        if (sm == mode::deterministic) {
          std::vector<T> bits(gb.data(), gb.data() + gb.size());
          if (first.empty()) first = bits;
          else CHECK(bits == first);
        }
      }
      CHECK(l.live_allocations() == 0);
    }
  }
}

TEST_CASE("device models: a GRU cell's scan, forward, backward and with gx::recompute_steps (its let read where it is used)") {
  // gx::cells::gru reads its gates' let three times, one of them inside the concat a product
  // reads: the device's unkept steps recompute it there; values and gradients as the host's
  auto const hx = gx::randn<float>(gx::dims(6, 3, 4), 1, 0.0, 0.5);
  auto const hh0 = gx::randn<float>(gx::dims(3, 5), 2, 0.0, 0.5);
  auto const hwg = gx::randn<float>(gx::dims(9, 10), 3, 0.0, 0.3);
  auto const hwn = gx::randn<float>(gx::dims(9, 5), 4, 0.0, 0.3);
  auto const hbg = gx::randn<float>(gx::dims(10), 5, 0.0, 0.1);
  auto const hbn = gx::randn<float>(gx::dims(5), 6, 0.0, 0.1);
  auto body = [](auto& wg, auto& wn, auto const& bg, auto const& bn) {
    return [&](auto h, auto xt) { return gx::cells::gru(xt, h, wg, bg, wn, bn); };
  };
  auto pg = gx::param(hwg);
  auto pn = gx::param(hwn);
  auto const hs = gx::eval(gx::scan(hh0, hx, body(pg, pn, hbg, hbn)));
  float const hv = gx::backward(gx::sum(gx::square(gx::scan(hh0, hx, body(pg, pn, hbg, hbn)))));
  auto const gg = pg.grad().to_dense();
  auto const gn = pn.grad().to_dense();
  launcher l;
  {
    auto dx = to_device(l, hx);
    auto dh0 = to_device(l, hh0);
    auto dbg = to_device(l, hbg);
    auto dbn = to_device(l, hbn);
    auto dg = grid::param(to_device(l, hwg));
    auto dn = grid::param(to_device(l, hwn));
    auto const ds = grid::eval(l, gx::scan(dh0.view(), dx.view(), body(dg, dn, dbg.view(), dbn.view())));
    CHECK(max_rel(ds.download(), hs) <= 1e-5);
    float const dr = grid::backward(
        l, gx::sum(gx::square(gx::scan(dh0.view(), dx.view(), body(dg, dn, dbg.view(), dbn.view()), gx::recompute_steps))));
    CHECK(std::abs(dr - hv) <= 1e-5 * (1 + std::abs(hv)));
    CHECK(max_rel(dg.grad().download(), gg) <= 1e-5);
    CHECK(max_rel(dn.grad().download(), gn) <= 1e-5);
    // every step kept: the let's operand feeds a product (the concat [x, r h] read by the
    // second gemm), so a kept step's one launch (with_saved_together) ends there and the
    // rest runs as before
    auto dg2 = grid::param(to_device(l, hwg));
    auto dn2 = grid::param(to_device(l, hwn));
    float const dk = grid::backward(l, gx::sum(gx::square(gx::scan(dh0.view(), dx.view(), body(dg2, dn2, dbg.view(), dbn.view())))));
    CHECK(std::abs(dk - hv) <= 1e-5 * (1 + std::abs(hv)));
    CHECK(max_rel(dg2.grad().download(), gg) <= 1e-5);
    CHECK(max_rel(dn2.grad().download(), gn) <= 1e-5);
  }
  CHECK(l.live_allocations() == 0);
}

TEST_CASE("device models: softmax rows read by a product") {
  check_model(
      [](auto const& x, auto const&, auto& w1, auto& w2, auto& b) {
        auto h = gx::softmax<1>(gx::matmul(x, w1));  // (6, 7)
        return gx::sum(gx::tanh(gx::matmul(h, w2) + b));
      },
      "softmax");
}

TEST_CASE("device models: layer norm of a product, shared through gx::let") {
  check_model(
      [](auto const& x, auto const&, auto& w1, auto& w2, auto& b) {
        return gx::let(gx::matmul(x, w1), [&](auto const& h) {
          auto n = gx::layer_norm(h);
          return gx::sum(gx::matmul(n * h, w2) * b);
        });
      },
      "layer_norm_let");
}

TEST_CASE("device models: a reduction broadcast back (a staged value) and a product's transpose") {
  check_model(
      [](auto const& x, auto const&, auto& w1, auto& w2, auto& b) {
        auto h = gx::matmul(x, w1);
        auto c = h - gx::mean<1>(h, gx::keep_dims);
        return gx::sum(gx::square(gx::matmul(c, w2))) + gx::sum(gx::matmul(gx::transpose(w2), gx::transpose(c)) *
                                                                gx::unsqueeze<1>(b));
      },
      "staged");
}

TEST_CASE("device models: cross_entropy with device targets, and a bad target reported before anything runs") {
  auto const hx = gx::randn<T>(gx::dims(6, 5), 1, 0.0, 0.7);
  auto const hw = gx::randn<T>(gx::dims(5, 4), 2, 0.0, 0.5);
  auto const ht = index_tensor({0, 3, 1, 1, 2, 3});
  auto pw = gx::param(hw);
  T const hv = gx::backward(gx::cross_entropy(gx::matmul(hx, pw), ht));
  auto const hg = pw.grad().to_dense();
  for (config c : configs) {
    INFO("threads " << c.threads << ", max_blocks " << c.max_blocks << ", shuffled " << c.shuffle);
    launcher l = make_launcher(c);
    auto dx = to_device(l, hx);
    auto dt = to_device(l, ht);
    auto dw = grid::param(to_device(l, hw));
    grid::backward_options const o{mode::atomic, {c.threads, c.max_blocks}};
    T const dv = grid::backward(l, gx::cross_entropy(gx::matmul(dx.view(), dw), dt.view()), o);
    CHECK(std::abs(dv - hv) <= 1e-12 * (1 + std::abs(hv)));
    CHECK(max_rel(dw.grad().download(), hg) <= 1e-12);
    // a target outside [0, 4): the host's message, the gradient unchanged
    auto bad = index_tensor({0, 3, 1, 4, 2, 3});
    auto db = to_device(l, bad);
    auto const before = dw.grad().download();
    std::string const want = error_of([&] { (void)gx::cross_entropy(gx::matmul(hx, pw), bad); });
    std::string const got =
        error_of([&] { grid::backward(l, gx::cross_entropy(gx::matmul(dx.view(), dw), db.view()), o); });
    CHECK(got == want);
    CHECK(want.find("position 4 at [3, 0] is out of range for axis 1 of extent 4") != std::string::npos);
    CHECK(max_rel(dw.grad().download(), before) == 0);
  }
}

TEST_CASE("device models: embedding_bag with device tokens and offsets (a text classifier's step), bad offsets") {
  auto const he = gx::randn<T>(gx::dims(20, 6), 5, 0.0, 0.5);
  auto const hw = gx::randn<T>(gx::dims(6, 3), 6, 0.0, 0.5);
  auto const htok = index_tensor({3, 7, 7, 19, 0, 4, 3, 12, 5});
  auto const hoff = index_tensor({0, 2, 2, 6});  // bag 1 empty
  auto const hy = index_tensor({0, 2, 1, 1});
  for (auto mode : {gx::bag_mode::sum, gx::bag_mode::mean}) {
    auto pe = gx::param(he, gx::sparse_grad<0>);
    auto pw = gx::param(hw);
    T const hv = gx::backward(gx::cross_entropy(gx::matmul(gx::embedding_bag(pe, htok, hoff, mode), pw), hy));
    auto const ge = pe.grad().to_dense();
    auto const gw = pw.grad().to_dense();
    for (config c : configs) {
      INFO("mode " << int(mode) << ", threads " << c.threads << ", max_blocks " << c.max_blocks);
      launcher l = make_launcher(c);
      auto dtok = to_device(l, htok);
      auto doff = to_device(l, hoff);
      auto dy = to_device(l, hy);
      auto de = grid::param(to_device(l, he), gx::sparse_grad<0>);
      auto dw = grid::param(to_device(l, hw));
      for (auto sm : {mode::atomic, mode::deterministic}) {
        de.grad().zero();
        dw.grad().zero();
        grid::backward_options const o{sm, {c.threads, c.max_blocks}};
        T const dv = grid::backward(
            l, gx::cross_entropy(gx::matmul(gx::embedding_bag(de, dtok.view(), doff.view(), mode), dw), dy.view()), o);
        CHECK(std::abs(dv - hv) <= 1e-12 * (1 + std::abs(hv)));
        CHECK(max_rel(de.grad().download(), ge) <= 1e-12);
        CHECK(max_rel(dw.grad().download(), gw) <= 1e-12);
      }
      // offsets that decrease: the host's message (for embedding_bag), nothing written
      auto const bad_off = index_tensor({0, 4, 3, 6});
      auto dbad = to_device(l, bad_off);
      auto const before = dw.grad().download();
      std::string const want = error_of([&] { (void)gx::embedding_bag(pe, htok, bad_off, mode); });
      std::string const got = error_of([&] {
        grid::backward(l, gx::cross_entropy(gx::matmul(gx::embedding_bag(de, dtok.view(), dbad.view(), mode), dw), dy.view()));
      });
      CHECK(got == want);
      CHECK(want == "gradix::embedding_bag: offsets[2] = 3 is below offsets[1] = 4 (offsets must not decrease)");
      CHECK(max_rel(dw.grad().download(), before) == 0);
    }
  }
}

TEST_CASE("device models: the tutorial's model trained end to end (embedding_bag, product, bias, cross_entropy, lazy Adam)") {
  // examples/tutorial.cpp's classifier of bags of tokens (fewer bags, double): a sparse table
  // trained by lazy Adam, a dense layer and a bias by Adam's update, 12 steps on the host and
  // on the device from the same start; losses and parameters after every step, then the
  // accuracy expression (an arg-max compared with the labels) evaluated on the device.
  index_t const V = 40, D = 8, C = 2, N = 60, L = 5;
  auto const draw = gx::uniform<T>(gx::dims(N, L), 11, 0.0, double(V));
  std::vector<std::int32_t> tok(static_cast<std::size_t>(N * L));
  std::vector<std::int32_t> off(static_cast<std::size_t>(N));
  gx::tensor<std::int64_t, gx::shape<gx::dyn>> hy(gx::dims(N));
  for (index_t n = 0; n < N; ++n) {
    int yes = 0;
    for (index_t k = 0; k < L; ++k) {
      auto const t = std::int32_t(draw(n, k));
      tok[std::size_t(n * L + k)] = t;
      yes += t >= V / 2;
    }
    off[std::size_t(n)] = std::int32_t(n * L);
    hy(n) = yes > L / 2 ? 1 : 0;
  }
  auto const htok = index_tensor(tok);
  auto const hoff = index_tensor(off);
  auto const he = gx::randn<T>(gx::dims(V, D), 2, 0.0, 0.1);
  auto const hw = gx::randn<T>(gx::dims(D, C), 3, 0.0, 0.5);
  auto const hb = gx::randn<T>(gx::dims(C), 4, 0.0, 0.1);
  for (config c : {configs[0], configs[2]}) {
    INFO("threads " << c.threads << ", max_blocks " << c.max_blocks << ", shuffled " << c.shuffle);
    launcher l = make_launcher(c);
    {
      auto pe = gx::param(he, gx::sparse_grad<0>);  // the same start for each configuration
      auto pw = gx::param(hw);
      auto pb = gx::param(hb);
      gx::optim::lazy_adam hopt2({.lr = 0.05}, pe, pw, pb);
      auto hlogits = [&] { return gx::matmul(gx::embedding_bag(pe, htok, hoff, gx::bag_mode::mean), pw) + pb; };
      auto dtok = to_device(l, htok);
      auto doff = to_device(l, hoff);
      auto dy = to_device(l, hy);
      auto de = grid::param(to_device(l, he), gx::sparse_grad<0>);
      auto dw = grid::param(to_device(l, hw));
      auto db = grid::param(to_device(l, hb));
      gx::optim::lazy_adam dopt({.lr = 0.05}, de, dw, db);
      auto dlogits = [&] { return gx::matmul(gx::embedding_bag(de, dtok.view(), doff.view(), gx::bag_mode::mean), dw) + db; };
      grid::backward_options const o{mode::atomic, {c.threads, c.max_blocks}};
      T first = 0, last = 0;
      for (int step = 0; step < 12; ++step) {
        INFO("step " << step);
        hopt2.zero_grad();
        T const hv = gx::backward(gx::cross_entropy(hlogits(), hy));
        hopt2.step();
        dopt.zero_grad();
        T const dv = grid::backward(l, gx::cross_entropy(dlogits(), dy.view()), o);
        dopt.step();
        CHECK(std::abs(dv - hv) <= 1e-10 * (1 + std::abs(hv)));
        CHECK(max_rel(de.value().download(), pe.value()) <= 1e-10);
        CHECK(max_rel(dw.value().download(), pw.value()) <= 1e-10);
        CHECK(max_rel(db.value().download(), pb.value()) <= 1e-10);
        if (step == 0) first = hv;
        last = hv;
      }
      CHECK(last < first);  // it trains
      T const hacc = gx::value(gx::mean(gx::cast<T>(gx::argmax<1>(hlogits()) == hy)));
      T const dacc = grid::value(l, gx::mean(gx::cast<T>(gx::argmax<1>(dlogits()) == dy.view())));
      CHECK(dacc == hacc);
      CHECK(hacc > 0.5);
    }
    CHECK(l.live_allocations() == 0);
  }
}
