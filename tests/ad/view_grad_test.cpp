// Gradients of view operations (transpose, permute, unsqueeze, reshape, broadcast_to) and of
// compositions of index and view operations, against central differences in double
// precision; laws (transpose twice, gather with the identity index) compared bit for bit.
#include "ad/configs.hpp"
#include "ad/numgrad.hpp"
#include "testing.hpp"

#include <cstdint>
#include <vector>

namespace gx = gradix;
using gx::dyn;
using gx::shape;

TEST_CASE_TEMPLATE("views: transpose, unsqueeze, broadcast_to, reshape", C, GRADIX_AD_CONFIGS) {
  auto x = C::make(401);
  SUBCASE("transpose") {
    auto w = gx::uniform<double>(gx::dims(3, 5), 402, -1.0, 1.0);
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(w * gx::tanh(gx::transpose(p))); }, x);
    CHECK_NUMGRAD(
        [&](auto& p) { return gx::sum(gx::tanh(gx::transpose(p) * w) * gx::permute<1, 0>(p)); }, x);
  }
  SUBCASE("transpose twice is the identity (bit for bit)") {
    auto w = C::values(403);
    auto a = gx::grad(gx::sum(w * gx::tanh(gx::transpose(gx::transpose(x)))), x).to_dense();
    auto b = gx::grad(gx::sum(w * gx::tanh(x)), x).to_dense();
    CHECK(gx::testing::same_bits(a, b));
  }
  SUBCASE("unsqueeze at the front, middle, back") {
    auto w0 = gx::uniform<double>(gx::dims(2, 5, 3), 404, -1.0, 1.0);
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(w0 * gx::tanh(gx::unsqueeze<0>(p))); }, x);
    auto w1 = gx::uniform<double>(gx::dims(5, 4, 3), 405, -1.0, 1.0);
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(w1 * gx::tanh(gx::unsqueeze<1>(p))); }, x);
    auto w2 = gx::uniform<double>(gx::dims(5, 3, 2), 406, -1.0, 1.0);
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(w2 * gx::tanh(gx::unsqueeze<-1>(p))); }, x);
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::exp(gx::unsqueeze<2>(p))); }, x);
  }
  SUBCASE("broadcast_to") {
    auto w = gx::uniform<double>(gx::dims(4, 5, 3), 407, -1.0, 1.0);
    CHECK_NUMGRAD(
        [&](auto& p) { return gx::sum(w * gx::tanh(gx::broadcast_to(p, gx::dims(4, 5, 3)))); }, x);
    auto w2 = gx::uniform<double>(gx::dims(5, 2, 3), 408, -1.0, 1.0);
    CHECK_NUMGRAD(
        [&](auto& p) {
          return gx::sum(
              w2 * gx::tanh(gx::broadcast_to(gx::unsqueeze<1>(p), gx::dims(5, gx::fix<2>, 3))));
        },
        x);
    auto g = gx::grad(gx::sum(gx::broadcast_to(x, gx::dims(4, 5, 3))), x).to_dense();
    for (gx::index_t k = 0; k < g.size(); ++k) CHECK(g.data()[k] == 4.0);
  }
  SUBCASE("reshape of a parameter (either layout)") {
    auto w = gx::uniform<double>(gx::dims(15), 409, -1.0, 1.0);
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(w * gx::tanh(gx::reshape(p, gx::dims(15)))); }, x);
    auto w2 = gx::uniform<double>(gx::dims(3, 5), 410, -1.0, 1.0);
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(w2 * gx::tanh(gx::reshape(p, gx::dims(3, 5)))); },
                  x);
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::tanh(gx::reshape(p, shape<3, 5>{})) * w2); },
                  x);
  }
  SUBCASE("reshape of a non-contiguous expression") {
    auto w = gx::uniform<double>(gx::dims(5, 3), 411, -1.0, 1.0);
    // transpose(p) is 3 x 5; read in its own row-major order and cut into 5 x 3
    CHECK_NUMGRAD(
        [&](auto& p) {
          return gx::sum(w * gx::tanh(gx::reshape(gx::transpose(p), gx::dims(5, 3))));
        },
        x);
    auto w9 = gx::uniform<double>(gx::dims(9), 412, -1.0, 1.0);  // rows 4, 2, 0 flattened
    CHECK_NUMGRAD(
        [&](auto& p) {
          return gx::sum(w9 * gx::exp(gx::reshape(gx::slice<0>(p, 4, -1, -2), gx::dims(9))));
        },
        x);
    auto w3 = gx::uniform<double>(gx::dims(5, 1, 3), 413, -1.0, 1.0);
    CHECK_NUMGRAD(
        [&](auto& p) {
          return gx::sum(
              w3 * gx::reshape(gx::transpose(gx::square(p)) * gx::transpose(p), gx::dims(5, 1, 3)));
        },
        x);
  }
}

