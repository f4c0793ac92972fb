// logsumexp, softmax, log_softmax and cross_entropy: values against plain double loops,
// stability with logits of 1e4, gradients against central differences in double precision
// and against the hand formula (softmax - one_hot) / B, the kept row statistics, and the
// errors for bad targets.
#include "ad/configs.hpp"
#include "ad/numgrad.hpp"
#include "testing.hpp"

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace gx = gradix;
using gx::dyn;
using gx::index_t;
using gx::shape;

namespace {
using TD = gx::tensor<double, shape<dyn, dyn>>;
using VI = gx::tensor<std::int64_t, shape<dyn>>;

// row-wise log-sum-exp of a (rows x cols) row-major array, in long double
long double lse_row(double const* p, index_t n) {
  long double m = p[0];
  for (index_t j = 1; j < n; ++j) m = std::max<long double>(m, p[j]);
  long double s = 0;
  for (index_t j = 0; j < n; ++j) s += std::exp((long double)p[j] - m);
  return m + std::log(s);
}
}  // namespace

TEST_CASE("softmax family: values against plain loops, both axes, keep_dims") {
  index_t const rows = 6, cols = 11;
  auto x = gx::uniform<double>(gx::dims(rows, cols), 41, -3.0, 3.0);
  auto lse = gx::eval(gx::logsumexp<1>(x));
  auto lsek = gx::eval(gx::logsumexp<-1>(x, gx::keep_dims));
  auto sm = gx::eval(gx::softmax<1>(x));
  auto ls = gx::eval(gx::log_softmax<1>(x));
  static_assert(gx::rank_v<gx::shape_of_t<decltype(lse)>> == 1);
  static_assert(std::is_same_v<gx::shape_of_t<decltype(lsek)>, shape<dyn, 1>>);
  for (index_t i = 0; i < rows; ++i) {
    double want = double(lse_row(x.data() + i * cols, cols));
    CHECK(lse(i) == doctest::Approx(want).epsilon(1e-14));
    CHECK(lsek(i, 0) == doctest::Approx(want).epsilon(1e-14));
    double total = 0;
    for (index_t j = 0; j < cols; ++j) {
      CHECK(sm(i, j) == doctest::Approx(std::exp(x(i, j) - want)).epsilon(1e-13));
      CHECK(ls(i, j) == doctest::Approx(x(i, j) - want).epsilon(1e-13));
      total += sm(i, j);
    }
    CHECK(total == doctest::Approx(1.0).epsilon(1e-14));
  }
  // over axis 0: the transpose's rows
  auto s0 = gx::eval(gx::softmax<0>(x));
  for (index_t j = 0; j < cols; ++j) {
    std::vector<double> column(static_cast<std::size_t>(rows));
    for (index_t i = 0; i < rows; ++i) column[std::size_t(i)] = x(i, j);
    double want = double(lse_row(column.data(), rows));
    for (index_t i = 0; i < rows; ++i) CHECK(s0(i, j) == doctest::Approx(std::exp(x(i, j) - want)).epsilon(1e-13));
  }
}

TEST_CASE("softmax family: logits of 1e4 stay finite and exact in float") {
  gx::tensor<float, shape<2, 3>> z{1e4f, 0.f, -1e4f, 1e4f, 1e4f, 1e4f - 1.f};
  auto sm = gx::eval(gx::softmax<1>(z));
  auto ls = gx::eval(gx::log_softmax<1>(z));
  auto lse = gx::eval(gx::logsumexp<1>(z));
  CHECK(sm(0, 0) == 1.f);
  CHECK(sm(0, 1) == 0.f);
  CHECK(ls(0, 0) == 0.f);
  CHECK(ls(0, 1) == -1e4f);
  CHECK(lse(0) == 1e4f);
  // row 1: two of 1e4 and one 1e4 - 1
  float const e1 = std::exp(-1.f);
  // exp(x - m) / s: float accuracy (exp(x - logsumexp) would be off by 1e4 x 6e-8 = 6e-4)
  CHECK(sm(1, 0) == doctest::Approx(1.0 / (2.0 + e1)).epsilon(1e-6));
  CHECK(sm(1, 2) == doctest::Approx(e1 / (2.0 + e1)).epsilon(1e-6));
  CHECK(ls(1, 2) == doctest::Approx(-1.0 - std::log(2.0 + e1)).epsilon(1e-6));
  CHECK(lse(1) == doctest::Approx(1e4 + std::log(2.0 + e1)).epsilon(1e-7));
  VI y(gx::dims(2));
  y(0) = 2;
  y(1) = 0;
  auto Z = gx::param(gx::tensor<float, shape<2, 3>>(z));
  float l = gx::backward(gx::cross_entropy(Z, y));
  CHECK(std::isfinite(l));
  CHECK(l == doctest::Approx((2e4 + std::log(2.0 + e1)) / 2).epsilon(1e-6));
  auto g = Z.grad().to_dense();
  for (int k = 0; k < 6; ++k) CHECK(std::isfinite(g.data()[k]));
  CHECK(g(0, 2) == doctest::Approx(-0.5));  // (softmax 0 - 1) / 2
}

