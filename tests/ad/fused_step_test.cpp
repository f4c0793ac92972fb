// The optimizer's step fused into backward (training/fused.hpp): gx::backward(e,
// optim::fused(opt)) gives, to the bit, the values of zero_grad + backward + step for every
// optimizer, dense and sparse storage, repeated indices; the parameters' own gradients are
// neither read nor written; parameters the optimizer does not manage get their gradients as
// by backward(e); a failing call leaves values and buffers as they were. Also row-wise
// Adagrad (optim::rowwise_adagrad) against the hand computation.
#include "testing.hpp"

#include <gradix/optim.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

namespace gx = gradix;
using gx::dyn;
using gx::index_t;
using gx::shape;
using S2 = shape<dyn, dyn>;

namespace {

template <class T, class L>
bool same_bits(gx::tensor<T, S2, L> const& a, gx::tensor<T, S2, L> const& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), std::size_t(a.size()) * sizeof(T)) == 0;
}

// A table read through a gather with repeated rows, twice (a product and an elementwise term:
// two uses of one parameter), a dense weight, and a parameter the optimizer does not manage.
template <class Spec, class T = float>
struct model {
  gx::parameter<T, S2, gx::row_major, Spec> table;
  gx::parameter<float, S2> weight;
  gx::parameter<float, S2> free;
  explicit model(Spec spec)
      : table(gx::param(start_table(), spec)), weight(gx::param(scaled(6, 3, 12))), free(gx::param(scaled(2, 3, 13))) {}
  static gx::tensor<float, S2> scaled(index_t r, index_t c, std::uint64_t seed) {
    gx::tensor<float, S2> t(gx::dims(r, c));
    auto const n = gx::randn<float>(gx::dims(r, c), seed);
    t = n * 0.5f;
    return t;
  }
  static gx::tensor<T, S2> start_table() {
    gx::tensor<T, S2> t(gx::dims(20, 6));
    auto const r = gx::randn<float>(gx::dims(20, 6), 11);
    t = r * 0.5f;
    return t;
  }
  auto loss(std::vector<int> const& rows) {
    auto g = gx::gather<0>(table, rows);
    auto h = gx::matmul(g, weight);
    return gx::sum(h * h * 0.5f) + gx::sum(g * 0.25f) + gx::sum(free * free);
  }
};

// Runs `steps` steps on two twins, one fused and one unfused, and requires the same bits.
template <class Spec, class T = float, class MakeOpt>
void check_fused(Spec spec, MakeOpt make_opt, int steps) {
  model<Spec, T> a(spec), b(spec);
  auto opt_a = make_opt(a.table, a.weight);
  auto opt_b = make_opt(b.table, b.weight);
  // a's own gradients hold something before: the fused calls neither read nor write them
  std::vector<int> const before{1, 2, 2};
  gx::backward(gx::sum(gx::gather<0>(a.table, before)) + gx::sum(a.weight * 3.0f));
  auto const held_table = a.table.grad().to_dense();
  auto const held_weight = a.weight.grad().to_dense();
  std::vector<int> rows{3, 7, 3, 19, 0, 3};
  for (int s = 0; s < steps; ++s) {
    // doc-snippet: fused_call
    float const la = gx::backward(a.loss(rows), gx::optim::fused(opt_a));
    // end doc-snippet
    opt_b.zero_grad();
    float const lb = gx::backward(b.loss(rows));
    opt_b.step();
    REQUIRE(std::memcmp(&la, &lb, sizeof la) == 0);
    REQUIRE(same_bits(a.table.value(), b.table.value()));
    REQUIRE(same_bits(a.weight.value(), b.weight.value()));
    rows[1] = (rows[1] + 5) % 20;  // another row next step
  }
  CHECK(same_bits(a.table.grad().to_dense(), held_table));
  CHECK(same_bits(a.weight.grad().to_dense(), held_weight));
  // the unmanaged parameter accumulated its gradient in both
  CHECK(same_bits(a.free.grad().to_dense(), b.free.grad().to_dense()));
  // and the values moved (the step ran)
  CHECK(!same_bits(a.table.value(), model<Spec, T>::start_table()));
}

}  // namespace

