// Two kernels of backward that replace scalar or repeated passes (docs/ad.md):
//  - the loss value carried by the first gradient kernel: backward(sum(F)) and
//    backward(mean(F)) for a vector F add F's values into the reduction's blocks while the
//    kernel writes the adjoints. The value must have the bits of value(e) and the gradients
//    the bits of grad(e, ...) (which never carries), for any size (full lanes, packs, scalar
//    tails, one block or many) and thread count;
//  - the arg-max of a max reduction on SIMD packs: the first maximum in row-major order
//    over the reduced axes, a NaN winning, as the scalar loop (used in constant evaluation)
//    defines it, for ties, +-0, rows of -inf, NaNs and lengths around the pack width.
#include "testing.hpp"

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

namespace gx = gradix;
using gx::testing::thread_scope;
using gx::dyn;
using gx::shape;

namespace {

using PV = gx::parameter<float, shape<dyn>>;

template <int K, class E>
auto exp_chain(E const& e) {
  if constexpr (K == 0) return e;
  else return exp_chain<K - 1>(gx::exp(e * 0.5f - 0.5f) * 0.5f);
}
template <int K, class E, class W>
auto mix_chain(E const& e, W const& w) {
  if constexpr (K == 0) return e;
  else return mix_chain<K - 1>(gx::exp(gx::tanh(e) * w - 0.5f), w);
}

template <class E>
constexpr int carrier_v = gx::detail::loss_carrier<gx::host::executor, gx::saved_expr_t<E>, gx::backward_plan_t<E>>::value;

// Which losses a kernel carries (types only).
static_assert(carrier_v<decltype(gx::sum(exp_chain<1>(std::declval<PV&>())))> == 0);
static_assert(carrier_v<decltype(gx::mean(exp_chain<3>(std::declval<PV&>())))> == 0);
static_assert(carrier_v<decltype(gx::sum(std::declval<PV&>()))> == 0);
static_assert(carrier_v<decltype(gx::sum(-gx::tanh(std::declval<PV&>()) * 2.f))> == 0);
// several parameters in one region: the multi_use carries it
static_assert(carrier_v<decltype(gx::sum(mix_chain<4>(std::declval<PV&>(), std::declval<PV&>())))> == 0);
// not carried: a max at the root, a matrix operand, a reduction inside F
static_assert(carrier_v<decltype(gx::max(gx::exp(std::declval<PV&>())))> < 0);
static_assert(carrier_v<decltype(gx::sum(gx::exp(std::declval<gx::parameter<float, shape<dyn, dyn>>&>())))> < 0);
static_assert(carrier_v<decltype(gx::sum(gx::sum<1>(std::declval<gx::parameter<float, shape<dyn, dyn>>&>())))> < 0);

// F's value from the path derivative's top (its top occurs once in F): no second evaluation
template <class E>
using first_kernel_t = std::remove_cvref_t<decltype(gx::get<0>(std::declval<gx::backward_plan_t<E>&>()))>;
template <class E>
constexpr bool top_in_f_v =
    gx::host::detail::top_in_f_v<typename gx::host::detail::loss_root<gx::saved_expr_t<E>>::arg, first_kernel_t<E>>;
static_assert(top_in_f_v<decltype(gx::sum(exp_chain<1>(std::declval<PV&>())))>);
static_assert(top_in_f_v<decltype(gx::mean(exp_chain<3>(std::declval<PV&>())))>);
static_assert(top_in_f_v<decltype(gx::sum(-gx::tanh(std::declval<PV&>()) * 2.f))>);
static_assert(!top_in_f_v<decltype(gx::sum(std::declval<PV&>()))>);  // no region: F beside

// An op that counts its evaluations (per element, or per lane of a pack).
std::atomic<long> counted{0};
struct counter_op {
  static constexpr char const* name = "counter_op";
  static constexpr bool needs_floating = true;
  template <class T>
  static T value(T x) {
    if constexpr (std::is_arithmetic_v<T>) counted.fetch_add(1, std::memory_order_relaxed);
    else counted.fetch_add(long(sizeof(T) / sizeof(x[0])), std::memory_order_relaxed);
    return x;
  }
  static constexpr bool pack_derivative = true;
  template <class T>
  static T d_arg(T, T) {
    return gx::simd::constant<T>(1);
  }
};

template <class T>
bool same_bits(T a, T b) {
  return std::memcmp(&a, &b, sizeof a) == 0;
}
// The value's bits, except that of two NaNs any payload: when a sum adds two NaNs, which
// payload comes out depends on the operands' order in the instruction, and a C++ compiler
// may swap the operands of an addition (g++ -O2 does, differently in value() and in the
// backward call): no library can promise a NaN's payload (docs/ad.md).
template <class T>
bool same_value(T a, T b) {
  if (a != a && b != b) return true;
  return same_bits(a, b);
}
template <class P>
std::vector<float> grad_of(P const& p) {
  auto d = p.grad().to_dense();
  return std::vector<float>(d.data(), d.data() + d.size());
}

// backward(loss) against value(loss) and grad(loss, p...), bit for bit.
template <class L, class... P>
void check_carried(L const& loss, P&... p) {
  auto v = gx::value(loss);
  (gx::zero_grad(p), ...);
  auto b = gx::backward(loss);
  CHECK_MESSAGE(same_value(v, b), "value ", double(v), " backward ", double(b));
  auto want = [&] {
    if constexpr (sizeof...(P) == 1) return std::tuple{gx::grad(loss, p...)};
    else return gx::grad(loss, p...);
  }();
  std::size_t k = 0;
  auto cmp = [&](auto const& param, auto const& g) {
    auto got = grad_of(param);
    auto d = g.to_dense();
    CHECK_MESSAGE(std::memcmp(got.data(), d.data(), got.size() * sizeof(float)) == 0, "parameter ", k);
    ++k;
  };
  std::apply([&](auto const&... g) { (cmp(p, g), ...); }, want);
  (gx::zero_grad(p), ...);
}

}  // namespace

