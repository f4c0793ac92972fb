// gx::matmul and gx::dot: values against plain loops (every operand form: tensors, params,
// transposes, column-major, expressions, batched and shared operands, the vector cases,
// empty and one-element extents), gradients against central differences in double and
// against the hand formulas d A = G B^T, d B = A^T G, nested products (an MLP), a sparse
// parameter gathered into a product, grad(), threads, the errors, and constant evaluation.
#include "ad/numgrad.hpp"
#include "testing.hpp"

#include <cmath>
#include <cstdint>
#include <vector>

namespace gx = gradix;
using gx::dyn;
using gx::index_t;
using gx::shape;
using gx::testing::thread_scope;

namespace {
using TD = gx::tensor<double, shape<dyn, dyn>>;
using TF = gx::tensor<float, shape<dyn, dyn>>;

// shapes and types
static_assert(std::is_same_v<gx::shape_of_t<decltype(gx::matmul(std::declval<gx::tensor<float, shape<2, 3>>&>(),
                                                                std::declval<gx::tensor<float, shape<3, 5>>&>()))>,
                             shape<2, 5>>);
static_assert(std::is_same_v<gx::shape_of_t<decltype(gx::matmul(std::declval<gx::tensor<float, shape<4, 2, 3>>&>(),
                                                                std::declval<TF&>()))>,
                             shape<4, 2, dyn>>);
static_assert(std::is_same_v<gx::shape_of_t<decltype(gx::matmul(std::declval<TF&>(),
                                                                std::declval<gx::tensor<float, shape<dyn>>&>()))>,
                             shape<dyn>>);
static_assert(std::is_same_v<gx::shape_of_t<decltype(gx::matmul(std::declval<gx::tensor<float, shape<3>>&>(),
                                                                std::declval<gx::tensor<float, shape<3>>&>()))>,
                             shape<>>);

// C[q] = A[q] B[q] by plain loops in long double (rank 2: one batch element); a(q, i, k), b(q, k, j)
template <class FA, class FB>
std::vector<long double> ref_product(index_t nb, index_t m, index_t n, index_t k, FA a, FB b) {
  std::vector<long double> c(std::size_t(nb * m * n), 0.0L);
  for (index_t q = 0; q < nb; ++q)
    for (index_t i = 0; i < m; ++i)
      for (index_t j = 0; j < n; ++j) {
        long double s = 0;
        for (index_t kk = 0; kk < k; ++kk) s += (long double)a(q, i, kk) * (long double)b(q, kk, j);
        c[std::size_t((q * m + i) * n + j)] = s;
      }
  return c;
}

template <class T, class C>
void check_close(C const& got, std::vector<long double> const& want, index_t k) {
  double const tol = (std::is_same_v<T, float> ? 2e-6 : 1e-14) * double(k > 0 ? k : 1);
  REQUIRE(std::size_t(got.size()) == want.size());
  for (std::size_t e = 0; e < want.size(); ++e) {
    double g = double(got.data()[e]), w = double(want[e]);
    if (!(std::abs(g - w) <= tol * (1 + std::abs(w)))) {
      CAPTURE(e);
      CHECK(g == doctest::Approx(w));
      return;
    }
  }
}
}  // namespace

