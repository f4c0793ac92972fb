// Shared values written by the user (api/let.hpp, gx::let; docs/ad.md, "Shared values"):
// a value read several times is computed once and named once. The type stays linear in the
// program's size (node counts, static_asserts), values equal the same expression written
// without let, gradients match central differences in double precision (nested lets whose
// operand reads the enclosing placeholder included), each product is planned once, and a
// pre-norm transformer block written with lets runs forward and backward on a thread with a
// 1 MiB stack.
#include "ad/numgrad.hpp"
#include "testing.hpp"
#include "ad/plan_count.hpp"

#include <cmath>
#include <cstdint>
#include <pthread.h>
#include <string_view>
#include <type_traits>
#include <vector>

namespace gx = gradix;
using gx::dyn;
using gx::index_t;
using gx::shape;

namespace {
using TD = gx::tensor<double, shape<dyn, dyn>>;
using TD3 = gx::tensor<double, shape<dyn, dyn, dyn>>;
using PD = gx::parameter<double, shape<dyn, dyn>>;

// The number of nodes in an expression's type tree (a placeholder counts as one leaf; a
// variable template, so each type is counted once).
template <class N>
constexpr std::size_t count_nodes();
template <class N>
inline constexpr std::size_t nodes_in = count_nodes<N>();
template <class N>
constexpr std::size_t count_nodes() {
  if constexpr (gx::is_let_node<N>::value)
    return 1 + nodes_in<std::remove_cvref_t<decltype(std::declval<N const&>().z_)>> +
           nodes_in<std::remove_cvref_t<decltype(std::declval<N const&>().body_)>>;
  else if constexpr (requires(N const& x) { x.lhs_; x.rhs_; })
    return 1 + nodes_in<std::remove_cvref_t<decltype(std::declval<N const&>().lhs_)>> +
           nodes_in<std::remove_cvref_t<decltype(std::declval<N const&>().rhs_)>>;
  else if constexpr (requires(N const& x) { x.arg_; })
    return 1 + nodes_in<std::remove_cvref_t<decltype(std::declval<N const&>().arg_)>>;
  else
    return 1;
}


// x -> x * x + x, n times: written with plain values (the type doubles at each step) and
// with let (it grows by a constant).
template <int N, class X>
auto doubling_plain(X const& x) {
  if constexpr (N == 0) return x * 1.0;
  else {
    auto y = doubling_plain<N - 1>(x);
    return y * y + y;
  }
}
template <int N, class X>
auto doubling_let(X const& x) {
  if constexpr (N == 0) return x * 1.0;
  else return gx::let(doubling_let<N - 1>(x), [](auto y) { return y * y + y; });
}

// Layer norm over the last axis, written out (as bench/blocks.cpp does), and with let.
template <class E>
auto layer_norm_plain(E const& x) {
  auto c = x - gx::mean<2>(x, gx::keep_dims);
  return c / gx::sqrt(gx::mean<2>(gx::square(c), gx::keep_dims) + 1e-5);
}
template <class E>
auto layer_norm_let(E const& x) {
  return gx::let(x - gx::mean<2>(x, gx::keep_dims), [](auto c) {
    return c / gx::sqrt(gx::mean<2>(gx::square(c), gx::keep_dims) + 1e-5);
  });
}
}  // namespace

// A tensor, a parameter or a view of one computes nothing: let passes it to the body as it
// is. An elementwise operand or a product is bound; a body that does not read the value is
// the body alone.
static_assert(std::is_same_v<decltype(gx::let(std::declval<TD&>(), [](auto x) { return x * 2.0; })),
                             decltype(std::declval<TD&>() * 2.0)>);
static_assert(std::is_same_v<decltype(gx::let(gx::transpose(std::declval<PD&>()), [](auto x) { return x * 2.0; })),
                             decltype(gx::transpose(std::declval<PD&>()) * 2.0)>);
