// Determinism of the backward scatter: a large gather with many duplicate indices gives
// bit-identical gradients (memcmp) with 1, 2, 3 and 4 threads, and across repeated runs; and
// the result agrees with a plain serial loop.
#include "ad/numgrad.hpp"
#include "testing.hpp"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

namespace gx = gradix;
using gx::testing::thread_scope;
using gx::dyn;
using gx::shape;

namespace {

constexpr gx::index_t n_rows = 64;
constexpr gx::index_t n_cols = 200000;
constexpr gx::index_t n_idx = 300000;

std::vector<std::int32_t> duplicate_indices() {
  std::vector<std::int32_t> idx(static_cast<std::size_t>(n_idx));
  for (gx::index_t k = 0; k < n_idx; ++k) idx[std::size_t(k)] = std::int32_t((k * 7919) % 1000);
  return idx;
}

/// Runs `run(p)` (one backward into p's zeroed gradient) with 1..4 threads, twice each, and
/// checks that every gradient is bit-identical to the first. Returns the first gradient.
template <class P, class F>
auto check_bit_identical(P& p, F&& run) {
  thread_scope guard;
  gx::set_num_threads(1);
  gx::zero_grad(p);
  run(p);
  auto ref = p.grad().to_dense();
  for (int t = 1; t <= 4; ++t) {
    gx::set_num_threads(t);
    for (int rep = 0; rep < 2; ++rep) {
      gx::zero_grad(p);
      run(p);
      auto g = p.grad().to_dense();
      CHECK_MESSAGE(gx::testing::same_bits(g, ref), "threads ", t, ", run ", rep);
    }
  }
  return ref;
}

}  // namespace

TEST_CASE(
    "threads: a large gather along axis 1 with duplicate indices is bit-identical for 1-4 "
    "threads") {
  auto idx = duplicate_indices();
  // weights that differ per gathered position, so the order of the additions matters
  auto c = gx::uniform<float>(gx::dims(gx::fix<1>, n_idx), 601, 0.5f, 1.5f);
  auto loss = [&](auto& p) { return gx::sum(c * gx::tanh(p(gx::all, gx::indices(idx)))); };

  auto check_against_serial = [&](auto const& g, auto const& value) {
    // column j of the gradient: sum over the k with idx[k] == j of c[k] * (1 - tanh^2)
    for (std::int32_t j : {0, 1, 499, 999}) {
      for (gx::index_t i : {gx::index_t(0), gx::index_t(37), n_rows - 1}) {
        double t = std::tanh(double(value(i, j)));
        double want = 0;
        for (gx::index_t k = 0; k < n_idx; ++k)
          if (idx[std::size_t(k)] == j) want += double(c(0, k)) * (1 - t * t);
        CHECK_MESSAGE(double(g(i, j)) == doctest::Approx(want).epsilon(1e-4), "at ", i, ", ", j);
      }
    }
    CHECK(g(5, 1000) == 0.0f);  // never read
    CHECK(g(63, n_cols - 1) == 0.0f);
  };

  SUBCASE("row-major, dense gradient") {
    auto p = gx::param(gx::uniform<float>(gx::dims(n_rows, n_cols), 602, -1.0f, 1.0f));
    auto g = check_bit_identical(p, [&](auto& q) { gx::backward_only(loss(q)); });
    check_against_serial(g, p.value());
  }
  SUBCASE("row-major, sparse gradient along axis 1") {
    auto p = gx::param(gx::uniform<float>(gx::dims(n_rows, n_cols), 602, -1.0f, 1.0f),
                       gx::sparse_grad<1>);
    auto g = check_bit_identical(p, [&](auto& q) { gx::backward_only(loss(q)); });
    CHECK(p.grad().size() == 1000);
    check_against_serial(g, p.value());
  }
  SUBCASE("column-major, dense gradient along axis 1") {
    auto p =
        gx::param(gx::uniform<float, gx::col_major>(gx::dims(n_rows, n_cols), 602, -1.0f, 1.0f),
                  gx::dense_grad<1>);
    auto g = check_bit_identical(p, [&](auto& q) { gx::backward_only(loss(q)); });
    check_against_serial(g, p.value());
  }
}

TEST_CASE("threads: a large gather along axis 0 (an embedding table) in double is bit-identical") {
  auto idx = duplicate_indices();
  auto c = gx::uniform<double>(gx::dims(n_idx, gx::fix<1>), 611, 0.5, 1.5);
  auto p = gx::param(gx::uniform<double>(gx::dims(n_cols, gx::fix<64>), 612, -1.0, 1.0),
                     gx::sparse_grad<0>);
  auto g = check_bit_identical(
      p, [&](auto& q) { gx::backward_only(gx::sum(c * gx::sigmoid(gx::gather<0>(q, idx)))); });
  CHECK(p.grad().size() == 1000);
  CHECK(p.grad().id(0) == 0);  // first touch: idx[0] = 0, idx[1] = 7919 % 1000 = 919
  CHECK(p.grad().id(1) == 919);
  double s = 1.0 / (1.0 + std::exp(-p.value()(919, 5)));
  double want = 0;
  for (gx::index_t k = 0; k < n_idx; ++k)
    if (idx[std::size_t(k)] == 919) want += c(k, 0) * s * (1 - s);
  CHECK(g(919, 5) == doctest::Approx(want).epsilon(1e-12));
}

TEST_CASE("threads: a large elementwise + reduction backward is bit-identical for 1-4 threads") {
  auto p = gx::param(gx::uniform<double>(gx::dims(512, 700), 621, -1.0, 1.0));
  auto m = gx::uniform<double>(gx::dims(512, 700), 622, -1.0, 1.0);
  check_bit_identical(p, [&](auto& q) {
    gx::backward_only(gx::sum(gx::square(gx::sum<1>(gx::tanh(q) * m))) +
                      gx::sum(gx::exp(gx::sum<0>(q * m) * 0.01)));
  });
}
