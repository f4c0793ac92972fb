// Shared sub-expressions (expr/let.hpp, ad::let): softmax, log_softmax, logsumexp and
// cross_entropy over operands that keep values (matrix products, reductions) compute them
// once and push their gradient once. Values against the same functions of the materialised
// operand, gradients against central differences in double precision and against the hand
// formula X^T (softmax - one_hot) / B, the kept buffers and the plan's shape (one product
// per layer, whatever the number of reads), grad() and detached operands, nested lets.
#include "ad/configs.hpp"
#include "ad/numgrad.hpp"
#include "testing.hpp"
#include "ad/plan_count.hpp"

#include <cmath>
#include <cstdint>
#include <vector>

namespace gx = gradix;
using gx::dyn;
using gx::index_t;
using gx::shape;

namespace {
using TD = gx::tensor<double, shape<dyn, dyn>>;
using VD = gx::tensor<double, shape<dyn>>;
using VI = gx::tensor<std::int64_t, shape<dyn>>;


VI labels(index_t n, index_t classes) {
  VI y(gx::dims(n));
  for (index_t i = 0; i < n; ++i) y(i) = (i * 5 + 2) % classes;
  return y;
}
}  // namespace

// Types: cross_entropy's let over an operand that keeps nothing is no let; over a product it
// is one. softmax and log_softmax are kept nodes of their own (they read their operand
// once per pass of the row, into their buffer), whatever the operand.
using PF = gx::parameter<float, shape<dyn, dyn>>;
using TF = gx::tensor<float, shape<dyn, dyn>>;
using VL = gx::tensor<std::int64_t, shape<dyn>>;
static_assert(!gx::is_let_node<decltype(gx::cross_entropy(std::declval<PF&>(), std::declval<VL&>()).arg_)>::value);
static_assert(gx::is_let_node<decltype(gx::cross_entropy(gx::matmul(std::declval<TF&>(), std::declval<PF&>()), std::declval<VL&>()).arg_)>::value);
static_assert(gx::is_row_node<decltype(gx::softmax<1>(std::declval<PF&>() * 2.f + 1.f))>::value);
static_assert(gx::is_row_node<decltype(gx::log_softmax<1>(gx::sum<2>(std::declval<gx::parameter<float, shape<dyn, dyn, dyn>>&>())))>::value);

TEST_CASE("let: softmax family over a product equals the same over the materialised logits") {
  index_t const B = 9, K = 7, Cn = 5;
  auto X = gx::uniform<double>(gx::dims(B, K), 301, -1.0, 1.0);
  auto W = gx::param(gx::uniform<double>(gx::dims(K, Cn), 302, -1.0, 1.0));
  auto b = gx::param(gx::uniform<double>(gx::dims(Cn), 303, -0.5, 0.5));
  auto z = [&] { return gx::matmul(X, W) + b; };
  TD Z = gx::eval(z());
  VI y = labels(B, Cn);
  VD cw(gx::dims(Cn));
  for (index_t j = 0; j < Cn; ++j) cw(j) = 0.25 + 0.5 * double(j);
  auto same = [](auto const& a, auto const& r) {
    auto s = a.shape();
    for (index_t k = 0; k < s.size(); ++k) {
      auto c = gx::detail::unravel(s, k);
      CHECK(a[c] == doctest::Approx(r[c]).epsilon(1e-14));
    }
  };
  same(gx::eval(gx::softmax<1>(z())), gx::eval(gx::softmax<1>(Z)));
  same(gx::eval(gx::softmax<0>(z())), gx::eval(gx::softmax<0>(Z)));
  same(gx::eval(gx::log_softmax<1>(z())), gx::eval(gx::log_softmax<1>(Z)));
  same(gx::eval(gx::logsumexp<1>(z())), gx::eval(gx::logsumexp<1>(Z)));
  same(gx::eval(gx::logsumexp<0>(z(), gx::keep_dims)), gx::eval(gx::logsumexp<0>(Z, gx::keep_dims)));
  CHECK(gx::value(gx::cross_entropy(z(), y)) == doctest::Approx(gx::value(gx::cross_entropy(Z, y))).epsilon(1e-14));
  CHECK(gx::value(gx::cross_entropy(z(), y, cw)) ==
        doctest::Approx(gx::value(gx::cross_entropy(Z, y, cw))).epsilon(1e-14));
  // the value backward returns is the loss
  CHECK(gx::backward(gx::cross_entropy(z(), y)) == doctest::Approx(gx::value(gx::cross_entropy(Z, y))).epsilon(1e-14));
}

