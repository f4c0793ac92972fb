// Normalization layers and GELU (expr/norm.hpp, op::gelu, op::gelu_tanh): values against
// loops in double precision, gradients against central differences (every axis of a rank-3
// operand, with and without affine parameters, into x, gamma and beta), float against double,
// erf in constant evaluation, and the errors a bad gamma or beta raises.
#include "ad/numgrad.hpp"
#include "testing.hpp"

#include <cmath>
#include <string>

namespace gx = gradix;
using gx::dyn;
using gx::index_t;
using gx::shape;

// erf in constant evaluation (core/math.hpp, cerf) against values to 16 digits.
static_assert(gx::math::erf(0.0) == 0.0);
static_assert(gx::math::erf(0.5) > 0.5204998778130464 && gx::math::erf(0.5) < 0.5204998778130467);
static_assert(gx::math::erf(-1.5) < -0.9661051464753106 && gx::math::erf(-1.5) > -0.9661051464753109);
static_assert(gx::math::erf(3.5) > 0.9999992569016275 && gx::math::erf(3.5) < 0.9999992569016278);
static_assert(gx::math::erf(7.0) == 1.0);
static_assert(gx::math::erfc(4.0) > 1.541725790028001e-08 * (1 - 1e-14) && gx::math::erfc(4.0) < 1.541725790028001e-08 * (1 + 1e-14));
static_assert(gx::math::erfc(-2.0) > 1.9953222650189527 && gx::math::erfc(-2.0) < 1.995322265018953);
static_assert(gx::math::erfc(0.25) > 0.7236736098317630 && gx::math::erfc(0.25) < 0.7236736098317632);

namespace {
using T3 = gx::tensor<double, shape<dyn, dyn, dyn>>;

// layer norm / rms norm of x over axis ax, by loops (double).
T3 reference_norm(T3 const& x, int ax, bool centre, double eps) {
  T3 out(x.shape());
  index_t const n0 = x.shape().extent(0), n1 = x.shape().extent(1), n2 = x.shape().extent(2);
  index_t const n[3] = {n0, n1, n2};
  auto at = [&](index_t a, index_t b, index_t c, index_t k) -> index_t const* {
    static thread_local index_t idx[3];
    idx[0] = a;
    idx[1] = b;
    idx[2] = c;
    idx[ax] = k;
    return idx;
  };
  for (index_t a = 0; a < (ax == 0 ? 1 : n0); ++a)
    for (index_t b = 0; b < (ax == 1 ? 1 : n1); ++b)
      for (index_t c = 0; c < (ax == 2 ? 1 : n2); ++c) {
        double m = 0, v = 0;
        for (index_t k = 0; k < n[ax]; ++k) {
          auto i = at(a, b, c, k);
          m += x(i[0], i[1], i[2]);
        }
        m = centre ? m / double(n[ax]) : 0.0;
        for (index_t k = 0; k < n[ax]; ++k) {
          auto i = at(a, b, c, k);
          double d = x(i[0], i[1], i[2]) - m;
          v += d * d;
        }
        v /= double(n[ax]);
        for (index_t k = 0; k < n[ax]; ++k) {
          auto i = at(a, b, c, k);
          out(i[0], i[1], i[2]) = (x(i[0], i[1], i[2]) - m) / std::sqrt(v + eps);
        }
      }
  return out;
}
}  // namespace

TEST_CASE("layer_norm and rms_norm: values over every axis equal loops in double") {
  auto X = gx::uniform<double>(gx::dims(3, 4, 5), 1201, -2.0, 2.0);
  auto check = [&](auto const& got, T3 const& want) {
    for (index_t a = 0; a < 3; ++a)
      for (index_t b = 0; b < 4; ++b)
        for (index_t c = 0; c < 5; ++c) CHECK(got(a, b, c) == doctest::Approx(want(a, b, c)).epsilon(1e-12));
  };
  check(gx::eval(gx::layer_norm(X)), reference_norm(X, 2, true, 1e-5));
  check(gx::eval(gx::layer_norm<-1>(X, 0.5)), reference_norm(X, 2, true, 0.5));
  check(gx::eval(gx::layer_norm<1>(X)), reference_norm(X, 1, true, 1e-5));
  check(gx::eval(gx::layer_norm<0>(X)), reference_norm(X, 0, true, 1e-5));
  check(gx::eval(gx::rms_norm(X)), reference_norm(X, 2, false, 1e-6));
  check(gx::eval(gx::rms_norm<0>(X, 1e-3)), reference_norm(X, 0, false, 1e-3));
  SUBCASE("affine parameters broadcast along the other axes") {
    auto g = gx::uniform<double>(gx::dims(4), 1202, 0.5, 1.5);
    auto b = gx::uniform<double>(gx::dims(4), 1203, -0.5, 0.5);
    auto got = gx::eval(gx::layer_norm<1>(X, g, b));
    auto got_rms = gx::eval(gx::rms_norm<-2>(X, g));
    auto want = reference_norm(X, 1, true, 1e-5);
    auto want_rms = reference_norm(X, 1, false, 1e-6);
    for (index_t i = 0; i < 3; ++i)
      for (index_t j = 0; j < 4; ++j)
        for (index_t k = 0; k < 5; ++k) {
          CHECK(got(i, j, k) == doctest::Approx(want(i, j, k) * g(j) + b(j)).epsilon(1e-12));
          CHECK(got_rms(i, j, k) == doctest::Approx(want_rms(i, j, k) * g(j)).epsilon(1e-12));
        }
  }
}

