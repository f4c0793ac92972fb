// The operand protocol (expr/visit.hpp, issue 33): one place says what a node's operands
// are; the walks that treat every operand alike (for_each_node, any_node, the node count of
// grad()'s constant evaluation, the device backend's validation and launcher probe) use it.
// Type-level facts are static_asserts, so a regression breaks the build.
#include <gradix/gradix.hpp>

#include <doctest/doctest.h>

#include <string>
#include <type_traits>
#include <vector>

namespace gx = gradix;

namespace {
template <class N>
struct is_exp : std::false_type {};
template <class A>
struct is_exp<gx::unary_node<gx::op::exp, A>> : std::true_type {};
}  // namespace

TEST_CASE("operand protocol: the operands of each node kind, in order") {
  auto a = gx::randn<float>(gx::dims(3, 4), 1);
  auto b = gx::randn<float>(gx::dims(3, 4), 2);
  auto w = gx::param(gx::randn<float>(gx::dims(4, 2), 3));
  gx::tensor<std::int32_t, gx::shape<gx::dyn, gx::dyn>> pos(gx::dims(3, 1));
  for (gx::index_t i = 0; i < 3; ++i) pos(i, 0) = std::int32_t(i);

  using A = decltype(gx::detail::as_node(a));
  using B = decltype(gx::detail::as_node(b));
  using Sum = decltype(a + b);
  static_assert(std::is_same_v<gx::detail::operand_types_t<Sum>, gx::tuple<A, B>>);
  using Exp = decltype(gx::exp(a));
  static_assert(std::is_same_v<gx::detail::operand_types_t<Exp>, gx::tuple<A>>);
  static_assert(std::is_same_v<gx::detail::operand_types_t<A>, gx::tuple<>>);  // a leaf
  using Mm = decltype(gx::matmul(a, w));
  static_assert(gx::detail::operand_types_t<Mm>::size == 2);
  using Take = decltype(gx::take_along<1>(a, pos));
  static_assert(std::is_same_v<gx::detail::operand_types_t<Take>,
                               gx::tuple<A, decltype(gx::detail::as_node(pos))>>);  // operand, positions
  // the value operands: positions left out (never differentiated, never kept)
  static_assert(std::is_same_v<gx::detail::value_operand_types_t<Take>, gx::tuple<A>>);
  static_assert(gx::detail::operand_count_v<Take> == 2 && gx::detail::value_operand_count_v<Take> == 1);
  static_assert(std::is_same_v<gx::detail::value_operand_t<0, Sum>, A> &&
                std::is_same_v<gx::detail::value_operand_t<1, Sum>, B>);
  static_assert(gx::detail::value_operand_count_v<A> == 0);
  // a let: its operand, then its body
  auto shared = gx::let(gx::exp(a), [](auto z) { return z * z; });
  using Let = decltype(gx::detail::as_node(shared));
  static_assert(gx::detail::value_operand_count_v<Let> == 2);
  static_assert(std::is_same_v<gx::detail::value_operand_t<0, Let>, Exp>);
  // walks over the value operands: what reaches a parameter, what a call keeps
  static_assert(gx::ad::reaches_param_v<decltype(gx::take_along<1>(gx::matmul(a, w), pos))>);
  static_assert(!gx::ad::reaches_param_v<decltype(gx::take_along<1>(a, pos))>);
  static_assert(gx::ad::buffer_count_v<Mm> == 1);  // the product
  static_assert(gx::ad::buffer_count_v<decltype(gx::matmul(a, w) + gx::matmul(b, w))> == 2);
  // sums under a node are kept too (a root sum is not): two products, two sums
  static_assert(gx::ad::buffer_count_v<decltype(gx::sum(gx::matmul(a, w)) + gx::sum(gx::matmul(b, w)))> == 4);

  // type-level walks
  static_assert(gx::detail::any_node<decltype(gx::sum(gx::exp(a) * b)), is_exp>());
  static_assert(!gx::detail::any_node<decltype(gx::sum(a * b)), is_exp>());
  static_assert(gx::detail::holds_param<decltype(gx::detail::as_node(gx::sum(gx::matmul(a, w))))>());
  static_assert(!gx::detail::holds_param<decltype(gx::sum(a * b))>());
  // sum(exp(a) * b): sum, mul, exp, a, b
  static_assert(gx::detail::node_count_v<decltype(gx::sum(gx::exp(a) * b))> == 5);

  // the run-time walk: parents first, operands in order
  auto e = gx::sum(gx::exp(a) * b);
  std::vector<std::string> kinds;
  gx::detail::for_each_node(e, [&](auto const& n) {
    using N = std::remove_cvref_t<decltype(n)>;
    if constexpr (gx::is_view_v<N>) kinds.push_back(n.data() == a.data() ? "a" : "b");
    else if constexpr (is_exp<N>::value) kinds.push_back("exp");
    else if constexpr (requires { n.lhs_; }) kinds.push_back("mul");
    else kinds.push_back("sum");
  });
  CHECK(kinds == std::vector<std::string>{"sum", "mul", "exp", "a", "b"});
}
