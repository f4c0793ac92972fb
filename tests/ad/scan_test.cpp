// Recurrences of run-time length (expr/scan.hpp, api/scan.hpp): gx::scan's value against the
// same recurrence unrolled at compile time, its gradients (parameters in the body, the
// initial carry, the inputs) against central differences in double precision and against
// the unrolled version, a loss read through products and reductions of the carries.
#include "ad/numgrad.hpp"
#include "testing.hpp"

#include <cmath>
#include <vector>

namespace gx = gradix;
using gx::dyn;
using gx::index_t;
using gx::shape;

namespace {
using TD2 = gx::tensor<double, shape<dyn, dyn>>;
using TD3 = gx::tensor<double, shape<dyn, dyn, dyn>>;

// An Elman cell: h' = tanh(x Wx + h Wh + b)
template <class X, class H, class WX, class WH, class BB>
auto elman(X const& x, H const& h, WX& wx, WH& wh, BB& b) {
  return gx::tanh(gx::matmul(x, wx) + gx::matmul(h, wh) + b);
}
}  // namespace

namespace {
// sum over t of sum(c_t * wo_t) with the cell unrolled over 3 steps at compile time.
template <class Cell, class XS, class C0, class WO>
auto unrolled3(Cell const& cell, XS& xs, C0& c0, WO const& wo) {  // (xs, c0: parameters, by reference)
  auto c1 = cell(gx::select<0>(xs, 0), c0);
  auto c2 = cell(gx::select<0>(xs, 1), c1);
  auto c3 = cell(gx::select<0>(xs, 2), c2);
  return gx::sum(c1 * gx::select<0>(wo, 0)) + gx::sum(c2 * gx::select<0>(wo, 1)) + gx::sum(c3 * gx::select<0>(wo, 2));
}
// The gradients of one parameter by two expressions' backward, compared element by element.
template <class P, class E1, class E2>
void same_gradient(P& p, E1 const& a, E2 const& b, double tol) {
  auto ga = gx::grad(a, p).to_dense();
  auto gb = gx::grad(b, p).to_dense();
  auto s = p.value().shape();
  for (index_t k = 0; k < s.size(); ++k) {
    auto c = gx::detail::unravel(s, k);
    CHECK(ga[c] == doctest::Approx(gb[c]).epsilon(tol));
  }
}
}  // namespace

TEST_CASE("scan: an Elman recurrence equals its compile-time unrolling, forward and backward") {
  index_t const T = 4, B = 3, D = 5, H = 6;
  auto xs = gx::uniform<double>(gx::dims(T, B, D), 11, -1.0, 1.0);
  auto wx = gx::param(gx::uniform<double>(gx::dims(D, H), 12, -0.6, 0.6));
  auto wh = gx::param(gx::uniform<double>(gx::dims(H, H), 13, -0.6, 0.6));
  auto b = gx::param(gx::uniform<double>(gx::dims(H), 14, -0.3, 0.3));
  auto h0 = gx::param(gx::uniform<double>(gx::dims(B, H), 15, -0.5, 0.5));
  auto hs = gx::scan(h0, xs, [&](auto h, auto x) { return elman(x, h, wx, wh, b); });
  static_assert(std::is_same_v<gx::shape_of_t<decltype(hs)>, shape<dyn, dyn, dyn>>);
  TD3 got = gx::eval(hs);
  REQUIRE(got.shape() == gx::dims(T, B, H));
  // unrolled by hand, step by step into tensors
  TD2 h = gx::eval(h0.value() * 1.0);
  for (index_t t = 0; t < T; ++t) {
    auto x = gx::select<0>(xs, t);
    TD2 hn = gx::eval(elman(x, h, wx, wh, b));
    for (index_t i = 0; i < B; ++i)
      for (index_t j = 0; j < H; ++j) CHECK(got(t, i, j) == doctest::Approx(hn(i, j)).epsilon(1e-14));
    h = hn;
  }
  // a loss over every carry; gradients against central differences
  auto Wo = gx::uniform<double>(gx::dims(H), 16, -1.0, 1.0);
  auto loss = [&](auto&) { return gx::sum(gx::scan(h0, xs, [&](auto h, auto x) { return elman(x, h, wx, wh, b); }) * Wo); };
  CHECK_NUMGRAD(loss, wx);
  CHECK_NUMGRAD(loss, wh);
  CHECK_NUMGRAD(loss, b);
  CHECK_NUMGRAD(loss, h0);
  // gx::recompute_steps: the same gradients up to rounding (the same kernels on the same
  // values; the weights' gradients are summed over the steps in another order: one product
  // over every step when the call keeps them all, step by step when it recomputes them)
  auto again = gx::sum(gx::scan(h0, xs, [&](auto h, auto x) { return elman(x, h, wx, wh, b); }, gx::recompute_steps) * Wo);
  for (auto* p : {&wx, &wh}) {
    auto g1 = gx::grad(loss(wx), *p).to_dense();
    auto g2 = gx::grad(again, *p).to_dense();
    auto s = p->value().shape();
    for (index_t k = 0; k < s.size(); ++k) CHECK(g1.data()[k] == doctest::Approx(g2.data()[k]).epsilon(1e-13));
  }
  auto g1 = gx::grad(loss(wx), b).to_dense();
  auto g2 = gx::grad(again, b).to_dense();
  for (index_t k = 0; k < H; ++k) CHECK(g1.data()[k] == g2.data()[k]);  // (no product: the same bits)
}

