// Gradients at sizes that reach the update kernels' SIMD packs, register tiles, collapsed
// projections and parallel paths (the 5 x 3 tests stay below them): the founding benchmark
// pattern (exact counts), projected sums in tiles, reductions, gathers, float against
// double; full central differences where cheap, random directional differences otherwise.
#include "ad/numgrad.hpp"
#include "testing.hpp"

#include <cstdint>
#include <numeric>
#include <vector>

namespace gx = gradix;
using gx::testing::thread_scope;
using gx::dyn;
using gx::shape;

TEST_CASE(
    "founding benchmark: sum(Eb(all, i) + Ea(all, at(j))) gives exact counts, per term and "
    "batched") {
  auto Ea = gx::param(gx::randn<float, gx::col_major>(gx::dims(gx::fix<64>, 20000), 701),
                      gx::sparse_grad<1>);
  auto Eb = gx::param(gx::randn<float, gx::col_major>(gx::dims(gx::fix<64>, 65535), 702),
                      gx::sparse_grad<1>);
  std::vector<std::uint16_t> i(5000);
  std::iota(i.begin(), i.end(), std::uint16_t(60000 - 5000));  // up to 59,999
  i[17] = 65534;                                               // the last column, once
  std::vector<std::int64_t> js{5, 19999, 5, 123, 7, 5, 0, 42, 19999, 11};
  SUBCASE("per term") {
    float total = 0;
    for (auto j : js)
      total += gx::backward(gx::sum(Eb(gx::all, gx::indices(i)) + Ea(gx::all, gx::at(j))));
    CHECK(Eb.grad().size() == 5000);
    CHECK(Ea.grad().size() == 7);
    auto gb = Eb.grad().to_dense();
    auto ga = Ea.grad().to_dense();
    for (int r : {0, 31, 63}) {
      CHECK(gb(r, 65534) == 10.0f);
      CHECK(gb(r, 55000) == 10.0f);
      CHECK(gb(r, 55017) == 0.0f);  // replaced by 65534
      CHECK(gb(r, 54999) == 0.0f);
      CHECK(ga(r, 5) == 15000.0f);
      CHECK(ga(r, 19999) == 10000.0f);
      CHECK(ga(r, 42) == 5000.0f);
      CHECK(ga(r, 1) == 0.0f);
    }
    CHECK(std::isfinite(total));
  }
  SUBCASE("batched: one expression, 64 x 5000 x 10") {
    auto e = gx::sum(gx::unsqueeze<2>(Eb(gx::all, gx::indices(i))) +
                     gx::unsqueeze<1>(Ea(gx::all, gx::indices(js))));
    gx::backward(e);
    auto gb = Eb.grad().to_dense();
    auto ga = Ea.grad().to_dense();
    for (int r : {0, 63}) {
      CHECK(gb(r, 65534) == 10.0f);
      CHECK(gb(r, 59999) == 10.0f);
      CHECK(gb(r, 55017) == 0.0f);
      CHECK(ga(r, 5) == 15000.0f);
      CHECK(ga(r, 0) == 5000.0f);
      CHECK(ga(r, 2) == 0.0f);
    }
  }
  SUBCASE("a value-dependent loss: per term equals batched (double, tolerance)") {
    auto A = gx::param(gx::randn<double, gx::col_major>(gx::dims(gx::fix<64>, 300), 703),
                       gx::sparse_grad<1>);
    auto B = gx::param(gx::randn<double, gx::col_major>(gx::dims(gx::fix<64>, 400), 704),
                       gx::sparse_grad<1>);
    std::vector<std::int32_t> ii{3, 399, 3, 250, 17, 3};
    std::vector<std::int32_t> jj{0, 299, 0, 7};
    for (auto j : jj)
      gx::backward(gx::sum(gx::tanh(B(gx::all, gx::indices(ii)) * A(gx::all, gx::at(j)))));
    auto ga1 = A.grad().to_dense();
    auto gb1 = B.grad().to_dense();
    auto [ga2, gb2] = gx::grad(gx::sum(gx::tanh(gx::unsqueeze<2>(B(gx::all, gx::indices(ii))) *
                                                gx::unsqueeze<1>(A(gx::all, gx::indices(jj))))),
                               A, B);
    CHECK_ALL_CLOSE(ga2.to_dense(), ga1, 1e-12, 1e-14);
    CHECK_ALL_CLOSE(gb2.to_dense(), gb1, 1e-12, 1e-14);
    CHECK_NUMGRAD_DIRECTIONAL(
        [&](auto& p) {
          return gx::sum(gx::tanh(gx::unsqueeze<2>(B(gx::all, gx::indices(ii))) *
                                  gx::unsqueeze<1>(p(gx::all, gx::indices(jj)))));
        },
        A);
    CHECK_NUMGRAD_DIRECTIONAL(
        [&](auto& p) {
          return gx::sum(gx::tanh(gx::unsqueeze<2>(p(gx::all, gx::indices(ii))) *
                                  gx::unsqueeze<1>(A(gx::all, gx::indices(jj)))));
        },
        B);
  }
}

