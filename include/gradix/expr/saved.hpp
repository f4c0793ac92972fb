#pragma once
/// \file
/// Saved values: sub-expressions whose value is computed once per call into a buffer and read
/// from there, instead of being recomputed wherever it is read.
///
///   save_mark_node<A>      `gx::saved(e)`: the user asks for e's value to be kept
///   saved_node<N, L>  N's value in a buffer of N's shape (layout L); made by the API's save
///                     transform (api/saved.hpp) for every `save_mark_node` and for every
///                     reduction read by a node other than a reduction (the cost rule of
///                     docs/ad.md, "Saved values") and for every matrix product; never
///                     built by users
///
/// Both have the value of their operand and pass gradients through to it.

#include "gradix/config.hpp"
#include "gradix/core/array.hpp"
#include "gradix/core/view.hpp"
#include "gradix/expr/bag.hpp"
#include "gradix/expr/concat.hpp"
#include "gradix/expr/let.hpp"
#include "gradix/expr/matmul.hpp"
#include "gradix/expr/node.hpp"
#include "gradix/expr/reduce.hpp"
#include "gradix/expr/row.hpp"
#include "gradix/expr/view.hpp"
#include "gradix/grad/adjoint_buffer.hpp"

#include <type_traits>

namespace gradix {

/// out[c] = arg[c], kept in a buffer for the duration of one call (eval, value, backward,
/// grad); backward: d_arg[c] = d_out[c]
template <class Arg>
struct save_mark_node {
  using is_gradix_expression = void;
  using value_type = value_type_t<Arg>;
  using shape_type = shape_of_t<Arg>;
  using layout_type = layout_of_t<Arg>;
  using space_type = space_of_t<Arg>;
  Arg arg_;
  GRADIX_HOST_DEVICE constexpr shape_type shape() const { return arg_.shape(); }
};

namespace detail {
/// Whether node N is a `gx::saved` mark (rebuild drops marks; the save transform keeps their values).
template <class N>
inline constexpr bool is_save_mark_node_v = false;
template <class A>
inline constexpr bool is_save_mark_node_v<save_mark_node<A>> = true;
}  // namespace detail

/// The layout of a saved buffer: N's own when it is row- or column-major, else row-major.
template <class N>
using saved_layout_t =
    std::conditional_t<std::is_same_v<layout_of_t<N>, col_major> && (shape_of_t<N>::rank > 1),
                       col_major, row_major>;

/// What a saved_node of N keeps beside N's value: nothing, or for a matrix product its
/// product_state (expr/matmul.hpp).
struct no_saved_extra {};
template <class N>
struct saved_extra {
  using type = no_saved_extra;
};
template <class A, class I>
struct saved_extra<segment_sum_node<A, I>> {
  using type = segment_state<value_type_t<segment_sum_node<A, I>>, shape_of_t<segment_sum_node<A, I>>>;
};
template <class L, class R>
struct saved_extra<matmul_node<L, R>> {
  using type = product_state<value_type_t<matmul_node<L, R>>, shape_of_t<matmul_node<L, R>>>;
};
/// A kept sum or mean reduction's adjoint buffer, in a backward call (ad/push.hpp stages its
/// adjoint there when it arrives through a broadcast: docs/ad.md, "Adjoints of reductions").
template <class T, class S>
struct reduction_state {
  adjoint_buffer<T, S> gout;
};
template <class Op, class A, axis_mask Mask, bool Keep>
  requires(std::is_same_v<Op, op::sum_of> || std::is_same_v<Op, op::mean_of>)
struct saved_extra<reduce_node<Op, A, Mask, Keep>> {
  using N = reduce_node<Op, A, Mask, Keep>;
  using type = reduction_state<value_type_t<N>, shape_of_t<N>>;
};
/// A kept concat's adjoint buffer, in a backward call: its adjoint, when it does not arrive
/// as a buffer already, is written there first, and each operand reads its block of it.
template <class L, class R, std::size_t Axis>
struct saved_extra<concat_node<L, R, Axis>> {
  using N = concat_node<L, R, Axis>;
  using type = reduction_state<value_type_t<N>, shape_of_t<N>>;
};
template <class A, std::size_t Axis, row_kind K>
struct saved_extra<row_node<A, Axis, K>> {
  using N = row_node<A, Axis, K>;
  using type = row_state<value_type_t<N>, shape_of_t<N>>;
};
/// A kept reshape's adjoint buffer, as a concat's.
template <class A, class S>
  requires is_kept_reshape<reshape_node<A, S>>::value
struct saved_extra<reshape_node<A, S>> {
  using N = reshape_node<A, S>;
  using type = reduction_state<value_type_t<N>, shape_of_t<N>>;
};
/// A let's placeholder bound to the let's buffer (api/saved.hpp, keep_let): in a backward
/// call, the let's adjoint buffer as the target of the kernels that add the adjoints of its
/// reads (ad/push.hpp); null storage otherwise. (The kernels point at it in the call's
/// expression, which is const; they write through its data pointer, never the object.)
template <class T, class S, class Z>
struct let_state {
  let_grad<T, S, Z> g;
};
template <class Z>
struct saved_extra<var_node<Z>> {
  using type = let_state<value_type_t<Z>, shape_of_t<Z>, Z>;
};
/// Whether a kept node N has an adjoint buffer of its own (a sum or mean reduction).
template <class N>
struct has_reduction_state : std::false_type {};
template <class T, class S>
struct has_reduction_state<reduction_state<T, S>> : std::true_type {};
template <class N>
inline constexpr bool stages_reduction_v = has_reduction_state<typename saved_extra<N>::type>::value;

/// The memory space of the call's buffers for node N (its value, its adjoint): N's own, or
/// the host's for a node that reads no memory.
template <class N>
using buffer_space_t = std::conditional_t<std::is_void_v<space_of_t<N>>, host_space, space_of_t<N>>;

/// N's value, read from a buffer (buf_) filled before the expression runs; node_ points at N
/// itself (kept by the call that made the saved node: api/saved.hpp, saved_space::keep_node),
/// through which backward pushes adjoints. By pointer: held by value, each saved node would
/// copy the whole subtree below it, and a chain of n kept values (an unrolled recurrence)
/// would make the transform's frames O(n^2) bytes of stack.
template <class N, class L>
struct saved_node {
  using is_gradix_expression = void;
  using node_type = N;
  using value_type = value_type_t<N>;
  using shape_type = shape_of_t<N>;
  using layout_type = L;
  using space_type = space_of_t<N>;
  using buffer_type = tensor_view<value_type const, shape_type, L, buffer_space_t<N>>;
  N const* node_ = nullptr;
  buffer_type buf_;
  /// A max reduction's arg-max, when N is one: per output element (row-major order), the
  /// operand coordinate along each reduced axis (in axis order) of its first arg-max.
  index_t const* argmax_ = nullptr;
  /// A matrix product's operands and backward buffers (saved_extra).
  [[no_unique_address]] typename saved_extra<N>::type extra_{};
  GRADIX_HOST_DEVICE constexpr shape_type const& shape() const { return buf_.shape(); }
  constexpr N const& node() const { return *node_; }
};

/// The node of a saved_node copied into a backward kernel's value expression (ad::light):
/// only its type (value, shape, layout, space); the kernel reads the buffer, and the node
/// with its whole subtree stays in the call's expression, once.
template <class N>
struct node_ref {
  using is_gradix_expression = void;
  using node_type = N;
  using value_type = value_type_t<N>;
  using shape_type = shape_of_t<N>;
  using layout_type = layout_of_t<N>;
  using space_type = space_of_t<N>;
};
template <class N>
struct is_node_ref : std::false_type {};
template <class N>
struct is_node_ref<node_ref<N>> : std::true_type {};

template <class N>
struct is_saved_node : std::false_type {};
template <class N, class L>
struct is_saved_node<saved_node<N, L>> : std::true_type {};

/// Keeps the value of x for the duration of each call that runs the expression: it is
/// computed once, in a pre-pass, and read from a buffer wherever the expression reads x
/// (docs/ad.md, "Saved values"). Gradients flow through it unchanged. Use it for a
/// sub-expression that is read many times per element: one that is broadcast, or one whose
/// value a backward kernel reads at many domain coordinates.
template <operand X>
constexpr auto saved(X&& x) {
  using N = detail::node_t<X>;
  static_assert(std::is_floating_point_v<value_type_t<N>>,
                "gradix::saved: only floating-point values are kept (the expression has an "
                "integer element type)");
  if constexpr (std::is_floating_point_v<value_type_t<N>>)
    return save_mark_node<N>{detail::as_node(static_cast<X&&>(x))};
}

}  // namespace gradix
