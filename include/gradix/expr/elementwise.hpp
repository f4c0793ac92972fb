#pragma once
/// \file
/// Elementwise nodes (unary and binary, generic over a scalar functor), their builders and
/// the arithmetic operators. Broadcasting: numpy rules aligned at the last axis, where an
/// axis broadcasts only when its extent is statically 1; dynamic extents must match, checked
/// at run time (every broadcast is visible in the types: docs/concepts.md).

#include "gradix/config.hpp"
#include "gradix/core/error.hpp"
#include "gradix/core/shape.hpp"
#include "gradix/expr/node.hpp"
#include "gradix/op/arith.hpp"
#include "gradix/op/compare.hpp"
#include "gradix/op/lift.hpp"
#include "gradix/op/math.hpp"

#include <type_traits>

namespace gradix {

/// out[c] = Op(arg[c])
/// shape:    shape of arg
/// backward: d_arg[c] = d_out[c] * Op'(arg[c])
template <class Op, class Arg>
struct unary_node {
  using is_gradix_expression = void;
  using is_elementwise_node = void;  // reads arg_ at its own coordinate
  using value_type = decltype(Op::value(std::declval<value_type_t<Arg>>()));
  using shape_type = shape_of_t<Arg>;
  using layout_type = layout_of_t<Arg>;
  using space_type = space_of_t<Arg>;
  Arg arg_;
  GRADIX_HOST_DEVICE constexpr shape_type shape() const { return arg_.shape(); }
};

/// out[c] = Op(lhs[c'], rhs[c''])   where c', c'' drop leading axes the operand lacks and read
///                                 coordinate 0 on its broadcast (statically 1) axes
/// shape:    broadcast_shape_t<shape of lhs, shape of rhs>
/// backward: d_lhs[c'] += d_out[c] * dOp/dlhs,  d_rhs[c''] += d_out[c] * dOp/drhs
///           (summed over the broadcast axes)
template <class Op, class Lhs, class Rhs>
struct binary_node {
  using is_gradix_expression = void;
  using value_type = promote_t<value_type_t<Lhs>, value_type_t<Rhs>>;
  using shape_type = broadcast_shape_t<shape_of_t<Lhs>, shape_of_t<Rhs>>;
  using layout_type = detail::combined_layout_t<Lhs, Rhs>;
  using space_type = detail::common_space_t<space_of_t<Lhs>, space_of_t<Rhs>>;
  Lhs lhs_;
  Rhs rhs_;
  shape_type shape_;
  GRADIX_HOST_DEVICE constexpr shape_type const& shape() const { return shape_; }
};

namespace detail {

/// Instantiated with the op and both shapes so that the compiler prints them.
template <class Op, class A, class B>
struct static_shapes_do_not_broadcast {
  static_assert(broadcastable_v<A, B>,
                "gradix: the static shapes of this elementwise operation do not broadcast (an "
                "axis broadcasts only when its extent is statically 1); the shapes are named in "
                "static_shapes_do_not_broadcast<op, lhs shape, rhs shape>");
  static constexpr bool value = broadcastable_v<A, B>;
};

template <class Op, class A, class B>
struct memory_spaces_differ {
  static_assert(spaces_compatible_v<space_of_t<A>, space_of_t<B>>,
                "gradix: the operands of this operation live in different memory spaces "
                "(host and CUDA); copy one of them first");
  static constexpr bool value = spaces_compatible_v<space_of_t<A>, space_of_t<B>>;
};

template <class Op, class T>
struct needs_floating_point {
  static_assert(std::is_floating_point_v<T>,
                "gradix: this function needs a floating-point operand; convert an integer "
                "expression with gradix::cast<float>(e) (or double)");
  static constexpr bool value = std::is_floating_point_v<T>;
};

/// Run-time broadcast check and result shape (dynamic extents must match).
template <class Op, class A, class B>
constexpr auto broadcast_shapes(A const& a, B const& b) {
  using SA = shape_of_t<A>;
  using SB = shape_of_t<B>;
  using info = broadcast_info<SA, SB>;
  typename info::type r{};
  auto sa = a.shape();
  auto sb = b.shape();
  for (std::size_t k = 0; k < info::rank; ++k) {
    index_t ea = k < info::off_a ? 1 : sa.extent(k - info::off_a);
    index_t eb = k < info::off_b ? 1 : sb.extent(k - info::off_b);
    bool a_bc = k >= info::off_a && SA::static_extents[k - info::off_a] == 1;
    bool b_bc = k >= info::off_b && SB::static_extents[k - info::off_b] == 1;
    if (k < info::off_a) a_bc = true;
    if (k < info::off_b) b_bc = true;
    if (!a_bc && !b_bc && ea != eb)
      fail("gradix::", Op::name, ": shapes ", to_string(sa), " and ", to_string(sb),
           " do not match at axis ", k, " of the result (", ea, " vs ", eb,
           "); only an axis of static extent 1 broadcasts");
    r.set_extent(k, a_bc ? eb : ea);
  }
  return r;
}

template <class Op>
inline constexpr bool op_needs_floating_v = [] {
  if constexpr (requires { Op::needs_floating; }) return bool(Op::needs_floating);
  else return false;
}();

/// Its member `value` is true unless Op needs floating point and T is not (then the static_assert in
/// needs_floating_point fires, once). A type, not a function: clang treats a constexpr
/// function whose body failed a static_assert as non-constant, which cascades.
template <class Op, class T>
using element_type_check =
    std::conditional_t<op_needs_floating_v<Op>, needs_floating_point<Op, T>, std::true_type>;

template <class Op, class A>
constexpr auto make_unary(A a) {
  if constexpr (!element_type_check<Op, value_type_t<A>>::value)
    return a;  // the static_assert has fired: stop here
  else
    return unary_node<Op, A>{a};
}

template <class Op, class A, class B>
constexpr auto make_binary_nodes(A a, B b) {
  if constexpr (!static_shapes_do_not_broadcast<Op, shape_of_t<A>, shape_of_t<B>>::value ||
                !memory_spaces_differ<Op, A, B>::value) {
    return a;  // the static_assert above has fired: stop here without more errors
  } else if constexpr (!element_type_check<Op, promote_t<value_type_t<A>, value_type_t<B>>>::value) {
    return a;
  } else {
    return binary_node<Op, A, B>{a, b, broadcast_shapes<Op>(a, b)};
  }
}

/// Builds a binary node from any pair of operands (tensors, expressions, C++ scalars).
template <class Op, class L, class R>
constexpr auto make_binary(L&& l, R&& r) {
  if constexpr (scalar<L>) {
    auto b = as_node(static_cast<R&&>(r));
    using T = scalar_promote_t<value_type_t<decltype(b)>, std::remove_cvref_t<L>>;
    return make_binary_nodes<Op>(scalar_node<T>{T(l)}, b);
  } else if constexpr (scalar<R>) {
    auto a = as_node(static_cast<L&&>(l));
    using T = scalar_promote_t<value_type_t<decltype(a)>, std::remove_cvref_t<R>>;
    return make_binary_nodes<Op>(a, scalar_node<T>{T(r)});
  } else {
    return make_binary_nodes<Op>(as_node(static_cast<L&&>(l)), as_node(static_cast<R&&>(r)));
  }
}

template <class L, class R>
concept binary_operands = (operand<L> && (operand<R> || scalar<R>)) || (scalar<L> && operand<R>);

/// Operators and binary functions are found for any pair where one side is a gradix operand
/// (so they never capture foreign types), and then check the other side with a message.
template <class L, class R>
concept gradix_pair = operand<L> || operand<R>;
/// Named elementwise functions take anything but C++ scalars (std:: keeps those), and then
/// check their operand with a message.
template <class X>
concept non_scalar = !scalar<X>;

}  // namespace detail

// ---------------------------------------------------------------------------------------
// Builders

/// Applies a user functor elementwise: `unary<my_op>(x)`. The functor provides `name`,
/// `value` (and `d_arg(x, y)`, x the operand and y the value, for gradients). A `value` that
/// is one plain function (`static float value(float)`) is called lane by lane on SIMD packs;
/// a template or a pack overload gets whole packs (op/lift.hpp, docs/ops.md).
template <class Op, operand X>
constexpr auto unary(X&& x) {
  return detail::make_unary<op::user_functor_t<Op>>(detail::as_node(static_cast<X&&>(x)));
}
/// Applies a user binary functor elementwise with broadcasting: `binary<my_op>(a, b)`, with
/// `value(a, b)`, `d_lhs(a, b, y)` and `d_rhs(a, b, y)`; scalars as for unary.
template <class Op, class L, class R>
  requires detail::binary_operands<L, R>
constexpr auto binary(L&& l, R&& r) {
  return detail::make_binary<op::user_functor_t<Op>>(static_cast<L&&>(l), static_cast<R&&>(r));
}

template <class L, class R>
  requires detail::gradix_pair<L, R>
constexpr auto operator+(L&& l, R&& r) {
  constexpr bool ok = detail::binary_operands<L, R>;
  static_assert(ok, "gradix::operator+: an operand is not a gradix expression, tensor, parameter "
                    "or arithmetic scalar");
  if constexpr (ok) return detail::make_binary<op::add>(static_cast<L&&>(l), static_cast<R&&>(r));
  else return scalar_node<float>{};  // the static_assert has fired: stop here
}
template <class L, class R>
  requires detail::gradix_pair<L, R>
constexpr auto operator-(L&& l, R&& r) {
  constexpr bool ok = detail::binary_operands<L, R>;
  static_assert(ok, "gradix::operator-: an operand is not a gradix expression, tensor, parameter "
                    "or arithmetic scalar");
  if constexpr (ok) return detail::make_binary<op::sub>(static_cast<L&&>(l), static_cast<R&&>(r));
  else return scalar_node<float>{};  // the static_assert has fired: stop here
}
template <class L, class R>
  requires detail::gradix_pair<L, R>
constexpr auto operator*(L&& l, R&& r) {
  constexpr bool ok = detail::binary_operands<L, R>;
  static_assert(ok, "gradix::operator*: an operand is not a gradix expression, tensor, parameter "
                    "or arithmetic scalar");
  if constexpr (ok) return detail::make_binary<op::mul>(static_cast<L&&>(l), static_cast<R&&>(r));
  else return scalar_node<float>{};  // the static_assert has fired: stop here
}
template <class L, class R>
  requires detail::gradix_pair<L, R>
constexpr auto operator/(L&& l, R&& r) {
  constexpr bool ok = detail::binary_operands<L, R>;
  static_assert(ok, "gradix::operator/: an operand is not a gradix expression, tensor, parameter "
                    "or arithmetic scalar");
  if constexpr (ok) return detail::make_binary<op::div>(static_cast<L&&>(l), static_cast<R&&>(r));
  else return scalar_node<float>{};  // the static_assert has fired: stop here
}

template <operand X>
constexpr auto operator-(X&& x) {
  return unary<op::neg>(static_cast<X&&>(x));
}

/// Elementwise functions (floating point only, except relu, square and abs).
template <detail::non_scalar X>
constexpr auto exp(X&& x) {
  constexpr bool ok = operand<X>;
  static_assert(ok, "gradix::exp: the operand is not a gradix expression, tensor or parameter");
  if constexpr (ok) return unary<op::exp>(static_cast<X&&>(x));
  else return scalar_node<float>{};
}
template <detail::non_scalar X>
constexpr auto log(X&& x) {
  constexpr bool ok = operand<X>;
  static_assert(ok, "gradix::log: the operand is not a gradix expression, tensor or parameter");
  if constexpr (ok) return unary<op::log>(static_cast<X&&>(x));
  else return scalar_node<float>{};
}
template <detail::non_scalar X>
constexpr auto tanh(X&& x) {
  constexpr bool ok = operand<X>;
  static_assert(ok, "gradix::tanh: the operand is not a gradix expression, tensor or parameter");
  if constexpr (ok) return unary<op::tanh>(static_cast<X&&>(x));
  else return scalar_node<float>{};
}
template <detail::non_scalar X>
constexpr auto sigmoid(X&& x) {
  constexpr bool ok = operand<X>;
  static_assert(ok, "gradix::sigmoid: the operand is not a gradix expression, tensor or parameter");
  if constexpr (ok) return unary<op::sigmoid>(static_cast<X&&>(x));
  else return scalar_node<float>{};
}
/// GELU, x Phi(x) (the exact form, with erf); gelu_tanh: its tanh approximation.
template <detail::non_scalar X>
constexpr auto gelu(X&& x) {
  constexpr bool ok = operand<X>;
  static_assert(ok, "gradix::gelu: the operand is not a gradix expression, tensor or parameter");
  if constexpr (ok) return unary<op::gelu>(static_cast<X&&>(x));
  else return scalar_node<float>{};
}
template <detail::non_scalar X>
constexpr auto gelu_tanh(X&& x) {
  constexpr bool ok = operand<X>;
  static_assert(ok, "gradix::gelu_tanh: the operand is not a gradix expression, tensor or parameter");
  if constexpr (ok) return unary<op::gelu_tanh>(static_cast<X&&>(x));
  else return scalar_node<float>{};
}
template <detail::non_scalar X>
constexpr auto expm1(X&& x) {
  constexpr bool ok = operand<X>;
  static_assert(ok, "gradix::expm1: the operand is not a gradix expression, tensor or parameter");
  if constexpr (ok) return unary<op::expm1>(static_cast<X&&>(x));
  else return scalar_node<float>{};
}
template <detail::non_scalar X>
constexpr auto log1p(X&& x) {
  constexpr bool ok = operand<X>;
  static_assert(ok, "gradix::log1p: the operand is not a gradix expression, tensor or parameter");
  if constexpr (ok) return unary<op::log1p>(static_cast<X&&>(x));
  else return scalar_node<float>{};
}
template <detail::non_scalar X>
constexpr auto softplus(X&& x) {
  constexpr bool ok = operand<X>;
  static_assert(ok, "gradix::softplus: the operand is not a gradix expression, tensor or parameter");
  if constexpr (ok) return unary<op::softplus>(static_cast<X&&>(x));
  else return scalar_node<float>{};
}
template <detail::non_scalar X>
constexpr auto log_sigmoid(X&& x) {
  constexpr bool ok = operand<X>;
  static_assert(ok, "gradix::log_sigmoid: the operand is not a gradix expression, tensor or parameter");
  if constexpr (ok) return unary<op::log_sigmoid>(static_cast<X&&>(x));
  else return scalar_node<float>{};
}
template <detail::non_scalar X>
constexpr auto sin(X&& x) {
  constexpr bool ok = operand<X>;
  static_assert(ok, "gradix::sin: the operand is not a gradix expression, tensor or parameter");
  if constexpr (ok) return unary<op::sin>(static_cast<X&&>(x));
  else return scalar_node<float>{};
}
template <detail::non_scalar X>
constexpr auto cos(X&& x) {
  constexpr bool ok = operand<X>;
  static_assert(ok, "gradix::cos: the operand is not a gradix expression, tensor or parameter");
  if constexpr (ok) return unary<op::cos>(static_cast<X&&>(x));
  else return scalar_node<float>{};
}
template <detail::non_scalar X>
constexpr auto relu(X&& x) {
  constexpr bool ok = operand<X>;
  static_assert(ok, "gradix::relu: the operand is not a gradix expression, tensor or parameter");
  if constexpr (ok) return unary<op::relu>(static_cast<X&&>(x));
  else return scalar_node<float>{};
}
template <detail::non_scalar X>
constexpr auto sqrt(X&& x) {
  constexpr bool ok = operand<X>;
  static_assert(ok, "gradix::sqrt: the operand is not a gradix expression, tensor or parameter");
  if constexpr (ok) return unary<op::sqrt>(static_cast<X&&>(x));
  else return scalar_node<float>{};
}
template <detail::non_scalar X>
constexpr auto square(X&& x) {
  constexpr bool ok = operand<X>;
  static_assert(ok, "gradix::square: the operand is not a gradix expression, tensor or parameter");
  if constexpr (ok) return unary<op::square>(static_cast<X&&>(x));
  else return scalar_node<float>{};
}
template <detail::non_scalar X>
constexpr auto abs(X&& x) {
  constexpr bool ok = operand<X>;
  static_assert(ok, "gradix::abs: the operand is not a gradix expression, tensor or parameter");
  if constexpr (ok) return unary<op::abs>(static_cast<X&&>(x));
  else return scalar_node<float>{};
}

/// Elementwise a^b (floating point), with broadcasting and scalars on either side.
template <class L, class R>
  requires detail::gradix_pair<L, R>
constexpr auto pow(L&& l, R&& r) {
  constexpr bool ok = detail::binary_operands<L, R>;
  static_assert(ok, "gradix::pow: an operand is not a gradix expression, tensor, parameter or "
                    "arithmetic scalar");
  if constexpr (ok) return detail::make_binary<op::pow>(static_cast<L&&>(l), static_cast<R&&>(r));
  else return scalar_node<float>{};
}
/// Elementwise maximum (ties: the first operand; see op::max). One operand: see reduce.hpp.
template <class L, class R>
  requires detail::gradix_pair<L, R>
constexpr auto max(L&& l, R&& r) {
  constexpr bool ok = detail::binary_operands<L, R>;
  static_assert(ok, "gradix::max: an operand is not a gradix expression, tensor, parameter or "
                    "arithmetic scalar");
  if constexpr (ok) return detail::make_binary<op::max>(static_cast<L&&>(l), static_cast<R&&>(r));
  else return scalar_node<float>{};
}
/// Elementwise minimum (ties: the first operand).
template <class L, class R>
  requires detail::gradix_pair<L, R>
constexpr auto min(L&& l, R&& r) {
  constexpr bool ok = detail::binary_operands<L, R>;
  static_assert(ok, "gradix::min: an operand is not a gradix expression, tensor, parameter or "
                    "arithmetic scalar");
  if constexpr (ok) return detail::make_binary<op::min>(static_cast<L&&>(l), static_cast<R&&>(r));
  else return scalar_node<float>{};
}
/// x limited to [lo, hi]: min(max(x, lo), hi), elementwise; lo and hi are scalars or
/// expressions that broadcast with x. The gradient to x is 1 on the closed interval
/// [lo, hi] and 0 outside it (ties go to x), and reaches lo or hi where they bound x. With
/// lo > hi the result is hi. A NaN in x gives NaN.
template <detail::non_scalar X, class Lo, class Hi>
constexpr auto clamp(X&& x, Lo&& lo, Hi&& hi) {
  constexpr bool ok = operand<X> && detail::binary_operands<X, Lo> && detail::binary_operands<X, Hi>;
  static_assert(ok, "gradix::clamp: x must be a gradix expression, tensor or parameter, and lo "
                    "and hi gradix expressions or arithmetic scalars");
  if constexpr (ok)
    return min(max(static_cast<X&&>(x), static_cast<Lo&&>(lo)), static_cast<Hi&&>(hi));
  else return scalar_node<float>{};
}
#define GRADIX_COMPARISON_OPERATOR(SYM, Op)                                                     \
  template <class L, class R>                                                                   \
    requires detail::gradix_pair<L, R>                                                          \
  constexpr auto operator SYM(L&& l, R&& r) {                                                   \
    constexpr bool ok = detail::binary_operands<L, R>;                                          \
    static_assert(ok, "gradix::operator" #SYM ": an operand is not a gradix expression, "      \
                      "tensor, parameter or arithmetic scalar");                                \
    if constexpr (ok) return detail::make_binary<Op>(static_cast<L&&>(l), static_cast<R&&>(r)); \
    else return scalar_node<float>{};                                                           \
  }
/// Comparisons: a 0/1 mask in the operands' promoted element type (op/compare.hpp), with
/// broadcasting and scalars on either side; no gradient flows through them.
GRADIX_COMPARISON_OPERATOR(<, op::less)
GRADIX_COMPARISON_OPERATOR(<=, op::less_equal)
GRADIX_COMPARISON_OPERATOR(>, op::greater)
GRADIX_COMPARISON_OPERATOR(>=, op::greater_equal)
GRADIX_COMPARISON_OPERATOR(==, op::equal)
GRADIX_COMPARISON_OPERATOR(!=, op::not_equal)
#undef GRADIX_COMPARISON_OPERATOR

/// where(m, a, b): a where the mask m is nonzero (a NaN is nonzero), b elsewhere, with
/// broadcasting over all three; a and b may be C++ scalars. The result has the bits of the
/// side taken: a NaN or infinity on the other side never leaks (it is keep_if(m, a) +
/// keep_unless(m, b), op/compare.hpp). Gradients: to a where m selects, to b elsewhere; the
/// mask gets none. The element type promotes as arithmetic does (mask included).
template <detail::non_scalar M, class A, class B>
constexpr auto where(M&& m, A&& a, B&& b) {
  constexpr bool ok = operand<M> && detail::binary_operands<M, A> && detail::binary_operands<M, B>;
  static_assert(ok, "gradix::where: the mask must be a gradix expression, tensor or parameter, "
                    "and a and b gradix expressions or arithmetic scalars");
  if constexpr (ok) {
    auto mn = detail::as_node(static_cast<M&&>(m));
    return detail::make_binary<op::add>(detail::make_binary<op::keep_if>(mn, static_cast<A&&>(a)),
                                        detail::make_binary<op::keep_unless>(mn, static_cast<B&&>(b)));
  } else {
    return scalar_node<float>{};
  }
}

/// Element type conversion: `cast<float>(int_index_tensor)`.
template <element U, operand X>
constexpr auto cast(X&& x) {
  return unary_node<op::cast<U>, detail::node_t<X>>{detail::as_node(static_cast<X&&>(x))};
}

}  // namespace gradix
