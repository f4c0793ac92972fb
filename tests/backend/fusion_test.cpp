// Fusion: evaluating an elementwise/broadcast expression is one pass over the destination,
// and a reduction reads each operand element once. A counting functor (`counted<Tag>`, the
// identity that adds the number of lanes it is applied to to its own counter) sits on the
// nodes we watch; after the evaluation its counter says how many times that node was
// evaluated. No allocation happens either: tests/alloc/alloc_test.cpp proves that part.
//
// Exact counts, from the loop structure of backend/host/assign.hpp and eval/reduce.hpp:
// - The host loop walks the destination's contiguous axis innermost, one `outer<A>(c)`
//   inner evaluator per run, every element of a run exactly once (packs, then a scalar
//   tail). Every node of the expression is evaluated once per element of the run, so a
//   counted node over an operand of the result's shape counts M * N.
// - A broadcast operand (static extent 1 on an axis) is *invariant* along the run only when
//   the loop runs along that axis: <1, N> in a column-major result, <M, 1> in a row-major
//   one. Then the leaf is read once per run (`const_inner`), but a unary node above it
//   still applies its functor to every lane (unary_inner over const_inner): the count is
//   M * N again, once per output element, never more. When the loop runs along the
//   operand's real axis (<1, N> in a row-major result) the operand varies along the run and
//   each of its elements is recomputed for every row: M * N as well. So the exact count is
//   M * N in all four cases. An evaluator that hoisted invariant subtrees out of the run
//   would lower the invariant cases to one evaluation per run (N serially for <1, N> in a
//   column-major result; more when task boundaries split runs): those expectations would
//   then change to the run count.
// - A reduction walks the reduced domain of each output element once, in blocks (serially
//   or in parallel, eval/reduce.hpp), packs then a scalar tail per run: each operand element
//   is read exactly once, for full and partial reductions alike.
#include "testing.hpp"

#include <atomic>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

namespace gx = gradix;
using gx::testing::thread_scope;
using gx::dyn;
using gx::shape;

namespace {

/// Identity functor that counts the lanes it is applied to (a host pack counts W lanes).
template <int Tag>
struct counted {
  static constexpr char const* name = "counted";
  static inline std::atomic<long long> calls{0};
  template <class T>
  static T value(T x) {
    if constexpr (gx::simd::vector_ext<T>)
      calls.fetch_add(static_cast<long long>(sizeof(T) / sizeof(x[0])), std::memory_order_relaxed);
    else
      calls.fetch_add(1, std::memory_order_relaxed);
    return x;
  }
};

template <int Tag, class X>
auto counting(X&& x) {
  return gx::unary<counted<Tag>>(static_cast<X&&>(x));
}
/// The count of node Tag since the last call, and reset.
template <int Tag>
long long taken() {
  return counted<Tag>::calls.exchange(0);
}
void reset_counts() {
  (void)taken<1>();
  (void)taken<2>();
  (void)taken<3>();
}

/// Sets the thread count for a scope.
/// A size/threads configuration: small runs serially, large goes through the pool.
struct config {
  int m, n, threads;
};
// 13 x 37 = 481 elements (serial); 301 x 419 = 126,119 > 2 * 32768 (parallel). Neither is a
// multiple of the pack width, so packs and scalar tails both run.
constexpr config configs[] = {{13, 37, 1}, {13, 37, 4}, {301, 419, 1}, {301, 419, 3}, {301, 419, 4}};

}  // namespace

