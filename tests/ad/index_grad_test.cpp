// Gradients of index operations (gather with index vectors, E(all, idx) syntax, index(e, ...)
// on expressions, range / slice with steps, at, select, unique) against central differences
// in double precision; repeated indices, rows never read, empty index vectors, index types,
// and validation: negative and out-of-range indices throw when the expression is built,
// with messages naming op, axis, value and extent, and leave parameters and gradients
// bit-identical.
#include "ad/configs.hpp"
#include "ad/numgrad.hpp"
#include "testing.hpp"

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

namespace gx = gradix;
using gx::dyn;
using gx::shape;

namespace {

/// Gradient of a param, dense, as a tensor (works for both storage kinds).
template <class P>
auto dense_grad_of(P const& p) {
  return p.grad().to_dense();
}

/// True when slice `id` along `axis` of the rank-2 tensor g is exactly zero.
template <class G>
bool slice_is_zero(G const& g, int axis, gx::index_t id) {
  for (gx::index_t k = 0; k < g.extent(1 - axis); ++k) {
    double v = axis == 0 ? g(id, k) : g(k, id);
    if (v != 0.0) return false;
  }
  return true;
}

}  // namespace

TEST_CASE_TEMPLATE("gather: gradient with repeated indices and rows never read", C,
                   GRADIX_AD_CONFIGS) {
  auto x = C::make(301);
  std::vector<int> rows{4, 0, 4, 2, 4};  // row 4 three times; rows 1 and 3 never read
  std::vector<int> cols{2, 2, 0};        // column 2 twice; column 1 never read
  auto wr = gx::uniform<double>(gx::dims(5, gx::fix<3>), 302, -1.0, 1.0);
  auto wc = gx::uniform<double>(gx::dims(5, 3), 303, -1.0, 1.0);
  SUBCASE("gather<0>") {
    auto f = [&](auto& p) { return gx::sum(wr * gx::tanh(gx::gather<0>(p, rows))); };
    CHECK_NUMGRAD(f, x);
    auto g = gx::grad(f(x), x).to_dense();
    CHECK(slice_is_zero(g, 0, 1));
    CHECK(slice_is_zero(g, 0, 3));
    CHECK_FALSE(slice_is_zero(g, 0, 4));
  }
  SUBCASE("p(indices, all)") {
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(wr * gx::exp(p(gx::indices(rows), gx::all))); }, x);
  }
  SUBCASE("gather<1> and p(all, indices)") {
    auto f = [&](auto& p) { return gx::sum(wc * gx::tanh(gx::gather<1>(p, cols))); };
    CHECK_NUMGRAD(f, x);
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(wc * gx::tanh(p(gx::all, gx::indices(cols)))); },
                  x);
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(wc * gx::tanh(gx::gather<-1>(p, cols))); }, x);
    auto g = gx::grad(f(x), x).to_dense();
    CHECK(slice_is_zero(g, 1, 1));
  }
  SUBCASE("both axes through index vectors") {
    std::vector<int> c2{1, 1};
    auto w = gx::uniform<double>(gx::dims(5, 2), 304, -1.0, 1.0);
    auto f = [&](auto& p) { return gx::sum(w * gx::tanh(p(gx::indices(rows), gx::indices(c2)))); };
    CHECK_NUMGRAD(f, x);
    auto g = gx::grad(f(x), x).to_dense();
    CHECK(slice_is_zero(g, 1, 0));
    CHECK(slice_is_zero(g, 1, 2));
    CHECK(slice_is_zero(g, 0, 3));
  }
  SUBCASE("the gradient is a scatter-add: exact counts for sum") {
    auto g = gx::grad(gx::sum(gx::gather<0>(x, rows)), x).to_dense();
    double count[5] = {1, 0, 1, 0, 3};
    for (int i = 0; i < 5; ++i)
      for (int j = 0; j < 3; ++j) CHECK(g(i, j) == count[i]);
  }
  SUBCASE("backward stores only the rows read (sparse: slots; dense: touched rows)") {
    gx::backward(gx::sum(gx::tanh(gx::gather<0>(x, rows))));
    auto g = dense_grad_of(x);
    CHECK(slice_is_zero(g, 0, 1));
    CHECK(slice_is_zero(g, 0, 3));
    using G = std::remove_cvref_t<decltype(x.grad())>;
    if constexpr (G::sparse && G::axis == 0) {
      CHECK(x.grad().size() == 3);
      CHECK(x.grad().id(0) == 4);  // first-touch order
      CHECK(x.grad().id(1) == 0);
      CHECK(x.grad().id(2) == 2);
      CHECK(x.grad().find(1) == -1);
      CHECK(x.grad().find(3) == -1);
    } else if constexpr (G::sparse) {
      CHECK(x.grad().size() == 3);  // a gather along axis 0 writes every column
    } else if constexpr (G::axis == 0) {
      auto t = x.grad().touched();
      std::sort(t.begin(), t.end());
      CHECK(t == std::vector<gx::index_t>{0, 2, 4});
    }
  }
}