TEST_CASE("let: gradients through a shared product match central differences") {
  index_t const B = 6, K = 5, Cn = 4;
  auto X0 = gx::uniform<double>(gx::dims(B, K), 311, -1.0, 1.0);
  auto W0 = gx::uniform<double>(gx::dims(K, Cn), 312, -1.0, 1.0);
  auto b0 = gx::uniform<double>(gx::dims(Cn), 313, -0.5, 0.5);
  auto w = gx::uniform<double>(gx::dims(B, Cn), 314, -1.0, 1.0);
  VI y = labels(B, Cn);
  VD cw(gx::dims(Cn));
  for (index_t j = 0; j < Cn; ++j) cw(j) = 0.5 + 0.25 * double(j);
  SUBCASE("into the right operand of the product") {
    auto W = gx::param(W0);
    CHECK_NUMGRAD([&](auto& p) { return gx::cross_entropy(gx::matmul(X0, p) + b0, y); }, W);
    CHECK_NUMGRAD([&](auto& p) { return gx::cross_entropy(gx::matmul(X0, p) * 2.0, y, cw); }, W);
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::softmax<1>(gx::matmul(X0, p)) * w); }, W);
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::softmax<0>(gx::matmul(X0, p)) * w); }, W);
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::log_softmax<1>(gx::matmul(X0, p) - 1.0) * w); }, W);
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::logsumexp<1>(gx::matmul(X0, p))); }, W);
  }
  SUBCASE("into the left operand and the bias") {
    auto X = gx::param(X0);
    CHECK_NUMGRAD([&](auto& p) { return gx::cross_entropy(gx::matmul(p, W0) + b0, y); }, X);
    auto b = gx::param(b0);
    CHECK_NUMGRAD([&](auto& p) { return gx::cross_entropy(gx::matmul(X0, W0) + p, y); }, b);
  }
  SUBCASE("the operand read besides the let, and two lets over one operand") {
    auto W = gx::param(W0);
    CHECK_NUMGRAD([&](auto& p) {
      return gx::cross_entropy(gx::matmul(X0, p), y) + gx::sum(gx::square(p)) * 0.5 +
             gx::sum(gx::softmax<0>(gx::matmul(X0, p)) * w);
    }, W);
  }
  SUBCASE("nested lets, and a let over a reduction") {
    auto W = gx::param(W0);
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::softmax<1>(gx::log_softmax<1>(gx::matmul(X0, p))) * w); }, W);
    CHECK_NUMGRAD([&](auto& p) { return gx::cross_entropy(gx::log_softmax<1>(gx::matmul(X0, p) + b0), y); }, W);
    auto x3 = gx::param(gx::uniform<double>(gx::dims(B, Cn, 3), 315, -1.0, 1.0));
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::softmax<1>(gx::sum<2>(p)) * w); }, x3);
    CHECK_NUMGRAD([&](auto& p) { return gx::cross_entropy(gx::max<2>(p), y); }, x3);
  }
  SUBCASE("a detached operand passes no gradient") {
    auto W = gx::param(W0);
    auto e = gx::cross_entropy(gx::detach(gx::matmul(X0, W)), y) + gx::sum(W * 3.0);
    (void)gx::backward(e);
    auto g = W.grad().to_dense();
    for (index_t k = 0; k < K; ++k)
      for (index_t j = 0; j < Cn; ++j) CHECK(g(k, j) == 3.0);
  }
}