TEST_CASE_TEMPLATE("fused step: the bits of zero_grad + backward + step, every optimizer", Spec, gx::sparse_grad_t<0>,
                   gx::dense_grad_t<0>) {
  Spec const spec{};
  SUBCASE("sgd") {
    check_fused(spec, [](auto& t, auto& w) { return gx::optim::sgd({0.05}, t, w); }, 4);
  }
  SUBCASE("sgd, momentum, Nesterov, weight decay") {
    check_fused(spec, [](auto& t, auto& w) {
      return gx::optim::sgd({.lr = 0.05, .momentum = 0.9, .nesterov = true, .weight_decay = 1e-3}, t, w);
    }, 4);
  }
  SUBCASE("adagrad, with and without weight decay") {
    check_fused(spec, [](auto& t, auto& w) { return gx::optim::adagrad({.lr = 0.1}, t, w); }, 4);
    check_fused(spec, [](auto& t, auto& w) { return gx::optim::adagrad({.lr = 0.1, .weight_decay = 1e-2}, t, w); }, 4);
  }
  SUBCASE("rowwise_adagrad, with and without weight decay") {
    check_fused(spec, [](auto& t, auto& w) { return gx::optim::rowwise_adagrad({.lr = 0.1}, t, w); }, 4);
    check_fused(spec, [](auto& t, auto& w) {
      return gx::optim::rowwise_adagrad({.lr = 0.1, .weight_decay = 1e-2, .initial_accumulator = 0.1}, t, w);
    }, 4);
  }
  SUBCASE("adam, adamw, lazy_adam") {
    check_fused(spec, [](auto& t, auto& w) { return gx::optim::adam({.lr = 0.01}, t, w); }, 3);
    check_fused(spec, [](auto& t, auto& w) { return gx::optim::adamw({.lr = 0.01, .weight_decay = 0.1}, t, w); }, 3);
    check_fused(spec, [](auto& t, auto& w) { return gx::optim::lazy_adam({.lr = 0.01}, t, w); }, 4);
  }
}

TEST_CASE("fused step: a bfloat16 table with stochastic rounding takes the same bits") {
  auto make = [](auto& t, auto& w) {
    t.set_rounding(gx::stochastic_rounding(99));
    return gx::optim::adagrad({.lr = 0.1}, t, w);
  };
  check_fused<gx::sparse_grad_t<0>, gx::bfloat16>(gx::sparse_grad<0>, make, 4);
}

namespace {
struct adagrad_maker {
  auto operator()(auto& t, auto& w) const { return gx::optim::adagrad({.lr = 0.1}, t, w); }
};
struct lazy_adam_maker {
  auto operator()(auto& t, auto& w) const { return gx::optim::lazy_adam({.lr = 0.01}, t, w); }
};
}  // namespace

TEST_CASE_TEMPLATE("fused step: a call that fails changes nothing, and the next one runs", Opt, adagrad_maker,
                   lazy_adam_maker) {
  // (lazy_adam counts its step before the backward: a failed call takes the count back)
  model<gx::sparse_grad_t<0>> a(gx::sparse_grad<0>), b(gx::sparse_grad<0>);
  auto opt_a = Opt{}(a.table, a.weight);
  auto opt_b = Opt{}(b.table, b.weight);
  std::vector<int> const rows{3, 7, 3};
  auto const before = a.table.value();
  a.free.value()(0, 0) = std::numeric_limits<float>::infinity();  // the loss is not finite
  gx::set_check_finite(true);
  CHECK_THROWS_AS(gx::backward(a.loss(rows), gx::optim::fused(opt_a)), gx::error);
  gx::set_check_finite(false);
  CHECK(same_bits(a.table.value(), before));
  a.free.value()(0, 0) = b.free.value()(0, 0);
  float const la = gx::backward(a.loss(rows), gx::optim::fused(opt_a));
  float const lb = gx::backward(b.loss(rows));
  opt_b.step();
  CHECK(la == lb);
  CHECK(same_bits(a.table.value(), b.table.value()));
}

