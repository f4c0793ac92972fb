#pragma once
/// \file
/// Shared sub-expressions: `let` computes an operand once and lets a body read it many
/// times (docs/ad.md, "Shared sub-expressions").
///
///   let_name<Tag, T, S, Sp, R>
///                          a placeholder's name: a small type, whatever the operand. T, S,
///                          Sp are the operand's value type, shape type and space, R whether
///                          a gradient can reach a parameter through the operand
///                          (ad::reaches_param). While the body is built, Tag is the type of
///                          the body function gx::let was given (a closure type: one per
///                          lambda expression and enclosing specialization; a tag of the
///                          library's own lets); the finished let renames its placeholder to
///                          Tag = let_level<L>, L one more than the highest level of the lets
///                          inside its body (rebuild.hpp, name_let). The name never holds the
///                          operand's type, nor a closure type (whose printed name holds its
///                          enclosing function's arguments): a placeholder read k times, in a
///                          let nested in other lets, adds k small leaves to the type, not k
///                          copies of the operand (which grew the printed type, and with it
///                          the compilers' debug information, exponentially in the nesting).
///   var_node<Z>            the placeholder a body reads (Z: a let_name), standing for the
///                          value of the let that binds Z
///   let_node<Z, X, Body>   the value of Body, in which every var_node<Z> stands for z_'s
///                          value (z_: the operand, of type X); built by gx::let and
///                          ad::let (ad/save.hpp). No let in Body binds the same name
///                          (its level is lower).
///   bound_let_node<Z, Z2, Body2>
///                          what the save transform (api/saved.hpp) makes of a let_node:
///                          z_ (Z2) is the transformed operand, its value computed once into a
///                          buffer of the call, and arg_ (Body2) the body with every
///                          placeholder replaced by a saved_node<var_node<Z>, L> reading that
///                          buffer. In a backward call gz_ is a buffer of the operand's shape:
///                          the body's kernels add the adjoint of every read of the
///                          placeholder into it (let_grad targets), then it is pushed into z_
///                          once (ad::let_use, ad/product.hpp).
///
/// softmax, log_softmax, logsumexp and cross_entropy read their operand three or four times
/// (the row max, the row sum, the result): through a let, an operand that holds a matrix
/// product is computed and differentiated once, not once per read.

#include "gradix/config.hpp"
#include "gradix/expr/node.hpp"
#include "gradix/grad/adjoint_buffer.hpp"

#include <type_traits>

namespace gradix {

/// The name of a let's placeholder (not an expression): Tag (the body's type, or a library
/// tag), the operand's value type, shape type and space, and whether a gradient reaches a
/// parameter through the operand.
template <class Tag, class T, class S, class Sp, bool Reaches>
struct let_name {
  using value_type = T;
  using shape_type = S;
  using space_type = Sp;
  static constexpr bool reaches_param = Reaches;
};
template <class N>
struct is_let_name : std::false_type {};
template <class Tag, class T, class S, class Sp, bool R>
struct is_let_name<let_name<Tag, T, S, Sp, R>> : std::true_type {};
/// The tag of a finished let's name: its level, 1 + the highest level of the lets in its
/// body (rebuild.hpp, name_let). Levels grow outward, so nested lets never share a name.
template <int Level>
struct let_level {};
template <class Z>
struct let_level_of : std::integral_constant<int, 0> {};  // a name under construction
template <int L, class T, class S, class Sp, bool R>
struct let_level_of<let_name<let_level<L>, T, S, Sp, R>> : std::integral_constant<int, L> {};

/// out[c] = value of the let binding the name Z at c (a leaf: only the save transform gives
/// it a value, by binding it to a buffer).
template <class Z>
struct var_node {
  static_assert(is_let_name<Z>::value, "gradix internal: a placeholder is named by a let_name");
  using is_gradix_expression = void;
  using value_type = typename Z::value_type;
  using shape_type = typename Z::shape_type;
  using layout_type = row_major;
  using space_type = typename Z::space_type;
  using name_type = Z;
  shape_type shape_;
  GRADIX_HOST_DEVICE constexpr shape_type shape() const { return shape_; }
};

/// out = body_, with var_node<Z> standing for the value of z_ (of type X).
template <class Z, class X, class Body>
struct let_node {
  using is_gradix_expression = void;
  using value_type = value_type_t<Body>;
  using shape_type = shape_of_t<Body>;
  using layout_type = layout_of_t<Body>;
  using space_type = space_of_t<Body>;
  using name_type = Z;
  X z_;
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
  using name_type = Z;  // the placeholder's name
  Z2 z_;
  Body2 arg_;
  value_type_t<Z>* gz_ = nullptr;
  GRADIX_HOST_DEVICE constexpr shape_type shape() const { return arg_.shape(); }
};

template <class N>
struct is_let_node : std::false_type {};
template <class Z, class X, class B>
struct is_let_node<let_node<Z, X, B>> : std::true_type {};
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
class let_grad : public adjoint_buffer<T, S> {
 public:
  using adjoint_buffer<T, S>::adjoint_buffer;
};
template <class G>
struct is_let_grad : std::false_type {};
template <class T, class S, class Z>
struct is_let_grad<let_grad<T, S, Z>> : std::true_type {};

}  // namespace gradix
