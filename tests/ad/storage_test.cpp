// AD plumbing: grad vs backward, grad for a parameter not read, several parameters,
// accumulation over calls, zero_grad, backward with a seed for a non-scalar expression,
// backward_only, detach, sparse and dense gradient storage contents; and a self-test of the
// numgrad helper.
#include "ad/configs.hpp"
#include "ad/numgrad.hpp"
#include "testing.hpp"

#include <cstdint>
#include <utility>
#include <vector>

namespace gx = gradix;
using gx::dyn;
using gx::shape;

TEST_CASE("numgrad helper: reports the worst element of a wrong gradient") {
  auto x = gx::param(gx::uniform<double>(shape<2, 3>{}, 501, -1.0, 1.0));
  auto e = gx::sum(gx::square(x));
  auto g = gx::grad(e, x).to_dense();
  gx::testing::numgrad_options o;
  std::vector<double> noise;
  auto numeric = gx::testing::central_differences(
      x, [&] { return gx::value(e); }, o, &noise);
  CHECK(gx::testing::compare_gradient(g, numeric, noise, o).empty());
  g(1, 2) += 1e-3;
  g(0, 1) += 1e-5;
  std::string m = gx::testing::compare_gradient(g, numeric, noise, o);
  CHECK_MESSAGE(m.find("worst element [1, 2]") != std::string::npos, m);
  // the helper restores the parameter bit for bit
  auto before = x.value();
  (void)gx::testing::numgrad_check([&](auto& p) { return gx::sum(gx::exp(p)); }, x);
  CHECK(gx::testing::same_bits(before, x.value()));
}

TEST_CASE_TEMPLATE("grad and backward agree; grad leaves the parameters untouched", C,
                   GRADIX_AD_CONFIGS) {
  auto x = C::make(511);
  auto z = C::make(512);
  std::vector<int> rows{4, 0, 4, 2};
  auto w = gx::uniform<double>(gx::dims(4, 3), 513, -1.0, 1.0);
  auto f = [&] {
    return gx::sum(w * gx::tanh(gx::gather<0>(x, rows) * gx::gather<0>(z, rows))) +
           gx::mean(gx::exp(x) * z);
  };
  gx::testing::param_snapshot sx0(x), sz0(z);
  auto [gx1, gz1] = gx::grad(f(), x, z);
  CHECK(gx::testing::param_snapshot(x) == sx0);  // parameters untouched by grad
  CHECK(gx::testing::param_snapshot(z) == sz0);
  double v = gx::backward(f());
  CHECK(v == gx::value(f()));
  CHECK(gx::testing::same_bits(gx1.to_dense(), x.grad().to_dense()));
  CHECK(gx::testing::same_bits(gz1.to_dense(), z.grad().to_dense()));
  // grad for one of them, in either order
  auto [gz2, gx2] = gx::grad(f(), z, x);
  CHECK(gx::testing::same_bits(gx2.to_dense(), gx1.to_dense()));
  CHECK(gx::testing::same_bits(gz2.to_dense(), gz1.to_dense()));
  using G = std::remove_cvref_t<decltype(x.grad())>;
  if constexpr (G::sparse) {
    REQUIRE(gx1.size() == x.grad().size());
    for (gx::index_t k = 0; k < gx1.size(); ++k) CHECK(gx1.id(k) == x.grad().id(k));
  }
}

TEST_CASE_TEMPLATE("grad: zeros for a parameter the expression does not read", C,
                   GRADIX_AD_CONFIGS) {
  auto x = C::make(521);
  auto y = C::make(522);
  gx::backward(gx::sum(gx::exp(y)));  // y holds a gradient already
  gx::testing::param_snapshot sy(y);
  auto [gx_, gy] = gx::grad(gx::sum(gx::tanh(x)), x, y);
  auto d = gy.to_dense();
  for (gx::index_t k = 0; k < d.size(); ++k) CHECK(d.data()[k] == 0.0);
  using G = std::remove_cvref_t<decltype(gy)>;
  if constexpr (G::sparse) CHECK(gy.size() == 0);
  CHECK(gx::testing::param_snapshot(y) == sy);
  auto gy2 = gx::grad(gx::sum(gx::tanh(x) * gx::detach(y)), y);  // read, but detached
  auto d2 = gy2.to_dense();
  for (gx::index_t k = 0; k < d2.size(); ++k) CHECK(d2.data()[k] == 0.0);
  CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::tanh(x)) + 0.0 * gx::sum(p * 0.0); }, y);
}

