// Saved values (docs/ad.md, "Saved values"): reductions read inside expressions and
// `gx::saved(e)` are computed once per call into a buffer; results and gradients are those
// of the expression without buffers. Gradients against central differences in double.
#include "ad/configs.hpp"
#include "ad/numgrad.hpp"
#include "testing.hpp"

#include <cmath>
#include <limits>
#include <thread>
#include <vector>

namespace gx = gradix;
using gx::dyn;
using gx::shape;

namespace {
// log(sum_j exp(x_ij - m_i)) + m_i with m = max over axis 1: the cross-entropy pattern
template <class X>
auto logsumexp1(X const& x) {
  return gx::log(gx::sum<1>(gx::exp(x - gx::max<1>(x, gx::keep_dims)))) + gx::max<1>(x);
}
}  // namespace

TEST_CASE_TEMPLATE("saved: logsumexp over rows, value and gradient", C, GRADIX_AD_CONFIGS) {
  auto x = C::make(301, -2.0, 2.0);
  auto w = C::values(302);
  // value against a plain loop
  double ref = 0;
  auto const& xv = x.value();
  for (gx::index_t i = 0; i < 5; ++i) {
    double m = xv(i, 0);
    for (gx::index_t j = 1; j < 3; ++j) m = std::max(m, double(xv(i, j)));
    double s = 0;
    for (gx::index_t j = 0; j < 3; ++j) s += std::exp(double(xv(i, j)) - m);
    ref += std::log(s) + m;
  }
  CHECK(gx::value(gx::sum(logsumexp1(x))) == doctest::Approx(ref).epsilon(1e-12));
  CHECK_NUMGRAD([&](auto& p) { return gx::sum(logsumexp1(p)); }, x);
  // softmax cross-entropy against weights: the adjoint of the max cancels exactly
  CHECK_NUMGRAD([&](auto& p) { return gx::sum(logsumexp1(p)) - gx::sum(w * p); }, x);
  // the same with the max named once and read twice through gx::saved
  CHECK_NUMGRAD(
      [&](auto& p) {
        auto m = gx::saved(gx::max<1>(p, gx::keep_dims));
        return gx::sum(gx::log(gx::sum<1>(gx::exp(p - m), gx::keep_dims)) + m);
      },
      x);
}

TEST_CASE_TEMPLATE("saved: reductions read by elementwise, index and view nodes", C, GRADIX_AD_CONFIGS) {
  auto x = C::make(311);
  auto w = C::values(312);
  SUBCASE("a normalised matrix: x / sum over each axis, broadcast back") {
    auto y = C::make(313, 0.5, 1.5);
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(w * p / gx::sum<0>(p, gx::keep_dims)); }, y);
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(w * p / gx::sum<1>(p, gx::keep_dims)); }, y);
  }
  SUBCASE("a centred matrix, squared") {
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::square(p - gx::mean<1>(p, gx::keep_dims)) * w); }, x);
  }
  SUBCASE("a reduction gathered with repeated indices, and a transposed one") {
    std::vector<int> idx{2, 0, 2, 1};
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::tanh(gx::gather<0>(gx::sum<0>(gx::tanh(p)), gx::indices(idx)))); }, x);
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::transpose(gx::exp(gx::sum<1>(p, gx::keep_dims))) * gx::sum<1>(p, gx::keep_dims)); }, x);
  }
  SUBCASE("nested: a reduction over an expression that reads a kept reduction") {
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::exp(gx::sum<1>(gx::tanh(p - gx::max<0>(p, gx::keep_dims))))); }, x);
  }
  SUBCASE("saved(e) around elementwise sub-expressions, read twice") {
    CHECK_NUMGRAD([&](auto& p) {
      auto h = gx::saved(gx::tanh(p * 0.7 + 0.1));
      return gx::sum(h * h * w + gx::exp(h));
    }, x);
  }
  SUBCASE("a seeded backward through a kept reduction") {
    auto seed = C::values(314);
    CHECK_NUMGRAD_SEEDED([&](auto& p) { return p - gx::max<1>(p, gx::keep_dims); }, x, seed);
  }
}