TEST_CASE("layer_norm and rms_norm: gradients match central differences") {
  auto X0 = gx::uniform<double>(gx::dims(2, 3, 4), 1211, -2.0, 2.0);
  auto W = gx::uniform<double>(gx::dims(2, 3, 4), 1212, -1.0, 1.0);  // weights of the loss
  auto Wm = gx::uniform<double>(gx::dims(4, 3), 1213, -1.0, 1.0);
  auto X = gx::param(X0);
  CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::layer_norm(p) * W); }, X);
  CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::layer_norm<0>(p) * W); }, X);
  CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::layer_norm<1>(p * 2.0 + 1.0) * W); }, X);
  CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::square(gx::matmul(gx::layer_norm(p), Wm))); }, X);
  CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::rms_norm(p) * W); }, X);
  CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::rms_norm<1>(gx::tanh(p)) * W); }, X);
  SUBCASE("into gamma and beta") {
    auto g = gx::param(gx::uniform<double>(gx::dims(4), 1214, 0.5, 1.5));
    auto b = gx::param(gx::uniform<double>(gx::dims(4), 1215, -0.5, 0.5));
    auto g1 = gx::param(gx::uniform<double>(gx::dims(3), 1216, 0.5, 1.5));
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::square(gx::layer_norm(X0, p, b))); }, g);
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::square(gx::layer_norm(X0, g, p)) * W); }, b);
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::square(gx::layer_norm(p, g, b)) * W); }, X);
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::rms_norm<1>(X0, p) * W); }, g1);
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::square(gx::rms_norm<1>(p, g1))); }, X);
  }
}

TEST_CASE("layer_norm: a gamma or beta of the wrong extent names the op, the axis and both extents") {
  auto X = gx::uniform<double>(gx::dims(2, 3, 4), 1221, -1.0, 1.0);
  auto g3 = gx::uniform<double>(gx::dims(3), 1222, -1.0, 1.0);
  auto g4 = gx::uniform<double>(gx::dims(4), 1223, -1.0, 1.0);
  std::string msg;
  try {
    (void)gx::layer_norm(X, g4, g3);
  } catch (gx::error const& e) {
    msg = e.what();
  }
  CHECK(msg.find("layer_norm") != std::string::npos);
  CHECK(msg.find("beta has extent 3") != std::string::npos);
  CHECK(msg.find("axis 2") != std::string::npos);
  CHECK(msg.find("extent 4") != std::string::npos);
  msg.clear();
  try {
    (void)gx::rms_norm<1>(X, g4);
  } catch (gx::error const& e) {
    msg = e.what();
  }
  CHECK(msg.find("rms_norm: gamma has extent 4, but axis 1") != std::string::npos);
}

TEST_CASE("gelu and gelu_tanh: values, float against double, gradients") {
  auto X0 = gx::uniform<double>(gx::dims(7, 9), 1231, -5.0, 5.0);
  X0(0, 0) = 0.0;
  X0(0, 1) = -8.0;
  X0(0, 2) = 8.0;
  auto e = gx::eval(gx::gelu(X0));
  auto t = gx::eval(gx::gelu_tanh(X0));
  gx::tensor<float, shape<dyn, dyn>> Xf(X0.shape());
  for (index_t i = 0; i < 7; ++i)
    for (index_t j = 0; j < 9; ++j) Xf(i, j) = float(X0(i, j));
  auto ef = gx::eval(gx::gelu(Xf));
  auto tf = gx::eval(gx::gelu_tanh(Xf));
  for (index_t i = 0; i < 7; ++i)
    for (index_t j = 0; j < 9; ++j) {
      double const x = X0(i, j);
      double const want_e = 0.5 * x * std::erfc(-x / std::sqrt(2.0));
      // x/2 (1 + tanh u) = x / (1 + e^-2u), the second without cancellation for x << 0
      double const want_t = x / (1.0 + std::exp(-2.0 * std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
      CHECK(e(i, j) == doctest::Approx(want_e).epsilon(1e-13).scale(1e-300));
      CHECK(t(i, j) == doctest::Approx(want_t).epsilon(1e-14).scale(1e-300));
      double const xf = double(Xf(i, j));
      CHECK(double(ef(i, j)) == doctest::Approx(0.5 * xf * std::erfc(-xf / std::sqrt(2.0))).epsilon(1e-5).scale(1e-30));
      CHECK(double(tf(i, j)) ==
            doctest::Approx(xf / (1.0 + std::exp(-2.0 * std::sqrt(2.0 / M_PI) * (xf + 0.044715 * xf * xf * xf))))
                .epsilon(1e-5)
                .scale(1e-30));
    }
  // the tail keeps its digits: -8 Phi(-8) = -4.976e-15 (1 + erf(-8/sqrt 2) would give 0 or noise)
  CHECK(e(0, 1) == doctest::Approx(-8.0 * 0.5 * std::erfc(8.0 / std::sqrt(2.0))).epsilon(1e-13).scale(1e-300));
  CHECK(e(0, 1) < -4.9e-15);
  auto X = gx::param(X0);
  auto Wt = gx::uniform<double>(gx::dims(7, 9), 1232, -1.0, 1.0);
  CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::gelu(p) * Wt); }, X);
  CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::gelu_tanh(p) * Wt); }, X);
  CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::square(gx::gelu(p * 0.5) - gx::gelu_tanh(p))); }, X);
}