static_assert(gx::is_let_node<decltype(gx::let(std::declval<TD&>() + 1.0, [](auto x) { return x * x; }))>::value);
static_assert(gx::is_let_node<decltype(gx::let(gx::matmul(std::declval<TD&>(), std::declval<PD&>()),
                                               [](auto x) { return x * x; }))>::value);

// The type is linear in the program: ten doublings with let hold a constant number of nodes
// per step; the same code with plain values triples the type at each step (y read 3 times).
static_assert(nodes_in<decltype(doubling_let<10>(std::declval<TD&>()))> <= 10 * 6 + 3);
static_assert(nodes_in<decltype(doubling_plain<10>(std::declval<TD&>()))> >= 59049);  // 3^10

namespace {
// The printed type (what __PRETTY_FUNCTION__ spells, as the compilers' debug information
// does) of K pre-norm blocks, each bound by a let over the previous one (as
// examples/transformer.cpp chains its blocks), and of its backward plan.
template <class T>
constexpr std::size_t printed_length() {
  return std::string_view(__PRETTY_FUNCTION__).size();
}
template <class X>
auto small_block(X const& x, PD& W1, PD& W2) {
  auto h = x + gx::let(gx::layer_norm(x), [&](auto xn) { return gx::matmul(gx::softmax<2>(gx::matmul(xn, W1)), xn); });
  return gx::let(h, [&](auto h) { return h + gx::matmul(gx::tanh(gx::matmul(h, W1)), W2); });
}
template <int K, class X>
auto nested_blocks(X const& x, PD& W1, PD& W2) {
  if constexpr (K == 0) return gx::sum(gx::square(x));
  else return gx::let(small_block(x, W1, W2), [&](auto y) { return nested_blocks<K - 1>(y, W1, W2); });
}
template <int K>
using blocks_loss_t = decltype(nested_blocks<K>(std::declval<TD3 const&>(), std::declval<PD&>(), std::declval<PD&>()));
template <int K>
inline constexpr std::size_t blocks_printed = printed_length<blocks_loss_t<K>>();
template <int K>
inline constexpr std::size_t blocks_plan_printed = printed_length<gx::backward_plan_t<blocks_loss_t<K>>>();
}  // namespace

// A placeholder is named by a small type (expr/let.hpp, let_name: a level, not the operand's
// type): the printed type grows linearly with the number of nested blocks (measured: 2239,
// 4220, 8182 characters at 1, 2, 4 blocks with g++ 12; when placeholders were named by
// their operand, each read printed the whole operand, exponentially in the nesting, and the
// two-block example did not compile with g++ -O0 -g in 24 GB). The backward plan grows a
// little faster (its elements nest the plans of the lets inside them: 12985, 31322, 75397).
static_assert(blocks_printed<4> * 10 <= blocks_printed<2> * 22);
static_assert(blocks_printed<2> * 10 <= blocks_printed<1> * 22);
static_assert(blocks_plan_printed<4> * 10 <= blocks_plan_printed<2> * 30);
// no placeholder name holds an expression
static_assert(!gx::expression<typename blocks_loss_t<1>::name_type>);

TEST_CASE("let: a let's body reads an enclosing let's value that its own operand does not read") {
  // the inner let's operand (b) does not mention x; its body reads both placeholders: the
  // levels (expr/let.hpp) keep the two names apart
  index_t const B = 2, T = 3, D = 4;
  auto X = gx::param(gx::uniform<double>(gx::dims(B, T, D), 921, -1.0, 1.0));
  auto W = gx::param(gx::uniform<double>(gx::dims(D, D), 922, -0.6, 0.6));
  auto f_let = [&](auto& x0, auto& w) {
    return gx::sum(gx::let(gx::matmul(x0, w), [&](auto a) {
      return gx::let(gx::tanh(gx::matmul(x0, w)) + 0.5, [&](auto b) { return a * b + gx::square(b) - a; });
    }));
  };
  auto f_plain = [&](auto& x0, auto& w) {
    auto a = gx::matmul(x0, w);
    auto b = gx::tanh(gx::matmul(x0, w)) + 0.5;
    return gx::sum(a * b + gx::square(b) - a);
  };
  CHECK(gx::value(f_let(X, W)) == doctest::Approx(gx::value(f_plain(X, W))).epsilon(1e-13));
  CHECK_NUMGRAD([&](auto& p) { return f_let(X, p); }, W);
  CHECK_NUMGRAD([&](auto& p) { return f_let(p, W); }, X);
}