TEST_CASE("saved: ad::buffer_count_v and workspace_bytes follow the rule") {
  auto x = gx::param(gx::randn<double>(gx::dims(6, 4), 1));
  auto xv = gx::randn<float>(gx::dims(6, 4), 2);
  using gx::ad::buffer_count_v;
  static_assert(buffer_count_v<decltype(gx::sum(gx::sum<1>(x)))> == 0);  // reduction of a reduction
  static_assert(buffer_count_v<decltype(gx::sum(gx::exp(gx::sum<1>(x))))> == 1);
  static_assert(buffer_count_v<decltype(gx::sum(logsumexp1(x)))> == 3);  // max twice, the sum
  static_assert(buffer_count_v<decltype(gx::saved(x * 2.0))> == 1);
  static_assert(buffer_count_v<decltype(gx::saved(gx::sum<1>(x)) * 2.0)> == 1);  // one, not two
  CHECK(gx::workspace_bytes(gx::sum(gx::sum<1>(x))) == 0);
  // values (doubles, floats, long doubles, indices), then adjoint buffers (doubles, floats,
  // long doubles), each kind rounded up to 64 bytes: 3 x 6 doubles kept, 2 x 6 arg-max
  // indices, the kept sum's adjoint (6 doubles)
  CHECK(gx::workspace_bytes(gx::sum(logsumexp1(x))) == 3 * 64 + 2 * 64 + 64);
  // a kept sum over a parameter also has an adjoint buffer of its size in a backward call
  // (docs/ad.md, "Adjoints of reductions"): the doubles take two lines, the floats (over a
  // constant, no adjoint buffer) one
  CHECK(gx::workspace_bytes(gx::sum(gx::exp(gx::sum<1>(x))) + gx::sum(gx::sum<1>(xv) * 2.0f)) == 128 + 64);
  gx::tensor<double, shape<dyn, dyn>> big(gx::dims(100, 300));
  CHECK(gx::workspace_bytes(big - gx::max<1>(big, gx::keep_dims)) == 2 * (100 * 8 + 64 - (100 * 8) % 64));
  // a warm call reuses the thread's workspace: it does not grow again
  (void)gx::backward(gx::sum(logsumexp1(x)));
  auto cap = gx::workspace_capacity();
  CHECK(cap >= gx::workspace_bytes(gx::sum(logsumexp1(x))));
  (void)gx::backward(gx::sum(logsumexp1(x)));
  CHECK(gx::workspace_capacity() == cap);
}

TEST_CASE("saved: results equal the plain loops bit for bit for sums (same summation scheme)") {
  // x - max over rows, evaluated through a kept buffer, against the same subtraction with
  // the maxima computed by a separate value() per row
  auto x = gx::randn<float>(gx::dims(37, 301), 5);
  auto y = gx::eval(x - gx::max<1>(x, gx::keep_dims));
  auto m = gx::eval(gx::max<1>(x));
  bool same = true;
  for (gx::index_t i = 0; i < 37; ++i)
    for (gx::index_t j = 0; j < 301; ++j) same = same && y(i, j) == x(i, j) - m(i);
  CHECK(same);
  // a row sum read back: sum<1>(x) kept, then broadcast
  auto z = gx::eval(x * gx::sum<1>(x, gx::keep_dims));
  auto s = gx::eval(gx::sum<1>(x));
  same = true;
  for (gx::index_t i = 0; i < 37; ++i)
    for (gx::index_t j = 0; j < 301; ++j) same = same && z(i, j) == x(i, j) * s(i);
  CHECK(same);
}

