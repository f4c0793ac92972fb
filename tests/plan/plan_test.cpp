// The compile-time plan of backward passes: facts about update kernels are static_asserts,
// so a regression breaks the build. The founding expression (DESIGN.md section 1) plans two
// update kernels and no buffers: Eb's through a lookup axis, Ea's injective after its
// projected axis collapses to `extent x v`.
#include "testing.hpp"

#include <atomic>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace gx = gradix;
namespace ad = gradix::ad;
using gx::dyn;
using gx::shape;

using Table = gx::parameter<float, shape<64, dyn>, gx::col_major, gx::sparse_grad_t<1>>;
using Idx = std::vector<std::uint16_t>;

inline auto founding_term(Table const& Ea, Table const& Eb, Idx const& i, std::uint32_t j) {
  return gx::sum(Eb(gx::all, gx::indices(i)) + Ea(gx::all, gx::at(j)));
}
using founding_plan = decltype(ad::plan(founding_term(std::declval<Table&>(), std::declval<Table&>(),
                                                      std::declval<Idx&>(), 0)));
static_assert(founding_plan::size == 2, "two update kernels, no buffers");
template <std::size_t K>
using kernel = ad::kernel_traits<std::remove_cvref_t<decltype(gx::get<K>(std::declval<founding_plan&>()))>>;
// Eb: domain 64 x k (the gathered block, not the table); axis 0 affine, axis 1 a lookup
static_assert(kernel<0>::domain_rank == 2);
static_assert(std::is_same_v<typename kernel<0>::D, shape<64, dyn>>);
static_assert(kernel<0>::kinds[0] == ad::axis_kind::affine);
static_assert(kernel<0>::kinds[1] == ad::axis_kind::lookup);
static_assert(!kernel<0>::injective);
static_assert(kernel<0>::inner_axis == 0);  // the contiguous axis of a column
static_assert(ad::is_one<typename kernel<0>::V>::value);  // the seed 1, as a type
// Ea: same domain; axis 1 projected (it reaches nothing of Ea), so the map is injective and
// the projected sum is `k x 1`, computed once
static_assert(kernel<1>::kinds[0] == ad::axis_kind::affine);
static_assert(kernel<1>::kinds[1] == ad::axis_kind::projected);
static_assert(kernel<1>::injective);
static_assert(kernel<1>::collapses_projected);

// The batched form: Ea gathered at all term columns along a third axis. Eb's kernel sees the
// term axis as projected and collapses it; Ea's sees the index axis as projected.
inline auto batched(Table const& Ea, Table const& Eb, Idx const& i, std::vector<std::uint32_t> const& js) {
  return gx::sum(gx::unsqueeze<2>(Eb(gx::all, gx::indices(i))) + gx::unsqueeze<1>(Ea(gx::all, gx::indices(js))));
}
using batched_plan = decltype(ad::plan(batched(std::declval<Table&>(), std::declval<Table&>(),
                                               std::declval<Idx&>(), std::declval<std::vector<std::uint32_t>&>())));
template <std::size_t K>
using bkernel = ad::kernel_traits<std::remove_cvref_t<decltype(gx::get<K>(std::declval<batched_plan&>()))>>;
static_assert(batched_plan::size == 2);
static_assert(bkernel<0>::domain_rank == 3);
static_assert(bkernel<0>::kinds[2] == ad::axis_kind::projected && bkernel<0>::collapses_projected);
static_assert(bkernel<1>::kinds[1] == ad::axis_kind::projected && bkernel<1>::collapses_projected);
static_assert(bkernel<1>::kinds[2] == ad::axis_kind::lookup);

// A value-dependent loss (square): the adjoint depends on the projected axis, no collapse.
inline auto square_term(Table const& Ea, Table const& Eb, Idx const& i, std::uint32_t j) {
  return gx::sum(gx::square(Eb(gx::all, gx::indices(i)) + Ea(gx::all, gx::at(j))));
}
using square_plan = decltype(ad::plan(square_term(std::declval<Table&>(), std::declval<Table&>(),
                                                  std::declval<Idx&>(), 0)));
// Both uses read the same domain and value: one fused loop nest with two targets.
static_assert(square_plan::size == 1);
using square_kernel = std::remove_cvref_t<decltype(gx::get<0>(std::declval<square_plan&>()))>;
static_assert(ad::is_fused<square_kernel>::value);
static_assert(!ad::kernel_traits<decltype(std::declval<square_kernel&>().second_)>::collapses_projected);
static_assert(ad::kernel_traits<decltype(std::declval<square_kernel&>().second_)>::injective);

