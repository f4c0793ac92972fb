// argmax<Axis>, one_hot and take_along: values against plain loops (ties, NaN, every pack
// width), shapes and types, the errors (axis, value, extent), and take_along's scatter-add
// gradient against central differences in double precision, with repeated positions, on a
// sparse parameter (touching only the rows read) and with several threads.
#include "ad/configs.hpp"
#include "ad/numgrad.hpp"
#include "testing.hpp"

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace gx = gradix;
using gx::dyn;
using gx::index_t;
using gx::shape;
using gx::testing::thread_scope;

namespace {
using TF = gx::tensor<float, shape<dyn, dyn>>;
using TI = gx::tensor<std::int32_t, shape<dyn, dyn>>;
using VI = gx::tensor<std::int64_t, shape<dyn>>;

static_assert(std::is_same_v<gx::value_type_t<decltype(gx::argmax<1>(std::declval<TF&>()))>, index_t>);
static_assert(std::is_same_v<gx::shape_of_t<decltype(gx::argmax<0>(std::declval<gx::tensor<float, shape<3, 5>>&>()))>, shape<5>>);
static_assert(std::is_same_v<gx::shape_of_t<decltype(gx::argmax<-1>(std::declval<gx::tensor<float, shape<3, 5>>&>()))>, shape<3>>);
static_assert(std::is_same_v<gx::shape_of_t<decltype(gx::one_hot(std::declval<VI&>(), gx::fix<10>))>, shape<dyn, 10>>);
static_assert(std::is_same_v<gx::value_type_t<decltype(gx::one_hot<double>(std::declval<VI&>(), 4))>, double>);
static_assert(std::is_same_v<gx::shape_of_t<decltype(gx::take_along<1>(std::declval<TF&>(), std::declval<TI&>()))>, shape<dyn, dyn>>);
// constant evaluation
constexpr gx::tensor<double, shape<2, 3>> cm{1.0, 5.0, 5.0, -1.0, -2.0, -0.5};
static_assert(gx::value(gx::sum(gx::argmax<1>(cm))) == 1 + 2);
static_assert(gx::value(gx::sum(gx::argmax<0>(cm))) == 0 + 0 + 0);

// the first maximum of n elements from p with stride s (a NaN wins: the first NaN)
template <class T>
index_t first_max(T const* p, index_t n, index_t s) {
  index_t best = 0;
  for (index_t i = 1; i < n; ++i) {
    T x = p[i * s], b = p[best * s];
    if (x > b || (x != x && b == b)) best = i;
  }
  return best;
}
}  // namespace

TEST_CASE("argmax: the first maximum along one axis (ties, NaN, -inf, every width)") {
  float const nan = std::numeric_limits<float>::quiet_NaN();
  for (index_t cols : {index_t(1), index_t(3), index_t(8), index_t(9), index_t(17), index_t(33), index_t(1000)}) {
    CAPTURE(cols);
    index_t const rows = 7;
    TF x(gx::dims(rows, cols));
    std::uint64_t s = std::uint64_t(cols);
    for (index_t k = 0; k < rows * cols; ++k) {
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      unsigned r = unsigned(s >> 33);
      index_t row = k / cols;
      x.data()[k] = row == 0 ? -std::numeric_limits<float>::infinity()
                  : row == 1 ? float(r % 3)                       // ties
                  : row == 2 && r % 7 == 0 ? nan
                  : float(r % 1000) / 7.f;
    }
    auto a1 = gx::eval(gx::argmax<1>(x));
    for (index_t r = 0; r < rows; ++r) CHECK(a1(r) == first_max(x.data() + r * cols, cols, 1));
    auto a0 = gx::eval(gx::argmax<0>(x));
    for (index_t c = 0; c < cols; ++c) CHECK(a0(c) == first_max(x.data() + c, rows, cols));
  }
  // rank 3, the middle axis, of an expression
  auto y = gx::uniform<double>(shape<4, 6, 5>{}, 3, -1.0, 1.0);
  auto am = gx::eval(gx::argmax<1>(y * -2.0));
  for (int i = 0; i < 4; ++i)
    for (int k = 0; k < 5; ++k) {
      index_t best = 0;
      for (int j = 1; j < 6; ++j)
        if (-2.0 * y(i, j, k) > -2.0 * y(i, int(best), k)) best = j;
      CHECK(am(i, k) == best);
    }
  TF empty(gx::dims(3, 0));
  CHECK_THROWS_WITH_AS((void)gx::argmax<1>(empty), doctest::Contains("gradix::argmax: axis 1 has extent 0"),
                       gx::error);
}