TEST_CASE("saved: a call nested in a call of the same thread gets buffers of its own") {
  // gradix never nests calls itself; a user's custom code could (here: an assignment from
  // inside a pool-free loop is not nesting, so simulate with two workspaces in use)
  auto x = gx::randn<double>(gx::dims(8, 5), 7);
  gx::detail::saved_sizes z;
  z.nd = 16;
  gx::host::executor ex;
  gx::detail::saved_space_host outer(z, ex);  // holds the thread's workspace
  double* p = outer.take<double>(16);
  for (int k = 0; k < 16; ++k) p[k] = double(k);
  auto y = gx::eval(x - gx::max<1>(x, gx::keep_dims));  // nested: its own buffer
  for (int k = 0; k < 16; ++k) CHECK(p[k] == double(k));  // the outer buffers are untouched
  CHECK(y(0, 0) <= 0.0);
}

TEST_CASE("saved: two user threads running backward with kept values stay correct") {
  auto make = [](std::uint64_t s) { return gx::param(gx::randn<float>(gx::dims(64, 300), s)); };
  auto pa = make(1), pb = make(2);
  gx::backward(gx::sum(logsumexp1(pa)));
  gx::backward(gx::sum(logsumexp1(pb)));
  auto ref_a = pa.grad().to_dense(), ref_b = pb.grad().to_dense();
  std::atomic<int> wrong{0};
  auto worker = [&](auto& p, auto const& ref) {
    for (int rep = 0; rep < 20; ++rep) {
      gx::zero_grad(p);
      gx::backward(gx::sum(logsumexp1(p)));
      auto g = p.grad().to_dense();
      for (gx::index_t k = 0; k < g.size(); ++k)
        if (g.data()[k] != ref.data()[k]) {
          ++wrong;
          break;
        }
    }
  };
  std::thread ta([&] { worker(pa, ref_a); });
  std::thread tb([&] { worker(pb, ref_b); });
  ta.join();
  tb.join();
  CHECK(wrong.load() == 0);
}

// ---------------------------------------------------------------------------------------
// Several parameters in one elementwise region: one multi_use kernel, one reverse sweep per
// element for all of them (ad::multi_use, eval/sweep.hpp).

TEST_CASE_TEMPLATE("multi_use: a two-layer elementwise network, every parameter", C, GRADIX_AD_CONFIGS) {
  auto w1 = C::make(401), b1 = C::make(402), w2 = C::make(403), b2 = C::make(404);
  auto x = C::values(405);
  auto net = [&](auto const& a1, auto const& c1, auto const& a2, auto const& c2) {
    return gx::sum(gx::tanh(a2 * gx::tanh(a1 * x + c1) + c2));
  };
  using E = decltype(net(w1, b1, w2, b2));
  using Plan = gx::backward_plan_t<E>;
  static_assert(Plan::size == 1, "the four uses run as one kernel");
  static_assert(gx::ad::is_multi<std::remove_cvref_t<decltype(gx::get<0>(std::declval<Plan&>()))>>::value);
  CHECK_NUMGRAD([&](auto& p) { return net(p, b1, w2, b2); }, w1);
  CHECK_NUMGRAD([&](auto& p) { return net(w1, p, w2, b2); }, b1);
  CHECK_NUMGRAD([&](auto& p) { return net(w1, b1, p, b2); }, w2);
  CHECK_NUMGRAD([&](auto& p) { return net(w1, b1, w2, p); }, b2);
  // grad() of one parameter from the shared kernel equals backward's
  auto g = gx::grad(net(w1, b1, w2, b2), w2).to_dense();
  gx::zero_grad(w1, b1, w2, b2);
  gx::backward(net(w1, b1, w2, b2));
  CHECK(gx::testing::same_bits(g, w2.grad().to_dense()));
}