// Ranges and at() compose as affine maps (injective); unique() makes a lookup injective.
using P2 = gx::parameter<double, shape<dyn, dyn>>;
inline auto sliced(P2 const& p) { return gx::sum(gx::slice<0>(gx::slice<1>(p, 1, 7, 2), 0, 4)); }
using sliced_plan = decltype(ad::plan(sliced(std::declval<P2&>())));
static_assert(ad::kernel_traits<std::remove_cvref_t<decltype(gx::get<0>(std::declval<sliced_plan&>()))>>::injective);
inline auto uniq(P2 const& p, std::vector<int> const& v) { return gx::sum(gx::gather<1>(p, gx::unique(gx::indices(v)))); }
using uniq_plan = decltype(ad::plan(uniq(std::declval<P2&>(), std::declval<std::vector<int>&>())));
static_assert(ad::kernel_traits<std::remove_cvref_t<decltype(gx::get<0>(std::declval<uniq_plan&>()))>>::injective);
// Constants and detach plan nothing.
inline auto detached(P2 const& p) { return gx::sum(gx::detach(p) * 2.0); }
static_assert(decltype(ad::plan(detached(std::declval<P2&>())))::size == 0);

// A counting op: the value expression of the Eb kernel is evaluated once per element of the
// gathered block (64 x k), never per element of the table (64 x 65,535).
namespace {
std::atomic<long> evaluations{0};
struct counted {
  // a test op: value is the identity, the derivative counts its calls
  template <class T>
  static T value(T x) {
    return x;
  }
  template <class T>
  static T d_arg(T, T) {  // the backward kernel's value: counted per domain element
    ++evaluations;
    return T(1);
  }
};
}  // namespace

TEST_CASE("plan: the Eb kernel runs over the gathered block, not the table") {
  gx::set_num_threads(1);
  auto Eb = gx::param(gx::uniform<float, gx::col_major>(gx::dims(gx::fix<64>, 65535), 3), gx::sparse_grad<1>);
  Idx i(5000);
  for (std::size_t r = 0; r < i.size(); ++r) i[r] = std::uint16_t((r * 7919) % 65535);
  auto e = gx::sum(gx::unary<counted>(Eb(gx::all, gx::indices(i))));
  evaluations = 0;
  gx::backward_only(e);
  CHECK(evaluations.load() == 64 * 5000);  // d_arg once per element of the domain
  CHECK(Eb.grad().size() == 5000);
  gx::set_num_threads(gx::host::default_num_threads());
}

TEST_CASE("plan: founding expression gradients are the exact counts") {
  auto Ea = gx::param(gx::uniform<float, gx::col_major>(gx::dims(gx::fix<64>, 1000), 1), gx::sparse_grad<1>);
  auto Eb = gx::param(gx::uniform<float, gx::col_major>(gx::dims(gx::fix<64>, 300), 2), gx::sparse_grad<1>);
  Idx i{5, 7, 5, 299};
  for (std::uint32_t j : {3u, 999u, 3u}) gx::backward_only(founding_term(Ea, Eb, i, j));
  auto gb = Eb.grad().to_dense();
  auto ga = Ea.grad().to_dense();
  CHECK(gb(0, 5) == 6.0f);
  CHECK(gb(63, 7) == 3.0f);
  CHECK(gb(10, 299) == 3.0f);
  CHECK(gb(10, 6) == 0.0f);
  CHECK(ga(1, 3) == 8.0f);    // 2 terms x 4 gathered columns
  CHECK(ga(1, 999) == 4.0f);
  CHECK(Ea.grad().size() == 2);
  CHECK(Eb.grad().size() == 3);
}

