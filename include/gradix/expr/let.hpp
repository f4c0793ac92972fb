#pragma once
/// \file
/// Shared sub-expressions: `let` computes an operand once and lets a body read it many
/// times (docs/ad.md, "Shared sub-expressions").
///
///   var_node<Z>            the placeholder a body reads: the value of the let's operand, an
///                          expression of type Z (the type is the placeholder's name)
///   let_node<Z, Body>      the value of Body, in which every var_node<Z> stands for z_'s
///                          value; built by ad::let (ad/save.hpp), never by users
///   bound_let_node<Z, Z2, Body2>
///                          what the save transform (api/saved.hpp) makes of a let_node:
///                          z_ (Z2) is the transformed operand, its value computed once into a
///                          buffer of the call, and arg_ (Body2) the body with every
///                          placeholder replaced by a saved_node<var_node<Z>, L> reading that
///                          buffer. In a backward call gz_ is a buffer of Z's shape: the
///                          body's kernels add the adjoint of every read of the placeholder
///                          into it (let_grad targets), then it is pushed into z_ once
///                          (ad::let_use, ad/product.hpp).
///
/// softmax, log_softmax, logsumexp and cross_entropy read their operand three or four times
/// (the row max, the row sum, the result): through a let, an operand that holds a matrix
/// product is computed and differentiated once, not once per read.

#include "gradix/config.hpp"
#include "gradix/expr/node.hpp"
#include "gradix/grad/workspace.hpp"

#include <type_traits>

namespace gradix {

/// out[c] = value of the enclosing let's operand at c (a leaf: only the save transform
/// gives it a value, by binding it to a buffer).
template <class Z>
struct var_node {
  using is_gradix_expression = void;
  using value_type = value_type_t<Z>;
  using shape_type = shape_of_t<Z>;
  using layout_type = row_major;
  using space_type = space_of_t<Z>;
  using operand_type = Z;
  shape_type shape_;
  GRADIX_HOST_DEVICE constexpr shape_type shape() const { return shape_; }
};

/// out = body_, with var_node<Z> standing for the value of z_.
template <class Z, class Body>
struct let_node {
  using is_gradix_expression = void;
  using value_type = value_type_t<Body>;
  using shape_type = shape_of_t<Body>;
  using layout_type = layout_of_t<Body>;
  using space_type = space_of_t<Body>;
  Z z_;
  Body body_;
  GRADIX_HOST_DEVICE constexpr shape_type shape() const { return body_.shape(); }
};

/// A let after the save transform: the value of arg_ (the bound body); z_ the transformed
/// operand (for the backward), gz_ its adjoint's buffer (null outside a backward call, or
/// when no gradient reaches z_).
template <class Z, class Z2, class Body2>
struct bound_let_node {
  using is_gradix_expression = void;
  using value_type = value_type_t<Body2>;
  using shape_type = shape_of_t<Body2>;
  using layout_type = layout_of_t<Body2>;
  using space_type = space_of_t<Body2>;
  using operand_type = Z;  // the placeholder's name
  Z2 z_;
  Body2 arg_;
  value_type_t<Z>* gz_ = nullptr;
  GRADIX_HOST_DEVICE constexpr shape_type shape() const { return arg_.shape(); }
};

template <class N>
struct is_let_node : std::false_type {};
template <class Z, class B>
struct is_let_node<let_node<Z, B>> : std::true_type {};
template <class N>
struct is_var_node : std::false_type {};
template <class Z>
struct is_var_node<var_node<Z>> : std::true_type {};
template <class N>
struct is_bound_let_node : std::false_type {};
template <class Z, class Z2, class B>
struct is_bound_let_node<bound_let_node<Z, Z2, B>> : std::true_type {};

/// The target of the kernels that add the adjoint of a let's placeholder (var_node<Z>) into
/// the let's buffer gz_: a workspace buffer, held by each saved node that binds the
/// placeholder (expr/saved.hpp, let_state); the kernels point at it.
template <class T, class S, class Z>
class let_grad : public workspace_grad<T, S> {
 public:
  using workspace_grad<T, S>::workspace_grad;
};
template <class G>
struct is_let_grad : std::false_type {};
template <class T, class S, class Z>
struct is_let_grad<let_grad<T, S, Z>> : std::true_type {};

}  // namespace gradix