TEST_CASE("scan: weights' gradients taken in one product over the steps, and a product whose operands repeat") {
  // x Wx reads the inputs, h Wh the carries: each weight's gradient is one product over
  // every step (exec/sweep.hpp, sweep_deferral); P Q reads the same P at every step, so
  // its rows over the steps are not one matrix and Q's gradient is taken step by step. The
  // reference: gx::recompute_steps (step by step), central differences.
  index_t const T = 5, B = 3, D = 4, H = 5, K = 2;
  auto xs = gx::uniform<double>(gx::dims(T, B, D), 71, -1.0, 1.0);
  auto wx = gx::param(gx::uniform<double>(gx::dims(D, H), 72, -0.6, 0.6));
  auto wh = gx::param(gx::uniform<double>(gx::dims(H, H), 73, -0.6, 0.6));
  auto p = gx::param(gx::uniform<double>(gx::dims(B, K), 74, -0.6, 0.6));
  auto q = gx::param(gx::uniform<double>(gx::dims(K, H), 75, -0.6, 0.6));
  auto h0 = gx::param(gx::uniform<double>(gx::dims(B, H), 76, -0.5, 0.5));
  auto wo = gx::uniform<double>(gx::dims(T, B, H), 77, -1.0, 1.0);
  auto body = [&](auto h, auto x) { return gx::tanh(gx::matmul(x, wx) + gx::matmul(h, wh) + gx::matmul(p, q)); };
  auto loss = [&](auto&) { return gx::sum(gx::scan(h0, xs, body) * wo); };
  CHECK_NUMGRAD(loss, wx);
  CHECK_NUMGRAD(loss, wh);
  CHECK_NUMGRAD(loss, p);
  CHECK_NUMGRAD(loss, q);
  CHECK_NUMGRAD(loss, h0);
  auto stepwise = gx::sum(gx::scan(h0, xs, body, gx::recompute_steps) * wo);
  CHECK(gx::backward(loss(wx)) == gx::value(stepwise));
  same_gradient(wx, loss(wx), stepwise, 1e-13);
  same_gradient(wh, loss(wx), stepwise, 1e-13);
  same_gradient(p, loss(wx), stepwise, 1e-13);
  same_gradient(q, loss(wx), stepwise, 1e-13);
  same_gradient(h0, loss(wx), stepwise, 1e-13);
  // with lengths (finished rows pass their adjoint on; their rows of dC are zero)
  gx::tensor<std::int64_t, shape<dyn>> len(gx::dims(B));
  len(0) = 5;
  len(1) = 2;
  len(2) = 0;
  auto ragged = [&](auto&) { return gx::sum(gx::scan(h0, xs, body, gx::lengths(len)) * wo); };
  CHECK_NUMGRAD(ragged, wh);
  CHECK_NUMGRAD(ragged, wx);
  same_gradient(wh, ragged(wx), gx::sum(gx::scan(h0, xs, body, gx::lengths(len), gx::recompute_steps) * wo), 1e-13);
}


TEST_CASE("scan: a large weight read transposed by every step's product, through one copy per sweep") {
  // h Wh with Wh 256 x 256 over 9 steps of 3 rows: the host's sweep gives each step's
  // dA = dC Wh^T gemm a row-major copy of Wh^T made once per sweep (exec/elements.hpp,
  // step_transposed: a weight of at least 2^16 elements, at most 256 rows a step, at least
  // 8 steps); gx::recompute_steps reads Wh in place (no copy), as every call did before.
  // Then Wh's values change in place and both run again: a copy from the first call must
  // not be read (each sweep makes its own), and a nested pair of calls in one thread
  // (the loss's value taken between) changes nothing.
  index_t const T = 9, B = 3, H = 256;
  auto xs = gx::uniform<double>(gx::dims(T, B, H), 81, -1.0, 1.0);
  auto wh = gx::param(gx::uniform<double>(gx::dims(H, H), 82, -0.08, 0.08));
  auto h0 = gx::param(gx::uniform<double>(gx::dims(B, H), 83, -0.5, 0.5));
  auto wo = gx::uniform<double>(gx::dims(T, B, H), 84, -1.0, 1.0);
  auto body = [&](auto h, auto x) { return gx::tanh(x + gx::matmul(h, wh)); };
  for (int round = 0; round < 2; ++round) {
    INFO("round " << round);
    auto kept = gx::sum(gx::scan(h0, xs, body) * wo);
    auto stepwise = gx::sum(gx::scan(h0, xs, body, gx::recompute_steps) * wo);
    same_gradient(wh, kept, stepwise, 1e-12);
    same_gradient(h0, kept, stepwise, 1e-12);
    // a few entries against central differences
    double const eps = 1e-6;
    for (index_t k : {index_t(0), index_t(257), index_t(H * H - 1)}) {
      auto g = gx::grad(kept, wh).to_dense();
      double& w = wh.value().data()[k];
      double const w0 = w;
      w = w0 + eps;
      double const up = gx::value(stepwise);
      w = w0 - eps;
      double const down = gx::value(stepwise);
      w = w0;
      CHECK(g.data()[k] == doctest::Approx((up - down) / (2 * eps)).epsilon(1e-6));
    }
    for (index_t k = 0; k < H * H; ++k) wh.value().data()[k] *= -0.75;  // in place: the same memory
  }
}

