// Determinism: a reduction gives the same bits for 1, 2, 3 and 4 threads, and on every
// repeated run. The summation scheme (eval/reduce.hpp, documented at its top) fixes the
// blocks (their size depends on the element count only), the lanes within a block and the
// order in which partial results are combined; threads only decide who computes a block or
// an output element. These tests compare bit patterns (std::bit_cast / memcmp), never
// tolerances. Sizes are chosen not to be multiples of the block size, the lane count or the
// pack width, so every path (full packs, scalar tails, a short last block) runs.
//
// The last test documents the accuracy claim: on random data gradix's float sum is closer
// to a double-precision reference than a naive serial float loop.
#include "testing.hpp"

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

namespace gx = gradix;
using gx::testing::bits_of;
using gx::testing::thread_scope;
using gx::dyn;
using gx::shape;

namespace {

/// Thread counts of a comparison, and how often each runs (repeated runs with 1 and 4).
constexpr int thread_counts[] = {1, 2, 3, 4};
constexpr int reps_for(int threads) { return threads == 1 || threads == 4 ? 2 : 1; }

/// f() evaluated with 1, 2, 3 and 4 threads (1 and 4 twice): every result has the bits of
/// the first. f returns a scalar.
template <class F>
void same_scalar_bits(F f) {
  using T = decltype(f());
  T first{};
  for (int t : thread_counts) {
    thread_scope ts(t);
    for (int rep = 0; rep < reps_for(t); ++rep) {
      CAPTURE(t);
      CAPTURE(rep);
      T v = f();
      if (t == 1 && rep == 0) first = v;
      CHECK(bits_of(v) == bits_of(first));
    }
  }
}

/// Same for a tensor result: its elements (in storage order) are compared with memcmp; on a
/// mismatch the first differing storage index is reported.
template <class F>
void same_tensor_bits(F f) {
  using R = decltype(f());
  using T = typename R::value_type;
  std::vector<T> first;
  for (int t : thread_counts) {
    thread_scope ts(t);
    for (int rep = 0; rep < reps_for(t); ++rep) {
      CAPTURE(t);
      CAPTURE(rep);
      R r = f();
      std::size_t n = std::size_t(r.size());
      if (t == 1 && rep == 0) {
        first.assign(r.data(), r.data() + n);
        continue;
      }
      REQUIRE(n == first.size());
      bool same = n == 0 || std::memcmp(r.data(), first.data(), n * sizeof(T)) == 0;
      if (!same) {
        std::size_t k = 0;
        while (k < n && bits_of(r.data()[k]) == bits_of(first[k])) ++k;
        CAPTURE(k);
        CHECK(same);
      }
    }
  }
}

// 16M + 37 elements: 2049 blocks of the minimum size would be too many, so the block size is
// ceil(n / 256) rounded up to the lane count (65,568), and the last block is short.
constexpr gx::index_t big = (gx::index_t(1) << 24) + 37;
// 3 x 5,000,017: rows of a prime length.
constexpr gx::index_t rows3 = 3, cols5m = 5'000'017;

}  // namespace

TEST_CASE("determinism: full sum, mean and max of 16M + 37 floats give the same bits for 1-4 threads") {
  auto x = gx::uniform<float>(gx::dims(big), 101, -1.0f, 1.0f);
  same_scalar_bits([&] { return gx::value(gx::sum(x)); });
  same_scalar_bits([&] { return gx::value(gx::mean(x)); });
  same_scalar_bits([&] { return gx::value(gx::max(x)); });
  // doubles use 16 lanes instead of 32: the same guarantee
  auto xd = gx::uniform<double>(gx::dims(big / 4 + 3), 102, -1.0, 1.0);
  same_scalar_bits([&] { return gx::value(gx::sum(xd)); });
}

TEST_CASE_TEMPLATE("determinism: full reductions of a 3 x 5,000,017 matrix", L, gx::row_major,
                   gx::col_major) {
  auto x = gx::uniform<float, L>(gx::dims(rows3, cols5m), 103, -1.0f, 1.0f);
  same_scalar_bits([&] { return gx::value(gx::sum(x)); });
  same_scalar_bits([&] { return gx::value(gx::mean(x)); });
  same_scalar_bits([&] { return gx::value(gx::max(x)); });
  // sum over both axes named explicitly is the same reduction
  same_scalar_bits([&] { return gx::value(gx::sum<0, 1>(x)); });
  CHECK(bits_of(gx::value(gx::sum<0, 1>(x))) == bits_of(gx::value(gx::sum(x))));
}

