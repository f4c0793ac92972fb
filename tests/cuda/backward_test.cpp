// The device backward (backend/grid/backward.hpp) through the grid emulator, against the host
// backward of the same expression: values and gradients of every op family the device plan
// runs (elementwise, broadcast, reductions, views, gathers by device indices), dense and
// sparse device storage, atomic and deterministic modes (the latter bit for bit against
// itself over launch shapes and block orders), grad(), and the validation of device indices.
// Suite `emulator`.
#include "cuda/device_test_util.hpp"
#include "cuda/emulator.hpp"

#include <gradix/backend/grid/backward.hpp>
#include <gradix/backend/grid/memory.hpp>
#include <gradix/backend/grid/param.hpp>
#include <gradix/gradix.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace gx = gradix;
namespace grid = gradix::grid;
using namespace gradix_test::dev;

namespace {
// ---------------------------------------------------------------------------------------
// The founding benchmark's shape: a gather by device indices plus a broadcast column at(j).

template <class Spec, mode M>
void check_founding(std::vector<std::int32_t> const& ids, char const* name) {
  using T = double;
  index_t const rows = 6, ea = 40, eb = 25;
  auto const ha = gx::randn<T, gx::col_major>(gx::dims(rows, ea), 11);
  auto const hb = gx::randn<T, gx::col_major>(gx::dims(rows, eb), 12);
  auto const hidx = index_tensor(ids);
  index_t const j = 17;

  auto hp_a = gx::param(ha, Spec{});
  auto hp_b = gx::param(hb, Spec{});
  T const hv = gx::backward(gx::sum(hp_b(gx::all, gx::indices(hidx)) + hp_a(gx::all, gx::at(j))));
  auto const want_b = hp_b.grad().to_dense();
  auto const want_a = hp_a.grad().to_dense();

  std::vector<gx::tensor<T, dyn2, gx::col_major>> first;
  for (config c : configs) {
    launcher l = make_launcher(c);
    {
      auto dp_a = grid::param(to_device(l, ha), Spec{});
      auto dp_b = grid::param(to_device(l, hb), Spec{});
      auto didx = to_device(l, hidx);
      auto e = gx::sum(dp_b(gx::all, grid::indices(didx)) + dp_a(gx::all, gx::at(j)));
      INFO(std::string(name) << ": threads " << c.threads << ", max_blocks " << c.max_blocks << ", shuffled " << c.shuffle);
      T const dv = grid::backward(l, e, {M, {c.threads, c.max_blocks}});
      CHECK(dv == doctest::Approx(hv).epsilon(1e-12));
      auto const got_b = dp_b.grad().download();
      auto const got_a = dp_a.grad().download();
      check_close(want_b, got_b, 1e-12, "gradient of the gathered table");
      check_close(want_a, got_a, 1e-12, "gradient of the at(j) table");
      if constexpr (Spec::sparse) {
        // only the columns read are stored, each once
        std::vector<std::int32_t> distinct = ids;
        std::sort(distinct.begin(), distinct.end());
        distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
        auto const stored = dp_b.grad().ids();
        std::vector<std::int32_t> sorted = stored;
        std::sort(sorted.begin(), sorted.end());
        CHECK(sorted == distinct);
        // at(j): one column, when the expression reads anything
        CHECK(dp_a.grad().ids() == (ids.empty() ? std::vector<std::int32_t>{} : std::vector<std::int32_t>{std::int32_t(j)}));
      }
      if constexpr (M == mode::deterministic) {
        if (first.empty()) first.push_back(got_b);
        else check_bits(first[0], got_b, "deterministic: the same bits for every launch shape and block order");
      }
      // a second backward accumulates (sparse: into the same slots)
      grid::backward_only(l, e, {M, {c.threads, c.max_blocks}});
      auto twice = dp_b.grad().download();
      for (index_t k = 0; k < twice.size(); ++k) REQUIRE(twice.data()[k] == doctest::Approx(2 * want_b.data()[k]).epsilon(1e-12));
      grid::zero_grad(dp_a, dp_b);
      auto cleared = dp_b.grad().download();
      for (index_t k = 0; k < cleared.size(); ++k) REQUIRE(cleared.data()[k] == 0.0);
    }
    CHECK(l.live_allocations() == 0);
  }
}

}  // namespace

TEST_CASE("grid::backward: gather by device indices + at(j), dense and sparse storage, both modes, against the host") {
  std::vector<std::int32_t> repeated;
  for (int i = 0; i < 60; ++i) repeated.push_back((i * 7) % 25);
  std::vector<std::int32_t> const equal(257, 4);
  auto const skew = zipf(300, 25, 5);
  check_founding<gx::sparse_grad_t<1>, mode::atomic>(repeated, "sparse, atomic, repeated");
  check_founding<gx::sparse_grad_t<1>, mode::deterministic>(repeated, "sparse, deterministic, repeated");
  check_founding<gx::dense_grad_t<0>, mode::atomic>(repeated, "dense, atomic, repeated");
  check_founding<gx::dense_grad_t<0>, mode::deterministic>(repeated, "dense, deterministic, repeated");
  check_founding<gx::sparse_grad_t<1>, mode::deterministic>(equal, "sparse, deterministic, all equal");
  check_founding<gx::dense_grad_t<0>, mode::atomic>(equal, "dense, atomic, all equal");
  check_founding<gx::sparse_grad_t<1>, mode::deterministic>(skew, "sparse, deterministic, Zipf-like");
  check_founding<gx::dense_grad_t<0>, mode::deterministic>(skew, "dense, deterministic, Zipf-like");
  check_founding<gx::sparse_grad_t<1>, mode::atomic>({}, "sparse, no indices");
}