TEST_CASE("let: values equal the expression written without let") {
  index_t const B = 3, T = 4, D = 5;
  auto X = gx::uniform<double>(gx::dims(B, T, D), 901, -1.0, 1.0);
  auto W = gx::param(gx::uniform<double>(gx::dims(D, D), 902, -0.5, 0.5));
  SUBCASE("layer norm") {
    auto a = gx::eval(layer_norm_plain(X));
    auto b = gx::eval(layer_norm_let(X));
    for (index_t i = 0; i < B; ++i)
      for (index_t t = 0; t < T; ++t)
        for (index_t d = 0; d < D; ++d) CHECK(b(i, t, d) == doctest::Approx(a(i, t, d)).epsilon(1e-13));
  }
  SUBCASE("doubling through a product, both ways") {
    auto h = gx::matmul(X, W);
    double const p = gx::value(gx::sum(doubling_plain<4>(h)));
    double const l = gx::value(gx::sum(doubling_let<4>(h)));
    CHECK(l == doctest::Approx(p).epsilon(1e-12));
  }
  SUBCASE("two values at once, and a body that returns the value") {
    double const p = gx::value(gx::sum(gx::matmul(X, W) * gx::square(X + 1.0)));
    double const l = gx::value(gx::sum(gx::let(gx::matmul(X, W), X + 1.0, [](auto a, auto b) { return a * b * b; })));
    CHECK(l == doctest::Approx(p).epsilon(1e-12));
    double const v = gx::value(gx::sum(gx::let(gx::matmul(X, W), [](auto a) { return a; })));
    CHECK(v == doctest::Approx(gx::value(gx::sum(gx::matmul(X, W)))).epsilon(1e-12));
  }
}

TEST_CASE("let: gradients match central differences") {
  index_t const B = 2, T = 3, D = 4;
  auto X0 = gx::uniform<double>(gx::dims(B, T, D), 911, -1.0, 1.0);
  auto W0 = gx::uniform<double>(gx::dims(D, D), 912, -0.6, 0.6);
  auto W2 = gx::uniform<double>(gx::dims(D, D), 913, -0.6, 0.6);
  SUBCASE("a layer norm, the input a parameter") {
    auto X = gx::param(X0);
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::square(layer_norm_let(p)) * X0); }, X);
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::square(gx::matmul(layer_norm_let(p), W0))); }, X);
  }
  SUBCASE("a nested let whose operand reads the enclosing value") {
    auto W = gx::param(W0);
    auto f = [&](auto& p) {
      return gx::let(gx::matmul(X0, p), [&](auto h) {
        return gx::let(h * h + gx::matmul(h, W2), [&](auto g) { return gx::sum(g * h) + gx::sum(gx::tanh(g)); });
      });
    };
    CHECK_NUMGRAD(f, W);
    auto X = gx::param(X0);
    CHECK_NUMGRAD([&](auto& p) {
      return gx::let(p * 0.5 + 0.25, [&](auto a) {
        return gx::let(gx::mean<2>(a, gx::keep_dims), [&](auto m) { return gx::sum(gx::square(a - m) * m); });
      });
    }, X);
  }
  SUBCASE("doubling through a product, into the weights") {
    auto W = gx::param(W0);
    CHECK_NUMGRAD([&](auto& p) { return gx::sum(doubling_let<3>(gx::matmul(X0, p) * 0.5)); }, W);
  }
  SUBCASE("a value read besides a product and a reduction") {
    auto W = gx::param(W0);
    CHECK_NUMGRAD([&](auto& p) {
      return gx::let(gx::tanh(gx::matmul(X0, p)), [&](auto h) {
        return gx::sum(gx::softmax<2>(gx::matmul(h, gx::permute<0, 2, 1>(h)))) + gx::sum(h * gx::sum<2>(h, gx::keep_dims));
      });
    }, W);
  }
}