TEST_CASE("rowwise_adagrad: one accumulator per row, against the hand computation") {
  // a 4 x 3 table, sparse along rows; rows 1 and 3 touched (1 twice)
  gx::tensor<float, S2> t0(gx::dims(4, 3));
  for (index_t i = 0; i < 4; ++i)
    for (index_t j = 0; j < 3; ++j) t0(i, j) = 0.1f * float(i * 3 + j) - 0.4f;
  auto p = gx::param(t0, gx::sparse_grad<0>);
  gx::tensor<float, S2> c(gx::dims(3, 3));
  for (index_t i = 0; i < 3; ++i)
    for (index_t j = 0; j < 3; ++j) c(i, j) = float(i + 1) * 0.5f - float(j) * 0.25f;
  std::vector<int> const rows{1, 3, 1};
  double const lr = 0.2, eps = 1e-10, init = 0.05;
  auto opt = gx::optim::rowwise_adagrad({.lr = lr, .eps = eps, .initial_accumulator = init}, p);
  std::vector<double> acc(4, init);
  std::vector<double> w(12);
  for (index_t k = 0; k < 12; ++k) w[std::size_t(k)] = t0.data()[k];
  for (int s = 0; s < 3; ++s) {
    // loss = sum(gather(p, rows) * c): the gradient of row r is the sum of c's rows that read it
    gx::backward(gx::sum(gx::gather<0>(p, rows) * c));
    opt.step();
    opt.zero_grad();
    for (int r : {1, 3}) {
      double g[3] = {0, 0, 0}, ss = 0;
      for (std::size_t k = 0; k < rows.size(); ++k)
        if (rows[k] == r)
          for (int j = 0; j < 3; ++j) g[j] += c(index_t(k), j);
      for (double x : g) ss += x * x;
      acc[std::size_t(r)] += ss / 3;
      for (int j = 0; j < 3; ++j) w[std::size_t(r * 3 + j)] -= lr * g[j] / (std::sqrt(acc[std::size_t(r)]) + eps);
    }
    for (index_t k = 0; k < 12; ++k) REQUIRE(p.value().data()[k] == doctest::Approx(w[std::size_t(k)]).epsilon(1e-6));
  }
  // rows 0 and 2 never moved
  for (index_t j = 0; j < 3; ++j) {
    CHECK(p.value()(0, j) == t0(0, j));
    CHECK(p.value()(2, j) == t0(2, j));
  }
  CHECK_THROWS_WITH_AS(gx::optim::rowwise_adagrad({.lr = 0.1, .eps = 0}, p),
                       doctest::Contains("gradix::optim::rowwise_adagrad: eps 0 must be > 0"), gx::error);
}