TEST_CASE_TEMPLATE("views: compositions of index and view operations", C, GRADIX_AD_CONFIGS) {
  auto x = C::make(421);
  std::vector<int> rows{4, 1, 4, 0};
  std::vector<int> rows2{3, 0, 0, 2, 3};
  std::vector<int> cols{2, 0, 2};
  SUBCASE("slice of a gather of a transpose") {
    // transpose: 3 x 5; gather columns (original rows) -> 3 x 4; slice rows 1..3 -> 2 x 4
    auto w = gx::uniform<double>(gx::dims(2, 4), 422, -1.0, 1.0);
    auto f = [&](auto& p) {
      return gx::sum(w * gx::tanh(gx::slice<0>(gx::gather<1>(gx::transpose(p), rows), 1, 3)));
    };
    CHECK_NUMGRAD(f, x);
    auto g = gx::grad(f(x), x).to_dense();
    for (int i = 0; i < 5; ++i) CHECK(g(i, 0) == 0.0);  // column 0 is sliced away
    for (int j = 0; j < 3; ++j) {
      CHECK(g(2, j) == 0.0);  // rows 2 and 3 are never gathered
      CHECK(g(3, j) == 0.0);
    }
  }
  SUBCASE("gather of a gather") {
    auto w = gx::uniform<double>(gx::dims(5, 3), 423, -1.0, 1.0);
    // rows2 indexes the 4 gathered rows: 3 -> row 0, 0 -> row 4, 2 -> row 4 (again)
    auto f = [&](auto& p) {
      return gx::sum(w * gx::exp(gx::gather<0>(gx::gather<0>(p, rows), rows2)));
    };
    CHECK_NUMGRAD(f, x);
    auto g = gx::grad(gx::sum(gx::gather<0>(gx::gather<0>(x, rows), rows2)), x).to_dense();
    double count[5] = {2, 0, 0, 0, 3};
    for (int i = 0; i < 5; ++i)
      for (int j = 0; j < 3; ++j) CHECK(g(i, j) == count[i]);
    CHECK_NUMGRAD(
        [&](auto& p) {
          return gx::sum(
              gx::tanh(gx::index(p(gx::indices(rows), gx::all), gx::all, gx::indices(cols))));
        },
        x);
  }
  SUBCASE("one parameter through two different gathers") {
    std::vector<int> other{0, 0, 3, 1};
    auto w = gx::uniform<double>(gx::dims(4, 3), 424, -1.0, 1.0);
    CHECK_NUMGRAD(
        [&](auto& p) {
          return gx::sum(w * gx::tanh(gx::gather<0>(p, rows) * gx::gather<0>(p, other)));
        },
        x);
    CHECK_NUMGRAD(
        [&](auto& p) {
          return gx::sum(gx::gather<0>(p, rows) * w) +
                 gx::sum(gx::exp(p(gx::all, gx::indices(cols))));
        },
        x);
  }
  SUBCASE("two overlapping slices of one parameter") {
    CHECK_NUMGRAD(
        [&](auto& p) { return gx::sum(gx::tanh(gx::slice<0>(p, 0, 4) * gx::slice<0>(p, 1, 5))); },
        x);
    CHECK_NUMGRAD(
        [&](auto& p) {
          return gx::sum(gx::exp(gx::slice<1>(p, 0, 2)) - gx::square(gx::slice<1>(p, 1, 3)));
        },
        x);
    // a difference of overlapping slices telescopes: only the ends get a gradient
    auto g = gx::grad(gx::sum(gx::slice<0>(x, 1, 5) - gx::slice<0>(x, 0, 4)), x).to_dense();
    for (int j = 0; j < 3; ++j) {
      CHECK(g(0, j) == -1.0);
      CHECK(g(4, j) == 1.0);
      for (int i = 1; i < 4; ++i) CHECK(g(i, j) == 0.0);
    }
  }
  SUBCASE("select and at inside compositions") {
    auto w = gx::uniform<double>(gx::dims(5), 425, -1.0, 1.0);
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(w * gx::select<0>(gx::transpose(gx::exp(p)), 2)); },
                  x);
    CHECK_NUMGRAD(
        [&](auto& p) {
          return gx::sum(
              gx::tanh(gx::transpose(p) * gx::index(gx::transpose(p), gx::all, gx::at(3))));
        },
        x);
    CHECK_NUMGRAD(
        [&](auto& p) {
          return gx::sum(gx::exp(gx::index(gx::gather<0>(p, rows), gx::at(1), gx::all) - p));
        },
        x);
  }
  SUBCASE("reshape of a gather, gather of a reshape") {
    auto w12 = gx::uniform<double>(gx::dims(12), 427, -1.0, 1.0);
    CHECK_NUMGRAD(
        [&](auto& p) {
          return gx::sum(w12 * gx::tanh(gx::reshape(gx::gather<0>(p, rows), gx::dims(12))));
        },
        x);
    std::vector<int> r3{2, 0, 2};
    auto w35 = gx::uniform<double>(gx::dims(3, 5), 428, -1.0, 1.0);
    CHECK_NUMGRAD(
        [&](auto& p) {
          return gx::sum(w35 * gx::tanh(gx::gather<0>(gx::reshape(p, gx::dims(3, 5)), r3)));
        },
        x);
    CHECK_NUMGRAD(
        [&](auto& p) {
          return gx::sum(gx::tanh(gx::sum<1>(gx::reshape(gx::transpose(p), gx::dims(3, 5)))));
        },
        x);
  }
  SUBCASE("a gather along a new axis: every copy lands on the same element") {
    std::vector<int> zeros3{0, 0, 0};
    auto f = [&](auto& p) { return gx::sum(gx::tanh(gx::gather<0>(gx::unsqueeze<0>(p), zeros3))); };
    CHECK_NUMGRAD(f, x);
    auto g = gx::grad(gx::sum(gx::gather<0>(gx::unsqueeze<0>(x), zeros3)), x).to_dense();
    for (gx::index_t k = 0; k < g.size(); ++k) CHECK(g.data()[k] == 3.0);
  }
  SUBCASE("slices of slices, a gather of a broadcast") {
    CHECK_NUMGRAD(
        [&](auto& p) {
          return gx::sum(gx::exp(gx::slice<0>(gx::slice<0>(p, 4, -1, -1), 1, 4, 2)));
        },
        x);
    auto w = gx::uniform<double>(gx::dims(4, 3), 429, -1.0, 1.0);
    CHECK_NUMGRAD(
        [&](auto& p) {
          return gx::sum(
              w * gx::tanh(gx::gather<0>(
                      gx::broadcast_to(p(gx::at(1), gx::all), gx::dims(5, gx::fix<3>)), rows)));
        },
        x);
  }
  SUBCASE("gather with the identity index equals the parameter (bit for bit)") {
    std::vector<int> id{0, 1, 2, 3, 4};
    auto w = gx::uniform<double>(gx::dims(5, 3), 426, -1.0, 1.0);
    auto a = gx::grad(gx::sum(w * gx::tanh(gx::gather<0>(x, id))), x).to_dense();
    auto b = gx::grad(gx::sum(w * gx::tanh(x)), x).to_dense();
    CHECK(gx::testing::same_bits(a, b));
  }
}