TEST_CASE("tiles: a broadcast parameter summed over a projected axis (19 x 37, both layouts)") {
  auto mr = gx::uniform<double>(gx::dims(19, 37), 711, -1.0, 1.0);
  auto mc = gx::uniform<double, gx::col_major>(gx::dims(19, 37), 712, -1.0, 1.0);
  auto row = gx::param(gx::uniform<double>(shape<1, 37>{}, 713, -1.0, 1.0));
  auto col = gx::param(gx::uniform<double, gx::col_major>(shape<19, 1>{}, 714, -1.0, 1.0),
                       gx::sparse_grad<0>);
  auto vec = gx::param(gx::uniform<double>(gx::dims(37), 715, -1.0, 1.0));
  CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::tanh(mr * p)); }, row);
  CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::tanh(mc * p)); }, row);
  CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::tanh(mr * p)); }, col);
  CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::tanh(mc * p)); }, col);
  CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::exp(p * 0.5 - mc)); }, vec);
  CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::tanh(gx::transpose(mr) * gx::transpose(p))); },
                row);
  // the collapsed rule (v independent of the projected axis): exact extents
  auto g = gx::grad(gx::sum(mr + row), row).to_dense();
  for (int j = 0; j < 37; ++j) CHECK(g(0, j) == 19.0);
  auto gc = gx::grad(gx::sum(mc + col), col).to_dense();
  for (int i = 0; i < 19; ++i) CHECK(gc(i, 0) == 37.0);
}

TEST_CASE("tiles: reductions and views of a 19 x 37 parameter (both layouts, dense and sparse)") {
  auto xr = gx::param(gx::uniform<double>(gx::dims(19, gx::fix<37>), 721, -1.0, 1.0));
  auto xc = gx::param(gx::uniform<double, gx::col_major>(gx::dims(19, 37), 722, -1.0, 1.0),
                      gx::sparse_grad<1>);
  auto check = [&](auto& x) {
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::tanh(gx::sum<1>(gx::sigmoid(p)))); }, x);
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::tanh(gx::sum<0>(gx::sigmoid(p)))); }, x);
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::exp(gx::max<1>(p, gx::keep_dims) - p)); }, x);
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::exp(gx::max<0>(p)) * gx::mean<0>(p)); }, x);
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::square(p - gx::mean<1>(p, gx::keep_dims))); },
                  x);
    CHECK_NUMGRAD(
        [&](auto& p) { return gx::sum(gx::tanh(gx::transpose(p) * gx::transpose(gx::exp(p)))); },
        x);
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::tanh(gx::slice<1>(p, 1, 36, 3))); }, x);
    CHECK_NUMGRAD(
        [&](auto& p) {
          return gx::sum(gx::tanh(gx::reshape(gx::transpose(p), gx::dims(37, 19)) * 0.5));
        },
        x);
  };
  SUBCASE("row-major, dense") { check(xr); }
  SUBCASE("column-major, sparse along axis 1") { check(xc); }
}