TEST_CASE("plan: a fused pair gives the same bits as its two kernels run apart") {
  auto Ea = gx::param(gx::uniform<float, gx::col_major>(gx::dims(gx::fix<64>, 3000), 5), gx::sparse_grad<1>);
  auto Eb = gx::param(gx::uniform<float, gx::col_major>(gx::dims(gx::fix<64>, 4000), 6), gx::sparse_grad<1>);
  Idx i(3000);
  for (std::size_t r = 0; r < i.size(); ++r) i[r] = std::uint16_t((r * 37) % 3999);
  auto e = square_term(Ea, Eb, i, 17);
  gx::set_num_threads(1);
  gx::backward_only(e);  // fused: one loop nest, two targets
  auto fa = Ea.grad().to_dense();
  auto fb = Eb.grad().to_dense();
  auto only_a = gx::grad(e, Ea);  // one target wanted: the kernels run apart
  auto only_b = gx::grad(e, Eb);
  CHECK_ALL_CLOSE(fa, only_a.to_dense(), 0.0, 0.0);
  CHECK_ALL_CLOSE(fb, only_b.to_dense(), 0.0, 0.0);
  gx::zero_grad(Ea, Eb);
  gx::set_num_threads(4);  // large enough to run in parallel: the kernels run apart
  gx::backward_only(e);
  CHECK_ALL_CLOSE(fa, Ea.grad().to_dense(), 0.0, 0.0);
  CHECK_ALL_CLOSE(fb, Eb.grad().to_dense(), 0.0, 0.0);
  gx::set_num_threads(gx::host::default_num_threads());
  // and the values: d/dEa(:, 17) = sum over gathered columns of 2 (Eb(:, i) + Ea(:, 17))
  double ref = 0;
  for (auto r : i) ref += 2.0 * (double(Eb.value()(5, r)) + double(Ea.value()(5, 17)));
  CHECK(double(fa(5, 17)) == doctest::Approx(ref).epsilon(1e-5));
}

TEST_CASE("plan: grad refuses a parameter given twice") {
  auto x = gx::param(gx::iota<double>(gx::dims(2, 3)));
  auto y = gx::param(gx::iota<double>(gx::dims(2, 3)));
  CHECK_THROWS_WITH_AS(gx::grad(gx::sum(x * y), x, y, x),
                       doctest::Contains("gradix::grad: parameter 0 and parameter 2 are the same parameter"),
                       gx::error);
  auto [gx_, gy_] = gx::grad(gx::sum(x * y), x, y);
  CHECK(gx_.dense()(1, 2) == 5.0);
  CHECK(gy_.dense()(1, 2) == 5.0);
}

// Chains: `sum(chain_k(x))`, chain(e) = tanh(e) * 0.9 + 0.05, plans one kernel whose value
// is differentiated along the chain in one pass (a path_deriv_node): O(k) work per element.
// (Multiplying a local derivative per node, each recomputed from the leaves, was O(k^2).)
template <int K, class E>
auto chain(E const& e) {
  if constexpr (K == 0) return e;
  else return chain<K - 1>(gx::tanh(e) * 0.9f + 0.05f);
}
using PV = gx::parameter<float, shape<dyn>>;
template <int K>
using chain_plan = decltype(ad::plan(gx::sum(chain<K>(std::declval<PV&>()))));
template <int K>
using chain_kernel = ad::kernel_traits<std::remove_cvref_t<decltype(gx::get<0>(std::declval<chain_plan<K>&>()))>>;
template <int K>
inline constexpr std::size_t chain_cost = ad::eval_cost_v<typename chain_kernel<K>::V>;
static_assert(chain_plan<1>::size == 1 && chain_plan<16>::size == 1);
static_assert(chain_cost<2> - chain_cost<1> == chain_cost<3> - chain_cost<2>, "linear in depth");
static_assert(chain_cost<16> - chain_cost<8> == 2 * (chain_cost<8> - chain_cost<4>), "linear in depth");
static_assert(chain_cost<32> <= 6 * 32 + 8, "a few nodes per level");
// Constant partials (+, -) stay out of a path: the two uses of a `+` under a square get the
// same value expression (one fused loop, above); a product outside a region multiplies by the
// other operand read at its own map, so Ea's projected axis still collapses under a scale.
inline auto scaled_term(Table const& Ea, Table const& Eb, Idx const& i, std::uint32_t j) {
  return gx::sum((Eb(gx::all, gx::indices(i)) + Ea(gx::all, gx::at(j))) * 2.0f);
}
using scaled_plan = decltype(ad::plan(scaled_term(std::declval<Table&>(), std::declval<Table&>(),
                                                  std::declval<Idx&>(), 0)));
static_assert(ad::kernel_traits<std::remove_cvref_t<decltype(gx::get<1>(std::declval<scaled_plan&>()))>>::collapses_projected);

