#pragma once
/// \file
/// Row operations: softmax, log_softmax, layer norm and RMS norm over one axis, one node kind
/// (the builders are in api/softmax.hpp and expr/norm.hpp). Every call keeps the value
/// (api/saved.hpp computes it row by row), and the backward reads that kept value instead of
/// recomputing the row statistics, as PyTorch's does (sums and means over the axis; s, l, y
/// the kept values, r = 1 / sqrt(var + eps) the kept per-row factor of the norms):
///
///   softmax      s = exp(x - m) / sum(exp(x - m))           d x = s (d s - sum(d s s))
///   log_softmax  l = (x - m) - log(sum(exp(x - m)))         d x = d l - exp(l) sum(d l)
///   layer_norm   y = (x - mean(x)) r, var the biased one    d x = r (d y - mean(d y) - y mean(d y y))
///   rms_norm     y = x r, var = mean(x^2)                   d x = r (d y - y mean(d y y))
///
/// (m the max over the axis). The adjoint d y is read from a buffer of the node's shape: the
/// adjoint itself when it arrives as one (a product's operand adjoint), else the node's own
/// (gout), written first; d x is written into the node's second buffer (gin), from which the
/// operand's plan runs (ad::row_use).

#include "gradix/config.hpp"
#include "gradix/expr/node.hpp"
#include "gradix/grad/adjoint_buffer.hpp"

#include <type_traits>

namespace gradix {

enum class row_kind { softmax, log_softmax, layer_norm, rms_norm };

/// out = the row operation K of arg over Axis (eps_: the norms' epsilon)
template <class A, std::size_t Axis, row_kind K>
struct row_node {
  using is_gradix_expression = void;
  using value_type = value_type_t<A>;
  using shape_type = shape_of_t<A>;
  using layout_type = row_major;
  using space_type = space_of_t<A>;
  static constexpr std::size_t axis = Axis;
  static constexpr row_kind kind = K;
  static constexpr bool norm = K == row_kind::layer_norm || K == row_kind::rms_norm;
  A arg_;
  value_type eps_{};
  GRADIX_HOST_DEVICE constexpr shape_type shape() const { return arg_.shape(); }
};
template <class N>
struct is_row_node : std::false_type {};
template <class A, std::size_t Axis, row_kind K>
struct is_row_node<row_node<A, Axis, K>> : std::true_type {};

constexpr char const* row_kind_name(row_kind k) {
  return k == row_kind::softmax ? "softmax" : k == row_kind::log_softmax ? "log_softmax"
                                          : k == row_kind::layer_norm    ? "layer_norm"
                                                                         : "rms_norm";
}

/// A kept row node's buffers: the norms' factor r per row (every call), and in a backward
/// call its adjoint (when it arrives otherwise than as a buffer) and its operand's.
template <class T, class S>
struct row_state {
  T* rstd = nullptr;
  adjoint_buffer<T, S> gout;
  T* gin = nullptr;
};

}  // namespace gradix