TEST_CASE("scan: GRU and LSTM cells, gradients against central differences and the unrolled cells") {
  index_t const B = 2, D = 3, H = 4;
  constexpr index_t T = 3;
  auto xs = gx::param(gx::uniform<double>(gx::dims(T, B, D), 31, -1.0, 1.0));
  SUBCASE("GRU") {
    auto wg = gx::param(gx::uniform<double>(gx::dims(D + H, 2 * H), 32, -0.6, 0.6));
    auto bg = gx::param(gx::uniform<double>(gx::dims(2 * H), 33, -0.3, 0.3));
    auto wn = gx::param(gx::uniform<double>(gx::dims(D + H, H), 34, -0.6, 0.6));
    auto bn = gx::param(gx::uniform<double>(gx::dims(H), 35, -0.3, 0.3));
    auto h0 = gx::param(gx::uniform<double>(gx::dims(B, H), 36, -0.5, 0.5));
    auto wo = gx::uniform<double>(gx::dims(T, B, H), 37, -1.0, 1.0);
    auto cell = [&](auto const& x, auto const& h) { return gx::cells::gru(x, h, wg, bg, wn, bn); };
    auto loss = [&](auto&) { return gx::sum(gx::scan(h0, xs, [&](auto h, auto x) { return cell(x, h); }) * wo); };
    CHECK_NUMGRAD(loss, wg);
    CHECK_NUMGRAD(loss, bn);
    CHECK_NUMGRAD(loss, h0);
    CHECK_NUMGRAD(loss, xs);
    auto unrolled = unrolled3(cell, xs, h0, wo);  // at compile time: three nested cells
    CHECK(gx::value(loss(wg)) == doctest::Approx(gx::value(unrolled)).epsilon(1e-13));
    same_gradient(wg, loss(wg), unrolled, 1e-12);
    same_gradient(wn, loss(wg), unrolled, 1e-12);
    same_gradient(xs, loss(wg), unrolled, 1e-12);
  }
  SUBCASE("LSTM") {
    auto w = gx::param(gx::uniform<double>(gx::dims(D + H, 4 * H), 42, -0.6, 0.6));
    auto b = gx::param(gx::uniform<double>(gx::dims(4 * H), 43, -0.3, 0.3));
    auto hc0 = gx::param(gx::uniform<double>(gx::dims(B, 2 * H), 46, -0.5, 0.5));
    auto wo = gx::uniform<double>(gx::dims(T, B, 2 * H), 47, -1.0, 1.0);
    auto cell = [&](auto const& x, auto const& hc) { return gx::cells::lstm(x, hc, w, b); };
    auto loss = [&](auto&) { return gx::sum(gx::scan(hc0, xs, [&](auto hc, auto x) { return cell(x, hc); }) * wo); };
    CHECK_NUMGRAD(loss, w);
    CHECK_NUMGRAD(loss, b);
    CHECK_NUMGRAD(loss, hc0);
    CHECK_NUMGRAD(loss, xs);
    auto unrolled = unrolled3(cell, xs, hc0, wo);  // at compile time: three nested cells
    CHECK(gx::value(loss(w)) == doctest::Approx(gx::value(unrolled)).epsilon(1e-13));
    same_gradient(w, loss(w), unrolled, 1e-12);
    same_gradient(hc0, loss(w), unrolled, 1e-12);
    same_gradient(xs, loss(w), unrolled, 1e-12);
  }
}