TEST_CASE_TEMPLATE("fusion: eval(count(x) * 2 + exp(count(y))) evaluates each node once per element",
                   L, gx::row_major, gx::col_major) {
  for (auto cf : configs) {
    CAPTURE(cf.m);
    CAPTURE(cf.n);
    CAPTURE(cf.threads);
    thread_scope ts(cf.threads);
    auto x = gx::uniform<float, L>(gx::dims(cf.m, cf.n), 11, -1.0f, 1.0f);
    auto y = gx::uniform<float, L>(gx::dims(cf.m, cf.n), 12, -1.0f, 1.0f);
    long long mn = static_cast<long long>(cf.m) * cf.n;
    reset_counts();
    auto r = gx::eval(counting<1>(x) * 2 + gx::exp(counting<2>(y)));
    CHECK(taken<1>() == mn);
    CHECK(taken<2>() == mn);
    static_assert(std::is_same_v<typename decltype(r)::layout_type, L>);
    CHECK_ALL_CLOSE(r, x * 2 + gx::exp(y));

    // into an existing tensor, and into a tensor of the other layout (the destination's
    // contiguous axis is walked innermost; the leaves are then read with a stride)
    using Other = std::conditional_t<std::is_same_v<L, gx::row_major>, gx::col_major, gx::row_major>;
    gx::tensor<float, shape<dyn, dyn>, Other> o(gx::dims(cf.m, cf.n));
    reset_counts();
    gx::assign(o, counting<1>(x) * 2 + gx::exp(counting<2>(y)));
    CHECK(taken<1>() == mn);
    CHECK(taken<2>() == mn);
    CHECK_ALL_CLOSE(o, r);
  }
}

TEST_CASE_TEMPLATE("fusion: a broadcast operand is evaluated once per output element", L,
                   gx::row_major, gx::col_major) {
  // <1, N> and <M, 1> against <M, N>. For a row-major result the loop runs along axis 1:
  // the row operand varies along the run, the column operand is invariant; for a
  // column-major result the other way round. Both count M * N (see the top of the file).
  for (auto cf : configs) {
    CAPTURE(cf.m);
    CAPTURE(cf.n);
    CAPTURE(cf.threads);
    thread_scope ts(cf.threads);
    auto x = gx::uniform<float, L>(gx::dims(cf.m, cf.n), 21, -1.0f, 1.0f);
    auto row = gx::uniform<float, L>(gx::dims(gx::fix<1>, cf.n), 22, -1.0f, 1.0f);
    auto col = gx::uniform<float, L>(gx::dims(cf.m, gx::fix<1>), 23, -1.0f, 1.0f);
    long long mn = static_cast<long long>(cf.m) * cf.n;
    reset_counts();
    auto r = gx::eval(counting<1>(x) * 2 + gx::exp(counting<2>(row)) - counting<3>(col));
    CHECK(taken<1>() == mn);
    CHECK(taken<2>() == mn);
    CHECK(taken<3>() == mn);
    CHECK_ALL_CLOSE(r, x * 2 + gx::exp(row) - col);

    // a broadcast operand alone on the left, and a rank-1 operand (missing leading axis)
    auto v = gx::uniform<float, L>(gx::dims(cf.n), 24, -1.0f, 1.0f);
    reset_counts();
    auto s = gx::eval(gx::exp(counting<1>(row)) * counting<2>(v) + counting<3>(x));
    CHECK(taken<1>() == mn);
    CHECK(taken<2>() == mn);
    CHECK(taken<3>() == mn);
    CHECK_ALL_CLOSE(s, gx::exp(row) * v + x);
  }
}

TEST_CASE("fusion: static shapes, shape<5, 3> and shape<dyn, 3>") {
  gx::tensor<float, shape<5, 3>> a = gx::uniform<float>(shape<5, 3>{}, 31);
  auto b = gx::uniform<float>(gx::dims(5, gx::fix<3>), 32);
  gx::tensor<float, shape<1, 3>> w{1, 2, 3};
  reset_counts();
  auto r = gx::eval(counting<1>(a) * 2 + gx::exp(counting<2>(b)) * counting<3>(w));
  static_assert(std::is_same_v<gx::shape_of_t<decltype(r)>, shape<5, 3>>);
  CHECK(taken<1>() == 15);
  CHECK(taken<2>() == 15);
  CHECK(taken<3>() == 15);
  CHECK_ALL_CLOSE(r, a * 2 + gx::exp(b) * w);
}