namespace {
/// backward of loss(p, x) on the host and on the device (dense storage, both modes, every
/// launch configuration): the same value and gradient.
template <class Loss, class HW, class HX>
void check_dense(Loss loss, HW const& hw, HX const& hx, char const* name, double tol = 1e-12) {
  auto hp = gx::param(hw);
  double const hv = double(gx::backward(loss(hp, hx)));
  auto const want = hp.grad().to_dense();
  for (mode m : {mode::atomic, mode::deterministic})
    for (config c : configs) {
      launcher l = make_launcher(c);
      {
        auto dp = grid::param(to_device(l, hw));
        auto dx = to_device(l, hx);
        auto const xv = dx.cview();
        INFO(std::string(name) << (m == mode::atomic ? ", atomic" : ", deterministic") << ": threads " << c.threads << ", max_blocks "
                  << c.max_blocks);
        double const dv = double(grid::backward(l, loss(dp, xv), {m, {c.threads, c.max_blocks}}));
        CHECK(dv == doctest::Approx(hv).epsilon(tol));
        check_close(want, dp.grad().download(), tol, name);
      }
      CHECK(l.live_allocations() == 0);
    }
}
}  // namespace

TEST_CASE("grid::backward: elementwise, broadcast, reductions and views, against the host") {
  using T = double;
  auto const w = gx::randn<T>(gx::dims(5, 7), 21);
  auto const x = gx::randn<T>(gx::dims(5, 7), 22);
  auto const xt = gx::randn<T>(gx::dims(7, 5), 23);
  auto const row = gx::randn<T>(gx::dims(gx::fix<1>, 7), 24);
  auto const xr = gx::randn<T>(gx::dims(9, 7), 25);
  check_dense([](auto& p, auto const& v) { return gx::sum(gx::tanh(p) * v); }, w, x, "sum(tanh(w) * x)");
  check_dense([](auto& p, auto const& v) { return gx::sum(gx::square(p * v - 0.5)); }, w, x, "sum(square(w * x - 0.5))");
  check_dense([](auto& p, auto const& v) { return gx::mean(gx::exp(p) + p * v); }, w, x, "mean(exp(w) + w * x): two uses");
  check_dense([](auto& p, auto const& v) { return gx::sum(gx::transpose(p) * v); }, w, xt, "sum(transpose(w) * x)");
  check_dense([](auto& p, auto const& v) { return gx::sum(gx::square(p(gx::range(1, 4), gx::all) * v(gx::range(0, 3), gx::all))); },
              w, x, "slices: sum(square(w[1:4] * x[0:3]))");
  check_dense([](auto& p, auto const& v) { return gx::sum(p(2, gx::all) * v(0, gx::all)); }, w, x, "select: sum(w[2] * x[0])");
  check_dense([](auto& p, auto const& v) { return gx::sum(gx::square(v + p)); }, row, xr,
              "a broadcast row: sum(square(x + b)), b [1, 7] (the batch axis projected)");
  check_dense([](auto& p, auto const&) { return gx::sum(p) * 3.0; }, w, x, "sum(w) * 3: extent x v");
  check_dense([](auto& p, auto const& v) { return gx::sum(gx::sum<0>(p * v) * gx::sum<1>(gx::transpose(p))); }, w, x,
              "sum(sum<0>(w * x) * sum<1>(transpose(w))): reductions inside");
  check_dense([](auto& p, auto const& v) { return gx::sum(gx::reshape(p, gx::dims(7, 5)) * gx::transpose(v)); }, w, x,
              "sum(reshape(w, [7, 5]) * transpose(x))");
}

TEST_CASE("grid::backward: a gather along axis 0 of a row-major table, and a gather read twice") {
  using T = double;
  auto const ht = gx::randn<T>(gx::dims(30, 4), 31);
  auto const ids = zipf(120, 30, 8);
  auto const hidx = index_tensor(ids);
  auto const hw = gx::randn<T>(gx::dims(120, 4), 32);
  auto hp = gx::param(ht, gx::sparse_grad<0>);
  auto loss_h = gx::sum(gx::square(hp(gx::indices(hidx), gx::all)) * hw + hp(gx::indices(hidx), gx::all));
  double const hv = gx::backward(loss_h);
  auto const want = hp.grad().to_dense();
  std::vector<gx::tensor<T, dyn2>> first;
  for (mode m : {mode::atomic, mode::deterministic})
    for (config c : configs) {
      launcher l = make_launcher(c);
      {
        auto dp = grid::param(to_device(l, ht), gx::sparse_grad<0>);
        auto didx = to_device(l, hidx);
        auto dw = to_device(l, hw);
        auto const wv = dw.cview();
        auto e = gx::sum(gx::square(dp(grid::indices(didx), gx::all)) * wv + dp(grid::indices(didx), gx::all));
        double const dv = grid::backward(l, e, {m, {c.threads, c.max_blocks}});
        CHECK(dv == doctest::Approx(hv).epsilon(1e-12));
        auto const got = dp.grad().download();
        check_close(want, got, 1e-12, "embedding rows");
        if (m == mode::deterministic) {
          if (first.empty()) first.push_back(got);
          else check_bits(first[0], got, "deterministic rows");
        }
      }
      CHECK(l.live_allocations() == 0);
    }
}