TEST_CASE_TEMPLATE("multi_use: signs, a parameter read twice, a factor from outside the region", C,
                   GRADIX_AD_CONFIGS) {
  auto a = C::make(411), b = C::make(412);
  auto w = C::values(413);
  SUBCASE("a difference and a repeated parameter inside one region") {
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::exp(p * b - b * 0.5) * gx::tanh(p - a * p)); }, a);
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::exp(a * p - p * 0.5) * gx::tanh(a - a * p)); }, b);
  }
  SUBCASE("the region under a product with a constant view (v0 of the kernel)") {
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(w * gx::sigmoid(p * b + a)); }, a);
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(w * gx::sigmoid(a * p + a)); }, b);
  }
  SUBCASE("a seeded backward") {
    auto seed = C::values(414);
    CHECK_NUMGRAD_SEEDED([&](auto& p) { return gx::tanh(p * b + b); }, a, seed);
    CHECK_NUMGRAD_SEEDED([&](auto& p) { return gx::tanh(a * p + p); }, b, seed);
  }
}

TEST_CASE("multi_use: the same bits with one thread and with several, serial and packed paths") {
  int const threads = gx::num_threads();
  gx::index_t const n = (1 << 17) + 13;  // a loop tail, and enough work for the pool
  auto x0 = gx::uniform<float>(gx::dims(n), 1);
  auto mk = [&](std::uint64_t s) { return gx::param(gx::uniform<float>(gx::dims(n), s, 0.f, 1.f)); };
  auto w1 = mk(2), b1 = mk(3), w2 = mk(4), b2 = mk(5);
  auto loss = [&] { return gx::sum(gx::tanh(w2 * gx::tanh(w1 * x0 + b1) + b2)); };
  gx::set_num_threads(1);
  gx::backward(loss());
  auto r1 = w1.grad().to_dense(), r2 = b2.grad().to_dense();
  gx::zero_grad(w1, b1, w2, b2);
  gx::set_num_threads(4);
  gx::backward(loss());
  auto p1 = w1.grad().to_dense(), p2 = b2.grad().to_dense();
  gx::set_num_threads(threads);
  bool same = true;
  for (gx::index_t k = 0; k < n; ++k) same = same && r1.data()[k] == p1.data()[k] && r2.data()[k] == p2.data()[k];
  CHECK(same);
  // against the chain rule in double, every element (packs and the tail)
  double worst = 0;
  for (gx::index_t k = 0; k < n; ++k) {
    double h = std::tanh(double(w1.value()(k)) * x0(k) + b1.value()(k));
    double y = std::tanh(double(w2.value()(k)) * h + b2.value()(k));
    double g2 = 1 - y * y, g1 = g2 * w2.value()(k) * (1 - h * h);
    for (double const d : {std::abs(g1 * x0(k) - r1.data()[k]), std::abs(g2 - r2.data()[k])})
      if (!(d <= worst)) worst = std::isnan(d) ? std::numeric_limits<double>::infinity() : d;  // (a NaN fails)
  }
  CHECK(worst < 1e-5);
}

TEST_CASE("multi_use: parameters of different layouts in one region keep their own loop order") {
  // a row-major and a column-major parameter read through one region: their contiguous axes
  // are different domain axes, so they do not share a loop nest (found by the random suite:
  // the column-major target was walked with the row-major one's stride)
  auto a = gx::param(gx::uniform<double, gx::row_major>(gx::dims(4, 3), 421, 0.2, 1.0));
  auto b = gx::param(gx::uniform<double, gx::col_major>(gx::dims(4, 3), 422, 0.2, 1.0));
  auto c = gx::param(gx::uniform<double, gx::row_major>(gx::dims(4, 3), 423, 0.2, 1.0));
  auto f = [&](auto const& x, auto const& y, auto const& z) { return gx::sum(gx::tanh(gx::square(x - y) + z * x)); };
  using Plan = gx::backward_plan_t<decltype(f(a, b, c))>;
  static_assert(Plan::size == 2, "a and c (row-major) together, b apart");
  CHECK_NUMGRAD([&](auto& p) { return f(p, b, c); }, a);
  CHECK_NUMGRAD([&](auto& p) { return f(a, p, c); }, b);
  CHECK_NUMGRAD([&](auto& p) { return f(a, b, p); }, c);
}

// ---------------------------------------------------------------------------------------
// Parameters reached through broadcasts join the region's kernel (ad::member_kind): a bias
// row summed down the columns, a column summed along the rows in registers, a scalar summed
// over everything (block partials added in block order).