namespace {
// A table read once through a gather (repeated rows), its rows applied inside the scatter
// kernel: the same bits as zero_grad + backward + step, and the rows counted.
template <class L, class Spec, class T, bool Bag = false, class MakeOpt>
void check_rows(MakeOpt make_opt) {
  constexpr bool col = std::is_same_v<L, gx::col_major>;
  auto start = [] {
    gx::tensor<T, S2, L> t(col ? gx::dims(6, 20) : gx::dims(20, 6));
    auto const r = gx::randn<float, L>(t.shape(), 21);
    t = r * 0.5f;
    return t;
  };
  auto a = gx::param(start(), Spec{});
  auto b = gx::param(start(), Spec{});
  auto opt_a = make_opt(a);
  auto opt_b = make_opt(b);
  std::vector<int> rows{3, 7, 3, 19, 0, 3};
  std::vector<int> const offsets{0, 2, 2, 5};
  gx::tensor<float, S2> c(gx::dims(6, 6));
  for (index_t i = 0; i < 6; ++i)
    for (index_t j = 0; j < 6; ++j) c(i, j) = 0.25f * float(i) - 0.5f * float(j) + 0.1f;
  auto v = gx::randn<float>(gx::dims(gx::fix_t<1>{}, 6), 5);
  auto loss = [&](auto& p) {
    if constexpr (col) return gx::sum(gx::square(gx::gather<1>(p, rows)) * c);
    else if constexpr (Bag) return gx::sum(gx::embedding_bag(p, rows, offsets, gx::bag_mode::sum) * v);
    else return gx::sum(gx::square(gx::gather<0>(p, rows)) * c);
  };
  for (int s = 0; s < 3; ++s) {
    float const la = gx::backward(loss(a), gx::optim::fused(opt_a));
    opt_b.zero_grad();
    float const lb = gx::backward(loss(b));
    opt_b.step();
    REQUIRE(std::memcmp(&la, &lb, sizeof la) == 0);
    REQUIRE(std::memcmp(a.value().data(), b.value().data(), std::size_t(a.value().size()) * sizeof(T)) == 0);
    CHECK(opt_a.fused_rows_applied() == 4);  // rows 0, 3, 7, 19
  }
}
}  // namespace

TEST_CASE_TEMPLATE("fused step: a table read once has its rows applied inside the scatter kernel", Spec,
                   gx::sparse_grad_t<0>, gx::dense_grad_t<0>) {
  auto sgd = [](auto& p) { return gx::optim::sgd({0.05}, p); };
  auto adagrad = [](auto& p) { return gx::optim::adagrad({.lr = 0.1}, p); };
  auto rowwise = [](auto& p) { return gx::optim::rowwise_adagrad({.lr = 0.1}, p); };
  check_rows<gx::row_major, Spec, float>(sgd);
  check_rows<gx::row_major, Spec, float>(adagrad);
  check_rows<gx::row_major, Spec, float>(rowwise);
  check_rows<gx::row_major, Spec, float, true>(sgd);
  check_rows<gx::row_major, Spec, float, true>(adagrad);
  check_rows<gx::row_major, Spec, float, true>(rowwise);
  if constexpr (std::is_same_v<Spec, gx::sparse_grad_t<0>>) {  // lazy_adam: rows of sparse storage only
    auto lazy = [](auto& p) { return gx::optim::lazy_adam({.lr = 0.01}, p); };
    check_rows<gx::row_major, Spec, float>(lazy);
    check_rows<gx::row_major, Spec, float, true>(lazy);
    check_rows<gx::row_major, Spec, gx::bfloat16>([](auto& p) {
      p.set_rounding(gx::stochastic_rounding(6));
      return gx::optim::lazy_adam({.lr = 0.01}, p);
    });
  }
  check_rows<gx::row_major, Spec, gx::bfloat16>([](auto& p) {
    p.set_rounding(gx::stochastic_rounding(5));
    return gx::optim::adagrad({.lr = 0.1}, p);
  });
}

TEST_CASE("fused step: column-major tables gathered along axis 1") {
  auto rowwise = [](auto& p) { return gx::optim::rowwise_adagrad({.lr = 0.1}, p); };
  check_rows<gx::col_major, gx::sparse_grad_t<1>, float>(rowwise);
  check_rows<gx::col_major, gx::sparse_grad_t<1>, float>([](auto& p) { return gx::optim::lazy_adam({.lr = 0.01}, p); });
}

