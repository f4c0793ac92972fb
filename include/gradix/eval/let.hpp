#pragma once
/// \file
/// Evaluators of shared sub-expressions (expr/let.hpp): a bound let evaluates its bound
/// body (which reads the operand's buffer). Calls bind every let first (the save transform,
/// api/saved.hpp); the evaluator of an unbound let, for the element-wise diagnostics that
/// evaluate single nodes (api/finite.hpp), evaluates its body with the operand itself in
/// place of the placeholder (recomputed at every read). A placeholder alone has no value.

#include "gradix/config.hpp"
#include "gradix/eval/evaluator.hpp"
#include "gradix/expr/let.hpp"
#include "gradix/expr/rebuild.hpp"

namespace gradix::ev {

template <class Z, class Z2, class Body2>
struct evaluator<bound_let_node<Z, Z2, Body2>> : evaluator<Body2> {
  GRADIX_HOST_DEVICE constexpr explicit evaluator(bound_let_node<Z, Z2, Body2> const& n) : evaluator<Body2>(n.arg_) {}
};

template <class Z, class X, class Body>
struct evaluator<let_node<Z, X, Body>>
    : evaluator<decltype(::gradix::detail::bind_var<Z>(std::declval<Body const&>(), std::declval<X const&>()))> {
  using base = evaluator<decltype(::gradix::detail::bind_var<Z>(std::declval<Body const&>(), std::declval<X const&>()))>;
  // (evaluators hold values, not pointers into their node: the inlined body may go)
  constexpr explicit evaluator(let_node<Z, X, Body> const& n) : base(::gradix::detail::bind_var<Z>(n.body_, n.z_)) {}
};
template <class Z>
struct evaluator<var_node<Z>> {
  static_assert(sizeof(Z) == 0,
                "gradix::let: a let's value (the placeholder its body receives) is read outside "
                "the let's body; build every expression that reads it inside the body and return it");
};

}  // namespace gradix::ev