TEST_CASE("tiles: gathers with duplicates over 37-wide rows and columns") {
  auto x = gx::param(gx::uniform<double>(gx::dims(50, 37), 731, -1.0, 1.0), gx::sparse_grad<0>);
  auto y = gx::param(gx::uniform<double, gx::col_major>(gx::dims(37, 50), 732, -1.0, 1.0),
                     gx::sparse_grad<1>);
  std::vector<int> idx(200);
  for (int k = 0; k < 200; ++k)
    idx[std::size_t(k)] = (k * 13) % 45;  // 45 of 50 read, each 4-5 times
  auto wr = gx::uniform<double>(gx::dims(200, 37), 733, -1.0, 1.0);
  auto wc = gx::uniform<double>(gx::dims(37, 200), 734, -1.0, 1.0);
  CHECK_NUMGRAD([&](auto& p) { return gx::sum(wr * gx::tanh(gx::gather<0>(p, idx))); }, x);
  CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::tanh(gx::sum<0>(gx::gather<0>(p, idx)))); }, x);
  CHECK_NUMGRAD([&](auto& p) { return gx::sum(wc * gx::tanh(p(gx::all, gx::indices(idx)))); }, y);
  CHECK_NUMGRAD(
      [&](auto& p) { return gx::sum(gx::tanh(gx::sum<1>(p(gx::all, gx::indices(idx))))); }, y);
  CHECK(gx::grad(gx::sum(gx::gather<0>(x, idx)), x).size() == 45);
}

TEST_CASE("float against double: the same expressions on 33 x 41 agree to float precision") {
  auto xd = gx::uniform<double>(gx::dims(33, 41), 741, -1.0, 1.0);
  auto xf = gx::eval(gx::cast<float>(xd));
  auto pd = gx::param(gx::eval(gx::cast<double>(xf)));  // the same values in both types
  auto pf = gx::param(xf);
  auto md = gx::uniform<double>(gx::dims(33, 41), 742, -1.0, 1.0);
  auto mf = gx::eval(gx::cast<float>(md));
  auto mdd = gx::eval(gx::cast<double>(mf));
  std::vector<int> idx{0, 40, 40, 7, 3, 3, 3, 39, 12, 13, 14, 15, 16};
  auto compare = [&](auto&& f) {
    auto gd = gx::grad(f(pd, mdd), pd).to_dense();
    auto gf = gx::grad(f(pf, mf), pf).to_dense();
    CHECK_ALL_CLOSE(gx::cast<double>(gf), gd, 2e-4, 2e-5);
  };
  compare([&](auto& p, auto& m) { return gx::sum(gx::tanh(p * m)); });
  compare(
      [&](auto& p, auto& m) { return gx::sum(gx::sigmoid(gx::sum<0>(p * m, gx::keep_dims) * p)); });
  compare([&](auto& p, auto& m) { return gx::sum(gx::exp(gx::max<1>(p, gx::keep_dims) - p) * m); });
  compare([&](auto& p, auto& m) {
    return gx::sum(gx::tanh(p(gx::all, gx::indices(idx))) * m(gx::all, gx::range(0, 13)));
  });
  compare([&](auto& p, auto& m) { return gx::sum(gx::tanh(gx::transpose(p) * gx::transpose(m))); });
  compare([&](auto& p, auto& m) { return gx::mean(gx::square(gx::sum<1>(p) - gx::sum<1>(m))); });
}

TEST_CASE("parallel paths: 400 x 300 (injective and projected kernels) for 1 and 4 threads") {
  thread_scope guard;
  auto x = gx::param(gx::uniform<double>(gx::dims(400, 300), 751, -1.0, 1.0));
  auto m = gx::uniform<double>(gx::dims(400, 300), 752, -1.0, 1.0);
  auto r =
      gx::param(gx::uniform<double>(gx::dims(gx::fix<1>, 300), 753, -1.0, 1.0), gx::sparse_grad<1>);
  auto fx = [&](auto& p) {
    return gx::sum(gx::tanh(p * m)) + gx::sum(gx::transpose(p) * gx::transpose(m) * 0.5);
  };
  auto fr = [&](auto& p) { return gx::sum(gx::tanh(m * p + x)); };
  for (int t : {1, 4}) {
    gx::set_num_threads(t);
    CAPTURE(t);
    CHECK_NUMGRAD_DIRECTIONAL(fx, x);
    CHECK_NUMGRAD(fr, r);
  }
  gx::set_num_threads(1);
  auto a = gx::grad(fx(x), x).to_dense();
  auto b = gx::grad(fr(r), r).to_dense();
  gx::set_num_threads(4);
  CHECK(gx::testing::same_bits(a, gx::grad(fx(x), x).to_dense()));
  CHECK(gx::testing::same_bits(b, gx::grad(fr(r), r).to_dense()));
}