TEST_CASE_TEMPLATE("matmul: values of (M, K) x (K, N) for every operand form", T, float, double) {
  thread_scope ts;
  for (int threads : {1, 2}) {
    gx::set_num_threads(threads);
    for (auto [m, k, n] : {std::array<index_t, 3>{1, 1, 1}, {3, 4, 5}, {17, 9, 1}, {1, 33, 7}, {64, 70, 40},
                          {0, 3, 2}, {2, 0, 3}}) {
      CAPTURE(m);
      CAPTURE(k);
      CAPTURE(n);
      auto A = gx::uniform<T>(gx::dims(m, k), 1, T(-1), T(1));
      auto B = gx::uniform<T>(gx::dims(k, n), 2, T(-1), T(1));
      auto ra = [&](index_t, index_t i, index_t j) { return A(i, j); };
      auto rb = [&](index_t, index_t i, index_t j) { return B(i, j); };
      auto want = ref_product(1, m, n, k, ra, rb);
      using TT = gx::tensor<T, shape<dyn, dyn>>;
      TT C = gx::eval(gx::matmul(A, B));
      check_close<T>(C, want, k);
      // transposed operands: views of the transposes' memory (no copy), and column-major
      auto At = gx::eval(gx::transpose(A));  // column-major copies of the transposes
      auto Bt = gx::eval(gx::transpose(B));
      TT C2 = gx::eval(gx::matmul(gx::transpose(At), gx::transpose(Bt)));
      check_close<T>(C2, want, k);
      gx::tensor<T, shape<dyn, dyn>, gx::col_major> Ac(A.shape()), Bc(B.shape());
      gx::assign(Ac, A);
      gx::assign(Bc, B);
      TT C3 = gx::eval(gx::matmul(Ac, Bc));
      check_close<T>(C3, want, k);
      // expression operands (computed into a buffer first), and a product read by an expression
      auto want2 = ref_product(1, m, n, k, [&](index_t, index_t i, index_t j) { return 2 * A(i, j) + 1; }, rb);
      TT C4 = gx::eval(gx::matmul(A * T(2) + T(1), B));
      check_close<T>(C4, want2, k);
      TT C5 = gx::eval(gx::matmul(A, B) * T(3) - gx::matmul(A, B));
      for (index_t e = 0; e < C5.size(); ++e) CHECK(double(C5.data()[e]) == doctest::Approx(2 * double(want[std::size_t(e)])).epsilon(1e-5));
      // a strided view (every other column of a wider tensor) as an operand
      auto W = gx::uniform<T>(gx::dims(k, 2 * n), 3, T(-1), T(1));
      TT C6 = gx::eval(gx::matmul(A, gx::slice<1>(W, 0, 2 * n, 2)));
      check_close<T>(C6, ref_product(1, m, n, k, ra, [&](index_t, index_t i, index_t j) { return W(i, 2 * j); }), k);
    }
  }
}

TEST_CASE("matmul: assign writes the destination directly, through a temporary when it is an operand") {
  auto A = gx::uniform<double>(gx::dims(6, 6), 41, -1.0, 1.0);
  auto B = gx::uniform<double>(gx::dims(6, 6), 42, -1.0, 1.0);
  auto ref = ref_product(1, 6, 6, 6, [&](index_t, index_t i, index_t j) { return A(i, j); },
                         [&](index_t, index_t i, index_t j) { return B(i, j); });
  TD C(gx::dims(6, 6));
  gx::assign(C, gx::matmul(A, B));
  check_close<double>(C, ref, 6);
  gx::tensor<double, shape<dyn, dyn>, gx::col_major> Cc(gx::dims(6, 6));  // not row-major: through the buffer
  gx::assign(Cc, gx::matmul(A, B));
  for (index_t i = 0; i < 6; ++i)
    for (index_t j = 0; j < 6; ++j) CHECK(Cc(i, j) == doctest::Approx(double(ref[std::size_t(i * 6 + j)])).epsilon(1e-14));
  TD D(gx::dims(6, 12));  // a strided destination: every other column
  gx::tensor_view<double, shape<dyn, dyn>, gx::strided> every_other(D.data(), shape<dyn, dyn>(gx::dims(6, 6)), {12, 2});
  gx::assign(every_other, gx::matmul(A, B));
  for (index_t i = 0; i < 6; ++i)
    for (index_t j = 0; j < 6; ++j) CHECK(D(i, 2 * j) == doctest::Approx(double(ref[std::size_t(i * 6 + j)])).epsilon(1e-14));
  gx::assign(A, gx::matmul(A, B));  // A = A B: the product is computed before A is written
  check_close<double>(A, ref, 6);
  CHECK_THROWS_WITH_AS(gx::assign(C, gx::matmul(A, gx::slice<1>(D, 0, 5))),
                       "gradix::assign: destination shape [6, 6] differs from expression shape [6, 5]", gx::error);
}