TEST_CASE_TEMPLATE("backward: accumulates over calls; zero_grad clears", C, GRADIX_AD_CONFIGS) {
  auto x = C::make(531);
  std::vector<int> rows{3, 3, 1};
  auto w = gx::uniform<double>(gx::dims(3, 3), 532, -1.0, 1.0);
  auto f = [&] {
    return gx::sum(w * gx::exp(gx::gather<0>(x, rows))) + gx::sum(gx::tanh(x(gx::all, gx::at(1))));
  };
  gx::backward(f());
  auto once = x.grad().to_dense();
  gx::backward_only(f());
  auto twice = x.grad().to_dense();
  for (gx::index_t k = 0; k < once.size(); ++k) CHECK(twice.data()[k] == 2.0 * once.data()[k]);
  gx::zero_grad(x);
  auto z = x.grad().to_dense();
  for (gx::index_t k = 0; k < z.size(); ++k) CHECK(z.data()[k] == 0.0);
  using G = std::remove_cvref_t<decltype(x.grad())>;
  if constexpr (G::sparse)
    CHECK(x.grad().size() == 0);
  else {
    CHECK(x.grad().touched().empty());
    CHECK_FALSE(x.grad().all_touched());
  }
  gx::backward(f());
  CHECK(gx::testing::same_bits(x.grad().to_dense(), once));
  // a different expression after zero_grad touches other slices; all of them are cleared
  gx::zero_grad(x);
  gx::backward(gx::sum(gx::square(x)));
  gx::zero_grad(x);
  auto z2 = x.grad().to_dense();
  for (gx::index_t k = 0; k < z2.size(); ++k) CHECK(z2.data()[k] == 0.0);
  // zero_grad of several parameters at once
  auto y = C::make(533);
  gx::backward(gx::sum(x * y));
  gx::zero_grad(x, y);
  auto zx = x.grad().to_dense(), zy = y.grad().to_dense();
  for (gx::index_t k = 0; k < zx.size(); ++k) CHECK((zx.data()[k] == 0.0 && zy.data()[k] == 0.0));
}

TEST_CASE_TEMPLATE("backward with a seed for a non-scalar expression", C, GRADIX_AD_CONFIGS) {
  auto x = C::make(541);
  auto seed = C::values(542);  // the expression's shape type
  SUBCASE("elementwise") {
    CHECK_NUMGRAD_SEEDED([&](auto& p) { return gx::tanh(p) * p; }, x, seed);
    CHECK_NUMGRAD_SEEDED([&](auto& p) { return p.node(); }, x, seed);  // the leaf itself
  }
  SUBCASE("index and view") {
    std::vector<int> rows{4, 4, 0};
    auto s2 = gx::uniform<double>(gx::dims(3, gx::fix<3>), 543, -1.0, 1.0);
    CHECK_NUMGRAD_SEEDED([&](auto& p) { return gx::exp(gx::gather<0>(p, rows)); }, x, s2);
    auto st = gx::uniform<double>(gx::dims(gx::fix<3>, 5), 544, -1.0, 1.0);
    if constexpr (std::is_same_v<typename C::shape_type, shape<5, 3>>) {
      auto sts = gx::uniform<double>(shape<3, 5>{}, 544, -1.0, 1.0);
      CHECK_NUMGRAD_SEEDED([&](auto& p) { return gx::sigmoid(gx::transpose(p)); }, x, sts);
    } else {
      CHECK_NUMGRAD_SEEDED([&](auto& p) { return gx::sigmoid(gx::transpose(p)); }, x, st);
    }
  }
  SUBCASE("equals grad of sum(seed * e)") {
    gx::zero_grad(x);
    gx::backward(gx::exp(x) * 2.0, seed);
    auto a = x.grad().to_dense();
    auto b = gx::grad(gx::sum(gx::exp(x) * 2.0 * seed), x).to_dense();
    CHECK_ALL_CLOSE(a, b, 1e-14, 0.0);
    gx::backward(gx::exp(x) * 2.0, seed);  // accumulates
    auto a2 = x.grad().to_dense();
    for (gx::index_t k = 0; k < a.size(); ++k) CHECK(a2.data()[k] == 2.0 * a.data()[k]);
  }
}

TEST_CASE("backward with a seed whose shape type differs (dynamic extents, same values)") {
  auto x = gx::param(gx::uniform<double>(shape<5, 3>{}, 545, -1.0, 1.0));
  auto seed = gx::uniform<double>(gx::dims(5, 3), 546, -1.0, 1.0);
  CHECK_NUMGRAD_SEEDED([&](auto& p) { return gx::exp(p); }, x, seed);
}

