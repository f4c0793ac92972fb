// gx::optim and the gradient accessors: each optimizer against a hand computation over a
// few steps (the same formula written as a plain loop, in double), dense and sparse storage,
// every layout and storage axis; what a step visits (only touched slices where the algorithm
// allows, every element for dense Adam); lazy Adam's catch-up of the skipped moment decay;
// option errors; initializers.
#include "ad/configs.hpp"
#include "testing.hpp"

#include <gradix/optim.hpp>

#include <cmath>
#include <cstdint>
#include <vector>

namespace gx = gradix;
using gx::dyn;
using gx::index_t;
using gx::shape;

namespace {
// The gradient of loss(w) = sum over the rows r in `rows` (with repeats) of sum_j c_j w[r, j]^2
// along axis 0 of a (R x C) parameter, or over columns along axis 1: 2 c w at the rows read.
struct rowloss {
  std::vector<index_t> rows;  // the slices read, with repeats
  template <class P>
  auto operator()(P& p) const {
    constexpr std::size_t A = gx::detail::param_storage_t<P>::axis;
    auto g = gx::gather<int(A)>(p, rows);
    return gx::sum(g * g * 0.5 + g * 0.25);
  }
  // d/dw of the same, at the element (r, j), by hand: per read of slice r: w + 0.25
  template <class P>
  double grad(P const&, index_t r, index_t j, double w) const {
    constexpr std::size_t A = gx::detail::param_storage_t<P>::axis;
    index_t const s = A == 0 ? r : j;
    double n = 0;
    for (index_t q : rows) n += q == s;
    return n * (w + 0.25);
  }
};

template <class P>
std::vector<double> values_of(P const& p) {
  auto const& v = p.value();
  std::vector<double> r;
  for (index_t i = 0; i < v.shape().extent(0); ++i)
    for (index_t j = 0; j < v.shape().extent(1); ++j) r.push_back(double(v(i, j)));
  return r;
}
}  // namespace

TEST_CASE_TEMPLATE("update_touched: exactly the touched slices, with their gradients, in every layout", C, GRADIX_AD_CONFIGS) {
  auto x = C::make(51);
  constexpr std::size_t A = gx::detail::param_storage_t<decltype(x)>::axis;
  rowloss L{{2, 0, 2}};
  gx::backward(L(x));
  auto const before = values_of(x);
  std::vector<index_t> seen;
  gx::for_each_grad_slice(x, [&](index_t id) { seen.push_back(id); });
  CHECK(seen.size() == 2);  // slices 2 and 0, each once
  gx::update_touched(x, [](double& w, double g) { w -= 0.5 * g; });
  auto const after = values_of(x);
  index_t const cols = x.value().shape().extent(1);
  for (index_t i = 0; i < x.value().shape().extent(0); ++i)
    for (index_t j = 0; j < cols; ++j) {
      double const w = before[std::size_t(i * cols + j)];
      double const want = w - 0.5 * L.grad(x, i, j, w);
      CHECK(after[std::size_t(i * cols + j)] == doctest::Approx(want).epsilon(1e-15));
    }
  (void)A;
}

TEST_CASE_TEMPLATE("sgd: plain, momentum, Nesterov and weight decay against the hand computation", C, GRADIX_AD_CONFIGS) {
  for (int variant = 0; variant < 4; ++variant) {
    CAPTURE(variant);
    gx::optim::sgd_options o;
    o.lr = 0.1;
    if (variant >= 1) o.momentum = 0.9;
    if (variant == 2) o.nesterov = true;
    if (variant == 3) {
      o.weight_decay = 0.01;
      o.dampening = 0.1;
    }
    auto x = C::make(52);
    using P = decltype(x);
    constexpr bool sparse = gx::detail::param_storage_t<P>::sparse;
    gx::optim::sgd opt(o, x);
    std::vector<double> w = values_of(x), b(w.size(), 0.0);
    std::vector<char> fresh(16, 1);
    index_t const cols = x.value().shape().extent(1);
    constexpr std::size_t A = gx::detail::param_storage_t<P>::axis;
    std::vector<rowloss> steps = {{{0, 1}}, {{1, 1}}, {{2}}};
    for (auto const& L : steps) {
      opt.zero_grad();
      gx::backward(L(x));
      opt.step();
      // by hand: which slices the step visits
      std::vector<char> touched(16, 0);
      for (index_t r : L.rows) touched[std::size_t(r)] = 1;
      bool const all = (o.momentum != 0 || o.weight_decay != 0) && !sparse;
      std::vector<char> first_now = fresh;
      for (std::size_t k = 0; k < w.size(); ++k) {
        index_t i = index_t(k) / cols, j = index_t(k) % cols;
        index_t s = A == 0 ? i : j;
        if (!all && !touched[std::size_t(s)]) continue;
        double g = L.grad(x, i, j, w[k]) + o.weight_decay * w[k];
        if (o.momentum != 0) {
          b[k] = first_now[std::size_t(s)] ? g : o.momentum * b[k] + (1 - o.dampening) * g;
          fresh[std::size_t(s)] = 0;
          g = o.nesterov ? g + o.momentum * b[k] : b[k];
        }
        w[k] -= o.lr * g;
      }
      auto got = values_of(x);
      for (std::size_t k = 0; k < w.size(); ++k) CHECK(got[k] == doctest::Approx(w[k]).epsilon(1e-14));
    }
  }
}