TEST_CASE("loss value carried by the first kernel: the bits of value(), the gradients of grad()") {
  for (int threads : {1, 3}) {
    thread_scope ts(threads);
    for (gx::index_t n : {gx::index_t(1), gx::index_t(7), gx::index_t(33), gx::index_t(8192),
                          gx::index_t(8193), gx::index_t(100003), gx::index_t(1 << 20)}) {
      CAPTURE(threads);
      CAPTURE(n);
      auto x = gx::param(gx::uniform<float>(gx::dims(n), 1, 0.25f, 0.75f));
      auto w = gx::param(gx::uniform<float>(gx::dims(n), 2, 0.f, 0.5f));
      check_carried(gx::sum(exp_chain<1>(x)), x);           // a plain use; F's top scaled
      check_carried(gx::mean(exp_chain<3>(x)), x);          // mean: the division at the end
      check_carried(gx::sum(-gx::tanh(x) * 2.f), x);        // a negated adjoint
      check_carried(gx::sum(x), x);                         // F is the parameter itself
      check_carried(gx::sum(mix_chain<4>(x, w)), x, w);     // a multi_use, F its region top
      check_carried(gx::sum(mix_chain<2>(x, w) * 3.f), x, w);  // a multi_use below F
    }
  }
}

TEST_CASE("loss value carried: the loss's operand is evaluated once per element in backward") {
  thread_scope ts(1);
  gx::index_t const n = 10007;
  auto x = gx::param(gx::uniform<float>(gx::dims(n), 3, -1.f, 1.f));
  auto loss = gx::sum(gx::unary<counter_op>(x) * 2.f + 1.f);
  counted = 0;
  auto v = gx::value(loss);
  CHECK(counted.load() == n);
  counted = 0;
  auto b = gx::backward(loss);
  CHECK(counted.load() == n);  // one pass: the value comes from the kernel's own evaluation
  CHECK(same_bits(v, b));
}

TEST_CASE("loss value carried: a strided parameter falls back to value() + the kernel") {
  auto X = gx::param(gx::uniform<float>(gx::dims(3000, 2), 4, -1.f, 1.f));
  auto col = gx::select<1>(X, 1);  // a strided view: the kernel declines to carry
  auto loss = gx::sum(gx::tanh(col));
  auto v = gx::value(loss);
  auto b = gx::backward(loss);
  CHECK(same_bits(v, b));
  auto g = gx::grad(loss, X).to_dense();
  auto got = X.grad().to_dense();
  CHECK(std::memcmp(g.data(), got.data(), std::size_t(g.size()) * sizeof(float)) == 0);
}