namespace {
template <int K, class E, class C, class R, class S>
auto bchain(E const& e, C const& c, R const& r, S const& s) {
  if constexpr (K == 0) return e;
  else return bchain<K - 1>(gx::tanh(e * c * s + r), c, r, s);
}
template <class L>
void check_bcast_members() {
  auto X = gx::param(gx::uniform<double, L>(gx::dims(5, 7), 431, -1.0, 1.0));
  auto r = gx::param(gx::uniform<double>(gx::dims(gx::fix<1>, 7), 432, -0.5, 0.5));
  auto c = gx::param(gx::uniform<double>(gx::dims(5, gx::fix<1>), 433, 0.5, 1.0));
  auto s = gx::param(gx::tensor<double, shape<>>{0.9});
  auto f = [&](auto const& x, auto const& cc, auto const& rr, auto const& ss) {
    return gx::sum(bchain<3>(x, cc, rr, ss));
  };
  using Plan = gx::backward_plan_t<decltype(f(X, c, r, s))>;
  static_assert(Plan::size == 1, "X, c, r and s in one kernel");
  CHECK_NUMGRAD([&](auto& p) { return f(p, c, r, s); }, X);
  CHECK_NUMGRAD([&](auto& p) { return f(X, p, r, s); }, c);
  CHECK_NUMGRAD([&](auto& p) { return f(X, c, p, s); }, r);
  CHECK_NUMGRAD([&](auto& p) { return f(X, c, r, p); }, s);
  // grad() of one member equals backward's
  auto g = gx::grad(f(X, c, r, s), r).to_dense();
  gx::zero_grad(X, c, r, s);
  gx::backward(f(X, c, r, s));
  CHECK(gx::testing::same_bits(g, r.grad().to_dense()));
}
}  // namespace

TEST_CASE("multi_use: broadcast members (row, column, scalar), row- and column-major") {
  SUBCASE("row-major") { check_bcast_members<gx::row_major>(); }
  SUBCASE("column-major") { check_bcast_members<gx::col_major>(); }
  SUBCASE("rank 3: a bias over the last axis, a scale per leading index") {
    auto X = gx::param(gx::uniform<double>(gx::dims(2, 3, 4), 441, -1.0, 1.0));
    auto b = gx::param(gx::uniform<double>(gx::dims(gx::fix<1>, gx::fix<1>, 4), 442, -0.5, 0.5));
    auto a = gx::param(gx::uniform<double>(gx::dims(2, 3, gx::fix<1>), 443, 0.5, 1.0));
    auto w = gx::param(gx::uniform<double>(gx::dims(2, gx::fix<1>, gx::fix<1>), 444, 0.5, 1.0));  // kernel of its own
    auto f = [&](auto const& x, auto const& bb, auto const& aa, auto const& ww) {
      return gx::sum(gx::tanh(gx::exp(x * aa + bb) * ww - bb));
    };
    CHECK_NUMGRAD([&](auto& p) { return f(p, b, a, w); }, X);
    CHECK_NUMGRAD([&](auto& p) { return f(X, p, a, w); }, b);
    CHECK_NUMGRAD([&](auto& p) { return f(X, b, p, w); }, a);
    CHECK_NUMGRAD([&](auto& p) { return f(X, b, a, p); }, w);
  }
  SUBCASE("a vector domain: scalars summed in blocks along the one axis") {
    auto x = gx::param(gx::uniform<double>(gx::dims(37), 451, -1.0, 1.0));
    auto s = gx::param(gx::tensor<double, shape<>>{0.7});
    auto t = gx::param(gx::tensor<double, shape<1>>{0.2});
    auto f = [&](auto const& xx, auto const& ss, auto const& tt) { return gx::sum(gx::tanh(gx::tanh(xx * ss + tt) * ss - tt)); };
    using Plan = gx::backward_plan_t<decltype(f(x, s, t))>;
    static_assert(Plan::size == 1);
    CHECK_NUMGRAD([&](auto& p) { return f(p, s, t); }, x);
    CHECK_NUMGRAD([&](auto& p) { return f(x, p, t); }, s);
    CHECK_NUMGRAD([&](auto& p) { return f(x, s, p); }, t);
  }
}