namespace {
// A pre-norm transformer block (single causal head), written with let: every value read more
// than once is bound once.
// doc-snippet: transformer_block
template <class X, class P>
auto transformer_block(X const& x0, P& Wq, P& Wk, P& Wv, P& Wo, P& W1, P& W2, TD const& mask, double scale) {
  return gx::let(x0, [&](auto x) {
    auto attn = gx::let(layer_norm_let(x), [&](auto n) {
      auto scores = gx::matmul(gx::matmul(n, Wq), gx::permute<0, 2, 1>(gx::matmul(n, Wk))) * scale;
      return gx::matmul(gx::matmul(gx::softmax<2>(gx::where(mask, scores, -1e9)), gx::matmul(n, Wv)), Wo);
    });
    return gx::let(x + attn, [&](auto h) {
      auto u = gx::matmul(layer_norm_let(h), W1);
      auto g = gx::let(u, [](auto v) { return 0.5 * v * (1.0 + gx::tanh(0.7978845608 * (v + 0.044715 * v * v * v))); });
      return h + gx::matmul(g, W2);
    });
  });
}
// end doc-snippet
}  // namespace

TEST_CASE("let: a transformer block: gradients, one product per matmul written") {
  index_t const B = 2, T = 3, D = 4, F = 6;
  auto X0 = gx::uniform<double>(gx::dims(B, T, D), 921, -1.0, 1.0);
  auto init = [](index_t r, index_t c, std::uint64_t seed) {
    return gx::param(gx::uniform<double>(gx::dims(r, c), seed, -0.7, 0.7));
  };
  auto Wq = init(D, D, 922), Wk = init(D, D, 923), Wv = init(D, D, 924), Wo = init(D, D, 925);
  auto W1 = init(D, F, 926), W2 = init(F, D, 927);
  TD mask(gx::dims(T, T));
  for (index_t i = 0; i < T; ++i)
    for (index_t j = 0; j < T; ++j) mask(i, j) = j <= i ? 1.0 : 0.0;
  double const scale = 0.5;
  auto X = gx::param(X0);
  auto loss = [&](auto& x) { return gx::sum(gx::square(transformer_block(x, Wq, Wk, Wv, Wo, W1, W2, mask, scale))); };
  using E = decltype(loss(X));
  // 8 products written (q, k, v, the scores, their product with v, Wo, W1, W2): each planned
  // once, whatever the number of reads of its operands. 5 lets: the bindings of the block
  // (both layer norms' centred values, the first norm, the residual, the MLP's hidden
  // layer); the softmax is a kept node of its own (one softmax use, reading its value).
  static_assert(gx::testing::products_in_v<gx::backward_plan_t<E>> == 8);
  static_assert(gx::testing::lets_in_v<gx::backward_plan_t<E>> == 5);
  static_assert(gx::testing::rows_in_v<gx::backward_plan_t<E>> == 1);
  CHECK_NUMGRAD(loss, X);
  CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::square(transformer_block(X0, Wq, Wk, Wv, Wo, p, W2, mask, scale))); }, W1);
  CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::square(transformer_block(X0, p, Wk, Wv, Wo, W1, W2, mask, scale))); }, Wq);
  CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::square(transformer_block(X0, Wq, Wk, p, Wo, W1, W2, mask, scale))); }, Wv);
}