TEST_CASE("fused step: rows of a large table, repeated many times, sorted in several radix passes, on 1 and 3 threads") {
  // 5,000 rows: slice ids need 13 bits, two passes of the row-by-row form's radix sort; 3,000
  // reads with repeats spread over the table, each with its own weight, so that summing a
  // row's contributions in another order than the plain kernel's would change bits; 96,000
  // elements: at 3 threads the rows run in 3 ranges cut at slice boundaries
  using S = gx::shape<gx::dyn, gx::dyn>;
  constexpr index_t rows_n = 5000, width = 32, reads = 3000;
  std::vector<int> rows(static_cast<std::size_t>(reads));
  std::uint32_t h = 12345;
  for (auto& r : rows) {
    h = h * 1664525u + 1013904223u;
    r = int((h >> 8) % 1700u) * 3 % int(rows_n);  // 1,700 distinct rows, each read about twice
  }
  std::vector<int> distinct = rows;
  std::sort(distinct.begin(), distinct.end());
  distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
  auto const c = gx::randn<float>(gx::dims(reads, width), 9);
  auto start = gx::randn<float>(gx::dims(rows_n, width), 10);
  auto test = [&]<class E = float>(auto make_opt) {
    gx::tensor<E, S> init(start.shape());
    init = start;
    auto a = gx::param(gx::tensor<E, S>(init), gx::sparse_grad<0>);
    auto b = gx::param(gx::tensor<E, S>(init), gx::sparse_grad<0>);
    auto opt_a = make_opt(a);
    auto opt_b = make_opt(b);
    for (int s = 0; s < 2; ++s) {
      float const la = gx::backward(gx::sum(gx::square(gx::gather<0>(a, rows)) * c), gx::optim::fused(opt_a));
      opt_b.zero_grad();
      float const lb = gx::backward(gx::sum(gx::square(gx::gather<0>(b, rows)) * c));
      opt_b.step();
      REQUIRE(std::memcmp(&la, &lb, sizeof la) == 0);
      REQUIRE(std::memcmp(a.value().data(), b.value().data(), std::size_t(a.value().size()) * sizeof(E)) == 0);
      CHECK(opt_a.fused_rows_applied() == index_t(distinct.size()));
    }
  };
  for (int threads : {1, 3}) {
    gx::set_num_threads(threads);
    test([](auto& p) { return gx::optim::rowwise_adagrad({.lr = 0.1}, p); });
    test([](auto& p) { return gx::optim::sgd({0.05}, p); });
    test([](auto& p) { return gx::optim::lazy_adam({.lr = 0.01}, p); });
    test.template operator()<gx::bfloat16>([](auto& p) {  // one rounding key per step, whatever the threads
      p.set_rounding(gx::stochastic_rounding(3));
      return gx::optim::adagrad({.lr = 0.1}, p);
    });
  }
  gx::set_num_threads(1);
}

TEST_CASE("fused step: a call that reads no row draws the rounding key as the unfused step does") {
  // bfloat16 tables with stochastic rounding: steps with rows, none, rows; the step of the
  // empty batch still counts one rounded update, fused or not, so later bits agree
  using S = gx::shape<gx::dyn, gx::dyn>;
  gx::tensor<gx::bfloat16, S> init(gx::dims(50, 8));
  init = gx::randn<float>(gx::dims(50, 8), 4);
  auto a = gx::param(gx::tensor<gx::bfloat16, S>(init), gx::sparse_grad<0>);
  auto b = gx::param(gx::tensor<gx::bfloat16, S>(init), gx::sparse_grad<0>);
  a.set_rounding(gx::stochastic_rounding(8));
  b.set_rounding(gx::stochastic_rounding(8));
  auto opt_a = gx::optim::adagrad({.lr = 0.1}, a);
  auto opt_b = gx::optim::adagrad({.lr = 0.1}, b);
  std::vector<std::vector<int>> const batches{{1, 7, 1, 30}, {}, {7, 49, 2}};
  for (auto const& rows : batches) {
    float const la = gx::backward(gx::sum(gx::square(gx::gather<0>(a, rows))), gx::optim::fused(opt_a));
    opt_b.zero_grad();
    float const lb = gx::backward(gx::sum(gx::square(gx::gather<0>(b, rows))));
    opt_b.step();
    CHECK(std::memcmp(&la, &lb, sizeof la) == 0);
    CHECK(a.rounded_updates() == b.rounded_updates());
    REQUIRE(std::memcmp(a.value().data(), b.value().data(), std::size_t(a.value().size()) * sizeof(gx::bfloat16)) == 0);
  }
}