TEST_CASE_TEMPLATE("determinism: partial reductions (sum<0>, sum<1>, mean, max, keep_dims)", L,
                   gx::row_major, gx::col_major) {
  // 3 x 5,000,017: sum<0> has 5M output elements (split between threads), sum<1> has 3
  // output elements of 5M terms each (several blocks). The transposed shape too.
  auto x = gx::uniform<float, L>(gx::dims(rows3, cols5m), 104, -1.0f, 1.0f);
  same_tensor_bits([&] { return gx::eval(gx::sum<0>(x)); });
  same_tensor_bits([&] { return gx::eval(gx::sum<1>(x)); });
  same_tensor_bits([&] { return gx::eval(gx::sum<1>(x, gx::keep_dims)); });
  same_tensor_bits([&] { return gx::eval(gx::mean<0>(x, gx::keep_dims)); });
  same_tensor_bits([&] { return gx::eval(gx::max<1>(x)); });
  auto y = gx::uniform<float, L>(gx::dims(cols5m, rows3), 105, -1.0f, 1.0f);
  same_tensor_bits([&] { return gx::eval(gx::sum<0>(y)); });
  same_tensor_bits([&] { return gx::eval(gx::sum<1>(y, gx::keep_dims)); });
  same_tensor_bits([&] { return gx::eval(gx::mean<1>(y)); });
  // a 2,003 x 2,011 matrix: both partial reductions have many terms and many outputs
  auto z = gx::uniform<float, L>(gx::dims(2003, 2011), 106, -1.0f, 1.0f);
  same_tensor_bits([&] { return gx::eval(gx::sum<0>(z)); });
  same_tensor_bits([&] { return gx::eval(gx::sum<1>(z, gx::keep_dims)); });
  same_scalar_bits([&] { return gx::value(gx::sum(gx::sum<1>(z))); });
}

TEST_CASE_TEMPLATE("determinism: expressions inside reductions", L, gx::row_major, gx::col_major) {
  auto x = gx::uniform<float, L>(gx::dims(rows3, cols5m), 107, -1.0f, 1.0f);
  auto y = gx::uniform<float, L>(gx::dims(rows3, cols5m), 108, -1.0f, 1.0f);
  auto w = gx::uniform<float, L>(gx::dims(gx::fix<1>, cols5m), 109, -1.0f, 1.0f);
  same_scalar_bits([&] { return gx::value(gx::sum(x * y + gx::exp(x) * 0.5f)); });
  same_scalar_bits([&] { return gx::value(gx::mean(gx::square(x - w))); });
  same_scalar_bits([&] { return gx::value(gx::max(gx::abs(x * w - y))); });
  same_tensor_bits([&] { return gx::eval(gx::sum<1>(x * w, gx::keep_dims)); });
  same_tensor_bits([&] { return gx::eval(gx::sum<0>(gx::tanh(x) * y)); });
  // a reduction of a reduction
  same_scalar_bits([&] { return gx::value(gx::sum(gx::sum<0>(x * y))); });
}

TEST_CASE("determinism: a reduction nested in an expression does not depend on the thread count") {
  // Large rows: each row's max and sum take several blocks, and the parallel loop splits rows
  // between tasks, so a task boundary inside a row recomputes that row's reduction on
  // another thread. The result is the same bits anyway.
  auto x = gx::uniform<float>(gx::dims(6, 1'000'003), 110, -4.0f, 4.0f);
  same_tensor_bits([&] { return gx::eval(x - gx::max<1>(x, gx::keep_dims)); });
  same_tensor_bits([&] { return gx::eval(x / gx::sum<1>(gx::abs(x), gx::keep_dims)); });
  same_tensor_bits([&] {
    return gx::eval(gx::exp(x - gx::max<1>(x, gx::keep_dims)) /
                    gx::sum<1>(gx::exp(x - gx::max<1>(x, gx::keep_dims)), gx::keep_dims));
  });
  // column-major: the loop runs down the columns, so reduce along them (sum<0>, keep_dims)
  auto xc = gx::uniform<float, gx::col_major>(gx::dims(1'000'003, 6), 111, -4.0f, 4.0f);
  same_tensor_bits([&] { return gx::eval(xc - gx::sum<0>(xc, gx::keep_dims)); });
  same_tensor_bits([&] { return gx::eval(xc - gx::mean<0>(xc, gx::keep_dims)); });
  // and the values are right: every row of x - max<1>(x) has the maximum 0
  auto c = gx::eval(x - gx::max<1>(x, gx::keep_dims));
  auto m = gx::eval(gx::max<1>(c));
  for (int i = 0; i < 6; ++i) CHECK(m(i) == 0.0f);
}

TEST_CASE("accuracy: gradix's float sum is closer to a double reference than a naive float loop") {
  // Naive: s += x[i] in float, in order. Reference: the same terms added in double (its
  // error is negligible at this size). Positive data (uniform [0, 1)) is where a naive
  // running sum loses most; mixed signs (normal) show the same order of improvement.
  struct data_case {
    std::string name;
    gx::tensor<float, shape<dyn>> x;
  };
  data_case cases[] = {{"uniform [0, 1)", gx::uniform<float>(gx::dims(big), 201)},
                       {"normal", gx::randn<float>(gx::dims(big), 202)},
                       {"uniform [0, 1), 1M + 3", gx::uniform<float>(gx::dims((1 << 20) + 3), 203)}};
  for (auto& dc : cases) {
    CAPTURE(dc.name);
    auto n = std::size_t(dc.x.size());
    float const* p = dc.x.data();
    double ref = 0, mag = 0;
    float naive = 0;
    for (std::size_t i = 0; i < n; ++i) {
      ref += double(p[i]);
      mag += std::abs(double(p[i]));
      naive += p[i];
    }
    float g = gx::value(gx::sum(dc.x));
    double err_g = std::abs(double(g) - ref), err_naive = std::abs(double(naive) - ref);
    MESSAGE(dc.name << ": relative error (to sum |x|): gradix " << err_g / mag << ", naive "
                    << err_naive / mag);
    CHECK(err_g < err_naive);
    // the scheme's error stays within a few float ulps of the magnitude per block level
    CHECK(err_g / mag < 1e-6);
  }
}