namespace {
struct stack_run {
  double loss = 0;
  std::vector<float> gq;
  bool done = false;
};
void* transformer_on_small_stack(void* p) {
  auto& r = *static_cast<stack_run*>(p);
  index_t const B = 2, T = 8, D = 16, F = 32;
  auto X = gx::randn<float>(gx::dims(B, T, D), 931);
  auto init = [](index_t rr, index_t c, std::uint64_t seed) {
    return gx::param(gx::randn<float>(gx::dims(rr, c), seed, 0.f, 0.25f));
  };
  auto Wq = init(D, D, 932), Wk = init(D, D, 933), Wv = init(D, D, 934), Wo = init(D, D, 935);
  auto W1 = init(D, F, 936), W2 = init(F, D, 937);
  gx::tensor<float, shape<dyn, dyn>> mask(gx::dims(T, T));
  for (index_t i = 0; i < T; ++i)
    for (index_t j = 0; j < T; ++j) mask(i, j) = j <= i ? 1.f : 0.f;
  auto ln = [](auto const& x) {
    return gx::let(x - gx::mean<2>(x, gx::keep_dims), [](auto c) {
      return c / gx::sqrt(gx::mean<2>(gx::square(c), gx::keep_dims) + 1e-5f);
    });
  };
  auto block = gx::let(X, [&](auto x) {
    auto attn = gx::let(ln(x), [&](auto n) {
      auto scores = gx::matmul(gx::matmul(n, Wq), gx::permute<0, 2, 1>(gx::matmul(n, Wk))) * 0.25f;
      return gx::matmul(gx::matmul(gx::softmax<2>(gx::where(mask, scores, -1e9f)), gx::matmul(n, Wv)), Wo);
    });
    return gx::let(x + attn, [&](auto h) { return h + gx::matmul(gx::tanh(gx::matmul(ln(h), W1)), W2); });
  });
  r.loss = double(gx::backward(gx::sum(gx::square(block))));
  auto g = Wq.grad().to_dense();
  for (index_t i = 0; i < D; ++i)
    for (index_t j = 0; j < D; ++j) r.gq.push_back(g(i, j));
  r.done = true;
  return nullptr;
}
}  // namespace

TEST_CASE("let: a transformer block's backward runs on a 1 MiB stack") {
  stack_run small, big;
  for (auto [run, mib] : {std::pair{&small, 1}, std::pair{&big, 64}}) {
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, std::size_t(mib) << 20);
    pthread_t t;
    REQUIRE(pthread_create(&t, &attr, transformer_on_small_stack, run) == 0);
    pthread_join(t, nullptr);
    pthread_attr_destroy(&attr);
  }
  REQUIRE(small.done);
  CHECK(std::isfinite(small.loss));
  CHECK(small.loss == big.loss);
  CHECK(small.gq == big.gq);
}

namespace {
// An Elman RNN unrolled at compile time, h_t = tanh(x_t Wx + h_{t-1} Wh + b): a chain of S
// products. Its backward plan holds one level's kernels (the operands' plans are built where
// each product runs: ad/product.hpp), so neither its size nor the push's stack grows with S.
template <int S, class X, class P, class Bv>
auto elman(X const& xs, P& Wx, P& Wh, Bv& b) {
  if constexpr (S == 1) return gx::tanh(gx::matmul(gx::select<0>(xs, 0), Wx) + b);
  else return gx::tanh(gx::matmul(gx::select<0>(xs, S - 1), Wx) + gx::matmul(elman<S - 1>(xs, Wx, Wh, b), Wh) + b);
}
template <int S>
using elman_loss_t = decltype(gx::sum(gx::square(elman<S>(
    std::declval<gx::tensor<float, shape<dyn, dyn, dyn>>&>(), std::declval<gx::parameter<float, shape<dyn, dyn>>&>(),
    std::declval<gx::parameter<float, shape<dyn, dyn>>&>(), std::declval<gx::parameter<float, shape<dyn>>&>()))));

struct rnn_inputs {
  index_t B = 4, H = 16;
  gx::tensor<float, shape<dyn, dyn, dyn>> xs = gx::randn<float>(gx::dims(64, B, H), 941);
  gx::parameter<float, shape<dyn, dyn>> Wx = gx::param(gx::randn<float>(gx::dims(H, H), 942, 0.f, 0.25f));
  gx::parameter<float, shape<dyn, dyn>> Wh = gx::param(gx::randn<float>(gx::dims(H, H), 943, 0.f, 0.25f));
  gx::parameter<float, shape<dyn>> b = gx::param(gx::randn<float>(gx::dims(H), 944, 0.f, 0.1f));
};
template <class Loss>
struct rnn_run {
  Loss const* loss_expr = nullptr;
  rnn_inputs* in = nullptr;
  double loss = 0;
  bool grad_matches = false;
  bool done = false;
};
template <class Loss>
void* rnn_on_stack(void* p) {
  auto& r = *static_cast<rnn_run<Loss>*>(p);
  r.loss = double(gx::backward(*r.loss_expr));
  auto const g = r.in->Wh.grad().to_dense();
  auto const g2 = gx::grad(*r.loss_expr, r.in->Wh).to_dense();
  r.grad_matches = true;
  for (index_t i = 0; i < r.in->H; ++i)
    for (index_t j = 0; j < r.in->H; ++j) r.grad_matches = r.grad_matches && g(i, j) == g2(i, j) && g(i, j) != 0.f;
  r.done = true;
  return nullptr;
}
}  // namespace