TEST_CASE("grid::backward: an out-of-range device index is an error before anything is written") {
  using T = float;
  launcher l;
  auto dp = grid::param(to_device(l, gx::randn<T>(gx::dims(3, 5), 41)), gx::sparse_grad<1>);
  auto dq = grid::param(to_device(l, gx::randn<T>(gx::dims(3, 5), 42)));
  auto bad = to_device(l, index_tensor({0, 4, 5, 1}));
  auto neg = to_device(l, index_tensor({2, -1}));
  for (mode m : {mode::atomic, mode::deterministic}) {
    std::string msg = error_of([&] {
      grid::backward(l, gx::sum(dq * 2.0f) + gx::sum(dp(gx::all, grid::indices(bad))), {m, {}});
    });
    CHECK(msg == "gradix::gather: index 5 (position 2) is out of range for axis 1 of extent 5");
    msg = error_of([&] { grid::backward_only(l, gx::sum(dp(gx::all, grid::indices(neg))), {m, {}}); });
    CHECK(msg == "gradix::gather: index -1 (position 1) is out of range for axis 1 of extent 5");
  }
  // the host's message for the same index
  auto hp = gx::param(gx::randn<T>(gx::dims(3, 5), 41), gx::sparse_grad<1>);
  auto const hbad = index_tensor({0, 4, 5, 1});
  CHECK(error_of([&] { gx::backward(gx::sum(hp(gx::all, gx::indices(hbad)))); }) ==
        "gradix::gather: index 5 (position 2) is out of range for axis 1 of extent 5");
  // nothing written: the dense gradient is zero, the sparse one stores nothing
  CHECK(dp.grad().size() == 0);
  auto const g = dq.grad().download();
  for (index_t k = 0; k < g.size(); ++k) REQUIRE(g.data()[k] == 0.0f);
}

TEST_CASE("grid::grad: new device storage, the parameters' own gradients untouched") {
  using T = double;
  launcher l;
  auto const ha = gx::randn<T>(gx::dims(4, 6), 51);
  auto const hb = gx::randn<T, gx::col_major>(gx::dims(4, 9), 52);
  auto const ids = std::vector<std::int32_t>{3, 3, 8, 0, 3};
  auto const hidx = index_tensor(ids);
  auto hpa = gx::param(ha);
  auto hpb = gx::param(hb, gx::sparse_grad<1>);
  auto [wa, wb] = gx::grad(gx::sum(gx::tanh(hpa(gx::all, gx::range(0, 5)) * hpb(gx::all, gx::indices(hidx)))), hpa, hpb);
  auto dpa = grid::param(to_device(l, ha));
  auto dpb = grid::param(to_device(l, hb), gx::sparse_grad<1>);
  auto didx = to_device(l, hidx);
  auto e = gx::sum(gx::tanh(dpa(gx::all, gx::range(0, 5)) * dpb(gx::all, grid::indices(didx))));
  auto [ga, gb] = grid::grad(l, e, dpa, dpb);
  check_close(wa.to_dense(), ga.download(), 1e-12, "grad of the sliced parameter");
  check_close(wb.to_dense(), gb.download(), 1e-12, "grad of the gathered parameter");
  CHECK(gb.size() == 3);
  CHECK(dpb.grad().size() == 0);
  auto const own = dpa.grad().download();
  for (index_t k = 0; k < own.size(); ++k) REQUIRE(own.data()[k] == 0.0);
  auto gb_only = grid::grad(l, e, dpb);
  check_close(wb.to_dense(), gb_only.download(), 1e-12, "grad of one parameter");
  CHECK(error_of([&] { (void)grid::grad(l, e, dpa, dpa); }) ==
        "gradix::grid::grad: parameter 0 and parameter 1 are the same parameter; give each parameter once");
}

namespace {
/// The distinct values of v in order of first appearance.
std::vector<std::int32_t> first_touch(std::vector<std::int32_t> const& v) {
  std::vector<std::int32_t> r;
  for (std::int32_t x : v)
    if (std::find(r.begin(), r.end(), x) == r.end()) r.push_back(x);
  return r;
}
}  // namespace