TEST_CASE("plan: a deep chain's gradient matches the chain rule") {
  auto x = gx::param(gx::uniform<float>(gx::dims(1000), 9, -1.f, 1.f));
  auto g = gx::grad(gx::sum(chain<12>(x)), x).dense();
  for (gx::index_t k : {0, 17, 999}) {
    double v = x.value()(k), d = 1;
    for (int l = 0; l < 12; ++l) {
      double t = std::tanh(v);
      d *= 0.9 * (1 - t * t);
      v = t * 0.9 + 0.05;
    }
    CHECK(double(g(k)) == doctest::Approx(d).epsilon(2e-5));
  }
}

// ---------------------------------------------------------------------------------------
// Saved values (docs/ad.md, "Saved values"): the buffers a call keeps, and the plan it runs.

// The founding expression keeps nothing: 2 kernels, 0 buffers, the same plan as above.
using founding_expr = decltype(founding_term(std::declval<Table&>(), std::declval<Table&>(),
                                             std::declval<Idx&>(), 0));
static_assert(ad::buffer_count_v<founding_expr> == 0);
static_assert(std::is_same_v<gx::backward_plan_t<founding_expr>, founding_plan>);
static_assert(gx::backward_plan_t<founding_expr>::size == 2);

// logsumexp over rows (the cross-entropy pattern): the max (read twice) and the sum are kept,
// once per row each; the backward kernels read them from buffers.
using PL = gx::parameter<float, shape<dyn, dyn>>;
inline auto lse_rows(PL const& x) {
  auto m = gx::max<1>(x, gx::keep_dims);
  return gx::sum(gx::log(gx::sum<1>(gx::exp(x - m))) + gx::max<1>(x));
}
using lse_expr = decltype(lse_rows(std::declval<PL&>()));
static_assert(ad::buffer_count_v<lse_expr> == 3);
// named once with gx::saved: the max is one buffer
inline auto lse_rows_saved(PL const& x) {
  auto m = gx::saved(gx::max<1>(x, gx::keep_dims));
  return gx::sum(gx::log(gx::sum<1>(gx::exp(x - m), gx::keep_dims)) + m);
}
static_assert(ad::buffer_count_v<decltype(lse_rows_saved(std::declval<PL&>()))> == 3);  // m twice + sum
// In the plan the call runs, no kernel's value expression contains a reduction any more: each
// reads kept values at O(1) per element (the untransformed plan recomputes them).
template <class V>
struct reads_reduction : std::bool_constant<gx::is_reduce_node<V>::value> {};
template <class Op, class A>
struct reads_reduction<gx::unary_node<Op, A>> : reads_reduction<A> {};
template <class Op, class A, class B>
struct reads_reduction<gx::binary_node<Op, A, B>>
    : std::bool_constant<reads_reduction<A>::value || reads_reduction<B>::value> {};
template <class S, class M, class D>
struct reads_reduction<ad::at_map_node<S, M, D>> : reads_reduction<S> {};
template <class V, class D>
struct reads_reduction<ad::extend_node<V, D>> : reads_reduction<V> {};
template <class T, class P>
struct reads_reduction<ad::path_deriv_node<T, P>> : reads_reduction<T> {};
template <class A, std::size_t Ax, class I>
struct reads_reduction<gx::index_node<A, Ax, I>> : reads_reduction<A> {};
template <class A, class S>
struct reads_reduction<gx::broadcast_node<A, S>> : reads_reduction<A> {};
// what a kernel evaluates per element: a use's value; a multi_use's region and v0
template <class E>
struct kernel_value {
  using type = typename E::value_expr;
};
template <int I, class Top, class TMap, class V0, class... U>
struct kernel_value<ad::multi_use<I, Top, TMap, V0, U...>> {
  using type = std::conditional_t<std::is_same_v<V0, ad::no_v0>, Top, gx::binary_node<gx::op::mul, V0, Top>>;
};
template <class Plan, std::size_t K>
using kernel_value_t = typename kernel_value<std::remove_cvref_t<decltype(gx::get<K>(std::declval<Plan&>()))>>::type;
template <class Plan, std::size_t... K>
constexpr bool any_kernel_reads_reduction(std::index_sequence<K...>) {
  return (reads_reduction<kernel_value_t<Plan, K>>::value || ...);
}
using lse_plan_run = gx::backward_plan_t<lse_expr>;
using lse_plan_plain = decltype(ad::plan(std::declval<lse_expr&>()));
static_assert(lse_plan_run::size == lse_plan_plain::size);
// two kernels: the exp region's, for x and, through the kept arg-max, for the max inside it
// (a column member: the row's adjoints summed in registers), and the outer max's
static_assert(lse_plan_run::size == 2 && ad::is_multi<std::remove_cvref_t<decltype(gx::get<0>(std::declval<lse_plan_run&>()))>>::value);
static_assert(!any_kernel_reads_reduction<lse_plan_run>(std::make_index_sequence<lse_plan_run::size>{}));
static_assert(any_kernel_reads_reduction<lse_plan_plain>(std::make_index_sequence<lse_plan_plain::size>{}));
// the work per element of the kernels that run: the reductions are gone from the cost
template <class Plan, std::size_t... K>
constexpr std::size_t plan_cost(std::index_sequence<K...>) {
  return (ad::eval_cost_v<kernel_value_t<Plan, K>> + ... + 0);
}
static_assert(plan_cost<lse_plan_run>(std::make_index_sequence<lse_plan_run::size>{}) < ad::reduction_weight);
static_assert(plan_cost<lse_plan_plain>(std::make_index_sequence<lse_plan_plain::size>{}) > ad::reduction_weight);