TEST_CASE("multi_use: broadcast members give the same bits with any thread count") {
  int const threads = gx::num_threads();
  auto run = [&](int nt, auto const& loss, auto&... ps) {
    gx::set_num_threads(nt);
    gx::zero_grad(ps...);
    gx::backward(loss());
    return std::vector<std::vector<float>>{[&] {
      auto d = ps.grad().to_dense();
      return std::vector<float>(d.data(), d.data() + d.size());
    }()...};
  };
  SUBCASE("a matrix: rows split over threads, bias rows in block partials") {
    gx::index_t const m = 301, n = 257;  // tails in both directions, several blocks
    auto X = gx::param(gx::uniform<float>(gx::dims(m, n), 461, -1.f, 1.f));
    auto r = gx::param(gx::uniform<float>(gx::dims(gx::fix<1>, n), 462, -0.5f, 0.5f));
    auto c = gx::param(gx::uniform<float>(gx::dims(m, gx::fix<1>), 463, 0.5f, 1.f));
    auto s = gx::param(gx::tensor<float, shape<>>{0.9f});
    auto loss = [&] { return gx::sum(bchain<4>(X, c, r, s)); };
    auto one = run(1, loss, X, r, c, s);
    auto four = run(4, loss, X, r, c, s);
    auto three = run(3, loss, X, r, c, s);
    CHECK(one == four);
    CHECK(one == three);
    // r against the chain rule in double (each column summed over the rows)
    std::vector<double> gr(std::size_t(n), 0.0);
    for (gx::index_t i = 0; i < m; ++i)
      for (gx::index_t j = 0; j < n; ++j) {
        double e = X.value()(i, j), ys[4], sv = s.value()(), cv = c.value()(i, 0), rv = r.value()(0, j);
        for (int k = 0; k < 4; ++k) ys[k] = e = std::tanh(e * cv * sv + rv);
        double a = 1;
        for (int k = 3; k >= 0; --k) {
          a *= 1 - ys[k] * ys[k];
          gr[std::size_t(j)] += a;
          a *= cv * sv;
        }
      }
    double worst = 0;
    for (gx::index_t j = 0; j < n; ++j) {
      double const d = std::abs(gr[std::size_t(j)] - one[1][std::size_t(j)]) / (1 + std::abs(gr[std::size_t(j)]));
      if (!(d <= worst)) worst = std::isnan(d) ? std::numeric_limits<double>::infinity() : d;  // (a NaN fails)
    }
    CHECK(worst < 1e-5);
  }
  SUBCASE("a vector: the axis split in blocks, scalars in block partials") {
    gx::index_t const n = (1 << 17) + 29;
    auto x = gx::param(gx::uniform<float>(gx::dims(n), 471, -1.f, 1.f));
    auto s = gx::param(gx::tensor<float, shape<>>{0.7f});
    auto t = gx::param(gx::tensor<float, shape<1>>{0.2f});
    auto loss = [&] { return gx::sum(gx::tanh(gx::tanh(x * s + t) * s - t)); };
    auto one = run(1, loss, x, s, t);
    auto four = run(4, loss, x, s, t);
    CHECK(one == four);
    double gs = 0;
    for (gx::index_t k = 0; k < n; ++k) {
      double sv = s.value()(), tv = t.value()(0), xv = x.value()(k);
      double h = std::tanh(xv * sv + tv), y = std::tanh(h * sv - tv);
      double a = 1 - y * y;
      gs += a * h + a * sv * (1 - h * h) * xv;
    }
    CHECK(std::abs(gs - one[1][0]) / (1 + std::abs(gs)) < 1e-5);
  }
  gx::set_num_threads(threads);
}