TEST_CASE("grid::backward: sparse slots in first-touch order over many calls, the storage growing only with what is stored") {
  using T = double;
  // an extent far above what the calls touch, so that a storage that grew with the bound
  // alone (30 calls x 100 indices) would fail the capacity check
  index_t const rows = 3, cols = 100000, per_call = 100;
  auto const ht = gx::randn<T, gx::col_major>(gx::dims(rows, cols), 61);
  for (config c : configs) {  // 32 threads: several points per thread in the reservation
    auto hp = gx::param(ht, gx::sparse_grad<1>);
    launcher l = make_launcher(c);
    {
      auto dp = grid::param(to_device(l, ht), gx::sparse_grad<1>);
      std::vector<std::int32_t> all_ids;
      for (int call = 0; call < 30; ++call) {
        // calls 0-5 touch new columns, 6-29 the same ones again (a bound that only grew would
        // reach 3000 slices)
        auto ids = zipf(per_call, call < 6 ? 150 * (call + 1) : 150, std::uint64_t(70 + call));
        for (auto& x : ids) x = std::int32_t((x * 7 + (call < 6 ? call : 0)) % cols);
        all_ids.insert(all_ids.end(), ids.begin(), ids.end());
        auto const hidx = index_tensor(ids);
        gx::backward(gx::sum(gx::square(hp(gx::all, gx::indices(hidx)))));
        auto const didx = to_device(l, hidx);
        grid::backward(l, gx::sum(gx::square(dp(gx::all, grid::indices(didx)))), {mode::atomic, {c.threads, c.max_blocks}});
        auto const stored = dp.grad().ids();
        INFO("threads " << c.threads << ", call " << call);
        REQUIRE(stored == first_touch(all_ids));
        // the capacity follows the stored count and a call's index count, never the extent
        CHECK(dp.grad().capacity() <= 2 * index_t(stored.size()) + 8 * per_call + 16);
      }
      check_close(hp.grad().to_dense(), dp.grad().download(), 1e-12, "accumulated over 30 calls");
      // the host's sparse storage is in first-touch order too
      std::vector<std::int32_t> host_ids;
      for (index_t k = 0; k < hp.grad().size(); ++k) host_ids.push_back(std::int32_t(hp.grad().id(k)));
      CHECK(host_ids == dp.grad().ids());
    }
    CHECK(l.live_allocations() == 0);
  }
}

namespace {
template <class X>
concept indexable = requires(X&& x) { grid::indices(static_cast<X&&>(x)); };
using dev_idx = grid::device_indices<std::int32_t, launcher>;
static_assert(indexable<dev_idx const&>);
static_assert(!indexable<dev_idx>, "grid::indices of a temporary device_indices must not compile (the expression would dangle)");
}  // namespace

TEST_CASE("grid::device_indices: bounds known on the host, so no validation kernel; out of range still names the position") {
  using T = float;
  launcher l;
  auto const ht = gx::randn<T, gx::col_major>(gx::dims(4, 9), 81);
  auto dp = grid::param(to_device(l, ht), gx::sparse_grad<1>);
  std::vector<std::int32_t> const ids{3, 8, 0, 3, 5};
  auto const hidx = index_tensor(ids);
  auto const checked = to_device(l, hidx);                                      // a device tensor: validated by a kernel
  auto const known = grid::device_indices<std::int32_t, launcher>::from_host(l, ids);  // bounds recorded at upload
  CHECK(known.min() == 0);
  CHECK(known.max() == 8);
  index_t const l0 = l.launches();
  grid::backward_only(l, gx::sum(dp(gx::all, grid::indices(checked))));
  index_t const with_kernel = l.launches() - l0;
  index_t const l1 = l.launches();
  grid::backward_only(l, gx::sum(dp(gx::all, grid::indices(known))));
  index_t const without = l.launches() - l1;
  CHECK(with_kernel == without + 1);
  // both gave the same gradient
  auto hp = gx::param(ht, gx::sparse_grad<1>);
  gx::backward(gx::sum(hp(gx::all, gx::indices(hidx))));
  gx::backward(gx::sum(hp(gx::all, gx::indices(hidx))));
  check_close(hp.grad().to_dense(), dp.grad().download(), 1e-6, "gradient through device_indices");

  // out of range (and negative): the validation kernel runs and the host's message comes back;
  // nothing is written
  grid::zero_grad(dp);
  auto const bad = grid::device_indices<std::int32_t, launcher>::from_host(l, std::vector<std::int32_t>{1, 2, 9, 4});
  CHECK(error_of([&] { grid::backward_only(l, gx::sum(dp(gx::all, grid::indices(bad)))); }) ==
        "gradix::gather: index 9 (position 2) is out of range for axis 1 of extent 9");
  auto neg = grid::device_indices<std::int32_t, launcher>::from_host(l, std::vector<std::int32_t>{1, -3});
  CHECK(error_of([&] { grid::backward_only(l, gx::sum(dp(gx::all, grid::indices(neg)))); }) ==
        "gradix::gather: index -3 (position 1) is out of range for axis 1 of extent 9");
  CHECK(dp.grad().size() == 0);
  // upload replaces the values and their bounds; a wrong count is an error
  neg.upload(std::vector<std::int32_t>{7, 2}.data(), 2);
  CHECK(neg.min() == 2);
  grid::backward_only(l, gx::sum(dp(gx::all, grid::indices(neg))));
  CHECK(dp.grad().ids() == std::vector<std::int32_t>{7, 2});
  CHECK(error_of([&] { neg.upload(ids.data(), 5); }) == "gradix::grid::device_indices::upload: 5 values for a vector of 2");

  // an expression built once sees later uploads: bounds are read when it runs
  grid::zero_grad(dp);
  auto reused = grid::device_indices<std::int32_t, launcher>::from_host(l, std::vector<std::int32_t>{1, 2});
  auto e = gx::sum(dp(gx::all, grid::indices(reused)));
  grid::backward_only(l, e);
  reused.upload(std::vector<std::int32_t>{4, 9}.data(), 2);
  CHECK(error_of([&] { grid::backward_only(l, e); }) ==
        "gradix::gather: index 9 (position 1) is out of range for axis 1 of extent 9");
  CHECK(dp.grad().ids() == std::vector<std::int32_t>{1, 2});
  // a moved-from vector says so
  auto moved = std::move(reused);
  CHECK(error_of([&] { (void)reused.min(); }) ==
        "gradix::grid::device_indices::bounds: the vector was moved from and holds nothing");
}

