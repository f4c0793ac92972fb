#pragma once
/// \file
/// Which values a call keeps (types only): the cost rule of docs/ad.md, "Saved values".
///
/// A node's value is kept in a buffer (computed once per call, before anything reads it)
/// when it is
///   - a floating-point reduction read by a node other than a reduction: an elementwise
///     node that broadcasts it reads each value once per element of the broadcast axes, and
///     the backward kernels below it read it at every coordinate of their (grown) domains.
///     A reduction of a reduction reads each inner value once, and the root reduction is the
///     result itself: neither is kept;
///   - a matrix product (expr/matmul.hpp): computed by a gemm, never in the loops around it;
///   - a segment sum (expr/bag.hpp: embedding_bag), whose backward reads each bag's adjoint
///     once per row of the bag;
///   - marked by the user with `gx::saved(e)`;
///   - the operand of a let (expr/let.hpp: the shared operand of softmax and cross_entropy)
///     that keeps a value itself (a product, a reduction, ...): computed once, its buffer
///     read by every placeholder of the body. (A let over a cheaper operand is no let: the
///     body reads the operand itself, see ad::let below.)
/// Everything else (elementwise, index and view nodes) is recomputed where it is read: it
/// costs a few operations per element and is read once per element of its consumer.
/// `ad::buffer_count_v<E>` is the number of buffers a call on E keeps; api/saved.hpp builds
/// them.

#include "gradix/ad/product.hpp"
#include "gradix/config.hpp"
#include "gradix/expr/bag.hpp"
#include "gradix/expr/let.hpp"
#include "gradix/expr/matmul.hpp"
#include "gradix/expr/param.hpp"
#include "gradix/expr/rebuild.hpp"
#include "gradix/expr/reduce.hpp"
#include "gradix/expr/saved.hpp"
#include "gradix/expr/visit.hpp"

#include <cstddef>
#include <type_traits>

namespace gradix::ad {

template <class N>
struct is_max_reduction : std::false_type {};
template <class A, std::uint64_t Mask, bool Keep>
struct is_max_reduction<reduce_node<op::max_of, A, Mask, Keep>> : std::true_type {};
/// A kept max reduction whose backward reads its arg-max: one whose operand is not detached
/// (`max<1>(detach(x), keep_dims)`, the shift of a stable logsumexp, gets no gradient).
template <class N>
struct needs_argmax : is_max_reduction<N> {};
template <class A, std::uint64_t Mask, bool Keep>
struct needs_argmax<reduce_node<op::max_of, detach_node<A>, Mask, Keep>> : std::false_type {};

/// Is N's value kept, given whether its parent is a reduction or a save mark (Under; the
/// root counts as under a reduction: it is the result)?
template <class N, bool Under>
inline constexpr bool keeps_value_v =
    ::gradix::detail::is_save_mark_node_v<N> || is_matmul_node<N>::value || is_segment_sum_node<N>::value ||
    is_concat_node<N>::value || is_kept_reshape<N>::value || is_row_node<N>::value || (is_reduce_node<N>::value && !Under && std::is_floating_point_v<value_type_t<N>>);

/// Do N's operands sit under a reduction or a save mark? (A product's operands are read once
/// per element, into the product or into a buffer first: as under a reduction.)
template <class N>
inline constexpr bool operands_under_v = is_reduce_node<N>::value || is_argmax_node<N>::value ||
                                         ::gradix::detail::is_save_mark_node_v<N> || is_matmul_node<N>::value ||
                                         is_segment_sum_node<N>::value || is_concat_node<N>::value ||
                                         is_kept_reshape<N>::value || is_row_node<N>::value;

template <class N, bool Under = true>
struct buffer_count;

namespace detail {
template <class N, bool Under>
constexpr std::size_t buffer_count_of() {
  constexpr bool U = operands_under_v<N>;
  std::size_t n = keeps_value_v<N, Under> ? 1 : 0;
  if constexpr (is_saved_node<N>::value) {
    return 0;  // already kept (a transformed expression)
  } else if constexpr (is_let_node<N>::value) {
    // the operand (its own kept values, and its value: in its root's buffer when the root is
    // kept, else in one of the let's), and the body's
    using Z = std::remove_cvref_t<decltype(std::declval<N const&>().z_)>;
    using B = std::remove_cvref_t<decltype(std::declval<N const&>().body_)>;
    return (keeps_value_v<Z, true> ? 0 : 1) + buffer_count<Z, true>::value + buffer_count<B, Under>::value;
  } else if constexpr (is_bound_let_node<N>::value) {
    return buffer_count<std::remove_cvref_t<decltype(std::declval<N const&>().arg_)>, Under>::value;
  } else if constexpr (is_scan_node<N>::value) {
    // its value (the carries), and its operands' kept values (the body's are a step's own)
    return 1 + buffer_count<gradix::detail::value_operand_t<0, N>, true>::value +
           buffer_count<gradix::detail::value_operand_t<1, N>, true>::value;
  } else if constexpr (gradix::detail::value_operand_count_v<N> == 2) {
    return n + buffer_count<gradix::detail::value_operand_t<0, N>, U>::value + buffer_count<gradix::detail::value_operand_t<1, N>, U>::value;
  } else if constexpr (gradix::detail::value_operand_count_v<N> == 1) {
    return n + buffer_count<gradix::detail::value_operand_t<0, N>, U>::value;
  } else {
    return n;
  }
}
}  // namespace detail

template <class N, bool Under>
struct buffer_count : std::integral_constant<std::size_t, detail::buffer_count_of<N, Under>()> {};

/// Number of values a call (eval, value, backward, grad) on expression E keeps in buffers.
template <class E>
inline constexpr std::size_t buffer_count_v = buffer_count<std::remove_cvref_t<E>, true>::value;

/// f(z) with z's value shared: when z keeps a value of its own (buffer_count<Z, false>: a
/// product, a reduction, a segment sum, anywhere in it, its root included), a let_node whose
/// body is f(placeholder): every call computes z once into a buffer, the body reads that
/// buffer, and its backward pushes the summed adjoint of all the reads into z once. An
/// operand that keeps nothing (views, parameters, elementwise and index nodes over them)
/// costs a few operations per read: f(z) itself, which recomputes it where it is read.
/// Tag names the placeholder (expr/let.hpp, let_name): one tag per call site of the library.
template <class Tag, class Z, class F>
constexpr auto let(Z const& z, F&& f) {
  if constexpr (buffer_count<Z, false>::value == 0) {
    return f(z);
  } else {
    using Name = let_name<Tag, value_type_t<Z>, shape_of_t<Z>, space_of_t<Z>, reaches_param_v<Z>>;
    auto body = f(var_node<Name>{z.shape()});
    return gradix::detail::name_let<Name>(z, body);  // (the placeholder renamed to its level)
  }
}

}  // namespace gradix::ad