TEST_CASE("backward with a seed: rank-0 reductions and views under + and - (the seed is a plain view)") {
  auto x = gx::param(gx::uniform<double>(shape<3, 4>{}, 548, -1.0, 1.0));
  auto y = gx::param(gx::uniform<double>(shape<2>{}, 549, -1.0, 1.0));
  auto seed = gx::uniform<double>(shape<2>{}, 550, -1.0, 1.0);
  CHECK_NUMGRAD_SEEDED([&](auto& p) { return gx::sum(p) + y; }, x, seed);
  CHECK_NUMGRAD_SEEDED([&](auto& p) { return gx::max(p) - y; }, x, seed);
  CHECK_NUMGRAD_SEEDED([&](auto& p) { return gx::mean(p * p) + y; }, x, seed);
  CHECK_NUMGRAD_SEEDED([&](auto& p) { return gx::cast<double>(gx::sum<0, 1>(p)) - y; }, x, seed);
  CHECK_NUMGRAD_SEEDED([&](auto& p) { return gx::select<0>(gx::select<0>(p, 2), 1) + y; }, x, seed);
  CHECK_NUMGRAD_SEEDED([&](auto& p) { return gx::reshape(gx::slice<0>(p, 1, 2), shape<2, 2>{}) + 0.0; },
                       x, gx::uniform<double>(shape<2, 2>{}, 551, -1.0, 1.0));
}

TEST_CASE("backward: a seed of other extents throws and writes nothing") {
  auto x =
      gx::param(gx::uniform<double>(gx::dims(5, gx::fix<3>), 547, -1.0, 1.0), gx::sparse_grad<0>);
  gx::backward(gx::sum(gx::exp(x(gx::range(0, 2), gx::all))));
  gx::testing::param_snapshot s(x);
  auto bad = gx::zeros<double>(gx::dims(4, gx::fix<3>));
  CHECK_THROWS_WITH_AS(gx::backward(gx::exp(x), bad), doctest::Contains("seed shape"), gx::error);
  CHECK(gx::testing::param_snapshot(x) == s);
}

TEST_CASE("detach: no gradient flows through a detached sub-expression") {
  auto x = gx::param(gx::uniform<double>(gx::dims(4, 3), 551, 0.5, 1.5));
  auto g = gx::grad(gx::sum(x * gx::detach(x)), x).to_dense();  // d/dx (x * c) = c = x
  CHECK(gx::testing::same_bits(g, x.value()));
  auto g2 = gx::grad(gx::sum(gx::detach(gx::exp(x) * x)), x).to_dense();
  for (gx::index_t k = 0; k < g2.size(); ++k) CHECK(g2.data()[k] == 0.0);
}

TEST_CASE("parameters: values are read when backward runs; a moved parameter keeps its storage") {
  auto x = gx::param(gx::uniform<double>(gx::dims(3, 2), 561, -1.0, 1.0));
  auto e = gx::sum(gx::square(x));
  x.value()(1, 1) = 5.0;  // changed after the expression was built
  auto g = gx::grad(e, x).to_dense();
  CHECK(g(1, 1) == 10.0);
  auto y = std::move(x);
  gx::backward(e);
  CHECK(y.grad().dense()(1, 1) == 10.0);
  CHECK(y.grad().dense()(0, 0) == 2.0 * y.value()(0, 0));
}

TEST_CASE("parameters: assigning a same-shape tensor to value() keeps built expressions valid") {
  // a same-size assignment copies into the existing buffer, which e views; e is evaluated
  // only when that holds (otherwise it would read freed memory)
  auto x = gx::param(gx::zeros<double>(gx::dims(4, 3)));
  auto e = gx::sum(gx::square(x));
  auto fresh = gx::full<double>(gx::dims(4, 3), 1.0);
  double const* viewed = x.value().data();  // what e reads
  x.value() = fresh;
  CHECK(x.value().data() == viewed);
  if (x.value().data() == viewed) {  // only then is reading e defined
    CHECK(gx::value(e) == 12.0);
    CHECK(gx::grad(e, x).to_dense()(0, 0) == 2.0);
  }
}