TEST_CASE("argmax: an accuracy, and a weight inside a differentiable loss") {
  TF logits(gx::dims(4, 3));
  float const v[] = {0, 2, 1, 5, 1, 1, 0, 0, 3, 1, 9, 2};
  for (int k = 0; k < 12; ++k) logits.data()[k] = v[k];
  VI labels(gx::dims(4));
  std::int64_t const l[] = {1, 0, 0, 1};  // predictions 1, 0, 2, 1
  for (int k = 0; k < 4; ++k) labels(k) = l[k];
  CHECK(gx::value(gx::mean(gx::cast<float>(gx::argmax<1>(logits) == labels))) == 0.75f);
  // d/dX sum(max<1>(X) * argmax<1>(X)) is argmax_r at (r, argmax_r)
  auto X = gx::param(gx::uniform<double>(gx::dims(5, 7), 4, -1.0, 1.0));
  auto g = gx::grad(gx::sum(gx::max<1>(X) * gx::cast<double>(gx::argmax<1>(X))), X).to_dense();
  for (index_t r = 0; r < 5; ++r) {
    index_t am = first_max(X.value().data() + r * 7, 7, 1);
    for (index_t c = 0; c < 7; ++c) CHECK(g(r, c) == (c == am ? double(am) : 0.0));
  }
}

TEST_CASE("one_hot: rows of 0 and 1, zeros for a position out of range, static and dynamic classes") {
  VI pos(gx::dims(6));
  std::int64_t const p[] = {0, 3, 3, -1, 4, 2};
  for (int k = 0; k < 6; ++k) pos(k) = p[k];
  auto h = gx::eval(gx::one_hot(pos, gx::fix<4>));
  auto hd = gx::eval(gx::one_hot<double>(pos, 4));
  for (int k = 0; k < 6; ++k)
    for (int c = 0; c < 4; ++c) {
      CHECK(h(k, c) == (p[k] == c ? 1.f : 0.f));
      CHECK(hd(k, c) == (p[k] == c ? 1.0 : 0.0));
    }
  // of an integer expression: the predicted class
  gx::tensor<float, shape<2, 3>> l{0.f, 2.f, 1.f, 7.f, 1.f, 1.f};
  auto hp = gx::eval(gx::one_hot(gx::argmax<1>(l), 3));
  CHECK(hp(0, 1) == 1.f);
  CHECK(hp(1, 0) == 1.f);
  CHECK(gx::value(gx::sum(hp)) == 2.f);
  CHECK_THROWS_WITH_AS((void)gx::one_hot(pos, -2), doctest::Contains("gradix::one_hot: the class count -2"),
                       gx::error);
  // no gradient flows through it: a weight
  auto w = gx::param(gx::uniform<double>(gx::dims(6, 4), 5, -1.0, 1.0));
  auto g = gx::grad(gx::sum(w * gx::one_hot<double>(pos, 4)), w).to_dense();
  for (int k = 0; k < 6; ++k)
    for (int c = 0; c < 4; ++c) CHECK(g(k, c) == (p[k] == c ? 1.0 : 0.0));
}

