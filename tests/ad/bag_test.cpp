// segment_sum and embedding_bag: values against plain loops (sum, mean, empty bags,
// per-sample weights), gradients against central differences in double with repeated
// indices, into dense and sparse tables (only the rows read get slots) and into parameter
// weights; the plan (one scatter kernel, staged only when the adjoint is not a buffer); the
// errors (offsets, indices, weights).
#include "ad/numgrad.hpp"
#include "testing.hpp"

#include <cmath>
#include <cstdint>
#include <vector>

namespace gx = gradix;
using gx::dyn;
using gx::index_t;
using gx::shape;

namespace {
using TD = gx::tensor<double, shape<dyn, dyn>>;

// bag b of (E, idx, off): sum (or mean) of w[j] * E[idx[j], :]
std::vector<double> ref_bags(TD const& E, std::vector<int> const& idx, std::vector<int> const& off, bool mean,
                             std::vector<double> const* w = nullptr) {
  index_t const D = E.shape().extent(1), nb = index_t(off.size());
  std::vector<double> r(std::size_t(nb * D), 0.0);
  for (index_t b = 0; b < nb; ++b) {
    index_t const e = b + 1 < nb ? off[std::size_t(b + 1)] : index_t(idx.size());
    for (index_t j = off[std::size_t(b)]; j < e; ++j)
      for (index_t d = 0; d < D; ++d)
        r[std::size_t(b * D + d)] += (w ? (*w)[std::size_t(j)] : 1.0) * E(idx[std::size_t(j)], d);
    if (mean && e > off[std::size_t(b)])
      for (index_t d = 0; d < D; ++d) r[std::size_t(b * D + d)] /= double(e - off[std::size_t(b)]);
  }
  return r;
}
}  // namespace

TEST_CASE("embedding_bag: values of sum and mean bags, empty bags, per-sample weights") {
  auto E = gx::uniform<double>(gx::dims(10, 4), 1, -1.0, 1.0);
  std::vector<int> idx = {3, 3, 9, 0, 5, 5, 5, 2};
  std::vector<int> off = {0, 3, 3, 4, 8};  // bags: {3, 3, 9}, {}, {0}, {5, 5, 5, 2}, {}
  std::vector<double> w = {0.5, -1, 2, 1, 0.25, 0.25, 0.5, 3};
  gx::tensor<double, shape<dyn>> wt(gx::dims(8));
  for (index_t j = 0; j < 8; ++j) wt(j) = w[std::size_t(j)];
  for (bool mean : {false, true}) {
    auto got = gx::eval(gx::embedding_bag(E, idx, off, mean ? gx::bag_mode::mean : gx::bag_mode::sum));
    REQUIRE(got.shape().extent(0) == 5);
    REQUIRE(got.shape().extent(1) == 4);
    auto want = ref_bags(E, idx, off, mean);
    for (std::size_t e = 0; e < want.size(); ++e) CHECK(got.data()[e] == doctest::Approx(want[e]).epsilon(1e-15));
  }
  auto gw = gx::eval(gx::embedding_bag(E, idx, off, gx::bag_mode::sum, wt));
  auto want = ref_bags(E, idx, off, false, &w);
  for (std::size_t e = 0; e < want.size(); ++e) CHECK(gw.data()[e] == doctest::Approx(want[e]).epsilon(1e-15));
  // a segment sum of any operand, rank 1 too
  gx::tensor<double, shape<dyn>> v(gx::dims(5));
  for (index_t j = 0; j < 5; ++j) v(j) = double(j + 1);
  std::vector<int> o2 = {0, 2};
  auto s = gx::eval(gx::segment_sum(v * 2.0, o2));
  CHECK(s(0) == 6.0);
  CHECK(s(1) == 24.0);
  auto m = gx::eval(gx::segment_sum(v, o2, gx::bag_mode::mean));
  CHECK(m(0) == 1.5);
  CHECK(m(1) == 4.0);
}