TEST_CASE_TEMPLATE("softmax family: gradients match central differences", C, GRADIX_AD_CONFIGS) {
  auto x = C::make(42, -2.0, 2.0);
  auto w = C::values(43);
  index_t const rows = x.shape().extent(0);
  VI y(gx::dims(rows));
  for (index_t i = 0; i < rows; ++i) y(i) = (i * 2 + 1) % 3;
  gx::tensor<double, shape<dyn>> cw(gx::dims(3));
  cw(0) = 0.5;
  cw(1) = 2.0;
  cw(2) = 1.25;
  SUBCASE("logsumexp") {
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::logsumexp<1>(p * 3.0) * gx::select<1>(w, 0)); }, x);
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::logsumexp<0>(p)); }, x);
  }
  SUBCASE("softmax") {
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::softmax<1>(p) * w); }, x);
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::softmax<0>(p * 2.0) * w); }, x);
  }
  SUBCASE("log_softmax") {
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::log_softmax<1>(p) * w); }, x);
  }
  SUBCASE("cross_entropy, plain and with class weights") {
    CHECK_NUMGRAD([&](auto& p) { return gx::cross_entropy(p, y); }, x);
    CHECK_NUMGRAD([&](auto& p) { return gx::cross_entropy(p * 2.0 - 1.0, y, cw); }, x);
  }
}

TEST_CASE("cross_entropy: the gradient is (softmax - one_hot) / B, the loss -mean log softmax at the targets") {
  index_t const B = 37, Cn = 13;
  auto Z = gx::param(gx::uniform<double>(gx::dims(B, Cn), 44, -4.0, 4.0));
  VI y(gx::dims(B));
  for (index_t i = 0; i < B; ++i) y(i) = (i * 7) % Cn;
  double l = gx::backward(gx::cross_entropy(Z, y));
  auto g = Z.grad().to_dense();
  long double want_l = 0;
  for (index_t i = 0; i < B; ++i) {
    long double lse = lse_row(Z.value().data() + i * Cn, Cn);
    want_l += lse - Z.value()(i, y(i));
    for (index_t j = 0; j < Cn; ++j) {
      double sm = double(std::exp((long double)Z.value()(i, j) - lse));
      double want = (sm - (j == y(i) ? 1.0 : 0.0)) / double(B);
      CHECK(g(i, j) == doctest::Approx(want).epsilon(1e-12));
    }
  }
  CHECK(l == doctest::Approx(double(want_l / B)).epsilon(1e-13));
  // weighted: sum_i w[t_i] (lse_i - z_{i, t_i}) / sum_i w[t_i]
  gx::tensor<double, shape<dyn>> cw(gx::dims(Cn));
  for (index_t j = 0; j < Cn; ++j) cw(j) = 0.5 + 0.1 * double(j);
  long double num = 0, den = 0;
  for (index_t i = 0; i < B; ++i) {
    long double wi = cw(y(i));
    num += wi * (lse_row(Z.value().data() + i * Cn, Cn) - Z.value()(i, y(i)));
    den += wi;
  }
  CHECK(gx::value(gx::cross_entropy(Z, y, cw)) == doctest::Approx(double(num / den)).epsilon(1e-13));
}

TEST_CASE("cross_entropy: only row statistics are kept; its plan is two kernels, no arg-max") {
  index_t const B = 64, Cn = 10;
  auto Z = gx::param(gx::uniform<float>(gx::dims(B, Cn), 45, -1.f, 1.f));
  VI y(gx::dims(B));
  for (index_t i = 0; i < B; ++i) y(i) = i % Cn;
  auto loss = gx::cross_entropy(Z, y);
  // the row max (read twice, as written) and the row sum: one float per row each
  static_assert(gx::ad::buffer_count_v<decltype(loss)> == 3);
  // one kernel for the softmax part, one scatter at the targets
  static_assert(gx::backward_plan_t<decltype(loss)>::size == 2);
  // 3 x 256 bytes (whole lines), and the row sum's adjoint buffer (a kept sum has one in a
  // backward call: docs/ad.md, "Adjoints of reductions")
  CHECK(gx::workspace_bytes(loss) == 4 * std::size_t(B) * sizeof(float));
}

TEST_CASE("cross_entropy: bad targets and shapes are errors that name them") {
  auto Z = gx::param(gx::uniform<float>(gx::dims(4, 3), 46, -1.f, 1.f));
  VI y(gx::dims(4));
  for (int i = 0; i < 4; ++i) y(i) = i % 3;
  y(2) = 3;
  CHECK_THROWS_WITH_AS((void)gx::cross_entropy(Z, y),
                       doctest::Contains("gradix::take_along: position 3 at [2, 0] is out of range for axis 1 of extent 3"),
                       gx::error);
  y(2) = -1;
  CHECK_THROWS_WITH_AS((void)gx::cross_entropy(Z, y), doctest::Contains("position -1 at [2, 0]"), gx::error);
  VI short_y(gx::dims(3));
  CHECK_THROWS_WITH_AS((void)gx::cross_entropy(Z, short_y),
                       doctest::Contains("gradix::cross_entropy: 3 targets for a batch of 4 logits rows"), gx::error);
  gx::tensor<float, shape<dyn>> cw(gx::dims(2));
  y(2) = 0;
  CHECK_THROWS_WITH_AS((void)gx::cross_entropy(Z, y, cw),
                       doctest::Contains("gradix::cross_entropy: 2 class weights for 3 classes"), gx::error);
}