TEST_CASE_TEMPLATE("matmul: batched, shared and vector operands", T, float, double) {
  index_t const nb = 3, m = 4, k = 5, n = 6;
  auto A3 = gx::uniform<T>(gx::dims(nb, m, k), 4, T(-1), T(1));
  auto B3 = gx::uniform<T>(gx::dims(nb, k, n), 5, T(-1), T(1));
  auto A2 = gx::uniform<T>(gx::dims(m, k), 6, T(-1), T(1));
  auto B2 = gx::uniform<T>(gx::dims(k, n), 7, T(-1), T(1));
  auto vk = gx::uniform<T>(gx::dims(k), 8, T(-1), T(1));
  auto vk2 = gx::uniform<T>(gx::dims(k), 9, T(-1), T(1));
  auto a3 = [&](index_t q, index_t i, index_t j) { return A3(q, i, j); };
  auto b3 = [&](index_t q, index_t i, index_t j) { return B3(q, i, j); };
  auto a2 = [&](index_t, index_t i, index_t j) { return A2(i, j); };
  auto b2 = [&](index_t, index_t i, index_t j) { return B2(i, j); };
  check_close<T>(gx::eval(gx::matmul(A3, B3)), ref_product(nb, m, n, k, a3, b3), k);
  check_close<T>(gx::eval(gx::matmul(A3, B2)), ref_product(nb, m, n, k, a3, b2), k);
  check_close<T>(gx::eval(gx::matmul(A2, B3)), ref_product(nb, m, n, k, a2, b3), k);
  // the batch of a transposed batched operand: permute<0, 2, 1>
  auto B3t = gx::eval(gx::permute<0, 2, 1>(B3));
  check_close<T>(gx::eval(gx::matmul(A3, gx::permute<0, 2, 1>(B3t))), ref_product(nb, m, n, k, a3, b3), k);
  // vectors: (M, K) x (K), (K) x (K, N), (B, M, K) x (K), (K) x (K)
  auto vcol = [&](index_t, index_t i, index_t) { return vk(i); };
  auto vrow = [&](index_t, index_t, index_t j) { return vk(j); };
  check_close<T>(gx::eval(gx::matmul(A2, vk)), ref_product(1, m, 1, k, a2, vcol), k);
  check_close<T>(gx::eval(gx::matmul(vk, B2)), ref_product(1, 1, n, k, vrow, b2), k);
  check_close<T>(gx::eval(gx::matmul(A3, vk)), ref_product(nb, m, 1, k, a3, vcol), k);
  long double d = 0;
  for (index_t i = 0; i < k; ++i) d += (long double)vk(i) * vk2(i);
  CHECK(double(gx::value(gx::matmul(vk, vk2))) == doctest::Approx(double(d)).epsilon(1e-6));
  CHECK(double(gx::value(gx::sum(gx::dot<0>(vk, vk2)))) == doctest::Approx(double(d)).epsilon(1e-6));
}

TEST_CASE("matmul: static shapes, long double (gradix's own loops) and the errors") {
#if defined(GRADIX_USE_OPENBLAS)
  MESSAGE("products of float and double through OpenBLAS");
#else
  MESSAGE("products through gradix's own loops");
#endif
  gx::tensor<double, shape<2, 3>> a{1, 2, 3, 4, 5, 6};
  gx::tensor<double, shape<3, 2>> b{1, 0, 0, 1, 1, 1};
  auto c = gx::eval(gx::matmul(a, b));
  static_assert(std::is_same_v<decltype(c), gx::tensor<double, shape<2, 2>>>);
  CHECK(c(0, 0) == 4);
  CHECK(c(0, 1) == 5);
  CHECK(c(1, 0) == 10);
  CHECK(c(1, 1) == 11);
  gx::tensor<long double, shape<dyn, dyn>> la(gx::dims(2, 3)), lb(gx::dims(3, 2));
  for (index_t e = 0; e < 6; ++e) {
    la.data()[e] = (long double)a.data()[e];
    lb.data()[e] = (long double)b.data()[e];
  }
  auto lc = gx::eval(gx::matmul(la, lb));
  CHECK(lc(1, 1) == 11.0L);
  TD x(gx::dims(3, 4)), y(gx::dims(5, 2));
  CHECK_THROWS_WITH_AS(gx::matmul(x, y),
                       "gradix::matmul: inner extents differ: left shape [3, 4] (K = 4 on axis 1), right shape [5, 2] (K = 5 on axis 0)",
                       gx::error);
  gx::tensor<double, shape<dyn, dyn, dyn>> x3(gx::dims(2, 3, 4)), y3(gx::dims(3, 4, 2));
  CHECK_THROWS_WITH_AS(gx::matmul(x3, y3), "gradix::matmul: batch extents differ: left shape [2, 3, 4], right shape [3, 4, 2] (axis 0)",
                       gx::error);
  gx::tensor<double, shape<dyn>> v3(gx::dims(3)), v4(gx::dims(4));
  CHECK_THROWS_WITH_AS(gx::matmul(v3, v4), "gradix::matmul: the vectors' extents differ: 3 and 4", gx::error);
}