TEST_CASE("embedding_bag: gradients against central differences (dense, sparse, weights, every adjoint form)") {
  std::vector<int> idx = {3, 3, 9, 0, 5, 5, 5, 2, 9};
  std::vector<int> off = {0, 3, 3, 4, 8};
  auto G = gx::uniform<double>(gx::dims(5, 4), 2, -1.0, 1.0);
  auto W = gx::uniform<double>(gx::dims(4, 3), 3, -1.0, 1.0);
  auto G3 = gx::uniform<double>(gx::dims(5, 3), 4, -1.0, 1.0);
  std::vector<int> rows = {4, 0, 0, 2};
  auto check_all = [&](auto& E) {
    for (auto mode : {gx::bag_mode::sum, gx::bag_mode::mean}) {
      CAPTURE(int(mode));
      // the adjoint is an expression: staged through the bag's buffer
      CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::embedding_bag(p, idx, off, mode) * G); }, E);
      CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::tanh(gx::embedding_bag(p * 1.5, idx, off, mode)) * G); }, E);
      // the adjoint is a product's buffer: one scatter straight from it
      CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::matmul(gx::embedding_bag(p, idx, off, mode), W) * G3); }, E);
      // read through a gather (bags repeated): staged
      CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::gather<0>(gx::embedding_bag(p, idx, off, mode), rows)); }, E);
    }
  };
  auto Ed = gx::param(gx::uniform<double>(gx::dims(10, 4), 5, -1.0, 1.0));
  auto Es = gx::param(gx::uniform<double>(gx::dims(10, 4), 5, -1.0, 1.0), gx::sparse_grad<0>);
  check_all(Ed);
  check_all(Es);
  // only the rows read get slots: 3, 9, 0, 5, 2
  Es.grad().zero();
  gx::backward(gx::sum(gx::matmul(gx::embedding_bag(Es, idx, off), W) * G3));
  CHECK(Es.grad().size() == 5);
  // per-sample weights: gradients into the table and into the weights
  auto wp = gx::param(gx::uniform<double>(gx::dims(9), 6, -1.0, 1.0));
  CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::embedding_bag(p, idx, off, gx::bag_mode::sum, wp) * G); }, Ed);
  CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::embedding_bag(Ed, idx, off, gx::bag_mode::sum, p) * G); }, wp);
  // bags under cross-entropy (a text classifier's loss)
  gx::tensor<std::int64_t, shape<dyn>> y(gx::dims(5));
  for (index_t i = 0; i < 5; ++i) y(i) = i % 3;
  CHECK_NUMGRAD([&](auto& p) { return gx::cross_entropy(gx::matmul(gx::embedding_bag(p, idx, off, gx::bag_mode::mean), W), y); }, Ed);
}

TEST_CASE("embedding_bag: the plan is one scatter kernel when the adjoint is a buffer") {
  using E = gx::parameter<float, shape<dyn, dyn>, gx::row_major, gx::sparse_grad_t<0>>;
  using Iv = std::vector<int>;
  using T = gx::tensor<float, shape<dyn, dyn>>;
  using Bag = decltype(gx::embedding_bag(std::declval<E&>(), std::declval<Iv const&>(), std::declval<Iv const&>()));
  // through a product: the product's plan for its left operand is one plain use
  using P1 = gx::backward_plan_t<decltype(gx::sum(gx::matmul(std::declval<Bag>(), std::declval<T&>())))>;
  static_assert(P1::size == 1 && gx::ad::is_product<std::remove_cvref_t<decltype(gx::get<0>(std::declval<P1>()))>>::value);
  using PA = decltype(gx::get<0>(std::declval<P1>()).pa());
  static_assert(std::remove_cvref_t<PA>::size == 1);
  static_assert(gx::ad::is_plain_use<std::remove_cvref_t<decltype(gx::get<0>(std::declval<PA>()))>>::value);
  // under an expression: staged (the adjoint is written into the bag's buffer first)
  using P2 = gx::backward_plan_t<decltype(gx::sum(gx::exp(std::declval<Bag>())))>;
  static_assert(P2::size == 1 && gx::ad::is_staged<std::remove_cvref_t<decltype(gx::get<0>(std::declval<P2>()))>>::value);
  CHECK(true);
}

TEST_CASE("embedding_bag: errors name the offset, index or weights") {
  auto E = gx::uniform<double>(gx::dims(10, 4), 7, -1.0, 1.0);
  std::vector<int> idx = {1, 2, 3};
  std::vector<int> bad0 = {1, 2}, dec = {0, 2, 1}, big = {0, 4};
  CHECK_THROWS_WITH_AS(gx::embedding_bag(E, idx, bad0), "gradix::embedding_bag: offsets[0] is 1; the first bag must start at 0",
                       gx::error);
  CHECK_THROWS_WITH_AS(gx::embedding_bag(E, idx, dec),
                       "gradix::embedding_bag: offsets[2] = 1 is below offsets[1] = 2 (offsets must not decrease)", gx::error);
  CHECK_THROWS_WITH_AS(gx::embedding_bag(E, idx, big), "gradix::embedding_bag: offsets[1] = 4 is out of range for 3 positions",
                       gx::error);
  std::vector<int> out = {1, 10, 3}, off = {0};
  CHECK_THROWS_AS(gx::embedding_bag(E, out, off), gx::error);
  gx::tensor<double, shape<dyn>> w2(gx::dims(2)), w3(gx::dims(3));
  CHECK_THROWS_WITH_AS(gx::embedding_bag(E, idx, off, gx::bag_mode::mean, w3),
                       "gradix::embedding_bag: per-sample weights need bag_mode::sum (as PyTorch)", gx::error);
  CHECK_THROWS_WITH_AS(gx::embedding_bag(E, idx, off, gx::bag_mode::sum, w2),
                       "gradix::embedding_bag: 2 per-sample weights for 3 indices", gx::error);
}