TEST_CASE("grid::backward: long projected axes that v depends on run one block per outer coordinate (fixed bits)") {
  using T = double;
  // b [1, 7] broadcast over 300 rows: its use sums 300 projected points per element of b
  auto const row = gx::randn<T>(gx::dims(gx::fix<1>, 7), 91);
  auto const xr = gx::randn<T>(gx::dims(300, 7), 92);
  check_dense([](auto& p, auto const& v) { return gx::sum(gx::square(v + p)); }, row, xr,
              "a broadcast row over 300 rows: sum(square(x + b))");
  // the founding shape with the squared loss: at(j)'s column sums 300 gathered columns
  auto const ha = gx::randn<T, gx::col_major>(gx::dims(6, 40), 93);
  auto const hb = gx::randn<T, gx::col_major>(gx::dims(6, 50), 94);
  auto const ids = zipf(300, 50, 9);
  auto const hidx = index_tensor(ids);
  auto hpa = gx::param(ha, gx::sparse_grad<1>);
  auto hpb = gx::param(hb, gx::sparse_grad<1>);
  gx::backward(gx::sum(gx::square(hpb(gx::all, gx::indices(hidx)) + hpa(gx::all, gx::at(11)))));
  std::vector<gx::tensor<T, dyn2, gx::col_major>> first;
  for (config c : configs) {
    launcher l = make_launcher(c);
    {
      auto dpa = grid::param(to_device(l, ha), gx::sparse_grad<1>);
      auto dpb = grid::param(to_device(l, hb), gx::sparse_grad<1>);
      auto didx = to_device(l, hidx);
      grid::backward_only(l, gx::sum(gx::square(dpb(gx::all, grid::indices(didx)) + dpa(gx::all, gx::at(11)))),
                          {mode::deterministic, {c.threads, c.max_blocks}});
      auto const got = dpa.grad().download();
      check_close(hpa.grad().to_dense(), got, 1e-12, "the at(j) column");
      check_close(hpb.grad().to_dense(), dpb.grad().download(), 1e-12, "the gathered columns");
      if (first.empty()) first.push_back(got);
      else check_bits(first[0], got, "the at(j) column: the same bits for every launch shape");
    }
    CHECK(l.live_allocations() == 0);
  }
  // the batched form: a gather by a repeated index vector (a lookup, so segments in the
  // deterministic mode) whose use sums the 300 gathered columns of the other table
  std::vector<std::int32_t> const js{11, 3, 11, 0, 11};
  auto const hj = index_tensor(js);
  auto hqa = gx::param(ha, gx::sparse_grad<1>);
  auto hqb = gx::param(hb, gx::sparse_grad<1>);
  gx::backward(gx::sum(gx::square(gx::unsqueeze<2>(hqb(gx::all, gx::indices(hidx))) +
                                  gx::unsqueeze<1>(hqa(gx::all, gx::indices(hj))))));
  first.clear();
  for (mode m : {mode::deterministic, mode::atomic})
    for (config c : configs) {
      launcher l = make_launcher(c);
      {
        auto dpa = grid::param(to_device(l, ha), gx::sparse_grad<1>);
        auto dpb = grid::param(to_device(l, hb), gx::sparse_grad<1>);
        auto didx = to_device(l, hidx);
        auto djs = to_device(l, hj);
        grid::backward_only(l, gx::sum(gx::square(gx::unsqueeze<2>(dpb(gx::all, grid::indices(didx))) +
                                                  gx::unsqueeze<1>(dpa(gx::all, grid::indices(djs))))),
                            {m, {c.threads, c.max_blocks}});
        auto const got = dpa.grad().download();
        check_close(hqa.grad().to_dense(), got, 1e-12, "batched: the table gathered by the repeated indices");
        check_close(hqb.grad().to_dense(), dpb.grad().download(), 1e-12, "batched: the 300 gathered columns");
        if (m == mode::deterministic) {
          if (first.empty()) first.push_back(got);
          else check_bits(first[0], got, "batched, deterministic: the same bits for every launch shape");
        }
      }
      CHECK(l.live_allocations() == 0);
    }
}