TEST_CASE("matmul: gradients against central differences and the hand formulas") {
  index_t const m = 5, k = 4, n = 3;
  auto A = gx::param(gx::uniform<double>(gx::dims(m, k), 11, -1.0, 1.0));
  auto B = gx::param(gx::uniform<double>(gx::dims(k, n), 12, -1.0, 1.0));
  auto G = gx::uniform<double>(gx::dims(m, n), 13, -1.0, 1.0);
  SUBCASE("hand formulas: d A = G B^T, d B = A^T G") {
    gx::backward(gx::sum(gx::matmul(A, B) * G));
    auto ga = A.grad().to_dense();
    auto gb = B.grad().to_dense();
    for (index_t i = 0; i < m; ++i)
      for (index_t j = 0; j < k; ++j) {
        double s = 0;
        for (index_t q = 0; q < n; ++q) s += G(i, q) * B.value()(j, q);
        CHECK(ga(i, j) == doctest::Approx(s).epsilon(1e-14));
      }
    for (index_t i = 0; i < k; ++i)
      for (index_t j = 0; j < n; ++j) {
        double s = 0;
        for (index_t q = 0; q < m; ++q) s += A.value()(q, i) * G(q, j);
        CHECK(gb(i, j) == doctest::Approx(s).epsilon(1e-14));
      }
  }
  SUBCASE("a column-major parameter, read in place (transposed for the gemm)") {
    auto Ac = gx::param(gx::tensor<double, shape<dyn, dyn>, gx::col_major>(gx::dims(m, k)));
    gx::assign(Ac.value(), A.value());
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::matmul(p, B) * G); }, Ac);
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::matmul(gx::transpose(p), G) * B); }, Ac);
  }
  SUBCASE("central differences: plain, transposed, expression operands, under an expression") {
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::matmul(p, B) * G); }, A);
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::matmul(A, p) * G); }, B);
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::exp(gx::matmul(gx::tanh(p) * 2.0, B)) * G); }, A);
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::matmul(gx::transpose(B), gx::transpose(p)) * gx::transpose(G)); }, A);
    auto Sq = gx::param(gx::uniform<double>(gx::dims(k, k), 14, -1.0, 1.0));
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::matmul(p, p * 0.5 + 1.0)); }, Sq);
    CHECK_NUMGRAD([&](auto& p) { return gx::mean(gx::max<1>(gx::matmul(p, B))); }, A);
  }
}

