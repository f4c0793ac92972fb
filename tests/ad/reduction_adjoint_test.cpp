// Adjoints of kept reductions (docs/ad.md, "Adjoints of reductions"): a kept sum or mean whose
// adjoint arrives through a broadcast is staged into a buffer of its own shape once, and its
// operand pushed from there (O(row) per row instead of O(row^2)). The layer norm and RMS norm
// of issue 32 written the natural way: their plans hold staged uses, their gradients match
// central differences, grad() gives backward's bits, and the bits do not depend on the thread
// count. Without a broadcast (a logsumexp's row sum, read by log) nothing is staged.
#include "testing.hpp"

#include <cstring>
#include <vector>

namespace gx = gradix;
using gx::dyn;
using gx::testing::thread_scope;

namespace {

template <class X>
auto layer_norm_written(X const& x) {
  auto mu = gx::mean<2>(x, gx::keep_dims);
  auto var = gx::mean<2>(gx::square(x - mu), gx::keep_dims);
  return (x - mu) / gx::sqrt(var + 1e-5f);
}
template <class X>
auto rms_norm_written(X const& x) {
  return x / gx::sqrt(gx::mean<2>(gx::square(x), gx::keep_dims) + 1e-5f);
}

template <class Plan>
struct staged_count;
template <class... E>
struct staged_count<gx::tuple<E...>> : std::integral_constant<int, (int(gx::ad::is_staged<E>::value) + ... + 0)> {};
template <class E>
constexpr int staged_v = staged_count<std::remove_cvref_t<gx::backward_plan_t<E>>>::value;

using P3 = gx::parameter<float, gx::shape<dyn, dyn, dyn>>;
using M2 = gx::parameter<float, gx::shape<dyn, dyn>>;
// the layer norm stages its mean (twice: written twice) and its variance; RMS norm its mean
static_assert(staged_v<decltype(gx::sum(gx::square(layer_norm_written(std::declval<P3&>()))))> >= 2);
static_assert(staged_v<decltype(gx::sum(gx::square(rms_norm_written(std::declval<P3&>()))))> >= 1);
// a row sum read by log (no broadcast on the way): nothing staged
static_assert(staged_v<decltype(gx::sum(gx::log(gx::sum<1>(gx::exp(std::declval<M2&>())))))> == 0);
// the founding expression keeps nothing, stages nothing
static_assert(staged_v<decltype(gx::sum(std::declval<M2&>() + std::declval<M2&>()))> == 0);

std::vector<float> grad_of(P3 const& x) {
  auto const& g = x.grad().dense();
  return std::vector<float>(g.data(), g.data() + g.shape().size());
}
bool same(std::vector<float> const& a, std::vector<float> const& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("reduction adjoints: layer norm and RMS norm gradients match central differences") {
  auto X = gx::randn<double>(gx::dims(2, 3, 7), 11);
  auto W = gx::randn<double>(gx::dims(2, 3, 7), 12);  // weights: a loss that is not symmetric
  SUBCASE("layer norm") {
    auto r = gx::gradcheck([&](auto const& x) { return gx::sum(layer_norm_written(x) * gx::view(W)); }, X);
    CHECK_MESSAGE(r.ok(), r);
  }
  SUBCASE("layer norm, squared, times a sum of its input") {
    auto r = gx::gradcheck([](auto const& x) { return gx::sum(gx::square(layer_norm_written(x))) * gx::sum(x); }, X);
    CHECK_MESSAGE(r.ok(), r);
  }
  SUBCASE("RMS norm") {
    auto r = gx::gradcheck([&](auto const& x) { return gx::sum(rms_norm_written(x) * gx::view(W)); }, X);
    CHECK_MESSAGE(r.ok(), r);
  }
  SUBCASE("a mean subtracted along the middle axis") {
    auto r = gx::gradcheck(
        [&](auto const& x) { return gx::sum(gx::square(x - gx::mean<1>(x, gx::keep_dims)) * gx::view(W)); }, X);
    CHECK_MESSAGE(r.ok(), r);
  }
}

TEST_CASE("reduction adjoints: grad() gives backward's bits, for any thread count") {
  auto x = gx::param(gx::randn<float>(gx::dims(8, 33, 70), 5));
  auto w = gx::randn<float>(gx::dims(8, 33, 70), 6);
  auto loss = gx::sum(layer_norm_written(x) * gx::view(w));
  std::vector<float> ref;
  for (int threads : {1, 2, 3}) {
    CAPTURE(threads);
    thread_scope ts(threads);
    gx::zero_grad(x);
    gx::backward(loss);
    auto g = grad_of(x);
    auto g2 = gx::grad(loss, x).dense();
    CHECK(std::memcmp(g2.data(), g.data(), g.size() * sizeof(float)) == 0);
    if (threads == 1) ref = g;
    else CHECK(same(g, ref));
  }
}