TEST_CASE_TEMPLATE("gather: an empty index vector reads nothing and writes nothing", C,
                   GRADIX_AD_CONFIGS) {
  auto x = C::make(311);
  std::vector<int> none;
  auto e0 = gx::sum(gx::exp(gx::gather<0>(x, none)));
  CHECK(gx::value(e0) == 0.0);
  auto g = gx::grad(e0, x);
  auto gd = g.to_dense();
  for (gx::index_t k = 0; k < gd.size(); ++k) CHECK(gd.data()[k] == 0.0);
  using G = std::remove_cvref_t<decltype(g)>;
  if constexpr (G::sparse) CHECK(g.size() == 0);
  CHECK(gx::backward(gx::sum(gx::tanh(x(gx::all, gx::indices(none))))) == 0.0);
  auto gb = dense_grad_of(x);
  for (gx::index_t k = 0; k < gb.size(); ++k) CHECK(gb.data()[k] == 0.0);
  if constexpr (G::sparse)
    CHECK(x.grad().size() == 0);
  else
    CHECK(x.grad().touched().empty());
  CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::gather<1>(p, none)) + gx::sum(gx::square(p)); },
                x);
}

TEST_CASE_TEMPLATE("gather: index element types and sources", I, int, std::int64_t, std::uint16_t,
                   std::uint8_t, std::size_t, std::int8_t) {
  auto x = gx::param(gx::uniform<double>(gx::dims(5, gx::fix<3>), 321, -1.0, 1.0));
  std::vector<I> v{3, 3, 1, 0};
  auto w = gx::uniform<double>(gx::dims(4, 3), 322, -1.0, 1.0);
  SUBCASE("std::vector") {
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(w * gx::tanh(gx::gather<0>(p, v))); }, x);
  }
  SUBCASE("std::span") {
    std::span<I const> s(v);
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(w * gx::tanh(gx::gather<0>(p, gx::indices(s)))); },
                  x);
  }
  SUBCASE("a rank-1 tensor") {
    gx::tensor<I, shape<dyn>> t(gx::dims(4), std::span<I const>(v));
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(w * gx::tanh(gx::gather<0>(p, t))); }, x);
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(w * gx::tanh(p(gx::indices(t), gx::all))); }, x);
  }
  SUBCASE("a strided view") {
    std::vector<I> interleaved{3, 9, 3, 9, 1, 9, 0, 9};  // the 9s are never read
    auto iv = gx::strided_view(interleaved.data(), gx::dims(4), gx::array<gx::index_t, 1>{{2}});
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(w * gx::tanh(gx::gather<0>(p, gx::indices(iv)))); },
                  x);
  }
}

TEST_CASE("gather: gather of an expression, index(e, ...) on any expression") {
  auto x = gx::param(gx::uniform<double, gx::col_major>(gx::dims(5, gx::fix<3>), 331, -1.0, 1.0),
                     gx::sparse_grad<0>);
  std::vector<long> r{1, 4, 1};
  auto w = gx::uniform<double>(gx::dims(3, 2), 332, -1.0, 1.0);
  CHECK_NUMGRAD(
      [&](auto& p) {
        return gx::sum(w * gx::index(gx::exp(p), gx::indices(r), gx::range(0, 3, 2)));
      },
      x);
  CHECK_NUMGRAD(
      [&](auto& p) { return gx::sum(w * gx::index(p * gx::tanh(p), r, gx::range(2, -1, -2))); }, x);
  auto w1 = gx::uniform<double>(gx::dims(3), 333, -1.0, 1.0);
  CHECK_NUMGRAD([&](auto& p) { return gx::sum(w1 * gx::index(gx::sigmoid(p), r, 1)); }, x);
  CHECK_NUMGRAD(
      [&](auto& p) {
        return gx::sum(gx::index(gx::sigmoid(p) * 2.0, 3, gx::all) * w1(gx::range(0, 3)));
      },
      x);
}