TEST_CASE_TEMPLATE("fusion: full reductions read each operand element once", L, gx::row_major,
                   gx::col_major) {
  for (auto cf : configs) {
    CAPTURE(cf.m);
    CAPTURE(cf.n);
    CAPTURE(cf.threads);
    thread_scope ts(cf.threads);
    auto a = gx::uniform<float, L>(gx::dims(cf.m, cf.n), 41, -1.0f, 1.0f);
    auto b = gx::uniform<float, L>(gx::dims(cf.m, cf.n), 42, -1.0f, 1.0f);
    long long mn = static_cast<long long>(cf.m) * cf.n;
    double ref_dot = 0, ref_sum = 0, ref_max = -1e30;
    for (int i = 0; i < cf.m; ++i)
      for (int j = 0; j < cf.n; ++j) {
        ref_dot += double(a(i, j)) * double(b(i, j));
        ref_sum += double(a(i, j));
        ref_max = std::max(ref_max, double(a(i, j)));
      }

    reset_counts();
    float dot = gx::value(gx::sum(counting<1>(a) * counting<2>(b)));
    CHECK(taken<1>() == mn);
    CHECK(taken<2>() == mn);
    CHECK(dot == doctest::Approx(ref_dot).epsilon(1e-4));

    float mean = gx::value(gx::mean(counting<1>(a)));
    CHECK(taken<1>() == mn);
    CHECK(mean == doctest::Approx(ref_sum / double(mn)).epsilon(1e-3));

    float mx = gx::value(gx::max(gx::exp(counting<1>(a))));
    CHECK(taken<1>() == mn);
    CHECK(mx == doctest::Approx(std::exp(ref_max)).epsilon(1e-6));

    // a rank-0 result through eval (the reduction runs through assign's rank-0 path)
    auto t = gx::eval(gx::sum(counting<1>(a) * counting<2>(b)));
    CHECK(taken<1>() == mn);
    CHECK(taken<2>() == mn);
    CHECK(t[gx::coord<0>{}] == dot);
  }
}

namespace {
/// A partial-reduction configuration: shape m x n, and the thread count.
struct red_config {
  int m, n, threads;
};
// small; many outputs along axis 0 (parallel over output elements when reducing axis 1);
// many outputs along axis 1; long rows (several blocks per output element); long columns.
constexpr red_config red_configs[] = {{13, 37, 1},     {13, 37, 4},      {70001, 3, 4},
                                      {3, 70001, 4},   {5, 100003, 3},   {100003, 5, 3},
                                      {70001, 3, 1}};
}  // namespace

TEST_CASE_TEMPLATE("fusion: partial reductions read each operand element once", L, gx::row_major,
                   gx::col_major) {
  for (auto cf : red_configs) {
    CAPTURE(cf.m);
    CAPTURE(cf.n);
    CAPTURE(cf.threads);
    thread_scope ts(cf.threads);
    auto x = gx::uniform<float, L>(gx::dims(cf.m, cf.n), 51, -1.0f, 1.0f);
    auto y = gx::uniform<float, L>(gx::dims(cf.m, cf.n), 52, -1.0f, 1.0f);
    long long mn = static_cast<long long>(cf.m) * cf.n;

    std::vector<double> row_sum(std::size_t(cf.m), 0.0), col_max(std::size_t(cf.n), -1e30),
        col_sum(std::size_t(cf.n), 0.0);
    for (int i = 0; i < cf.m; ++i)
      for (int j = 0; j < cf.n; ++j) {
        double v = x(i, j);
        row_sum[std::size_t(i)] += v;
        col_max[std::size_t(j)] = std::max(col_max[std::size_t(j)], v);
        col_sum[std::size_t(j)] += v * double(y(i, j));
      }

    reset_counts();
    auto s1 = gx::eval(gx::sum<1>(counting<1>(x)));
    CHECK(taken<1>() == mn);
    REQUIRE(s1.size() == cf.m);
    bool ok = true;
    for (int i = 0; i < cf.m; ++i)
      ok = ok && std::abs(s1(i) - row_sum[std::size_t(i)]) <= 1e-4 * (1 + cf.n);
    CHECK(ok);

    auto m0 = gx::eval(gx::max<0>(counting<1>(x)));
    CHECK(taken<1>() == mn);
    ok = true;
    for (int j = 0; j < cf.n; ++j) ok = ok && double(m0(j)) == col_max[std::size_t(j)];
    CHECK(ok);

    auto me = gx::eval(gx::mean<1>(counting<1>(x), gx::keep_dims));
    CHECK(taken<1>() == mn);
    static_assert(std::is_same_v<gx::shape_of_t<decltype(me)>, shape<dyn, 1>>);
    CHECK(me(cf.m - 1, 0) == doctest::Approx(row_sum[std::size_t(cf.m - 1)] / cf.n).epsilon(1e-3));

    auto d0 = gx::eval(gx::sum<0>(counting<1>(x) * counting<2>(y), gx::keep_dims));
    CHECK(taken<1>() == mn);
    CHECK(taken<2>() == mn);
    ok = true;
    for (int j = 0; j < cf.n; ++j)
      ok = ok && std::abs(d0(0, j) - col_sum[std::size_t(j)]) <= 1e-4 * (1 + cf.m);
    CHECK(ok);
  }
}