TEST_CASE("scan: the projected LSTM and GRU cells (the input's product out of the loop) against central differences, the unrolled cells and the formulas") {
  index_t const B = 2, H = 3;
  constexpr index_t T = 3;
  SUBCASE("gru_projected: PyTorch's nn.GRU step") {
    auto xw = gx::param(gx::uniform<double>(gx::dims(T, B, 3 * H), 51, -1.0, 1.0));
    auto wh = gx::param(gx::uniform<double>(gx::dims(H, 3 * H), 52, -0.7, 0.7));
    auto bh = gx::param(gx::uniform<double>(gx::dims(3 * H), 53, -0.4, 0.4));
    auto h0 = gx::param(gx::uniform<double>(gx::dims(B, H), 54, -0.5, 0.5));
    auto wo = gx::uniform<double>(gx::dims(T, B, H), 55, -1.0, 1.0);
    auto cell = [&](auto const& x, auto const& h) { return gx::cells::gru_projected(x, h, wh, bh); };
    auto loss = [&](auto&) { return gx::sum(gx::scan(h0, xw, [&](auto h, auto x) { return cell(x, h); }) * wo); };
    CHECK_NUMGRAD(loss, wh);
    CHECK_NUMGRAD(loss, bh);
    CHECK_NUMGRAD(loss, h0);
    CHECK_NUMGRAD(loss, xw);
    // the formula, in plain loops: r, z, n in PyTorch's order, the reset gate after the product
    auto const hs = gx::eval(gx::scan(h0, xw, [&](auto h, auto x) { return cell(x, h); }));
    std::vector<double> h(std::size_t(B * H)), a(std::size_t(3 * H));
    for (index_t b = 0; b < B; ++b)
      for (index_t k = 0; k < H; ++k) h[std::size_t(b * H + k)] = h0.value()(b, k);
    auto sg = [](double v) { return 1 / (1 + std::exp(-v)); };
    for (index_t t = 0; t < T; ++t) {
      std::vector<double> next(h.size());
      for (index_t b = 0; b < B; ++b) {
        for (index_t j = 0; j < 3 * H; ++j) {
          a[std::size_t(j)] = bh.value()(j);
          for (index_t k = 0; k < H; ++k) a[std::size_t(j)] += h[std::size_t(b * H + k)] * wh.value()(k, j);
        }
        for (index_t k = 0; k < H; ++k) {
          double const r = sg(xw.value()(t, b, k) + a[std::size_t(k)]);
          double const z = sg(xw.value()(t, b, H + k) + a[std::size_t(H + k)]);
          double const n = std::tanh(xw.value()(t, b, 2 * H + k) + r * a[std::size_t(2 * H + k)]);
          next[std::size_t(b * H + k)] = (1 - z) * n + z * h[std::size_t(b * H + k)];
        }
      }
      h = next;
      for (index_t b = 0; b < B; ++b)
        for (index_t k = 0; k < H; ++k) CHECK(hs(t, b, k) == doctest::Approx(h[std::size_t(b * H + k)]).epsilon(1e-13));
    }
    auto unrolled = unrolled3(cell, xw, h0, wo);  // at compile time: three nested cells
    CHECK(gx::value(loss(wh)) == doctest::Approx(gx::value(unrolled)).epsilon(1e-13));
    same_gradient(wh, loss(wh), unrolled, 1e-12);
    same_gradient(bh, loss(wh), unrolled, 1e-12);
    same_gradient(h0, loss(wh), unrolled, 1e-12);
    same_gradient(xw, loss(wh), unrolled, 1e-12);
  }
  SUBCASE("lstm_projected") {
    auto xw = gx::param(gx::uniform<double>(gx::dims(T, B, 4 * H), 61, -1.0, 1.0));
    auto wh = gx::param(gx::uniform<double>(gx::dims(H, 4 * H), 62, -0.7, 0.7));
    auto hc0 = gx::param(gx::uniform<double>(gx::dims(B, 2 * H), 63, -0.5, 0.5));
    auto wo = gx::uniform<double>(gx::dims(T, B, 2 * H), 64, -1.0, 1.0);
    auto cell = [&](auto const& x, auto const& hc) { return gx::cells::lstm_projected(x, hc, wh); };
    auto loss = [&](auto&) { return gx::sum(gx::scan(hc0, xw, [&](auto hc, auto x) { return cell(x, hc); }) * wo); };
    CHECK_NUMGRAD(loss, wh);
    CHECK_NUMGRAD(loss, hc0);
    CHECK_NUMGRAD(loss, xw);
    auto unrolled = unrolled3(cell, xw, hc0, wo);  // at compile time: three nested cells
    CHECK(gx::value(loss(wh)) == doctest::Approx(gx::value(unrolled)).epsilon(1e-13));
    same_gradient(wh, loss(wh), unrolled, 1e-12);
    same_gradient(hc0, loss(wh), unrolled, 1e-12);
    same_gradient(xw, loss(wh), unrolled, 1e-12);
  }
}

namespace {
// Whether a node is a product of a concatenation (the form gx::scan takes apart).
template <class N>
struct concat_product : std::false_type {};
template <class L, class R, std::size_t A, class W>
struct concat_product<gx::matmul_node<gx::concat_node<L, R, A>, W>> : std::true_type {};
}  // namespace