namespace {
// The first maximum of row r (a NaN wins), by a plain loop.
template <class T>
gx::index_t first_max(std::vector<T> const& v, gx::index_t off, gx::index_t n, gx::index_t step) {
  gx::index_t best = 0;
  T b = v[std::size_t(off)];
  for (gx::index_t i = 1; i < n; ++i) {
    T x = v[std::size_t(off + i * step)];
    if (x > b || (x != x && b == b)) {
      b = x;
      best = i;
    }
  }
  return best;
}
template <class T>
void check_rows(gx::index_t rows, gx::index_t cols, std::uint64_t seed) {
  CAPTURE(rows);
  CAPTURE(cols);
  std::vector<T> v(std::size_t(rows * cols));
  std::uint64_t s = seed;
  auto next = [&] {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    return unsigned(s >> 33);
  };
  T const inf = std::numeric_limits<T>::infinity();
  for (gx::index_t r = 0; r < rows; ++r) {
    int kind = int(r % 6);
    for (gx::index_t c = 0; c < cols; ++c) {
      T& x = v[std::size_t(r * cols + c)];
      switch (kind) {
        case 0: x = T(next() % 5); break;                          // many ties
        case 1: x = -inf; break;                                   // all -inf
        case 2: x = (next() % 2) ? T(0) : T(-0.0); break;          // +0 and -0
        case 3: x = T(next() % 7) - T(3); break;
        case 4: x = (next() % 9 == 0) ? std::numeric_limits<T>::quiet_NaN() : T(next() % 4); break;
        default: x = T(next() % 1000) / T(7); break;
      }
    }
    if (kind == 1 && cols > 2) v[std::size_t(r * cols + cols - 1)] = T(-1);  // a late maximum
  }
  auto X = gx::param(gx::tensor<T, shape<dyn, dyn>>(gx::dims(rows, cols)));
  std::memcpy(X.value().data(), v.data(), v.size() * sizeof(T));
  auto g = gx::grad(gx::sum(gx::max<1>(X)), X).to_dense();
  for (gx::index_t r = 0; r < rows; ++r) {
    gx::index_t want = first_max(v, r * cols, cols, 1);
    for (gx::index_t c = 0; c < cols; ++c) {
      T gw = c == want ? T(1) : T(0);
      if (!(g(r, c) == gw)) {
        FAIL_CHECK("row ", r, " col ", c, ": gradient ", double(g(r, c)), ", first max at ", want);
        break;
      }
    }
  }
  // over the rows (axis 0: runs of length `rows`, strided in memory)
  auto g0 = gx::grad(gx::sum(gx::max<0>(X)), X).to_dense();
  for (gx::index_t c = 0; c < cols; ++c) {
    gx::index_t want = first_max(v, c, rows, cols);
    for (gx::index_t r = 0; r < rows; ++r) {
      T gw = r == want ? T(1) : T(0);
      if (!(g0(r, c) == gw)) {
        FAIL_CHECK("column ", c, " row ", r, ": gradient ", double(g0(r, c)), ", first max at ", want);
        break;
      }
    }
  }
  // over all elements (row-major order)
  auto ga = gx::grad(gx::max(X), X).to_dense();
  gx::index_t want = first_max(v, 0, rows * cols, 1);
  CHECK(ga(want / cols, want % cols) == T(1));
  CHECK(gx::value(gx::sum(ga)) == T(1));
}
}  // namespace

TEST_CASE("max: the SIMD arg-max is the first maximum (ties, +-0, -inf rows, NaN, tails)") {
  for (gx::index_t cols : {gx::index_t(1), gx::index_t(3), gx::index_t(8), gx::index_t(9),
                           gx::index_t(16), gx::index_t(17), gx::index_t(33), gx::index_t(1000)}) {
    check_rows<float>(12, cols, std::uint64_t(cols));
    check_rows<double>(12, cols, std::uint64_t(cols) + 99);
  }
}

TEST_CASE("max: the arg-max over two reduced axes is the first in row-major order") {
  auto X = gx::param(gx::tensor<float, shape<2, 3, 5>>{});
  for (int k = 0; k < 30; ++k) X.value().data()[k] = float(k % 4);  // ties across rows
  auto g = gx::grad(gx::sum(gx::max<1, 2>(X)), X).to_dense();
  // each [3, 5] slice's maximum 3: first at element 3 of slice 0, at element 0 of slice 1
  for (int a = 0; a < 2; ++a)
    for (int b = 0; b < 3; ++b)
      for (int c = 0; c < 5; ++c) {
        int flat = a * 15 + b * 5 + c;
        int first = a == 0 ? 3 : 15;  // slice 1 starts at element 15, whose value is 3
        CHECK_MESSAGE(g(a, b, c) == (flat == first ? 1.f : 0.f), a, " ", b, " ", c);
      }
}

