// The ops transformer-like models need beside norms (expr/pattern.hpp, expr/concat.hpp,
// optim.hpp's clip_grad_norm): values against loops, gradients against central differences,
// the errors bad arguments raise.
#include "ad/numgrad.hpp"
#include "testing.hpp"

#include <gradix/optim.hpp>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

namespace gx = gradix;
using gx::dyn;
using gx::index_t;
using gx::shape;

namespace {
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (gx::error const& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST_CASE("dropout: a counter-based mask, the same in forward and backward") {
  auto X0 = gx::uniform<double>(gx::dims(64, 50), 1301, 0.5, 1.5);  // no zeros: a dropped element reads 0
  double const p = 0.3;
  auto y = gx::eval(gx::dropout(X0, p, 42, 7));
  index_t dropped = 0;
  for (index_t i = 0; i < 64; ++i)
    for (index_t j = 0; j < 50; ++j) {
      if (y(i, j) == 0.0) ++dropped;
      else CHECK(y(i, j) == doctest::Approx(X0(i, j) / (1 - p)).epsilon(1e-15));
    }
  // 3200 Bernoulli(0.3) draws: mean 960, standard deviation 26; 6 deviations either side
  CHECK(dropped > 960 - 160);
  CHECK(dropped < 960 + 160);
  SUBCASE("the same (seed, counter) gives the same mask; another counter or seed another one") {
    auto y2 = gx::eval(gx::dropout(X0, p, 42, 7));
    auto y3 = gx::eval(gx::dropout(X0, p, 42, 8));
    auto y4 = gx::eval(gx::dropout(X0, p, 43, 7));
    index_t same2 = 0, same3 = 0, same4 = 0;
    for (index_t i = 0; i < 64; ++i)
      for (index_t j = 0; j < 50; ++j) {
        same2 += (y2(i, j) == 0.0) == (y(i, j) == 0.0);
        same3 += (y3(i, j) == 0.0) == (y(i, j) == 0.0);
        same4 += (y4(i, j) == 0.0) == (y(i, j) == 0.0);
      }
    CHECK(same2 == 3200);
    CHECK(same3 < 3000);  // independent masks agree on 0.7^2 + 0.3^2 = 58% of elements
    CHECK(same4 < 3000);
  }
  SUBCASE("the mask is a function of the logical index: a transposed read drops the same elements") {
    auto yt = gx::eval(gx::dropout(gx::transpose(gx::transpose(X0)), p, 42, 7));
    for (index_t i = 0; i < 64; ++i)
      for (index_t j = 0; j < 50; ++j) CHECK(yt(i, j) == y(i, j));
  }
  SUBCASE("p = 0 keeps everything, p = 1 drops everything") {
    auto y0 = gx::eval(gx::dropout(X0, 0.0, 5));
    auto y1 = gx::eval(gx::dropout(X0, 1.0, 5));
    for (index_t i = 0; i < 64; ++i)
      for (index_t j = 0; j < 50; ++j) {
        CHECK(y0(i, j) == X0(i, j));
        CHECK(y1(i, j) == 0.0);
      }
  }
  SUBCASE("gradient: the forward's mask, scaled (central differences)") {
    auto X = gx::param(gx::uniform<double>(gx::dims(6, 7), 1302, -1.0, 1.0));
    auto W = gx::uniform<double>(gx::dims(6, 7), 1303, -1.0, 1.0);
    CHECK_NUMGRAD([&](auto& q) { return gx::sum(gx::dropout(gx::tanh(q), 0.4, 9, 1) * W); }, X);
    CHECK_NUMGRAD([&](auto& q) { return gx::sum(gx::square(gx::dropout(q, 0.5, 3))); }, X);
    // the gradient is zero exactly where the forward dropped
    auto g = gx::grad(gx::sum(gx::dropout(X, 0.4, 9, 1) * W), X).to_dense();
    auto fwd = gx::eval(gx::dropout(X.value(), 0.4, 9, 1));
    for (index_t i = 0; i < 6; ++i)
      for (index_t j = 0; j < 7; ++j) CHECK((g(i, j) == 0.0) == (fwd(i, j) == 0.0 && X.value()(i, j) != 0.0));
  }
  SUBCASE("p outside [0, 1] names the op and the value") {
    auto msg = error_of([&] { (void)gx::dropout(X0, 1.5, 1); });
    CHECK(msg.find("gradix::dropout") != std::string::npos);
    CHECK(msg.find("p = 1.5") != std::string::npos);
    CHECK(!error_of([&] { (void)gx::dropout(X0, std::nan(""), 1); }).empty());
    CHECK(!error_of([&] { (void)gx::dropout(X0, -0.1, 1); }).empty());
  }
}

TEST_CASE("causal_mask: keys after the query get the fill value; softmax gives them no weight") {
  auto S0 = gx::uniform<double>(gx::dims(2, 5, 5), 1311, -2.0, 2.0);
  auto m = gx::eval(gx::causal_mask(S0));
  for (index_t b = 0; b < 2; ++b)
    for (index_t q = 0; q < 5; ++q)
      for (index_t k = 0; k < 5; ++k) {
        if (k <= q) CHECK(m(b, q, k) == S0(b, q, k));
        else CHECK(m(b, q, k) == -std::numeric_limits<double>::infinity());
      }
  auto pr = gx::eval(gx::softmax<2>(gx::causal_mask(S0)));
  for (index_t b = 0; b < 2; ++b)
    for (index_t q = 0; q < 5; ++q) {
      double z = 0;
      for (index_t k = 0; k <= q; ++k) z += std::exp(S0(b, q, k));
      for (index_t k = 0; k < 5; ++k)
        CHECK(pr(b, q, k) == doctest::Approx(k <= q ? std::exp(S0(b, q, k)) / z : 0.0).epsilon(1e-13));
    }
  SUBCASE("other axes, a finite fill, rectangular scores") {
    auto S1 = gx::uniform<double>(gx::dims(4, 3, 6), 1312, -2.0, 2.0);  // (key, batch, query)
    auto m1 = gx::eval(gx::causal_mask<2, 0>(S1, -1e9));
    for (index_t k = 0; k < 4; ++k)
      for (index_t b = 0; b < 3; ++b)
        for (index_t q = 0; q < 6; ++q) CHECK(m1(k, b, q) == (k <= q ? S1(k, b, q) : -1e9));
  }
  SUBCASE("gradient: into the kept scores only (central differences)") {
    auto S = gx::param(gx::uniform<double>(gx::dims(2, 4, 4), 1313, -1.0, 1.0));
    auto V = gx::uniform<double>(gx::dims(2, 4, 3), 1314, -1.0, 1.0);
    CHECK_NUMGRAD([&](auto& q) { return gx::sum(gx::square(gx::matmul(gx::softmax<2>(gx::causal_mask(q)), V))); }, S);
    auto g = gx::grad(gx::sum(gx::square(gx::causal_mask(S, 0.0))), S).to_dense();
    for (index_t b = 0; b < 2; ++b)
      for (index_t q = 0; q < 4; ++q)
        for (index_t k = q + 1; k < 4; ++k) CHECK(g(b, q, k) == 0.0);
  }
}

TEST_CASE("concat and stack: values along every axis, static extents, errors") {
  auto A = gx::uniform<double>(gx::dims(2, 3, 4), 1321, -1.0, 1.0);
  auto B = gx::uniform<double>(gx::dims(2, 5, 4), 1322, -1.0, 1.0);
  auto C = gx::uniform<double>(gx::dims(2, 1, 4), 1323, -1.0, 1.0);
  auto y = gx::eval(gx::concat<1>(A, B, C));
  CHECK(y.shape().extent(1) == 9);
  for (index_t i = 0; i < 2; ++i)
    for (index_t j = 0; j < 9; ++j)
      for (index_t k = 0; k < 4; ++k)
        CHECK(y(i, j, k) == (j < 3 ? A(i, j, k) : j < 8 ? B(i, j - 3, k) : C(i, 0, k)));
  auto yl = gx::eval(gx::concat<-1>(A, gx::tanh(A)));  // the last axis, an expression operand
  for (index_t i = 0; i < 2; ++i)
    for (index_t j = 0; j < 3; ++j)
      for (index_t k = 0; k < 8; ++k) CHECK(yl(i, j, k) == (k < 4 ? A(i, j, k) : std::tanh(A(i, j, k - 4))));
  auto s = gx::eval(gx::stack<0>(A, gx::square(A)));
  auto s2 = gx::eval(gx::stack<-1>(A, A, A));
  for (index_t i = 0; i < 2; ++i)
    for (index_t j = 0; j < 3; ++j)
      for (index_t k = 0; k < 4; ++k) {
        CHECK(s(0, i, j, k) == A(i, j, k));
        CHECK(s(1, i, j, k) == A(i, j, k) * A(i, j, k));
        for (index_t q = 0; q < 3; ++q) CHECK(s2(i, j, k, q) == A(i, j, k));
      }
  SUBCASE("static extents add up; stack's new axis is static") {
    gx::tensor<float, shape<4, 3>> P;
    gx::tensor<float, shape<2, 3>> Q;
    gx::tensor<float, shape<dyn, 3>> Rd(gx::dims(5, gx::fix<3>));
    static_assert(std::is_same_v<gx::shape_of_t<decltype(gx::concat<0>(P, Q))>, shape<6, 3>>);
    static_assert(std::is_same_v<gx::shape_of_t<decltype(gx::concat<0>(P, Rd))>, shape<dyn, 3>>);
    static_assert(std::is_same_v<gx::shape_of_t<decltype(gx::concat<1>(P, P))>, shape<4, 6>>);
    static_assert(std::is_same_v<gx::shape_of_t<decltype(gx::stack<1>(P, P, P))>, shape<4, 3, 3>>);
  }
  SUBCASE("extents that differ off the joined axis name the op, both shapes and the axis") {
    auto msg = error_of([&] { (void)gx::concat<2>(A, B); });
    CHECK(msg.find("gradix::concat") != std::string::npos);
    CHECK(msg.find("[2, 3, 4]") != std::string::npos);
    CHECK(msg.find("[2, 5, 4]") != std::string::npos);
    CHECK(msg.find("axis 1") != std::string::npos);
    CHECK(error_of([&] { (void)gx::stack<0>(A, B); }).find("gradix::stack") != std::string::npos);
  }
}

TEST_CASE("concat and stack: gradients match central differences") {
  auto X = gx::param(gx::uniform<double>(gx::dims(2, 3, 4), 1331, -1.0, 1.0));
  auto Y = gx::param(gx::uniform<double>(gx::dims(2, 2, 4), 1332, -1.0, 1.0));
  auto W9 = gx::uniform<double>(gx::dims(2, 5, 4), 1333, -1.0, 1.0);
  auto W3 = gx::uniform<double>(gx::dims(2, 3, 3, 4), 1335, -1.0, 1.0);
  auto Wm = gx::uniform<double>(gx::dims(8, 3), 1334, -1.0, 1.0);
  auto Y0 = Y.value();
  // the adjoint arrives lane-wise (staged into the concat's buffer first)
  CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::square(gx::concat<1>(p, Y0)) * W9); }, X);
  CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::exp(gx::concat<1>(X.value(), gx::tanh(p)))); }, Y);
  // through a product (its adjoint buffer read directly), the operand used twice
  CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::square(gx::matmul(gx::concat<-1>(p, p * 2.0), Wm))); }, X);
  // through a reduction over the joined axis, and a slice of the result
  CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::square(gx::sum<1>(gx::concat<1>(p, gx::sin(p))))); }, X);
  CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::square(gx::slice<1>(gx::concat<1>(Y0, p), 1, 4))); }, X);
  // stack along a new inner axis, then softmax over it
  CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::softmax<1>(gx::stack<1>(p, gx::square(p), p * 0.5)) * W3); }, X);
}