TEST_CASE("scan: a product of the input beside the carry is taken apart when the scan is built (x W_x over every step at once)") {
  // [x, h] W = x W_x + h W_h (api/scan_hoist.hpp): the scan's input becomes x W_x of every
  // step, one product before the loop; values and gradients as the body written, against
  // central differences and the body unrolled at compile time (where nothing is taken
  // apart). The device's default; on the host with gx::split_products (the device's own:
  // tests/cuda/model_test.cpp, "the cells that concatenate the input and the carry")
  index_t const B = 2, D = 3, H = 3;
  constexpr index_t T = 3;
  auto xs = gx::param(gx::uniform<double>(gx::dims(T, B, D), 71, -1.0, 1.0));
  auto h0 = gx::param(gx::uniform<double>(gx::dims(B, H), 72, -0.5, 0.5));
  auto w = gx::param(gx::uniform<double>(gx::dims(D + H, H), 73, -0.6, 0.6));
  auto b = gx::param(gx::uniform<double>(gx::dims(H), 74, -0.3, 0.3));
  auto wo = gx::uniform<double>(gx::dims(T, B, H), 75, -1.0, 1.0);
  SUBCASE("the cells' scans hold no product of a concatenation: the type says so") {
    auto kept = gx::scan(h0, xs, [&](auto h, auto x) { return gx::cells::elman(x, h, w, b); });
    static_assert(gx::detail::any_node<decltype(kept.body_), concat_product>(),
                  "the host keeps a product whole without gx::split_products");
    auto e = gx::scan(h0, xs, [&](auto h, auto x) { return gx::cells::elman(x, h, w, b); }, gx::split_products);
    static_assert(!gx::detail::any_node<decltype(e.body_), concat_product>(),
                  "gx::scan takes an Elman cell's [x, h] W apart");
    static_assert(gx::is_reshape_node<std::remove_cvref_t<decltype(e.xs_)>>::value,
                  "the Elman scan's input is x W_x of every step (a product reshaped to [steps, batch, H])");
    CHECK(e.xs_.shape() == gx::dims(T, B, H));
    auto w4 = gx::param(gx::uniform<double>(gx::dims(D + H, 4 * H), 76, -0.6, 0.6));
    auto b4 = gx::param(gx::uniform<double>(gx::dims(4 * H), 77, -0.3, 0.3));
    auto hc0 = gx::uniform<double>(gx::dims(B, 2 * H), 78, -0.5, 0.5);
    auto l = gx::scan(hc0, xs, [&](auto hc, auto x) { return gx::cells::lstm(x, hc, w4, b4); }, gx::split_products);
    static_assert(!gx::detail::any_node<decltype(l.body_), concat_product>(), "gx::scan takes an LSTM cell's [x, h] W apart");
    CHECK(l.xs_.shape() == gx::dims(T, B, 4 * H));  // x W_x for the four gates
    auto wn = gx::param(gx::uniform<double>(gx::dims(D + H, H), 79, -0.6, 0.6));
    auto g = gx::scan(h0, xs, [&](auto h, auto x) { return gx::cells::gru(x, h, w4, b4, wn, b); }, gx::split_products);
    static_assert(!gx::detail::any_node<decltype(g.body_), concat_product>(), "gx::scan takes a GRU cell's two products apart");
    CHECK(g.xs_.shape() == gx::dims(T, B, 4 * H + H));  // both products' input halves side by side
  }
  SUBCASE("a product of the input itself, x Wx (an Elman body with two weights), taken out of the loop whole") {
    auto wx = gx::param(gx::uniform<double>(gx::dims(D, H), 86, -0.6, 0.6));
    auto wh = gx::param(gx::uniform<double>(gx::dims(H, H), 87, -0.6, 0.6));
    auto cell = [&](auto const& x, auto const& h) { return elman(x, h, wx, wh, b); };
    auto s = gx::scan(h0, xs, [&](auto h, auto x) { return cell(x, h); }, gx::split_products);
    using S = decltype(s);
    static_assert(gx::detail::hoist_count_v<typename S::input_name, decltype(s.body_)> == 0,
                  "no product of the scan's input is left in the loop");
    CHECK(s.xs_.shape() == gx::dims(T, B, H));  // x Wx of every step
    auto loss = [&](auto&) { return gx::sum(gx::scan(h0, xs, [&](auto h, auto x) { return cell(x, h); }, gx::split_products) * wo); };
    CHECK_NUMGRAD(loss, wx);
    CHECK_NUMGRAD(loss, wh);
    CHECK_NUMGRAD(loss, xs);
    auto unrolled = unrolled3(cell, xs, h0, wo);
    CHECK(gx::value(loss(wx)) == doctest::Approx(gx::value(unrolled)).epsilon(1e-13));
    same_gradient(wx, loss(wx), unrolled, 1e-12);
    same_gradient(wh, loss(wx), unrolled, 1e-12);
  }
  SUBCASE("the carry first, [h, x] W: W's last rows multiply x") {
    auto cell = [&](auto const& x, auto const& h) { return gx::tanh(gx::matmul(gx::concat<1>(h, x), w) + b); };
    auto loss = [&](auto&) { return gx::sum(gx::scan(h0, xs, [&](auto h, auto x) { return cell(x, h); }, gx::split_products) * wo); };
    static_assert(!gx::detail::any_node<decltype(gx::scan(h0, xs, [&](auto h, auto x) { return cell(x, h); }, gx::split_products).body_),
                                         concat_product>());
    CHECK_NUMGRAD(loss, w);
    CHECK_NUMGRAD(loss, b);
    CHECK_NUMGRAD(loss, h0);
    CHECK_NUMGRAD(loss, xs);
    auto unrolled = unrolled3(cell, xs, h0, wo);
    CHECK(gx::value(loss(w)) == doctest::Approx(gx::value(unrolled)).epsilon(1e-13));
    same_gradient(w, loss(w), unrolled, 1e-12);
    same_gradient(xs, loss(w), unrolled, 1e-12);
  }
  SUBCASE("the input also read outside the product: the scan's input is [x, x W_x]") {
    auto cell = [&](auto const& x, auto const& h) { return gx::tanh(gx::matmul(gx::concat<1>(x, h), w) + b) + 0.5 * x; };
    auto loss = [&](auto&) { return gx::sum(gx::scan(h0, xs, [&](auto h, auto x) { return cell(x, h); }, gx::split_products) * wo); };
    CHECK(gx::scan(h0, xs, [&](auto h, auto x) { return cell(x, h); }, gx::split_products).xs_.shape() == gx::dims(T, B, D + H));
    CHECK_NUMGRAD(loss, w);
    CHECK_NUMGRAD(loss, h0);
    CHECK_NUMGRAD(loss, xs);
    auto unrolled = unrolled3(cell, xs, h0, wo);
    CHECK(gx::value(loss(w)) == doctest::Approx(gx::value(unrolled)).epsilon(1e-13));
    same_gradient(w, loss(w), unrolled, 1e-12);
    same_gradient(xs, loss(w), unrolled, 1e-12);
  }
  SUBCASE("a weight that is a tensor, or an expression of a parameter") {
    auto wt = gx::uniform<double>(gx::dims(D + H, H), 80, -0.6, 0.6);
    auto lt = [&](auto&) {
      return gx::sum(gx::scan(h0, xs, [&](auto h, auto x) { return gx::cells::elman(x, h, wt, b); }, gx::split_products) * wo);
    };
    CHECK_NUMGRAD(lt, xs);
    CHECK_NUMGRAD(lt, h0);
    CHECK_NUMGRAD(lt, b);
    auto le = [&](auto&) {
      return gx::sum(gx::scan(h0, xs, [&](auto h, auto x) { return gx::cells::elman(x, h, 0.5 * w, b); }, gx::split_products) * wo);
    };
    CHECK_NUMGRAD(le, w);
    CHECK_NUMGRAD(le, xs);
  }
  SUBCASE("zero steps and one step") {
    auto w4 = gx::param(gx::uniform<double>(gx::dims(D + H, 4 * H), 81, -0.6, 0.6));
    auto b4 = gx::param(gx::uniform<double>(gx::dims(4 * H), 82, -0.3, 0.3));
    auto hc0 = gx::param(gx::uniform<double>(gx::dims(B, 2 * H), 83, -0.5, 0.5));
    auto none = gx::zeros<double>(gx::dims(0, B, D));
    auto hs = gx::scan(hc0, none, [&](auto hc, auto x) { return gx::cells::lstm(x, hc, w4, b4); }, gx::split_products);
    CHECK(gx::eval(hs).shape() == gx::dims(0, B, 2 * H));
    auto g = gx::grad(gx::sum(hs), w4).to_dense();
    for (index_t k = 0; k < (D + H) * 4 * H; ++k) CHECK(g.data()[k] == 0.0);
    auto one = gx::param(gx::uniform<double>(gx::dims(1, B, D), 84, -1.0, 1.0));
    auto wo1 = gx::uniform<double>(gx::dims(1, B, 2 * H), 85, -1.0, 1.0);
    auto l1 = [&](auto&) {
      return gx::sum(gx::scan(hc0, one, [&](auto hc, auto x) { return gx::cells::lstm(x, hc, w4, b4); }, gx::split_products) * wo1);
    };
    CHECK_NUMGRAD(l1, w4);
    CHECK_NUMGRAD(l1, one);
  }
}

