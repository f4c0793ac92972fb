// The compile-time cost rule (api/cost.hpp, ad/cost.hpp; docs/ad.md "What a backward costs") on model
// blocks written the natural way: a backward call costs at most 3 times its forward in
// ad::eval_cost units, every value computed once; and the rule sees a backward that
// recomputes a reduction per element (a layer norm written out, planned without the save
// transform: the plan issue 32 started from).
#include "testing.hpp"

#include <cstdlib>
#include <type_traits>

namespace gx = gradix;
namespace ad = gradix::ad;
using gx::dyn;

// Operands of the expressions below, which appear in unevaluated operands only (decltype).
// Never called; defined all the same, because g++ at -O0 (test_optimization=auto, the
// default of `bash tools/test.sh`) emits block()'s body, instantiated to deduce its return
// type, and its calls must link.
namespace cost_test {
using TD3 = gx::tensor<double, gx::shape<dyn, dyn, dyn>>;
using TD = gx::tensor<double, gx::shape<dyn, dyn>>;
using PD = gx::parameter<double, gx::shape<dyn, dyn>>;
using PV = gx::parameter<double, gx::shape<dyn>>;
using IV = gx::tensor<int, gx::shape<dyn>>;
TD3& X() { std::abort(); }
PD& W() { std::abort(); }
PD& W1() { std::abort(); }
PD& W2() { std::abort(); }
PV& g() { std::abort(); }
PV& b() { std::abort(); }
}  // namespace cost_test
using namespace cost_test;

namespace {


template <class E>
inline constexpr bool cheap_backward = ad::backward_cost_v<E> <= 3 * ad::forward_cost_v<E>;

template <class E>
auto layer_norm_written_out(E const& x) {
  auto c = x - gx::mean<2>(x, gx::keep_dims);
  return c / gx::sqrt(gx::mean<2>(gx::square(c), gx::keep_dims) + 1e-5);
}
template <class X>
auto causal_head(X const& x) {
  auto q = gx::matmul(x, W());
  auto k = gx::matmul(x, W1());
  auto scores = gx::matmul(q, gx::permute<0, 2, 1>(k)) * 0.25;
  return gx::matmul(gx::softmax<2>(gx::causal_mask(scores)), gx::matmul(x, W2()));
}
template <class X>
auto block(X const& x) {
  auto h = x + gx::let(gx::layer_norm(x, g(), b()), [&](auto xn) { return gx::matmul(causal_head(xn), W()); });
  return gx::let(h, [&](auto h) { return h + gx::matmul(gx::gelu_tanh(gx::matmul(gx::layer_norm(h), W1())), W2()); });
}
}  // namespace

static_assert(cheap_backward<decltype(gx::sum(gx::square(gx::matmul(X(), W()))))>);
static_assert(cheap_backward<decltype(gx::sum(gx::square(gx::layer_norm(gx::matmul(X(), W()), g(), b()))))>);
static_assert(cheap_backward<decltype(gx::sum(gx::square(gx::rms_norm(gx::matmul(X(), W()), g()))))>);
static_assert(cheap_backward<decltype(gx::sum(gx::square(layer_norm_written_out(gx::matmul(X(), W())))))>);
static_assert(cheap_backward<decltype(gx::sum(gx::square(gx::softmax<1>(gx::matmul(X(), W())))))>);  // an inner axis
static_assert(cheap_backward<decltype(gx::sum(gx::square(gx::log_softmax<0>(gx::matmul(X(), W())))))>);
static_assert(cheap_backward<decltype(gx::sum(gx::square(X() - gx::mean<1>(gx::matmul(X(), W()), gx::keep_dims))))>);
static_assert(cheap_backward<decltype(gx::sum(gx::square(causal_head(X()))))>);
// doc-snippet: cost
static_assert(ad::backward_cost_v<decltype(gx::sum(gx::square(block(X()))))> <=
              3 * ad::forward_cost_v<decltype(gx::sum(gx::square(block(X()))))>);  // a pre-norm block
// end doc-snippet
static_assert(cheap_backward<decltype(gx::cross_entropy(gx::matmul(std::declval<TD&>(), W()), std::declval<IV&>()))>);

// The rule sees recomputation: the written-out layer norm planned over the expression
// itself, without the save transform, evaluates its means inside the backward's kernels
// (each a reduction_weight times its operand, per element), far above its forward.
using P3 = gx::parameter<double, gx::shape<dyn, dyn, dyn>>;
using ln_loss = decltype(gx::sum(gx::square(layer_norm_written_out(std::declval<P3&>()))));
using ln_plan_plain = decltype(ad::plan(std::declval<ln_loss&>()));
// doc-snippet: recomputed
// the written-out layer norm planned without the save transform: its means recomputed
static_assert(ad::plan_cost_v<ln_plan_plain> > 6 * ad::forward_cost_v<ln_loss>);
// end doc-snippet
static_assert(cheap_backward<ln_loss>);  // the plan a call runs

TEST_CASE("cost rule: a transformer block's backward costs a few forwards (compile-time figures)") {
  using E = decltype(gx::sum(gx::square(block(X()))));
  MESSAGE("transformer block: forward_cost_v " << ad::forward_cost_v<E> << ", backward_cost_v " << ad::backward_cost_v<E>);
  CHECK(ad::backward_cost_v<E> > ad::forward_cost_v<E>);
  CHECK(ad::plan_cost_v<ln_plan_plain> > ad::plan_cost_v<gx::backward_plan_t<ln_loss>>);
}