TEST_CASE("matmul: batched and vector gradients, an MLP, a sparse table gathered into a product") {
  index_t const nb = 2, m = 3, k = 4, n = 5;
  auto A3 = gx::param(gx::uniform<double>(gx::dims(nb, m, k), 21, -1.0, 1.0));
  auto W = gx::param(gx::uniform<double>(gx::dims(k, n), 22, -1.0, 1.0));
  auto G3 = gx::uniform<double>(gx::dims(nb, m, n), 23, -1.0, 1.0);
  auto v = gx::param(gx::uniform<double>(gx::dims(k), 24, -1.0, 1.0));
  CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::matmul(p, W) * G3); }, A3);
  CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::matmul(A3, p) * G3); }, W);  // shared: summed over the batch
  CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::matmul(gx::transpose(W), p) * gx::select<1>(G3, 0)); }, v);
  CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::sin(gx::matmul(A3, p))); }, v);
  CHECK_NUMGRAD([&](auto& p) { return gx::matmul(p, v) ; }, v);
  // an MLP: relu(x W1 + b1) W2, cross-entropy
  auto x = gx::uniform<double>(gx::dims(6, k), 25, -1.0, 1.0);
  auto W1 = gx::param(gx::uniform<double>(gx::dims(k, 7), 26, -1.0, 1.0));
  auto b1 = gx::param(gx::uniform<double>(gx::dims(7), 27, -0.5, 0.5));
  auto W2 = gx::param(gx::uniform<double>(gx::dims(7, 3), 28, -1.0, 1.0));
  gx::tensor<std::int64_t, shape<dyn>> y(gx::dims(6));
  for (index_t i = 0; i < 6; ++i) y(i) = i % 3;
  auto loss = [&](auto& w1, auto& bb, auto& w2) {
    return gx::cross_entropy(gx::matmul(gx::relu(gx::matmul(x, w1) + bb), w2), y);
  };
  CHECK_NUMGRAD([&](auto& p) { return loss(p, b1, W2); }, W1);
  CHECK_NUMGRAD([&](auto& p) { return loss(W1, p, W2); }, b1);
  CHECK_NUMGRAD([&](auto& p) { return loss(W1, b1, p); }, W2);
  // a sparse embedding table: rows gathered, then a product; only the rows read get slots
  auto E = gx::param(gx::uniform<double>(gx::dims(50, k), 29, -1.0, 1.0), gx::sparse_grad<0>);
  std::vector<index_t> rows = {7, 3, 7, 49};
  auto P = gx::uniform<double>(gx::dims(4, n), 30, -1.0, 1.0);
  CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::matmul(gx::gather<0>(p, rows), W) * P); }, E);
  E.grad().zero();
  gx::backward(gx::sum(gx::matmul(gx::gather<0>(E, rows), W) * P));
  CHECK(E.grad().size() == 3);
  // grad(): a new storage; the parameter's own is untouched
  W.grad().zero();
  auto gw = gx::grad(gx::sum(gx::matmul(A3, W) * G3), W);
  CHECK(W.grad().to_dense()(0, 0) == 0.0);
  double s = 0;
  for (index_t q = 0; q < nb; ++q)
    for (index_t i = 0; i < m; ++i) s += A3.value()(q, i, 1) * G3(q, i, 2);
  CHECK(gw.to_dense()(1, 2) == doctest::Approx(s).epsilon(1e-14));
}

TEST_CASE("matmul: float training step, 1 and 2 threads agree with a double reference") {
  thread_scope ts;
  index_t const m = 70, k = 90, n = 50;
  auto Af = gx::uniform<float>(gx::dims(m, k), 31, -1.0f, 1.0f);
  auto Gf = gx::uniform<float>(gx::dims(m, n), 32, -1.0f, 1.0f);
  for (int threads : {1, 2}) {
    gx::set_num_threads(threads);
    auto Wf = gx::param(gx::uniform<float>(gx::dims(k, n), 33, -1.0f, 1.0f));
    gx::backward(gx::sum(gx::matmul(Af, Wf) * Gf));
    auto g = Wf.grad().to_dense();
    for (index_t i = 0; i < k; i += 7)
      for (index_t j = 0; j < n; j += 3) {
        double s = 0;
        for (index_t q = 0; q < m; ++q) s += double(Af(q, i)) * double(Gf(q, j));
        CHECK(double(g(i, j)) == doctest::Approx(s).epsilon(1e-4));
      }
  }
}

// constant evaluation: a product and its gradient (gradix's own loops)
namespace {
constexpr gx::tensor<double, shape<2, 3>> ca{1, 2, 3, 4, 5, 6};
constexpr gx::tensor<double, shape<3, 2>> cb{1, 0, 0, 1, 1, 1};
static_assert(gx::value(gx::sum(gx::matmul(ca, cb))) == 4 + 5 + 10 + 11);
constexpr double grad_00() {
  auto a = gx::param(gx::tensor<double, shape<2, 3>>{1, 2, 3, 4, 5, 6});
  gx::tensor<double, shape<2, 2>> g{1, 2, 3, 4};
  gx::backward(gx::sum(gx::matmul(a, cb) * g));
  return a.grad().dense()(0, 2);  // row 0 of G (1, 2) times row 2 of cb (1, 1)
}
static_assert(grad_00() == 3.0);
}  // namespace