namespace {
// One Adam step of element k in double, as the optimizer defines it (t counts from 1).
void adam_reference(gx::optim::adam_options const& o, int t, double g, double& w, double& m, double& v) {
  m = o.beta1 * m + (1 - o.beta1) * g;
  v = o.beta2 * v + (1 - o.beta2) * g * g;
  double mh = m / (1 - std::pow(o.beta1, t)), vh = v / (1 - std::pow(o.beta2, t));
  w -= o.lr * mh / (std::sqrt(vh) + o.eps);
}
}  // namespace

TEST_CASE_TEMPLATE("adagrad and adam / adamw against the hand computation", C, GRADIX_AD_CONFIGS) {
  std::vector<rowloss> steps = {{{0, 2}}, {{2, 2}}, {{1}}, {{0}}};
  SUBCASE("adagrad") {
    auto x = C::make(53);
    gx::optim::adagrad_options o;
    o.lr = 0.5;
    o.initial_accumulator = 0.1;
    gx::optim::adagrad opt(o, x);
    std::vector<double> w = values_of(x), s(w.size(), 0.1);
    index_t const cols = x.value().shape().extent(1);
    for (auto const& L : steps) {
      opt.zero_grad();
      gx::backward(L(x));
      opt.step();
      for (std::size_t k = 0; k < w.size(); ++k) {
        double g = L.grad(x, index_t(k) / cols, index_t(k) % cols, w[k]);
        s[k] += g * g;
        w[k] -= o.lr * g / (std::sqrt(s[k]) + o.eps);
      }
      auto got = values_of(x);
      for (std::size_t k = 0; k < w.size(); ++k) CHECK(got[k] == doctest::Approx(w[k]).epsilon(1e-13));
    }
  }
  for (int decoupled = 0; decoupled < 2; ++decoupled) {
    CAPTURE(decoupled);
    auto x = C::make(54);
    gx::optim::adam_options o;
    o.lr = 0.05;
    o.weight_decay = 0.1;
    o.decoupled = decoupled;
    gx::optim::adam opt(o, x);
    std::vector<double> w = values_of(x), m(w.size(), 0.0), v(w.size(), 0.0);
    index_t const cols = x.value().shape().extent(1);
    int t = 0;
    for (auto const& L : steps) {
      opt.zero_grad();
      gx::backward(L(x));
      opt.step();
      ++t;
      for (std::size_t k = 0; k < w.size(); ++k) {  // every element, touched or not
        double g = L.grad(x, index_t(k) / cols, index_t(k) % cols, w[k]);
        if (decoupled) w[k] *= 1 - o.lr * o.weight_decay;
        else g += o.weight_decay * w[k];
        adam_reference(o, t, g, w[k], m[k], v[k]);
      }
      auto got = values_of(x);
      for (std::size_t k = 0; k < w.size(); ++k) CHECK(got[k] == doctest::Approx(w[k]).epsilon(1e-12));
    }
    CHECK(opt.steps() == 4);
  }
}

TEST_CASE("lazy_adam: only touched slices move; a slice touched again catches up its moment decay") {
  // rows 0 and 1 of a sparse table; row 1 is touched at steps 1 and 4 only
  auto E = gx::param(gx::uniform<double>(gx::dims(4, 3), 55, -1.0, 1.0), gx::sparse_grad<0>);
  auto D = gx::param(gx::tensor<double, shape<dyn, dyn>>(E.value()));  // dense Adam, same start
  gx::optim::adam_options o;
  o.lr = 0.1;
  gx::optim::lazy_adam lazy(o, E);
  gx::optim::adam dense(o, D);
  std::vector<rowloss> steps = {{{0, 1}}, {{0}}, {{0, 0}}, {{1, 0}}};
  std::vector<double> w = values_of(E), m(w.size(), 0.0), v(w.size(), 0.0);
  std::vector<int> last(4, 0);
  int t = 0;
  for (auto const& L : steps) {
    lazy.zero_grad();
    dense.zero_grad();
    gx::backward(L(E));
    gx::backward(L(D));
    lazy.step();
    dense.step();
    ++t;
    for (index_t r = 0; r < 4; ++r) {
      bool touched = false;
      for (index_t q : L.rows) touched = touched || q == r;
      if (!touched) continue;
      int const skipped = t - last[std::size_t(r)] - 1;
      last[std::size_t(r)] = t;
      for (index_t j = 0; j < 3; ++j) {
        std::size_t k = std::size_t(r * 3 + j);
        m[k] *= std::pow(o.beta1, skipped);
        v[k] *= std::pow(o.beta2, skipped);
        adam_reference(o, t, L.grad(E, r, j, w[k]), w[k], m[k], v[k]);
      }
    }
    auto got = values_of(E);
    for (std::size_t k = 0; k < w.size(); ++k) CHECK(got[k] == doctest::Approx(w[k]).epsilon(1e-12));
  }
  auto lv = values_of(E), dv = values_of(D);
  // row 0, touched every step: lazy and dense Adam agree bit for bit
  for (std::size_t k = 0; k < 3; ++k) CHECK(lv[k] == dv[k]);
  // rows 2 and 3, never touched: lazy leaves them, dense (zero gradient, zero moments) too
  for (std::size_t k = 6; k < 12; ++k) CHECK(lv[k] == dv[k]);
  // row 1: dense Adam kept moving it at steps 2 and 3 with its decaying momentum
  bool differs = false;
  for (std::size_t k = 3; k < 6; ++k) differs = differs || lv[k] != dv[k];
  CHECK(differs);
}