TEST_CASE("scan: the inputs gathered from an embedding table, the carries read by a product and a loss") {
  index_t const T = 5, B = 3, V = 9, D = 4, H = 5, K = 3;
  auto table = gx::param(gx::uniform<double>(gx::dims(V, D), 51, -1.0, 1.0));
  gx::tensor<std::int64_t, shape<dyn>> tokens(gx::dims(T * B));
  for (index_t i = 0; i < T * B; ++i) tokens(i) = (i * 7 + 3) % V;  // rows repeat
  auto w = gx::param(gx::uniform<double>(gx::dims(D + H, H), 52, -0.6, 0.6));
  auto b = gx::param(gx::uniform<double>(gx::dims(H), 53, -0.3, 0.3));
  auto wo = gx::param(gx::uniform<double>(gx::dims(H, K), 54, -0.6, 0.6));
  auto h0 = gx::zeros<double>(gx::dims(B, H));
  gx::tensor<std::int64_t, shape<dyn>> y(gx::dims(T * B));
  for (index_t i = 0; i < T * B; ++i) y(i) = (i * 5 + 1) % K;
  auto loss = [&](auto&) {
    // doc-snippet: scan_loss
    auto xs = gx::reshape(gx::gather<0>(table, tokens), gx::dims(T, B, D));  // [steps, batch, D]
    auto hs = gx::scan(h0, xs, [&](auto h, auto x) {  // the carry, the step's input
      return gx::tanh(gx::matmul(gx::concat<1>(x, h), w) + b);  // the new carry: gx::cells::elman
    });  // [steps, batch, H]: every step's carry
    return gx::cross_entropy(gx::matmul(gx::reshape(hs, gx::dims(T * B, H)), wo), y);
    // end doc-snippet
  };
  CHECK_NUMGRAD(loss, table);
  CHECK_NUMGRAD(loss, w);
  CHECK_NUMGRAD(loss, b);
  CHECK_NUMGRAD(loss, wo);
}