TEST_CASE_TEMPLATE("fusion: reductions over several axes of a rank-3 operand", L, gx::row_major,
                   gx::col_major) {
  // 7 x 11 x 13: the reduced domain has "rows" on the other reduced axes (eval/reduce.hpp).
  // 61 x 37 x 41 = 92,537 elements: the full reduction runs its blocks on the pool.
  for (auto cf : {config{7, 11, 1}, config{61, 37, 4}}) {
    CAPTURE(cf.m);
    thread_scope ts(cf.threads);
    int k = cf.m == 7 ? 13 : 41;
    auto x = gx::uniform<float, L>(gx::dims(cf.m, cf.n, k), 61, -1.0f, 1.0f);
    long long n = static_cast<long long>(cf.m) * cf.n * k;
    reset_counts();
    auto a = gx::eval(gx::sum<0, 2>(counting<1>(x)));
    CHECK(taken<1>() == n);
    auto b = gx::eval(gx::max<1>(counting<1>(x), gx::keep_dims));
    CHECK(taken<1>() == n);
    float c = gx::value(gx::mean(counting<1>(x)));
    CHECK(taken<1>() == n);
    CHECK_ALL_CLOSE(gx::sum(a), gx::sum(x), 1e-4, 1e-3);
    CHECK(c == doctest::Approx(gx::value(gx::sum(x)) / float(n)).epsilon(1e-4));
    float b0 = x(0, 0, 0);
    for (int j = 1; j < cf.n; ++j) b0 = std::max(b0, x(0, j, 0));
    CHECK(b(0, 0, 0) == b0);
  }
}

TEST_CASE("fusion: a reduction nested in an expression is computed once per call (kept)") {
  // `x - max<1>(x, keep_dims)` reads the reduction through a broadcast. The call keeps the
  // reduction's value in a buffer first (docs/ad.md, "Saved values"), so each element of x is
  // read once by the reduction whatever the loop order: in a column-major result, whose loop
  // runs along axis 0 where the reduction varies, it was recomputed for every output element
  // before (M * N * N reads).
  thread_scope ts(1);
  int m = 13, n = 37;
  long long mn = static_cast<long long>(m) * n;
  auto xr = gx::uniform<float>(gx::dims(m, n), 71);
  reset_counts();
  auto r = gx::eval(counting<1>(xr) - gx::max<1>(counting<2>(xr), gx::keep_dims));
  CHECK(taken<1>() == mn);
  CHECK(taken<2>() == mn);
  auto xc = gx::uniform<float, gx::col_major>(gx::dims(m, n), 71);
  reset_counts();
  auto c = gx::eval(counting<1>(xc) - gx::max<1>(counting<2>(xc), gx::keep_dims));
  CHECK(taken<1>() == mn);
  CHECK(taken<2>() == mn);
  CHECK_ALL_CLOSE(r, c, 0.0, 0.0);
}