TEST_CASE("optimizers: a float parameter of rank 0 and 1 beside a matrix; bad options are errors") {
  auto s = gx::param(gx::tensor<float, shape<>>{2.f});
  auto v = gx::param(gx::tensor<float, shape<3>>{1.f, -1.f, 0.5f});
  gx::optim::sgd opt({.lr = 0.25}, s, v);
  opt.zero_grad();
  gx::backward(gx::sum(v * v) + s * s * 3.f);
  opt.step();
  CHECK(s.value().data()[0] == doctest::Approx(2.f - 0.25f * 12.f));
  CHECK(v.value()(1) == doctest::Approx(-1.f + 0.25f * 2.f));
  {  // momentum switched on through options() after construction: its buffer starts then
    auto u = gx::param(gx::tensor<double, shape<2>>{1.0, 2.0});
    gx::optim::sgd late({.lr = 0.5}, u);
    late.options().momentum = 0.5;
    for (int k = 0; k < 2; ++k) {
      late.zero_grad();
      gx::backward(gx::sum(u * u));
      late.step();
    }
    // w = 1: g 2, b 2, w 0; then g 0, b 1, w -0.5 (and twice that for w = 2)
    CHECK(u.value()(0) == -0.5);
    CHECK(u.value()(1) == -1.0);
  }
  CHECK_THROWS_WITH_AS(gx::optim::sgd({.lr = -1.0}, v), doctest::Contains("gradix::optim::sgd: the learning rate -1"), gx::error);
  CHECK_THROWS_WITH_AS((gx::optim::sgd({.lr = 0.1, .nesterov = true}, v)), doctest::Contains("Nesterov"), gx::error);
  CHECK_THROWS_WITH_AS(gx::optim::adam({.beta1 = 1.0}, v), doctest::Contains("gradix::optim::adam: beta1 = 1 must be in [0, 1)"), gx::error);
  CHECK_THROWS_WITH_AS(gx::optim::lazy_adam({.eps = 0.0}, v), doctest::Contains("gradix::optim::lazy_adam: eps 0 must be > 0"), gx::error);
}

TEST_CASE("init: Xavier and Kaiming bounds and spread, seeded and in place") {
  auto W = gx::param(gx::tensor<float, shape<dyn, dyn>>(gx::dims(200, 100)));
  float const* buf = W.value().data();
  gx::init::xavier_uniform(W, 7);
  CHECK(W.value().data() == buf);  // written in place
  double const a = std::sqrt(6.0 / 300.0);
  double sum = 0, sq = 0;
  for (index_t k = 0; k < W.value().size(); ++k) {
    double x = W.value().data()[k];
    CHECK_MESSAGE((x >= -a && x < a), "element ", k, " = ", x);
    sum += x;
    sq += x * x;
  }
  double const n = double(W.value().size());
  CHECK(std::abs(sum / n) < 0.01);
  CHECK(std::sqrt(sq / n) == doctest::Approx(a / std::sqrt(3.0)).epsilon(0.03));
  auto W2 = gx::param(gx::tensor<float, shape<dyn, dyn>>(gx::dims(200, 100)));
  gx::init::xavier_uniform(W2, 7);
  CHECK(W2.value().data()[123] == W.value().data()[123]);  // the same seed, the same values
  gx::init::kaiming_normal(W2, 8);
  sq = 0;
  for (index_t k = 0; k < W2.value().size(); ++k) sq += double(W2.value().data()[k]) * W2.value().data()[k];
  CHECK(std::sqrt(sq / n) == doctest::Approx(std::sqrt(2.0 / 200.0)).epsilon(0.03));
  gx::init::kaiming_uniform(W2, 9);
  double const ka = std::sqrt(2.0) * std::sqrt(3.0 / 200.0);
  for (index_t k = 0; k < W2.value().size(); ++k) CHECK((W2.value().data()[k] >= -ka && W2.value().data()[k] < ka));
  gx::init::xavier_normal(W2, 10);
  sq = 0;
  for (index_t k = 0; k < W2.value().size(); ++k) sq += double(W2.value().data()[k]) * W2.value().data()[k];
  CHECK(std::sqrt(sq / n) == doctest::Approx(std::sqrt(2.0 / 300.0)).epsilon(0.03));
}