TEST_CASE_TEMPLATE("slice, at, select: gradients", C, GRADIX_AD_CONFIGS) {
  auto x = C::make(341);
  SUBCASE("slice with steps (positive and negative), either axis") {
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::exp(gx::slice<0>(p, 1, 5, 2))); }, x);
    CHECK_NUMGRAD(
        [&](auto& p) {
          return gx::sum(gx::exp(gx::slice<0>(p, 4, -1, -2)) * gx::slice<0>(p, 0, 5, 2));
        },
        x);
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::tanh(gx::slice<1>(p, 2, 0, -1))); }, x);
    CHECK_NUMGRAD(
        [&](auto& p) { return gx::sum(gx::tanh(p(gx::range(1, 4), gx::range(0, 3, 2)))); }, x);
    auto g = gx::grad(gx::sum(gx::slice<0>(x, 1, 5, 2)), x).to_dense();
    for (int i = 0; i < 5; ++i)
      for (int j = 0; j < 3; ++j) CHECK(g(i, j) == (i % 2 == 1 ? 1.0 : 0.0));
  }
  SUBCASE("an empty slice") {
    auto g = gx::grad(gx::sum(gx::exp(gx::slice<0>(x, 3, 3))), x).to_dense();
    for (gx::index_t k = 0; k < g.size(); ++k) CHECK(g.data()[k] == 0.0);
  }
  SUBCASE("at keeps an axis of extent 1 that broadcasts") {
    auto m = gx::uniform<double>(gx::dims(5, 3), 342, -1.0, 1.0);
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::tanh(m * p(gx::at(2), gx::all))); }, x);
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::tanh(m * p(gx::all, gx::at(1)))); }, x);
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::tanh(m * gx::gather<0>(p, gx::at(4)) + p)); },
                  x);
    // the gradient of a broadcast row is its column sums
    auto g = gx::grad(gx::sum(m * x(gx::at(2), gx::all)), x).to_dense();
    auto cs = gx::eval(gx::sum<0>(m));
    for (int j = 0; j < 3; ++j) CHECK(g(2, j) == doctest::Approx(cs(j)).epsilon(1e-14));
    CHECK(slice_is_zero(g, 0, 0));
  }
  SUBCASE("select drops an axis") {
    auto w3 = gx::uniform<double>(shape<3>{}, 343, -1.0, 1.0);
    auto w5 = gx::uniform<double>(gx::dims(5), 344, -1.0, 1.0);
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(w3 * gx::exp(gx::select<0>(p, 3))); }, x);
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(w5 * gx::exp(gx::select<1>(p, 0))); }, x);
    CHECK_NUMGRAD(
        [&](auto& p) { return gx::sum(w5 * gx::exp(p(gx::all, 2))) + gx::sum(w3 * p(1, gx::all)); },
        x);
    CHECK_NUMGRAD(
        [&](auto& p) {
          return gx::exp(gx::index(p, 4, 2)) * gx::select<0>(gx::select<1>(p, 1), 0);
        },
        x);
  }
  SUBCASE("unique indices (injective scatter)") {
    std::vector<int> u{3, 0, 4};
    auto w = gx::uniform<double>(gx::dims(3, 3), 345, -1.0, 1.0);
    CHECK_NUMGRAD(
        [&](auto& p) { return gx::sum(w * gx::exp(p(gx::unique(gx::indices(u)), gx::all))); }, x);
    auto a = gx::grad(gx::sum(w * gx::exp(x(gx::unique(gx::indices(u)), gx::all))), x).to_dense();
    auto b = gx::grad(gx::sum(w * gx::exp(x(gx::indices(u), gx::all))), x).to_dense();
    CHECK(gx::testing::same_bits(a, b));
  }
}

// ---- validation