TEST_CASE("clip_grad_norm: the global norm over a parameter list, scaled when above the bound") {
  auto A = gx::param(gx::uniform<double>(gx::dims(3, 4), 1341, -1.0, 1.0));
  auto b = gx::param(gx::uniform<float>(gx::dims(5), 1342, -1.0, 1.0));
  auto E = gx::param(gx::uniform<double>(gx::dims(10, 2), 1343, -1.0, 1.0), gx::sparse_grad<0>);
  std::vector<int> rows{1, 7, 1};
  auto X = gx::uniform<double>(gx::dims(3, 4), 1344, -2.0, 2.0);
  auto run = [&] {
    A.grad().zero();
    b.grad().zero();
    E.grad().zero();
    gx::backward(gx::sum(gx::square(A * X)) * 3.0);
    gx::backward(gx::sum(gx::exp(b)));
    gx::backward(gx::sum(gx::square(E(rows, gx::all))));
  };
  run();
  auto const gA = A.grad().to_dense();
  auto const gb = b.grad().to_dense();
  auto const gE = E.grad().to_dense();
  double want = 0;
  for (index_t i = 0; i < 3; ++i)
    for (index_t j = 0; j < 4; ++j) want += gA(i, j) * gA(i, j);
  for (index_t i = 0; i < 5; ++i) want += double(gb(i)) * double(gb(i));
  for (index_t i = 0; i < 10; ++i)
    for (index_t j = 0; j < 2; ++j) want += gE(i, j) * gE(i, j);
  want = std::sqrt(want);
  SUBCASE("below the bound: the norm, nothing scaled") {
    CHECK(gx::optim::clip_grad_norm(want * 2, A, b, E) == doctest::Approx(want).epsilon(1e-12));
    CHECK(A.grad().to_dense()(2, 3) == gA(2, 3));
  }
  SUBCASE("above it: every gradient scaled to the bound") {
    double const got = gx::optim::clip_grad_norm(1.0, A, b, E);
    CHECK(got == doctest::Approx(want).epsilon(1e-12));
    double const c = 1.0 / (want + 1e-6);
    auto const nA = A.grad().to_dense();
    auto const nb = b.grad().to_dense();
    auto const nE = E.grad().to_dense();
    for (index_t i = 0; i < 3; ++i)
      for (index_t j = 0; j < 4; ++j) CHECK(nA(i, j) == doctest::Approx(gA(i, j) * c).epsilon(1e-14));
    for (index_t i = 0; i < 5; ++i) CHECK(double(nb(i)) == doctest::Approx(double(gb(i)) * c).epsilon(1e-6));
    for (index_t i = 0; i < 10; ++i)
      for (index_t j = 0; j < 2; ++j) CHECK(nE(i, j) == doctest::Approx(gE(i, j) * c).epsilon(1e-14));
    CHECK(gx::optim::clip_grad_norm(1e9, A, b, E) == doctest::Approx(1.0).epsilon(1e-6));
  }
  SUBCASE("a non-finite gradient names the parameter and scales nothing") {
    auto B = gx::param(gx::uniform<double>(gx::dims(2), 1345, -1.0, 1.0));
    auto S = gx::uniform<double>(gx::dims(2), 1346, -1.0, 1.0);
    S(1) = std::numeric_limits<double>::infinity();
    gx::backward(gx::sum(B * S));  // d/dB = S: an infinite element
    std::string msg = error_of([&] { (void)gx::optim::clip_grad_norm(1.0, A, B); });
    CHECK(msg.find("clip_grad_norm") != std::string::npos);
    CHECK(msg.find("parameter 1") != std::string::npos);
    CHECK(A.grad().to_dense()(0, 0) == gA(0, 0));
    CHECK(!error_of([&] { (void)gx::optim::clip_grad_norm(-1.0, A); }).empty());
  }
}