namespace {
// An op that counts its evaluations (per element, or per lane of a pack).
std::atomic<long> counted_evals{0};
struct value_counter {
  static constexpr char const* name = "value_counter";
  static constexpr bool needs_floating = true;
  template <class T>
  static T value(T x) {
    if constexpr (std::is_arithmetic_v<T>) counted_evals.fetch_add(1, std::memory_order_relaxed);
    else counted_evals.fetch_add(long(sizeof(T) / sizeof(x[0])), std::memory_order_relaxed);
    return x;
  }
  static constexpr bool pack_derivative = true;
  template <class T>
  static T d_arg(T, T) { return T(1); }
};
}  // namespace

TEST_CASE("saved: a reduction broadcast back is computed once per call, not once per element") {
  int const threads = gx::num_threads();
  gx::set_num_threads(1);
  auto x = gx::param(gx::randn<double>(gx::dims(16, 40), 9));
  auto m = gx::max<1>(gx::unary<value_counter>(x), gx::keep_dims);  // counted once per element of x
  auto loss = gx::sum(gx::exp(x - m));
  counted_evals = 0;
  (void)gx::value(loss);
  CHECK(counted_evals.load() == 16 * 40);  // the max's operand, once (was 16 * 40 * 40)
  counted_evals = 0;
  (void)gx::backward(loss);
  // forward: once; backward: the arg-max of each row, found once per row in the kernel of m
  CHECK(counted_evals.load() <= 3 * 16 * 40);
  counted_evals = 0;
  (void)gx::eval(x - m);
  CHECK(counted_evals.load() == 16 * 40);
  gx::set_num_threads(threads);
}

// Several parameters in one elementwise region: one multi_use kernel whose sweep evaluates the
// region once per element for all of them.
using PV = gx::parameter<float, shape<dyn>>;
using V1 = gx::tensor_view<float const, shape<dyn>>;
inline auto net4(PV const& w1, PV const& b1, PV const& w2, PV const& b2, PV const& w3, PV const& b3,
                 PV const& w4, PV const& b4, V1 x) {
  auto h1 = gx::tanh(w1 * x + b1);
  auto h2 = gx::tanh(w2 * h1 + b2);
  auto h3 = gx::tanh(w3 * h2 + b3);
  return gx::sum(gx::tanh(w4 * h3 + b4));
}
using net4_expr = decltype(net4(std::declval<PV&>(), std::declval<PV&>(), std::declval<PV&>(), std::declval<PV&>(),
                                std::declval<PV&>(), std::declval<PV&>(), std::declval<PV&>(), std::declval<PV&>(),
                                std::declval<V1>()));
using net4_plan = gx::backward_plan_t<net4_expr>;
using net4_kernel = std::remove_cvref_t<decltype(gx::get<0>(std::declval<net4_plan&>()))>;
static_assert(net4_plan::size == 1 && ad::is_multi<net4_kernel>::value);
static_assert(decltype(std::declval<net4_kernel&>().uses_)::size == 8);
static_assert(ad::buffer_count_v<net4_expr> == 0);
// parameters reached through a broadcast join too: their kernels sum the broadcast axes
// (ad::member_kind: a bias row, a column scale, a scalar)
using PM = gx::parameter<float, shape<dyn, dyn>>;
using PR = gx::parameter<float, shape<1, dyn>>;
using PC = gx::parameter<float, shape<dyn, 1>>;
using PS = gx::parameter<float, shape<>>;
inline auto bcast1(PM const& X, PR const& r, PM const& Y) { return gx::sum(gx::tanh(X * Y + r)); }
using bcast_plan = gx::backward_plan_t<decltype(bcast1(std::declval<PM&>(), std::declval<PR&>(), std::declval<PM&>()))>;
static_assert(bcast_plan::size == 1);  // X, Y and r together
template <int K, class E>
auto bcast_chain(E const& e, PC const& c, PR const& r, PS const& s) {
  if constexpr (K == 0) return e;
  else return bcast_chain<K - 1>(gx::tanh(e * c * s + r), c, r, s);
}
using bchain_plan = gx::backward_plan_t<decltype(gx::sum(bcast_chain<8>(std::declval<PM&>(), std::declval<PC&>(),
                                                                         std::declval<PR&>(), std::declval<PS&>())))>;