TEST_CASE("gather: a uint16 index at the top of a 65,535 extent") {
  constexpr gx::index_t n = 65535;
  auto x =
      gx::param(gx::uniform<double>(gx::dims(n, gx::fix<2>), 351, -1.0, 1.0), gx::sparse_grad<0>);
  auto y = gx::param(gx::uniform<double, gx::col_major>(gx::dims(2, n), 352, -1.0, 1.0));
  std::vector<std::uint16_t> ok{65534, 0, 65534};
  std::vector<std::uint16_t> bad{0, 65535};
  SUBCASE("65,534 is valid; the gradient lands there") {
    auto w = gx::uniform<double>(gx::dims(3, 2), 353, -1.0, 1.0);
    auto g = gx::grad(gx::sum(w * gx::gather<0>(x, ok)), x);
    CHECK(g.size() == 2);
    CHECK(g.id(0) == 65534);
    CHECK(g.id(1) == 0);
    auto gd = g.to_dense();
    for (int j = 0; j < 2; ++j) {
      CHECK(gd(65534, j) == doctest::Approx(w(0, j) + w(2, j)).epsilon(1e-15));
      CHECK(gd(0, j) == w(1, j));
      CHECK(gd(65533, j) == 0.0);
    }
    auto w2 = gx::uniform<double>(gx::dims(2, 3), 354, -1.0, 1.0);
    auto gy = gx::grad(gx::sum(w2 * gx::tanh(y(gx::all, gx::indices(ok)))), y).to_dense();
    for (int i = 0; i < 2; ++i) {
      double t0 = std::tanh(y.value()(i, 65534));
      CHECK(gy(i, 65534) == doctest::Approx((w2(i, 0) + w2(i, 2)) * (1 - t0 * t0)).epsilon(1e-12));
      CHECK(gy(i, 65533) == 0.0);
    }
  }
  SUBCASE("65,535 is out of range: gradix::error naming op, axis, value, extent") {
    auto msg = [&](auto&& build) -> std::string {
      try {
        build();
      } catch (gx::error const& e) {
        return e.what();
      }
      return "(no exception)";
    };
    std::string m0 = msg([&] { return gx::gather<0>(x, bad); });
    CHECK_MESSAGE(m0.find("gather") != std::string::npos, m0);
    CHECK_MESSAGE(m0.find("65535") != std::string::npos, m0);
    CHECK_MESSAGE(m0.find("axis 0") != std::string::npos, m0);
    CHECK_MESSAGE(m0.find("extent 65535") != std::string::npos, m0);
    std::string m1 = msg([&] { return y(gx::all, gx::indices(bad)); });
    CHECK_MESSAGE(m1.find("gather") != std::string::npos, m1);
    CHECK_MESSAGE(m1.find("index 65535") != std::string::npos, m1);
    CHECK_MESSAGE(m1.find("axis 1") != std::string::npos, m1);
    CHECK_MESSAGE(m1.find("extent 65535") != std::string::npos, m1);
  }
}