// reshape plans (core/reshape.hpp): splits and merges without the ravel, others general
static_assert([] {
  gx::reshape_plan<4, 3> split(gx::array<index_t, 4>{{2, 5, 4, 3}}, gx::array<index_t, 3>{{2, 5, 12}});
  auto a = split(gx::array<index_t, 4>{{1, 2, 3, 1}});
  return !split.general_ && a[0] == 1 && a[1] == 2 && a[2] == 10 && split.last_axis_contiguous();
}());
static_assert([] {
  gx::reshape_plan<3, 4> merge(gx::array<index_t, 3>{{8, 5, 3}}, gx::array<index_t, 4>{{2, 4, 5, 3}});
  auto a = merge(gx::array<index_t, 3>{{6, 4, 2}});
  return !merge.general_ && a[0] == 1 && a[1] == 2 && a[2] == 4 && a[3] == 2 && merge.last_axis_contiguous();
}());
static_assert([] {
  gx::reshape_plan<2, 2> odd(gx::array<index_t, 2>{{4, 3}}, gx::array<index_t, 2>{{3, 4}});  // no groups
  auto a = odd(gx::array<index_t, 2>{{2, 1}});                                               // element 7
  return odd.general_ && a[0] == 1 && a[1] == 3 && !odd.last_axis_contiguous();
}());
static_assert([] {  // axes of extent 1 anywhere
  gx::reshape_plan<3, 2> ones(gx::array<index_t, 3>{{1, 6, 1}}, gx::array<index_t, 2>{{2, 3}});
  auto a = ones(gx::array<index_t, 3>{{0, 5, 0}});
  return !ones.general_ && a[0] == 1 && a[1] == 2;
}());