using bchain_kernel = std::remove_cvref_t<decltype(gx::get<0>(std::declval<bchain_plan&>()))>;
static_assert(bchain_plan::size == 1 && ad::is_multi<bchain_kernel>::value);
static_assert(decltype(std::declval<bchain_kernel&>().uses_)::size == 1 + 3 * 8);
static_assert(bchain_kernel::inner_axis == 1);  // row-major: along the rows
static_assert(ad::member_kind_v<0b01, 2, 1> == ad::member_kind::row &&
              ad::member_kind_v<0b10, 2, 1> == ad::member_kind::column &&
              ad::member_kind_v<0b11, 2, 1> == ad::member_kind::scalar &&
              ad::member_kind_v<0, 2, 1> == ad::member_kind::full);
// column-major: the loop walks down the columns, and r becomes the summed one
using PMc = gx::parameter<float, shape<dyn, dyn>, gx::col_major>;
using bchainc_plan = gx::backward_plan_t<decltype(gx::sum(bcast_chain<2>(std::declval<PMc&>(), std::declval<PC&>(),
                                                                          std::declval<PR&>(), std::declval<PS&>())))>;
using bchainc_kernel = std::remove_cvref_t<decltype(gx::get<0>(std::declval<bchainc_plan&>()))>;
static_assert(bchainc_plan::size == 1 && bchainc_kernel::inner_axis == 0);

TEST_CASE("multi_use: the region's derivatives are evaluated once per element for all targets") {
  int const threads = gx::num_threads();
  gx::set_num_threads(1);
  gx::index_t const n = 1000;
  auto x = gx::uniform<float>(gx::dims(n), 1);
  auto a = gx::param(gx::uniform<float>(gx::dims(n), 2)), b = gx::param(gx::uniform<float>(gx::dims(n), 3));
  auto c = gx::param(gx::uniform<float>(gx::dims(n), 4));
  // counted's derivative (counted per call) at the top of a region read by three parameters
  auto e = gx::sum(gx::unary<counted>(a * x + b * c));
  evaluations = 0;
  gx::backward_only(e);
  CHECK(evaluations.load() == n);  // one sweep per element (three kernels took 3 n)
  gx::set_num_threads(threads);
}

TEST_CASE("saved: gx::saved of a max keeps its arg-max too, in a workspace sized for it") {
  auto x = gx::param(gx::randn<double>(gx::dims(6, 4), 3));
  CHECK(gx::workspace_bytes(gx::sum(gx::exp(x - gx::saved(gx::max<1>(x, gx::keep_dims))))) == 64 + 64);
  // enough rows for the parallel arg-max fill (a write past the workspace fails under ASan);
  // d/dy_ij of sum_j exp(y_ij - m_i) sums to 0 over each row (the max takes -sum_j exp(...))
  int const threads = gx::num_threads();
  gx::set_num_threads(2);
  auto y = gx::param(gx::randn<float>(gx::dims(4096, 64), 4));
  float v = gx::backward(gx::sum(gx::exp(y - gx::saved(gx::max<1>(y, gx::keep_dims)))));
  gx::set_num_threads(threads);
  CHECK(std::isfinite(v));
  auto g = y.grad().to_dense();
  double worst = 0;
  for (gx::index_t i = 0; i < 4096; ++i) {
    double s = 0, mag = 0;
    for (gx::index_t j = 0; j < 64; ++j) {
      s += g(i, j);
      mag += std::abs(g(i, j));
    }
    double const d = mag > 0 ? std::abs(s) / mag : std::abs(s);
    if (!(d <= worst)) worst = std::isnan(d) ? std::numeric_limits<double>::infinity() : d;  // (a NaN fails)
  }
  CHECK(worst < 1e-5);
}