// The plan of a chain of products does not grow with its length.
static_assert(sizeof(gx::backward_plan_t<elman_loss_t<8>>) == sizeof(gx::backward_plan_t<elman_loss_t<32>>));

// Neither the save transform nor the plan needs stack in proportion to the chain: a saved
// node points at its node (kept by the call), and the push stops at each product. The
// 64-step chain's forward and backward, and grad(), which must agree bit for bit, run on a
// thread with a 1 MiB stack. (The expression is built on the test's thread: built by a
// recursive function, each level holds copies of the expression below it, O(steps^2) bytes
// of the builder's own stack at -O0.)
TEST_CASE("let: an unrolled 64-step RNN runs backward on a 1 MiB stack; backward and grad() agree") {
  rnn_inputs in;
  auto const loss = gx::sum(gx::square(elman<64>(in.xs, in.Wx, in.Wh, in.b)));
  using Loss = std::remove_cvref_t<decltype(loss)>;
  rnn_run<Loss> r{&loss, &in};
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, std::size_t(1) << 20);
  pthread_t t;
  REQUIRE(pthread_create(&t, &attr, rnn_on_stack<Loss>, &r) == 0);
  pthread_join(t, nullptr);
  pthread_attr_destroy(&attr);
  REQUIRE(r.done);
  CHECK(std::isfinite(r.loss));
  CHECK(r.grad_matches);
}

TEST_CASE("let: an unrolled RNN's gradients match central differences") {
  index_t const B = 3, H = 4;
  auto xs = gx::uniform<double>(gx::dims(6, B, H), 951, -1.0, 1.0);
  auto Wx = gx::param(gx::uniform<double>(gx::dims(H, H), 952, -0.6, 0.6));
  auto Wh = gx::param(gx::uniform<double>(gx::dims(H, H), 953, -0.6, 0.6));
  auto b = gx::param(gx::uniform<double>(gx::dims(H), 954, -0.3, 0.3));
  CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::square(elman<6>(xs, Wx, p, b))); }, Wh);
  CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::square(elman<6>(xs, p, Wh, b))); }, Wx);
  CHECK_NUMGRAD([&](auto& p) { return gx::sum(gx::square(elman<6>(xs, Wx, Wh, p))); }, b);
  // grad() of one parameter writes nothing into the others' gradients, also through the
  // plans built where each product runs
  auto g = gx::grad(gx::sum(gx::square(elman<6>(xs, Wx, Wh, b))), Wh);
  CHECK(g.to_dense()(0, 0) != 0.0);
  auto gx0 = Wx.grad().to_dense();
  for (index_t i = 0; i < H; ++i)
    for (index_t j = 0; j < H; ++j) CHECK(gx0(i, j) == 0.0);
}