TEST_CASE("sparse storage: first-touch order, find, at, to_dense; along axis 0 and 1") {
  SUBCASE("sparse_grad<0>, gather along axis 0, row-major") {
    auto x =
        gx::param(gx::uniform<double>(gx::dims(6, gx::fix<2>), 571, -1.0, 1.0), gx::sparse_grad<0>);
    std::vector<int> a{5, 1, 5}, b{3, 1, 0};
    gx::backward(gx::sum(gx::gather<0>(x, a)));
    REQUIRE(x.grad().size() == 2);
    CHECK(x.grad().id(0) == 5);
    CHECK(x.grad().id(1) == 1);
    gx::backward(gx::sum(gx::exp(gx::gather<0>(x, b))));
    REQUIRE(x.grad().size() == 4);  // new slices appended in first-touch order
    CHECK(x.grad().id(2) == 3);
    CHECK(x.grad().id(3) == 0);
    CHECK(x.grad().find(2) == -1);
    CHECK(x.grad().find(4) == -1);
    CHECK(x.grad().find(1) == 1);
    auto d = x.grad().to_dense();
    CHECK(d(5, 1) == 2.0);
    CHECK(d(1, 0) == doctest::Approx(1.0 + std::exp(x.value()(1, 0))).epsilon(1e-15));
    CHECK(x.grad().at({{1, 0}}) == d(1, 0));
    CHECK(x.grad().at({{2, 1}}) == 0.0);
    CHECK(d(2, 0) == 0.0);
    CHECK(d(4, 1) == 0.0);
  }
  SUBCASE("sparse_grad<1>, gather along axis 1, column-major") {
    auto x = gx::param(gx::uniform<double, gx::col_major>(gx::dims(3, 7), 572, -1.0, 1.0),
                       gx::sparse_grad<1>);
    std::vector<std::uint16_t> c{6, 2, 6, 6};
    auto w = gx::uniform<double>(gx::dims(3, 4), 573, -1.0, 1.0);
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(w * gx::tanh(p(gx::all, gx::indices(c)))); }, x);
    gx::backward(gx::sum(w * gx::tanh(x(gx::all, gx::indices(c)))));
    REQUIRE(x.grad().size() == 2);
    CHECK(x.grad().id(0) == 6);
    CHECK(x.grad().id(1) == 2);
    CHECK(x.grad().slice_elements() == 3);
    auto d = x.grad().to_dense();
    for (int i = 0; i < 3; ++i) {
      CHECK(d(i, 0) == 0.0);
      double t = std::tanh(x.value()(i, 2));
      CHECK(d(i, 2) == doctest::Approx(w(i, 1) * (1 - t * t)).epsilon(1e-14));
    }
  }
  SUBCASE("sparse storage along an axis an elementwise use writes whole") {
    auto x = gx::param(gx::uniform<double>(gx::dims(4, 3), 574, -1.0, 1.0), gx::sparse_grad<1>);
    gx::backward(gx::sum(gx::square(x)));
    CHECK(x.grad().size() == 3);
    auto d = x.grad().to_dense();
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 3; ++j) CHECK(d(i, j) == 2.0 * x.value()(i, j));
  }
}

TEST_CASE("dense storage: touched slices along the declared axis") {
  auto x = gx::param(gx::uniform<double>(gx::dims(6, 2), 581, -1.0, 1.0));
  std::vector<int> a{4, 1, 4};
  gx::backward(gx::sum(gx::gather<0>(x, a)));
  auto t = x.grad().touched();
  std::sort(t.begin(), t.end());
  CHECK(t == std::vector<gx::index_t>{1, 4});
  gx::backward(gx::sum(gx::slice<0>(x, 0, 6, 3)));
  t = x.grad().touched();
  std::sort(t.begin(), t.end());
  CHECK(t == std::vector<gx::index_t>{0, 1, 3, 4});
  gx::zero_grad(x);
  auto d = x.grad().dense();
  for (gx::index_t k = 0; k < d.size(); ++k) CHECK(d.data()[k] == 0.0);
  // dense_grad<1>: a gather along axis 0 writes every column
  auto y = gx::param(gx::uniform<double>(gx::dims(6, 2), 582, -1.0, 1.0), gx::dense_grad<1>);
  gx::backward(gx::sum(gx::gather<0>(y, a)));
  CHECK(y.grad().all_touched());
  gx::zero_grad(y);
  CHECK_FALSE(y.grad().all_touched());
  for (gx::index_t k = 0; k < y.grad().dense().size(); ++k)
    CHECK(y.grad().dense().data()[k] == 0.0);
  // a use that writes every slice along the axis, or reaches it through a reshape: one full
  // clear; a gather and a slice of a few rows do not
  gx::backward(gx::sum(gx::square(x)));
  CHECK(x.grad().all_touched());
  gx::zero_grad(x);
  for (gx::index_t k = 0; k < d.size(); ++k) CHECK(x.grad().dense().data()[k] == 0.0);
  gx::backward(gx::sum(gx::reshape(x, gx::dims(3, 4)) * 2.0));
  CHECK(x.grad().all_touched());
  gx::zero_grad(x);
  gx::backward(gx::sum(gx::slice<0>(x, 1, 6, 2)));
  CHECK_FALSE(x.grad().all_touched());
  CHECK(x.grad().touched().size() == 3);
  gx::zero_grad(x);
  for (gx::index_t k = 0; k < d.size(); ++k) CHECK(x.grad().dense().data()[k] == 0.0);
}

TEST_CASE("a rank-0 parameter") {
  auto s = gx::param(gx::tensor<double, shape<>>{0.7});
  auto m = gx::uniform<double>(gx::dims(3, 4), 591, -1.0, 1.0);
  CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::tanh(m * p)); }, s);
  CHECK_NUMGRAD([&](auto& p) { return gx::exp(p) * p; }, s);
  double v = gx::backward(gx::square(s));
  CHECK(v == 0.7 * 0.7);
  CHECK(s.grad().dense().data()[0] == 1.4);
}
