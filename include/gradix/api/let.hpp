#pragma once
/// \file
/// `gx::let`: a value computed once and read many times (docs/ad.md, "Shared values").
///
///   auto y = gx::let(layer_input, [&](auto x) { return x + gx::matmul(norm(x), W); });
///
/// The body f receives a placeholder for the operand's value (a small node, named by f's
/// type: expr/let.hpp, let_name) and returns an expression that reads it as often as it likes.
/// Every call (eval, value, backward, grad) computes the operand once into a buffer of the
/// call, the body reads that buffer, and a backward call adds the adjoints of all the reads
/// into one buffer, from which the operand's own gradient is pushed once (expr/let.hpp,
/// ad::let_use). The expression's type holds the operand once and the body once: a model
/// that binds each value it reads more than once has a type linear in its size, where the
/// same code with plain `auto` variables repeats every shared sub-expression in the type
/// at each read (exponentially in the depth of the sharing).
///
/// An operand that computes nothing (a tensor, a parameter, a scalar, a placeholder, or views
/// and index nodes over them) is passed to f as it is (as a node: a view of the tensor, the parameter's node): reading it costs what reading the
/// buffer would, and no buffer is kept.

#include "gradix/ad/product.hpp"
#include "gradix/ad/save.hpp"
#include "gradix/config.hpp"
#include "gradix/expr/elementwise.hpp"
#include "gradix/expr/let.hpp"
#include "gradix/expr/node.hpp"
#include "gradix/expr/rebuild.hpp"
#include "gradix/expr/visit.hpp"

#include <type_traits>

namespace gradix {

namespace detail {
template <class N>
struct is_specialization_of_unary : std::false_type {};
template <class Op, class A>
struct is_specialization_of_unary<unary_node<Op, A>> : std::true_type {};

/// Whether N computes anything: an elementwise node, or a value a call keeps (a product, a
/// reduction, a segment sum, a let) anywhere in it.
template <class N>
constexpr bool computes() {
  if constexpr (ad::buffer_count<N, false>::value > 0 || is_let_node<N>::value) {
    return true;
  } else if constexpr (requires(N const& x) { x.lhs_; x.rhs_; }) {
    return true;  // binary nodes (products keep a value: above)
  } else if constexpr (is_specialization_of_unary<N>::value) {
    return true;
  } else if constexpr (value_operand_count_v<N> == 2) {
    return computes<value_operand_t<0, N>>() || computes<value_operand_t<1, N>>();
  } else if constexpr (value_operand_count_v<N> == 1) {
    return computes<value_operand_t<0, N>>();
  } else {
    return false;
  }
}

/// Tag: the placeholder's name (expr/let.hpp, let_name), the body's own type.
template <class Tag, class X, class F>
constexpr auto let1(X&& x, F&& f) {
  using N = node_t<X>;
  if constexpr (!computes<N>()) {
    return f(as_node(static_cast<X&&>(x)));  // (a node: a view, or the parameter's node)
  } else {
    N const z = as_node(static_cast<X&&>(x));
    using Name = let_name<Tag, value_type_t<N>, shape_of_t<N>, space_of_t<N>, ad::reaches_param_v<N>>;
    auto body = f(var_node<Name>{z.shape()});
    using B = decltype(body);
    static_assert(expression<B>, "gradix::let: the body must return an expression (built from its argument)");
    if constexpr (!mentions_var<B, Name>()) return body;  // the value is not read
    else return name_let<Name>(z, body);  // (the placeholder renamed to its level)
  }
}
/// The names of the two placeholders of let(a, b, f).
template <class F, int K>
struct let_pair {};

}  // namespace detail

/// f(x), with x's value computed once per call and its adjoints summed into one buffer
/// (docs/ad.md, "Shared values"). f takes the value (a placeholder expression) and returns
/// the expression that reads it.
template <operand X, class F>
constexpr auto let(X&& x, F&& f) {
  return detail::let1<std::remove_cvref_t<F>>(static_cast<X&&>(x), f);
}

/// f(a, b): both values shared (let(a, [&](auto a) { return let(b, [&](auto b) { return
/// f(a, b); }); })).
template <operand A, operand B, class F>
constexpr auto let(A&& a, B&& b, F&& f) {
  using Fn = std::remove_cvref_t<F>;
  return detail::let1<detail::let_pair<Fn, 0>>(static_cast<A&&>(a), [&](auto const& va) {
    return detail::let1<detail::let_pair<Fn, 1>>(static_cast<B&&>(b), [&](auto const& vb) { return f(va, vb); });
  });
}

}  // namespace gradix