TEST_CASE("views: permute of rank 3 (row- and column-major, dense and sparse storage)") {
  auto xr = gx::param(gx::uniform<double>(gx::dims(2, gx::fix<3>, 4), 431, -1.0, 1.0));
  auto xc = gx::param(gx::uniform<double, gx::col_major>(shape<2, 3, 4>{}, 432, -1.0, 1.0),
                      gx::sparse_grad<2>);
  auto xs = gx::param(gx::uniform<double>(shape<2, 3, 4>{}, 433, -1.0, 1.0), gx::sparse_grad<1>);
  auto w = gx::uniform<double>(gx::dims(4, 2, 3), 434, -1.0, 1.0);
  auto w2 = gx::uniform<double>(gx::dims(3, 4, 2), 435, -1.0, 1.0);
  std::vector<int> idx{3, 3, 1};
  auto check = [&](auto& x) {
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(w * gx::tanh(gx::permute<2, 0, 1>(p))); }, x);
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(w2 * gx::tanh(gx::permute<1, 2, 0>(p))); }, x);
    CHECK_NUMGRAD(
        [&](auto& p) {
          return gx::sum(gx::exp(gx::permute<0, 2, 1>(p) *
                                 gx::index(gx::permute<0, 2, 1>(p), gx::at(1), gx::all, gx::all)));
        },
        x);
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::tanh(gx::sum<1>(gx::permute<2, 0, 1>(p)))); },
                  x);
    CHECK_NUMGRAD(
        [&](auto& p) { return gx::sum(gx::tanh(gx::gather<0>(gx::permute<2, 1, 0>(p), idx))); }, x);
    CHECK_NUMGRAD(
        [&](auto& p) {
          return gx::sum(gx::tanh(gx::reshape(gx::permute<2, 0, 1>(p), gx::dims(6, 4))));
        },
        x);
    CHECK_NUMGRAD([&](auto& p) { return gx::max(gx::permute<1, 0, 2>(p) * 2.0); }, x);
    // permuting back is the identity (bit for bit)
    auto a =
        gx::grad(gx::sum(gx::tanh(gx::permute<1, 2, 0>(gx::permute<2, 0, 1>(x)))), x).to_dense();
    auto b = gx::grad(gx::sum(gx::tanh(x)), x).to_dense();
    CHECK(gx::testing::same_bits(a, b));
  };
  SUBCASE("row-major, dynamic first extent, dense") { check(xr); }
  SUBCASE("column-major, static, sparse along axis 2") { check(xc); }
  SUBCASE("row-major, static, sparse along axis 1") { check(xs); }
}

TEST_CASE("views: broadcast_to of a rank-1 parameter into rank 3, and of an at() row") {
  auto b = gx::param(gx::uniform<double>(gx::dims(4), 441, -1.0, 1.0), gx::sparse_grad<0>);
  auto w = gx::uniform<double>(gx::dims(2, 3, 4), 442, -1.0, 1.0);
  CHECK_NUMGRAD(
      [&](auto& p) { return gx::sum(w * gx::tanh(gx::broadcast_to(p, gx::dims(2, 3, 4)))); }, b);
  auto m = gx::param(gx::uniform<double, gx::col_major>(gx::dims(5, 4), 443, -1.0, 1.0));
  auto w2 = gx::uniform<double>(gx::dims(6, 4), 444, -1.0, 1.0);
  CHECK_NUMGRAD(
      [&](auto& p) {
        return gx::sum(w2 * gx::exp(gx::broadcast_to(p(gx::at(3), gx::all), gx::dims(6, 4))));
      },
      m);
  CHECK_NUMGRAD(
      [&](auto& p) {
        return gx::sum(gx::exp(gx::broadcast_to(gx::sum<0>(p, gx::keep_dims), gx::dims(6, 4))) *
                       w2);
      },
      m);
}