TEST_CASE("scan: no steps, one step, a body that ignores its input or its carry") {
  index_t const B = 2, H = 3;
  auto w = gx::param(gx::uniform<double>(gx::dims(H, H), 61, -0.6, 0.6));
  auto h0 = gx::param(gx::uniform<double>(gx::dims(B, H), 62, -0.5, 0.5));
  SUBCASE("zero steps: an empty result, zero gradients") {
    auto xs = gx::zeros<double>(gx::dims(0, B, H));
    auto hs = gx::scan(h0, xs, [&](auto h, auto x) { return gx::tanh(gx::matmul(h, w) + x); });
    auto r = gx::eval(hs);
    CHECK(r.shape() == gx::dims(0, B, H));
    auto g = gx::grad(gx::sum(hs), w).to_dense();
    for (index_t k = 0; k < H * H; ++k) CHECK(g.data()[k] == 0.0);
    auto g0 = gx::grad(gx::sum(hs), h0).to_dense();
    for (index_t k = 0; k < B * H; ++k) CHECK(g0.data()[k] == 0.0);
  }
  SUBCASE("one step") {
    auto xs = gx::uniform<double>(gx::dims(1, B, H), 63, -1.0, 1.0);
    auto loss = [&](auto&) {
      return gx::sum(gx::square(gx::scan(h0, xs, [&](auto h, auto x) { return gx::tanh(gx::matmul(h, w) + x); })));
    };
    CHECK_NUMGRAD(loss, w);
    CHECK_NUMGRAD(loss, h0);
  }
  SUBCASE("a body that reads only its input: the carries do not depend on c0") {
    auto xs = gx::uniform<double>(gx::dims(4, B, H), 64, -1.0, 1.0);
    auto loss = [&](auto&) { return gx::sum(gx::scan(h0, xs, [&](auto, auto x) { return gx::tanh(gx::matmul(x, w)); })); };
    CHECK_NUMGRAD(loss, w);
    CHECK_NUMGRAD(loss, h0);
  }
  SUBCASE("a body that reads only its carry (a power iteration)") {
    auto xs = gx::zeros<double>(gx::dims(4, 1));
    auto loss = [&](auto&) {
      return gx::sum(gx::scan(h0, xs, [&](auto h, auto) { return gx::sin(gx::matmul(h, w)) * 0.9; }));
    };
    CHECK_NUMGRAD(loss, w);
    CHECK_NUMGRAD(loss, h0);
  }
}

TEST_CASE("scan: a carry whose shape the body changes at run time is a gradix::error naming both shapes") {
  auto h0 = gx::zeros<double>(gx::dims(2, 3));
  auto w = gx::uniform<double>(gx::dims(3, 4), 71, -1.0, 1.0);
  auto xs = gx::zeros<double>(gx::dims(5, 2, 4));
  auto build = [&] { return gx::scan(h0, xs, [&](auto h, auto x) { return gx::matmul(h, w) + x; }); };
  CHECK_THROWS_WITH_AS(build(), doctest::Contains("gradix::scan: the body's new carry has shape [2, 4] but the carry c0 has shape [2, 3]"), gx::error);
}

TEST_CASE("scan: sequences of different lengths (gx::lengths): finished rows keep their carry") {
  index_t const T = 5, B = 4, D = 3, H = 4;
  auto xs = gx::param(gx::uniform<double>(gx::dims(T, B, D), 81, -1.0, 1.0));
  auto w = gx::param(gx::uniform<double>(gx::dims(D + H, H), 82, -0.6, 0.6));
  auto b = gx::param(gx::uniform<double>(gx::dims(H), 83, -0.3, 0.3));
  auto h0 = gx::param(gx::uniform<double>(gx::dims(B, H), 84, -0.5, 0.5));
  auto wo = gx::uniform<double>(gx::dims(T, B, H), 85, -1.0, 1.0);
  gx::tensor<std::int64_t, shape<dyn>> len(gx::dims(B));
  len(0) = 5;
  len(1) = 2;
  len(2) = 0;
  len(3) = 3;
  auto cell = [&](auto h, auto x) { return gx::cells::elman(x, h, w, b); };
  auto hs = gx::scan(h0, xs, cell, gx::lengths(len));
  auto full = gx::eval(gx::scan(h0, xs, cell));
  auto got = gx::eval(hs);
  for (index_t r = 0; r < B; ++r)
    for (index_t t = 0; t < T; ++t)
      for (index_t j = 0; j < H; ++j) {
        // row r runs len(r) steps, then repeats its last carry (h0 when it runs none)
        double const want = t < len(r) ? full(t, r, j) : (len(r) == 0 ? h0.value()(r, j) : full(len(r) - 1, r, j));
        CHECK(got(t, r, j) == want);
      }
  SUBCASE("gradients") {
    auto loss = [&](auto&) { return gx::sum(gx::scan(h0, xs, cell, gx::lengths(len)) * wo); };
    CHECK_NUMGRAD(loss, w);
    CHECK_NUMGRAD(loss, b);
    CHECK_NUMGRAD(loss, h0);
    CHECK_NUMGRAD(loss, xs);
    auto again = [&](auto&) { return gx::sum(gx::scan(h0, xs, cell, gx::lengths(len), gx::recompute_steps) * wo); };
    CHECK_NUMGRAD(again, w);
    CHECK_NUMGRAD(again, h0);
  }
  SUBCASE("a length outside the sequence, or a lengths vector of another extent, is an error before any step") {
    len(2) = 6;
    CHECK_THROWS_WITH_AS(gx::eval(hs), doctest::Contains("gradix::scan: lengths[2] = 6 is outside the sequence of 5 steps"), gx::error);
    len(2) = -1;
    CHECK_THROWS_WITH_AS(gx::eval(hs), doctest::Contains("gradix::scan: lengths[2] = -1 is outside"), gx::error);
    gx::tensor<std::int64_t, shape<dyn>> three(gx::dims(3));
    three(0) = three(1) = three(2) = 1;
    CHECK_THROWS_WITH_AS(gx::eval(gx::scan(h0, xs, cell, gx::lengths(three))),
                         doctest::Contains("gradix::scan: gx::lengths has 3 lengths but the carry has 4 rows"), gx::error);
  }
}