TEST_CASE("grid::backward: the uses of a plan share launches (one for the reservations, one for the updates) while their storages differ") {
  using T = double;
  auto const ha = gx::randn<T, gx::col_major>(gx::dims(5, 40), 101);
  auto const hb = gx::randn<T, gx::col_major>(gx::dims(5, 30), 102);
  std::vector<std::int32_t> const ids{4, 29, 4, 0, 17, 4};
  auto const hidx = index_tensor(ids);
  index_t const j = 23;
  for (config c : configs) {
    launcher l = make_launcher(c);
    INFO("threads " << c.threads << ", max_blocks " << c.max_blocks << ", shuffled " << c.shuffle);
    {
      auto const di = grid::device_indices<std::int32_t, launcher>::from_host(l, ids);  // no validation kernel
      // two tables: one reservation launch (a block each) and one update launch
      auto dpa = grid::param(to_device(l, ha), gx::sparse_grad<1>);
      auto dpb = grid::param(to_device(l, hb), gx::sparse_grad<1>);
      index_t l0 = l.launches();
      grid::backward_only(l, gx::sum(dpb(gx::all, grid::indices(di)) + dpa(gx::all, gx::at(j))),
                          {mode::atomic, {c.threads, c.max_blocks}});
      CHECK(l.launches() - l0 == 2);
      // the squared loss: the at(j) use sums over 6 gathered columns per thread, the gathered
      // use one thread per element; still one launch for both
      l0 = l.launches();
      grid::backward_only(l, gx::sum(gx::square(dpb(gx::all, grid::indices(di)) + dpa(gx::all, gx::at(j)))),
                          {mode::atomic, {c.threads, c.max_blocks}});
      CHECK(l.launches() - l0 == 2);
      auto hpa = gx::param(ha, gx::sparse_grad<1>);
      auto hpb = gx::param(hb, gx::sparse_grad<1>);
      gx::backward(gx::sum(hpb(gx::all, gx::indices(hidx)) + hpa(gx::all, gx::at(j))));
      gx::backward(gx::sum(gx::square(hpb(gx::all, gx::indices(hidx)) + hpa(gx::all, gx::at(j)))));
      check_close(hpa.grad().to_dense(), dpa.grad().download(), 1e-12, "fused: the at(j) table");
      check_close(hpb.grad().to_dense(), dpb.grad().download(), 1e-12, "fused: the gathered table");
      CHECK(hpa.grad().size() == index_t(dpa.grad().ids().size()));

      // each reservation publishes the count where the host reads it without a wait: calls
      // that keep reading the same columns never read it back (without the publication, the
      // bound on the count passes the capacity every few calls, and each time the count is
      // read back); after zero_grad, the bound starts again from zero
      index_t const r0 = l.reads();
      for (int k = 0; k < 40; ++k)
        grid::backward_only(l, gx::sum(dpb(gx::all, grid::indices(di)) + dpa(gx::all, gx::at(j))),
                            {mode::atomic, {c.threads, c.max_blocks}});
      CHECK(l.reads() == r0);
      CHECK(dpb.grad().capacity() < 30);
      grid::zero_grad(dpa, dpb);
      for (int k = 0; k < 3; ++k)
        grid::backward_only(l, gx::sum(dpb(gx::all, grid::indices(di)) + dpa(gx::all, gx::at(j))),
                            {mode::atomic, {c.threads, c.max_blocks}});
      auto hpb3 = gx::param(hb, gx::sparse_grad<1>);
      for (int k = 0; k < 3; ++k) gx::backward(gx::sum(hpb3(gx::all, gx::indices(hidx))));
      check_close(hpb3.grad().to_dense(), dpb.grad().download(), 1e-12, "three calls after zero_grad");

      // deterministic: the gathered table's keys are made and sorted in one block beside the
      // reservations, still two launches; the same bits as the unfused path of a plan of one
      // use (keys, sort and segment sums as launches of their own)
      {
        auto dqa = grid::param(to_device(l, ha), gx::sparse_grad<1>);
        auto dqb = grid::param(to_device(l, hb), gx::sparse_grad<1>);
        auto dsb = grid::param(to_device(l, hb), gx::sparse_grad<1>);
        l0 = l.launches();
        grid::backward_only(l, gx::sum(dqb(gx::all, grid::indices(di)) + dqa(gx::all, gx::at(j))),
                            {mode::deterministic, {c.threads, c.max_blocks}});
        CHECK(l.launches() - l0 == 2);
        // (a device_tensor of the same values: no kept order, so sorted at every call)
        auto const dt = to_device(l, hidx);
        l0 = l.launches();
        grid::backward_only(l, gx::sum(dsb(gx::all, grid::indices(dt))), {mode::deterministic, {c.threads, c.max_blocks}});
        CHECK(l.launches() - l0 == 1 + 1 + 3);  // validation, the reservation, then keys, sort, segments
        check_bits(dsb.grad().download(), dqb.grad().download(), "deterministic: fused sort and unfused sort");
      }

      // one table read twice, at a column the gather also reads (4) or not (7), and a dense
      // table beside it. Atomic mode: still one reservation launch (the table's two uses one
      // after the other in one block, so the at(j) column's new slot follows the gather's, as
      // on the host) and one update launch (the two uses of the table adding atomically).
      // Deterministic mode: two groups, so two launches of each kind, one after the other.
      for (mode m : {mode::atomic, mode::deterministic})
        for (index_t col : {7, 4}) {
          INFO((m == mode::atomic ? "atomic" : "deterministic") << ", at(" << col << ")");
          auto dq = grid::param(to_device(l, hb), gx::sparse_grad<1>);
          auto dd = grid::param(to_device(l, ha));
          l0 = l.launches();
          for (int rep = 0; rep < 2; ++rep)
            grid::backward_only(l, gx::sum(dq(gx::all, grid::indices(di)) + dq(gx::all, gx::at(col)) + dd(gx::all, gx::at(j))),
                                {m, {c.threads, c.max_blocks}});
          CHECK(l.launches() - l0 == (m == mode::atomic ? 2 * 2 : 2 * 4));
          auto hq = gx::param(hb, gx::sparse_grad<1>);
          auto hd = gx::param(ha);
          for (int rep = 0; rep < 2; ++rep)
            gx::backward(gx::sum(hq(gx::all, gx::indices(hidx)) + hq(gx::all, gx::at(col)) + hd(gx::all, gx::at(j))));
          check_close(hq.grad().to_dense(), dq.grad().download(), 1e-12, "a table read twice");
          check_close(hd.grad().to_dense(), dd.grad().download(), 1e-12, "the dense table beside it");
          std::vector<std::int32_t> host_ids;
          for (index_t k = 0; k < hq.grad().size(); ++k) host_ids.push_back(std::int32_t(hq.grad().id(k)));
          CHECK(host_ids == dq.grad().ids());
        }

      // the second use of a table grows its storage (1 position, then 24 new ones), so the
      // first use's reservation, in the same block, must write through the grown storage too
      {
        std::vector<std::int32_t> many;
        for (std::int32_t q = 0; q < 24; ++q) many.push_back((q * 7 + 3) % 30);
        auto const dm = grid::device_indices<std::int32_t, launcher>::from_host(l, many);
        auto const hm = index_tensor(many);
        auto dq = grid::param(to_device(l, hb), gx::sparse_grad<1>);
        grid::backward_only(l, gx::sum(dq(gx::all, gx::at(29)) * 2.0 + dq(gx::all, grid::indices(dm))),
                            {mode::atomic, {c.threads, c.max_blocks}});
        auto hq = gx::param(hb, gx::sparse_grad<1>);
        gx::backward(gx::sum(hq(gx::all, gx::at(29)) * 2.0 + hq(gx::all, gx::indices(hm))));
        check_close(hq.grad().to_dense(), dq.grad().download(), 1e-12, "a table whose second use grows its storage");
        std::vector<std::int32_t> host_ids;
        for (index_t k = 0; k < hq.grad().size(); ++k) host_ids.push_back(std::int32_t(hq.grad().id(k)));
        CHECK(host_ids == dq.grad().ids());
      }
    }
    CHECK(l.live_allocations() == 0);
  }
}