namespace {
using PM = gx::parameter<float, shape<dyn, dyn>>;
// the arg-max kernel of a row max carries the loss (one search per row gives both)
static_assert(carrier_v<decltype(gx::sum(gx::max<1>(std::declval<PM&>())))> == 0);
static_assert(carrier_v<decltype(gx::mean(gx::max<1>(std::declval<PM&>())))> == 0);
static_assert(carrier_v<decltype(gx::sum(gx::max<0>(std::declval<PM&>())))> == 0);
static_assert(gx::host::carries_row_maxima_v<gx::saved_expr_t<decltype(gx::sum(gx::max<1>(std::declval<PM&>())))>,
                                                  first_kernel_t<decltype(gx::sum(gx::max<1>(std::declval<PM&>())))>>);
static_assert(!gx::host::carries_row_maxima_v<gx::saved_expr_t<decltype(gx::sum(gx::exp(std::declval<PV&>())))>,
                                                   first_kernel_t<decltype(gx::sum(gx::exp(std::declval<PV&>())))>>);

// rows x cols of kind k: 0 random, 1 every element +0 or -0, 2 some NaNs, 3 -inf rows and
// ties, 4 zeros whose signs the arg-max and the reduction see differently
PM filled(gx::index_t rows, gx::index_t cols, int kind, std::uint64_t seed) {
  auto X = gx::param(gx::uniform<float>(gx::dims(rows, cols), seed, -2.f, 2.f));
  float* d = X.value().data();
  std::uint64_t s = seed;
  auto next = [&] {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    return unsigned(s >> 33);
  };
  for (gx::index_t k = 0; k < rows * cols; ++k) {
    if (kind == 1) d[k] = (next() % 2) ? 0.f : -0.f;
    if (kind == 2 && next() % 97 == 0) {  // NaNs of many payloads and both signs
      std::uint32_t const bits = 0x7fc00000u | (next() & 0x803fffffu);
      std::memcpy(d + k, &bits, sizeof bits);
    }
    if (kind == 3) d[k] = (k / cols) % 3 == 0 ? -std::numeric_limits<float>::infinity() : float(next() % 3);
    // a row's first maximum +0 (element 1) and the reduction's -0 (element 32, in lane 0,
    // which wins the lanes' ties); the sum is +0 either way (it starts at +0)
    if (kind == 4) d[k] = k % cols == 1 ? 0.f : k % cols == 32 ? -0.f : -std::numeric_limits<float>::infinity();
  }
  return X;
}
}  // namespace

TEST_CASE("loss value carried by the arg-max kernel of a row max: the bits of value(), the gradients of grad()") {
  for (int threads : {1, 3}) {
    thread_scope ts(threads);
    for (auto [rows, cols] : {std::pair<gx::index_t, gx::index_t>{1, 1}, {3, 17}, {64, 9}, {4096, 33},
                              {8193, 4}, {20000, 3}, {40, 2000}}) {
      for (int kind = 0; kind < 5; ++kind) {
        if (kind == 4 && cols < 33) continue;
        CAPTURE(threads);
        CAPTURE(rows);
        CAPTURE(cols);
        CAPTURE(kind);
        auto X = filled(rows, cols, kind, std::uint64_t(rows * 31 + cols + kind));
        check_carried(gx::sum(gx::max<1>(X)), X);
        check_carried(gx::mean(gx::max<1>(X)), X);
        check_carried(gx::sum(gx::max<0>(X)), X);        // columns: strided searches
        check_carried(gx::sum(gx::max<1>(X * 2.f)), X);  // an expression under the max
      }
    }
  }
}

TEST_CASE("loss value carried by the arg-max kernel: the value costs no search of its own") {
  thread_scope ts(1);
  gx::index_t const rows = 300, cols = 77;
  auto X = filled(rows, cols, 0, 5);
  auto loss = gx::sum(gx::max<1>(gx::unary<counter_op>(X)));
  counted = 0;
  auto v = gx::value(loss);
  CHECK(counted.load() == rows * cols);
  counted = 0;
  auto g = gx::grad(loss, X);  // the gradient alone (grad() never computes the value)
  long const grad_only = counted.load();
  counted = 0;
  auto b = gx::backward(loss);
  CHECK(counted.load() == grad_only);  // the value costs no pass of its own
  CHECK(same_bits(v, b));
  auto d = g.to_dense();
  auto got = grad_of(X);
  CHECK(std::memcmp(got.data(), d.data(), got.size() * sizeof(float)) == 0);
}