TEST_CASE("scan: an early exit (gx::stop_when) for a fixed-point iteration") {
  // x <- cos(x) converges to 0.739085...; stop when a step moves every entry less than 1e-10
  index_t const steps = 200;
  auto x0 = gx::uniform<double>(gx::dims(3), 91, 0.0, 1.0);
  auto none = gx::zeros<double>(gx::dims(steps, 1));
  double prev[3] = {x0(0), x0(1), x0(2)};
  index_t stopped_at = -1;
  auto until = gx::stop_when([&](auto const& x, index_t t) {
    bool done = true;
    for (index_t i = 0; i < 3; ++i) {
      done = done && std::abs(x(i) - prev[i]) < 1e-10;
      prev[i] = x(i);
    }
    if (done && stopped_at < 0) stopped_at = t;
    return done;
  });
  auto xs = gx::eval(gx::scan(x0, none, [](auto x, auto) { return gx::cos(x); }, until));
  REQUIRE(stopped_at > 0);
  CHECK(stopped_at < 100);
  for (index_t t = stopped_at; t < steps; ++t)
    for (index_t i = 0; i < 3; ++i) CHECK(xs(t, i) == xs(stopped_at, i));  // repeated after the exit
  CHECK(xs(steps - 1, 0) == doctest::Approx(0.7390851332151607).epsilon(1e-9));
}

TEST_CASE("scan: bodies with kept values of every kind, two stacked layers, a scan inside a let") {
  index_t const T = 4, B = 3, D = 4, H = 5;
  auto xs = gx::param(gx::uniform<double>(gx::dims(T, B, D), 101, -1.0, 1.0));
  auto w = gx::param(gx::uniform<double>(gx::dims(D + H, H), 102, -0.6, 0.6));
  auto u = gx::param(gx::uniform<double>(gx::dims(H, H), 103, -0.6, 0.6));
  auto g = gx::param(gx::uniform<double>(gx::dims(H), 104, 0.5, 1.5));
  auto h0 = gx::param(gx::uniform<double>(gx::dims(B, H), 105, -0.5, 0.5));
  auto wo = gx::uniform<double>(gx::dims(T, B, H), 106, -1.0, 1.0);
  SUBCASE("layer norm, softmax, a row sum broadcast back, a max") {
    auto loss = [&](auto&) {
      return gx::sum(gx::scan(h0, xs, [&](auto h, auto x) {
               auto z = gx::layer_norm(gx::matmul(gx::concat<1>(x, h), w), g, g * 0.0);
               auto s = gx::softmax<1>(z);
               return gx::tanh(z - gx::mean<1>(z, gx::keep_dims) + s * 2.0 + gx::max<1>(h, gx::keep_dims) * 0.1);
             }) * wo);
    };
    CHECK_NUMGRAD(loss, w);
    CHECK_NUMGRAD(loss, g);
    CHECK_NUMGRAD(loss, h0);
    CHECK_NUMGRAD(loss, xs);
  }
  SUBCASE("two stacked layers: the second scan reads the first's carries") {
    auto loss = [&](auto&) {
      auto h1 = gx::scan(h0, xs, [&](auto h, auto x) { return gx::cells::elman(x, h, w, g); });
      auto h2 = gx::scan(h0 * 0.5, h1, [&](auto h, auto x) { return gx::tanh(gx::matmul(x, u) + gx::matmul(h, u) * 0.5); });
      return gx::sum(h2 * wo) + gx::sum(h1 * wo) * 0.25;
    };
    CHECK_NUMGRAD(loss, w);
    CHECK_NUMGRAD(loss, u);
    CHECK_NUMGRAD(loss, h0);
    CHECK_NUMGRAD(loss, xs);
  }
  SUBCASE("a scan inside a let, its body reading the let's value; the steps along another axis") {
    auto xb = gx::param(gx::uniform<double>(gx::dims(B, T, D), 107, -1.0, 1.0));  // batch-major
    auto loss = [&](auto&) {
      return gx::let(gx::matmul(h0, u), [&](auto shared) {
        auto hs = gx::scan(shared, gx::permute<1, 0, 2>(xb), [&](auto h, auto x) {
          return gx::tanh(gx::matmul(gx::concat<1>(x, h), w) + shared * 0.5);
        });
        return gx::sum(hs * wo) + gx::sum(shared);
      });
    };
    CHECK_NUMGRAD(loss, u);
    CHECK_NUMGRAD(loss, w);
    CHECK_NUMGRAD(loss, h0);
    CHECK_NUMGRAD(loss, xb);
  }
}