TEST_CASE("grid::backward: deterministic mode takes a device_indices vector's sorted order, kept from one call to the next") {
  // A lookup that reads a whole device_indices vector sorts its values once per upload (in the
  // vector's index_order), not at every call: later calls launch only the reservation and the
  // update. The bits are those of a device_tensor of the same values, sorted at every call.
  using T = double;
  index_t const eb = 60;
  auto const hb = gx::randn<T, gx::col_major>(gx::dims(4, eb), 201);
  auto const ha = gx::randn<T, gx::col_major>(gx::dims(4, 20), 202);
  index_t const j = 11;
  // 6 values fit one sort tile (sorted in the reservation launch); 3000 do not (sorted by
  // launches of their own)
  for (index_t count : {index_t(6), index_t(3000)}) {
    auto const ids = zipf(count, eb, std::uint64_t(300 + count));
    auto ids2 = ids;  // a second upload: other values
    std::reverse(ids2.begin(), ids2.end());
    for (auto& v : ids2) v = std::int32_t((v * 7 + 3) % eb);
    auto const hidx = index_tensor(ids), hidx2 = index_tensor(ids2);
    std::vector<gx::tensor<T, dyn2, gx::col_major>> first;
    for (config c : configs) {
      INFO(count << " values; threads " << c.threads << ", max_blocks " << c.max_blocks << ", shuffled " << c.shuffle);
      launcher l = make_launcher(c);
      {
        grid::backward_options const det{mode::deterministic, {c.threads, c.max_blocks}};
        auto di = grid::device_indices<std::int32_t, launcher>::from_host(l, ids);
        auto const dt = to_device(l, hidx);
        CHECK(di.order_bytes() == 0);
        // an atomic backward keeps nothing
        {
          auto dp = grid::param(to_device(l, hb), gx::sparse_grad<1>);
          grid::backward_only(l, gx::sum(dp(gx::all, grid::indices(di))), {mode::atomic, {c.threads, c.max_blocks}});
          CHECK(di.order_bytes() == 0);
        }
        auto kept = grid::param(to_device(l, hb), gx::sparse_grad<1>);
        auto kept_a = grid::param(to_device(l, ha), gx::sparse_grad<1>);
        auto each = grid::param(to_device(l, hb), gx::sparse_grad<1>);
        auto each_a = grid::param(to_device(l, ha), gx::sparse_grad<1>);
        auto term = [&](auto& p, auto& pa, auto const& idx) { return gx::sum(gx::square(p(gx::all, grid::indices(idx)) + pa(gx::all, gx::at(j)))); };
        index_t l0 = l.launches();
        grid::backward_only(l, term(kept, kept_a, di), det);
        index_t const first_call = l.launches() - l0;
        CHECK(di.order_bytes() >= std::size_t(count) * 16);
        // 3000 values: keys, then 4096 keys sorted in tiles of 2048 (three launches: the tiles, the
        // one step across tiles, the rest in tiles)
        CHECK(first_call == (count <= 2048 ? 2 : 2 + 1 + 3));
        for (int k = 0; k < 3; ++k) {
          l0 = l.launches();
          grid::backward_only(l, term(kept, kept_a, di), det);
          CHECK(l.launches() - l0 == 2);  // the reservation and the update: no sort
        }
        for (int k = 0; k < 4; ++k) grid::backward_only(l, term(each, each_a, dt), det);
        auto const got = kept.grad().download();
        check_bits(each.grad().download(), got, "kept order against a sort at every call");
        check_bits(each_a.grad().download(), kept_a.grad().download(), "the at(j) table beside it");
        if (first.empty()) first.push_back(got);
        else check_bits(first[0], got, "the same bits for every launch shape and block order");
        auto hp = gx::param(hb, gx::sparse_grad<1>);
        auto hpa = gx::param(ha, gx::sparse_grad<1>);
        for (int k = 0; k < 4; ++k) gx::backward(gx::sum(gx::square(hp(gx::all, gx::indices(hidx)) + hpa(gx::all, gx::at(j)))));
        check_close(hp.grad().to_dense(), got, 1e-12, "kept order against the host");

        // a new upload makes the kept order stale: sorted again at the next call
        di.upload(ids2.data(), index_t(ids2.size()));
        auto const dt2 = to_device(l, hidx2);
        grid::zero_grad(kept, kept_a, each, each_a);
        l0 = l.launches();
        grid::backward_only(l, term(kept, kept_a, di), det);
        CHECK(l.launches() - l0 == first_call);
        grid::backward_only(l, term(each, each_a, dt2), det);
        check_bits(each.grad().download(), kept.grad().download(), "after an upload");

        // two tables gathered by the one vector in one plan: sorted once, then kept
        {
          auto p1 = grid::param(to_device(l, hb), gx::sparse_grad<1>);
          auto p2 = grid::param(to_device(l, hb), gx::sparse_grad<1>);
          auto q1 = grid::param(to_device(l, hb), gx::sparse_grad<1>);
          auto q2 = grid::param(to_device(l, hb), gx::sparse_grad<1>);
          auto di3 = grid::device_indices<std::int32_t, launcher>::from_host(l, ids);
          for (int k = 0; k < 2; ++k) {
            l0 = l.launches();
            grid::backward_only(l, gx::sum(p1(gx::all, grid::indices(di3)) * p2(gx::all, grid::indices(di3))), det);
            if (k == 1) CHECK(l.launches() - l0 == 2);
            grid::backward_only(l, gx::sum(q1(gx::all, grid::indices(dt)) * q2(gx::all, grid::indices(dt))), det);
          }
          check_bits(q1.grad().download(), p1.grad().download(), "two tables, one vector: the first");
          check_bits(q2.grad().download(), p2.grad().download(), "two tables, one vector: the second");
        }

        // a slice of the gathered values reads part of the vector, in another order: not the
        // kept order (sorted at every call; the same bits as a device_tensor's)
        {
          auto p = grid::param(to_device(l, hb), gx::sparse_grad<1>);
          auto q = grid::param(to_device(l, hb), gx::sparse_grad<1>);
          for (int k = 0; k < 2; ++k) {
            l0 = l.launches();
            grid::backward_only(l, gx::sum(gx::index(p(gx::all, grid::indices(di)), gx::all, gx::range(1, count - 1, 2))), det);
            CHECK(l.launches() - l0 == 1 + 3);  // reservation, keys, sort (at most 1499 keys: one tile), segments
            grid::backward_only(l, gx::sum(gx::index(q(gx::all, grid::indices(dt2)), gx::all, gx::range(1, count - 1, 2))), det);
          }
          check_bits(q.grad().download(), p.grad().download(), "a slice of the gathered values");
        }

        // another host thread does not use the kept order (its stream may not be the owner's):
        // it sorts at every call, with the same bits
        {
          auto p = grid::param(to_device(l, hb), gx::sparse_grad<1>);
          auto q = grid::param(to_device(l, hb), gx::sparse_grad<1>);
          index_t in_thread = 0;
          std::thread th([&] {
            index_t const t0 = l.launches();
            grid::backward_only(l, gx::sum(p(gx::all, grid::indices(di))), det);
            in_thread = l.launches() - t0;
          });
          th.join();
          CHECK(in_thread == (count <= 2048 ? 1 + 3 : 1 + 1 + 3 + 1));  // reservation, keys, sort (1 or 3), segments
          grid::backward_only(l, gx::sum(q(gx::all, grid::indices(di))), det);
          check_bits(p.grad().download(), q.grad().download(), "another thread");
        }
      }
      CHECK(l.live_allocations() == 0);
    }
  }
}