TEST_CASE("index validation: messages name op, axis, value and extent") {
  auto x = gx::param(gx::uniform<double>(gx::dims(5, gx::fix<3>), 361, -1.0, 1.0));
  auto what = [](auto&& build) -> std::string {
    try {
      build();
    } catch (gx::error const& e) {
      return e.what();
    }
    return "(no exception)";
  };
  std::vector<int> neg{1, -1};
  std::vector<std::int8_t> neg8{2, -3};
  std::vector<std::uint8_t> big8{1, 200};
  std::vector<std::int64_t> big{0, 5};
  struct expect {
    std::string msg;
    std::vector<std::string> parts;
  };
  std::vector<expect> cases{
      {what([&] { return gx::gather<0>(x, neg); }), {"gather", "-1", "axis 0", "extent 5"}},
      {what([&] { return x(gx::indices(neg), gx::all); }), {"gather", "-1", "axis 0", "extent 5"}},
      {what([&] { return x(gx::all, gx::indices(neg)); }), {"gather", "-1", "axis 1", "extent 3"}},
      {what([&] { return gx::gather<0>(x, neg8); }), {"gather", "-3", "axis 0", "extent 5"}},
      {what([&] { return gx::gather<1>(x, big8); }), {"gather", "200", "axis 1", "extent 3"}},
      {what([&] { return gx::gather<0>(gx::exp(x), big); }),
       {"gather", "index 5", "axis 0", "extent 5"}},
      {what([&] { return gx::index(gx::exp(x), gx::all, neg); }),
       {"gather", "-1", "axis 1", "extent 3"}},
      {what([&] { return x(gx::at(-1), gx::all); }), {"at", "-1", "axis 0", "extent 5"}},
      {what([&] { return x(gx::all, gx::at(3)); }), {"at", "3", "axis 1", "extent 3"}},
      {what([&] { return gx::select<0>(x, 5); }), {"select", "5", "axis 0", "extent 5"}},
      {what([&] { return x(-2, gx::all); }), {"select", "-2", "axis 0", "extent 5"}},
      {what([&] { return gx::slice<0>(x, 3, 6); }), {"slice", "axis 0", "extent 5"}},
      {what([&] { return gx::slice<1>(x, -1, 2); }), {"slice", "-1", "axis 1", "extent 3"}},
      {what([&] { return gx::slice<0>(x, 0, 5, 0); }), {"range", "step"}},
  };
  std::vector<int> none;
  cases.push_back(
      {what([&] { return x(gx::unique(gx::indices(none)), gx::all); }), {"(no exception)"}});
  std::vector<int> dup{1, 3, 1};
  cases.push_back({what([&] { return x(gx::unique(gx::indices(dup)), gx::all); }),
                   {"unique", "1", "axis 0", "extent 5"}});
  for (auto const& c : cases)
    for (auto const& part : c.parts)
      CHECK_MESSAGE(c.msg.find(part) != std::string::npos, c.msg, " lacks '", part, "'");
}

TEST_CASE_TEMPLATE("index validation: a throwing call leaves values and gradients bit-identical", C,
                   GRADIX_AD_CONFIGS) {
  auto x = C::make(371);
  auto z = C::make(372);
  std::vector<int> rows{4, 1, 4};
  std::vector<int> neg{0, -1};
  std::vector<int> big{2, 5};
  // some gradient is already accumulated
  gx::backward(gx::sum(gx::tanh(gx::gather<0>(x, rows)) * z(gx::indices(rows), gx::all)));
  gx::testing::param_snapshot sx(x), sz(z);
  CHECK_THROWS_AS(gx::backward(gx::sum(gx::gather<0>(x, neg))), gx::error);
  CHECK_THROWS_AS(gx::backward(gx::sum(gx::gather<0>(x, rows)) + gx::sum(gx::gather<0>(x, big))),
                  gx::error);
  CHECK_THROWS_AS(gx::backward(gx::sum(z * gx::exp(x)) + gx::sum(x(gx::all, gx::indices(big)))),
                  gx::error);
  CHECK_THROWS_AS(gx::backward(gx::sum(gx::slice<0>(x, 0, 7)) * gx::sum(z)), gx::error);
  CHECK_THROWS_AS(gx::backward(gx::sum(x(gx::at(5), gx::all) * z)), gx::error);
  CHECK_THROWS_AS((void)gx::grad(gx::sum(gx::select<1>(x, 3)), x, z), gx::error);
  CHECK_THROWS_AS(gx::backward(gx::sum(x(gx::unique(gx::indices(rows)), gx::all))), gx::error);
  // a seed of the wrong extents (same shape type: a dynamic first extent)
  if constexpr (gx::shape_of_t<decltype(x.node())>::static_extents[0] == dyn) {
    auto bad_seed =
        gx::zeros<double, typename C::layout>(typename C::shape_type(gx::dims(4, gx::fix<3>)));
    CHECK_THROWS_AS(gx::backward(gx::exp(x) * z, bad_seed), gx::error);
  }
  CHECK(gx::testing::param_snapshot(x) == sx);
  CHECK(gx::testing::param_snapshot(z) == sz);
  // and a further backward still works and adds on top
  auto before = x.grad().to_dense();
  gx::backward(gx::sum(gx::gather<0>(x, rows)));
  auto after = x.grad().to_dense();
  CHECK(after(4, 1) == before(4, 1) + 2.0);
  CHECK(after(1, 0) == before(1, 0) + 1.0);
  CHECK(after(0, 0) == before(0, 0));
}