TEST_CASE("multi-head attention: heads split and merged by reshape and permute, gradients") {
  // (B, T, D) -> (B, T, H, D/H) -> (B, H, T, D/H) -> (B H, T, D/H) and back, as
  // examples/transformer.cpp writes it: the reshapes of computed values are kept, and their
  // adjoints read as buffers of the operand's shape
  index_t const B = 2, T = 3, D = 4, H = 2, dh = D / H;
  auto X = gx::uniform<double>(gx::dims(B, T, D), 1351, -1.0, 1.0);
  auto Wq = gx::param(gx::uniform<double>(gx::dims(D, D), 1352, -1.0, 1.0));
  auto Wv = gx::uniform<double>(gx::dims(D, D), 1353, -1.0, 1.0);
  auto heads = [&](auto const& y) {
    return gx::reshape(gx::permute<0, 2, 1, 3>(gx::reshape(y, gx::dims(B, T, H, dh))), gx::dims(B * H, T, dh));
  };
  auto merge = [&](auto const& y) {
    return gx::reshape(gx::permute<0, 2, 1, 3>(gx::reshape(y, gx::dims(B, H, T, dh))), gx::dims(B, T, D));
  };
  auto attn = [&](auto& wq) {
    auto q = heads(gx::matmul(X, wq));
    auto v = heads(gx::matmul(X, Wv));
    auto s = gx::softmax<2>(gx::causal_mask(gx::matmul(q, gx::permute<0, 2, 1>(q))));
    return merge(gx::matmul(s, v));
  };
  // the value against loops
  auto got = gx::eval(attn(Wq));
  auto q = gx::eval(gx::matmul(X, Wq.value()));
  auto v = gx::eval(gx::matmul(X, Wv));
  for (index_t b = 0; b < B; ++b)
    for (index_t h = 0; h < H; ++h)
      for (index_t t = 0; t < T; ++t) {
        double w[3], z = 0;
        for (index_t u = 0; u <= t; ++u) {
          double s = 0;
          for (index_t e = 0; e < dh; ++e) s += q(b, t, h * dh + e) * q(b, u, h * dh + e);
          w[u] = std::exp(s);
          z += w[u];
        }
        for (index_t e = 0; e < dh; ++e) {
          double o = 0;
          for (index_t u = 0; u <= t; ++u) o += w[u] / z * v(b, u, h * dh + e);
          CHECK(got(b, t, h * dh + e) == doctest::Approx(o).epsilon(1e-12));
        }
      }
  auto Wo = gx::uniform<double>(gx::dims(B, T, D), 1354, -1.0, 1.0);
  CHECK_NUMGRAD([&](auto& p) { return gx::sum(attn(p) * Wo); }, Wq);
  CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::square(gx::reshape(gx::tanh(gx::matmul(X, p)), gx::dims(B * T, D)))); }, Wq);
}

