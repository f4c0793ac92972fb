#pragma once
/// \file
/// The softmax node (expr/softmax.hpp builds it): softmax or log_softmax over one axis, a
/// value every call keeps (api/saved.hpp computes it row by row: the max, the sum of
/// exponentials, the result), whose backward reads that kept value instead of recomputing
/// the exponentials, as PyTorch's does:
///
///   softmax      s = exp(x - m) / sum(exp(x - m)),   d x = s (d s - sum(d s s))
///   log_softmax  l = (x - m) - log(sum(exp(x - m))), d x = d l - exp(l) sum(d l)
///
/// (sums over the axis, m the max over it). The adjoint d s is read from a buffer of the
/// node's shape: the adjoint itself when it arrives as one (a product's operand adjoint),
/// else the node's own (gout), written first; d x is written into the node's second buffer
/// (gin), from which the operand's plan runs (ad::softmax_use).

#include "gradix/config.hpp"
#include "gradix/expr/node.hpp"
#include "gradix/grad/workspace.hpp"

#include <type_traits>

namespace gradix {

/// out = softmax (Log: log_softmax) of arg over Axis
template <class A, std::size_t Axis, bool Log>
struct softmax_node {
  using is_gradix_expression = void;
  using value_type = value_type_t<A>;
  using shape_type = shape_of_t<A>;
  using layout_type = row_major;
  using space_type = space_of_t<A>;
  static constexpr std::size_t axis = Axis;
  static constexpr bool log = Log;
  A arg_;
  GRADIX_HOST_DEVICE constexpr shape_type shape() const { return arg_.shape(); }
};
template <class N>
struct is_softmax_node : std::false_type {};
template <class A, std::size_t Axis, bool Log>
struct is_softmax_node<softmax_node<A, Axis, Log>> : std::true_type {};

/// A kept softmax's buffers in a backward call: its adjoint (when it arrives otherwise than
/// as a buffer) and its operand's adjoint.
template <class T, class S>
struct softmax_state {
  workspace_grad<T, S> gout;
  T* gin = nullptr;
};

}  // namespace gradix