// A product whose operand is a slice of a parameter: the slice's map has the identity's type
// (an offset and a step per axis), so the product must not write its operand's gradient
// straight into the parameter's (found by the scan tests: the LSTM's carry slices).
TEST_CASE("matmul: an operand that is a slice of a parameter gets its gradient through the slice") {
  gx::index_t const B = 2, H = 3;
  auto w = gx::param(gx::uniform<double>(gx::dims(H, 2 * H), 42, -0.6, 0.6));
  auto hc = gx::param(gx::uniform<double>(gx::dims(B, 2 * H), 46, -0.5, 0.5));
  auto wo = gx::uniform<double>(gx::dims(B, 2 * H), 47, -1.0, 1.0);
  auto left = [&](auto&) { return gx::sum(gx::matmul(gx::slice<1>(hc, 0, H), w) * wo); };
  auto right = [&](auto&) { return gx::sum(gx::matmul(gx::slice<1>(hc, H, 2 * H), w) * wo); };
  auto nested = [&](auto&) {
    auto h1 = gx::tanh(gx::matmul(gx::slice<1>(hc, 0, H), w));
    return gx::sum(gx::tanh(gx::matmul(gx::slice<1>(h1, 1, 1 + H), w)) * wo);
  };
  CHECK_NUMGRAD(left, hc);
  CHECK_NUMGRAD(right, hc);
  CHECK_NUMGRAD(nested, hc);
  CHECK_NUMGRAD(nested, w);
}

// The same through kept nodes: a product's operand that slices a kept concat (two nested
// cells that pack two states side by side, as an LSTM's carry), and slices of a sparse
// parameter, plain and transposed. A slice of a buffer adjoint covers part of the node below
// it; before the fix, a kept concat (or permute, reshape, row node) below took it for its
// whole adjoint.
TEST_CASE("matmul: operands that slice a kept concat or a sparse parameter") {
  gx::index_t const B = 2, H = 3;
  auto w2 = gx::param(gx::uniform<double>(gx::dims(H, H), 43, -0.6, 0.6));
  auto hc0 = gx::param(gx::uniform<double>(gx::dims(B, 2 * H), 46, -0.5, 0.5));
  auto wo = gx::uniform<double>(gx::dims(B, 2 * H), 47, -1.0, 1.0);
  auto front = [&](auto const& hc) {
    return gx::concat<1>(gx::matmul(gx::slice<1>(hc, 0, H), w2), gx::slice<1>(hc, H, 2 * H));
  };
  auto back = [&](auto const& hc) {
    return gx::concat<1>(gx::slice<1>(hc, H, 2 * H), gx::matmul(gx::slice<1>(hc, 0, H), w2));
  };
  auto both = [&](auto const& hc) {
    return gx::concat<1>(gx::matmul(gx::slice<1>(hc, 0, H), w2), gx::matmul(gx::slice<1>(hc, H, 2 * H), w2));
  };
  auto l1 = [&](auto&) { return gx::sum(front(front(hc0)) * wo); };
  auto l2 = [&](auto&) { return gx::sum(back(back(hc0)) * wo); };
  auto l3 = [&](auto&) { return gx::sum(both(both(hc0)) * wo); };
  CHECK_NUMGRAD(l1, hc0);
  CHECK_NUMGRAD(l1, w2);
  CHECK_NUMGRAD(l2, hc0);
  CHECK_NUMGRAD(l2, w2);
  CHECK_NUMGRAD(l3, hc0);
  CHECK_NUMGRAD(l3, w2);
  auto E = gx::param(gx::uniform<double>(gx::dims(6, H), 44, -0.6, 0.6), gx::sparse_grad<0>);
  auto wb = gx::uniform<double>(gx::dims(B, H), 48, -1.0, 1.0);
  auto w3 = gx::uniform<double>(gx::dims(3, H), 49, -1.0, 1.0);
  auto s1 = [&](auto&) { return gx::sum(gx::matmul(gx::slice<0>(E, 2, 2 + B), w2) * wb); };
  auto s2 = [&](auto&) { return gx::sum(gx::matmul(gx::transpose(gx::slice<0>(E, 1, 4)), w3) * w2); };
  CHECK_NUMGRAD(s1, E);
  CHECK_NUMGRAD(s2, E);
}