// concat along the contiguous axis reads each side in SIMD packs (eval/inner.hpp,
// split_inner): rows that start before, at and after the split (the thread pool cuts large
// assignments inside rows), packs across the split, both layouts of the destination
TEST_CASE("concat along the contiguous axis: every row start, packs across the split, threads") {
  for (int threads : {1, 3}) {
    gx::set_num_threads(threads);
    for (gx::index_t split : {1, 7, 16, 37}) {
      gx::index_t const rows = 3001, cols = 53;
      auto A = gx::uniform<float>(gx::dims(rows, split), 7, -1.0f, 1.0f);
      auto B = gx::uniform<float>(gx::dims(rows, cols - split), 8, -1.0f, 1.0f);
      auto y = gx::eval(gx::concat<1>(gx::tanh(A), B * 2.0f));
      bool same = true;
      for (gx::index_t i = 0; i < rows; ++i)
        for (gx::index_t j = 0; j < cols; ++j) {
          float const want = j < split ? float(gx::eval(gx::tanh(gx::slice<1>(gx::slice<0>(A, i, i + 1), j, j + 1)))(0, 0))
                                       : B(i, j - split) * 2.0f;
          same = same && y(i, j) == want;
        }
      CHECK(same);
    }
  }
  gx::set_num_threads(1);
}