TEST_CASE("take_along: values, repeated positions, and errors naming the position, the axis and the extent") {
  auto x = gx::uniform<float>(gx::dims(4, 5), 6, -1.f, 1.f);
  TI pos(gx::dims(4, 3));
  std::int32_t const p[] = {0, 4, 4, 2, 2, 2, 1, 0, 3, 4, 3, 0};
  for (int k = 0; k < 12; ++k) pos.data()[k] = p[k];
  auto t = gx::eval(gx::take_along<1>(x, pos));
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 3; ++j) CHECK(t(i, j) == x(i, p[i * 3 + j]));
  // along axis 0 (negative spelling too)
  TI p0(gx::dims(2, 5));
  for (int k = 0; k < 10; ++k) p0.data()[k] = (k * 7) % 4;
  auto t0 = gx::eval(gx::take_along<-2>(x, p0));
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 5; ++j) CHECK(t0(i, j) == x(p0(i, j), j));
  // labels of a batch: a (B, 1) column from a vector by unsqueeze
  VI y(gx::dims(4));
  for (int k = 0; k < 4; ++k) y(k) = 4 - k;
  auto col = gx::eval(gx::take_along<1>(x, gx::unsqueeze<1>(y)));
  static_assert(gx::rank_v<gx::shape_of_t<decltype(col)>> == 2);
  for (int i = 0; i < 4; ++i) CHECK(col(i, 0) == x(i, 4 - i));
  // errors
  pos.data()[7] = 5;
  CHECK_THROWS_WITH_AS((void)gx::take_along<1>(x, pos),
                       doctest::Contains("gradix::take_along: position 5 at [2, 1] is out of range for axis 1 of extent 5"),
                       gx::error);
  pos.data()[7] = -1;
  CHECK_THROWS_WITH_AS((void)gx::take_along<1>(x, pos), doctest::Contains("position -1 at [2, 1]"), gx::error);
  TI wrong(gx::dims(3, 2));
  CHECK_THROWS_WITH_AS((void)gx::take_along<1>(x, wrong),
                       doctest::Contains("gradix::take_along: the positions' extent 3 differs from the operand's 4 at axis 0"),
                       gx::error);
}

TEST_CASE_TEMPLATE("take_along: gradients match central differences (repeated positions add)", C, GRADIX_AD_CONFIGS) {
  auto x = C::make(31);
  auto const ext = x.shape().extents();
  if constexpr (gx::rank_v<gx::shape_of_t<decltype(x.value())>> == 2) {
    TI pos(gx::dims(ext[0], index_t(5)));
    for (index_t k = 0; k < pos.size(); ++k) pos.data()[k] = std::int32_t((k * 5 + k / 3) % ext[1]);
    pos.data()[1] = pos.data()[0];  // a repeat in row 0
    auto w = gx::uniform<double>(gx::dims(ext[0], index_t(5)), 32, -1.0, 1.0);
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(w * gx::take_along<1>(p, pos)); }, x);
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::exp(gx::take_along<1>(p * 0.5, pos)) * w); }, x);
  }
}

TEST_CASE("take_along: the gradient on a sparse parameter touches only the rows read; threads agree") {
  for (int threads : {1, 3}) {
    thread_scope ts(threads);
    CAPTURE(threads);
    index_t const rows = 3000, cols = 40;
    auto E = gx::param(gx::uniform<double>(gx::dims(rows, cols), 7, -1.0, 1.0), gx::sparse_grad<0>);
    // positions along axis 0 (rows of E), one per column, many repeats
    TI pos(gx::dims(index_t(50), cols));
    for (index_t k = 0; k < pos.size(); ++k) pos.data()[k] = std::int32_t((k * 37) % 11 * 100);
    auto g = gx::grad(gx::sum(gx::take_along<0>(E, pos) * 2.0), E);
    CHECK(g.size() == 11);  // slices stored: the rows read, no other
    auto d = g.to_dense();
    for (index_t r = 0; r < rows; ++r)
      for (index_t c = 0; c < cols; ++c) {
        double want = 0;
        for (index_t i = 0; i < 50; ++i)
          if (pos(i, c) == r) want += 2.0;
        if (d(r, c) != want) {
          FAIL_CHECK("row ", r, " col ", c, ": ", d(r, c), " want ", want);
          return;
        }
      }
  }
}