TEST_CASE("let: the cross-entropy gradient of a linear layer is X^T (softmax - one_hot) / B") {
  index_t const B = 33, K = 17, Cn = 11;
  auto X = gx::uniform<double>(gx::dims(B, K), 321, -1.0, 1.0);
  auto W = gx::param(gx::uniform<double>(gx::dims(K, Cn), 322, -1.0, 1.0));
  auto b = gx::param(gx::uniform<double>(gx::dims(Cn), 323, -0.5, 0.5));
  VI y = labels(B, Cn);
  TD Z = gx::eval(gx::matmul(X, W) + b);
  TD S = gx::eval(gx::softmax<1>(Z));
  (void)gx::backward(gx::cross_entropy(gx::matmul(X, W) + b, y));
  auto gW = W.grad().to_dense();
  auto gb = b.grad().to_dense();
  for (index_t j = 0; j < Cn; ++j) {
    long double wb = 0;
    for (index_t i = 0; i < B; ++i) wb += (S(i, j) - (y(i) == j ? 1.0 : 0.0)) / double(B);
    CHECK(gb(j) == doctest::Approx(double(wb)).epsilon(1e-12));
    for (index_t k = 0; k < K; ++k) {
      long double want = 0;
      for (index_t i = 0; i < B; ++i) want += X(i, k) * (S(i, j) - (y(i) == j ? 1.0 : 0.0)) / double(B);
      CHECK(gW(k, j) == doctest::Approx(double(want)).epsilon(1e-12));
    }
  }
  // grad() gives the same, into storage of its own
  auto g2 = gx::grad(gx::cross_entropy(gx::matmul(X, W) + b, y), W).to_dense();
  for (index_t k = 0; k < K; ++k)
    for (index_t j = 0; j < Cn; ++j) CHECK(g2(k, j) == doctest::Approx(gW(k, j)).epsilon(1e-14));
}

TEST_CASE("let: the operand is kept once, and its product planned once") {
  index_t const B = 64, K = 32, H = 16, Cn = 10;
  TF X = gx::uniform<float>(gx::dims(B, K), 331, -1.f, 1.f);
  auto W1 = gx::param(gx::uniform<float>(gx::dims(K, H), 332, -1.f, 1.f));
  auto W2 = gx::param(gx::uniform<float>(gx::dims(H, Cn), 333, -1.f, 1.f));
  auto b2 = gx::param(gx::uniform<float>(gx::dims(Cn), 334, -1.f, 1.f));
  VI y = labels(B, Cn);
  auto loss = gx::cross_entropy(gx::matmul(gx::relu(gx::matmul(X, W1)), W2) + b2, y);
  using L = decltype(loss);
  // two products, the let's buffer of the logits, the row max (read twice) and the row sum
  static_assert(gx::ad::buffer_count_v<L> == 2 + 1 + 3);
  using P = gx::backward_plan_t<L>;
  static_assert(gx::testing::lets_in_v<P> == 1);
  static_assert(gx::testing::products_in_v<P> == 2);  // each product once (without the let: 2 reads x 2)
  // softmax alone: kept, its operand's product planned once, under one softmax use
  using SM = decltype(gx::sum(gx::softmax<1>(gx::matmul(X, W1))));
  static_assert(gx::testing::products_in_v<gx::backward_plan_t<SM>> == 1);
  static_assert(gx::testing::rows_in_v<gx::backward_plan_t<SM>> == 1);
  // buffers: products (B x H, B x Cn) + copy of relu(X W1) (B x H) + logits (B x Cn) + row
  // stats, and in a backward call the adjoints of the products, of the product operands and
  // of the logits
  (void)gx::backward(loss);
  CHECK(gx::workspace_capacity() >= gx::workspace_bytes(loss));
  std::size_t const cap = gx::workspace_capacity();
  (void)gx::backward(loss);
  CHECK(gx::workspace_capacity() == cap);  // warm: nothing grows
}

TEST_CASE_TEMPLATE("let: gradients into every parameter configuration (layouts, dense and sparse storage)", C, GRADIX_AD_CONFIGS) {
  auto x = C::make(341, -2.0, 2.0);  // (rows, cols) parameter
  index_t const rows = x.shape().extent(0), cols = x.shape().extent(1);
  auto M = gx::uniform<double>(gx::dims(cols, cols), 342, -1.0, 1.0);
  VI y(gx::dims(rows));
  for (index_t i = 0; i < rows; ++i) y(i) = i % cols;
  CHECK_NUMGRAD([&](auto& p) { return gx::cross_entropy(gx::matmul(p, M), y); }, x);
  CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::log_softmax<1>(gx::matmul(p, M)) * 0.5); }, x);
}
