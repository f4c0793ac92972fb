#pragma once
/// \file
/// Run-time checks of a device expression before a device backend runs it: every gather by
/// indices in device memory (`device_index_vec`, from `grid::indices` or `indices(view)` of a
/// cuda_space view) is checked by a validation kernel against the extent it indexes
/// (grid::validate_indices: the first bad position through an atomic min, one host read).
/// The error is the host's (expr/index.hpp): `gradix::gather: index 7 (position 2) is out of
/// range for axis 1 of extent 5`. It comes before anything is written: grid::backward
/// validates first, so parameters and gradients stay as they were.

#include "gradix/backend/grid/scatter.hpp"
#include "gradix/config.hpp"
#include "gradix/expr/index.hpp"
#include "gradix/expr/node.hpp"
#include "gradix/expr/visit.hpp"

#include <string>
#include <type_traits>

namespace gradix::grid {

namespace detail {
template <class N>
struct index_node_parts {
  static constexpr bool value = false;
};
template <class A, std::size_t Axis, class Idx>
struct index_node_parts<index_node<A, Axis, Idx>> {
  static constexpr bool value = true;
  static constexpr std::size_t axis = Axis;
  using index_kind = Idx;
};

/// Calls f(node) for every index_node of n (and of its operands), in a fixed order.
template <class N, class F>
void for_each_index_node(N const& n, F&& f) {
  using D = std::remove_cvref_t<N>;
  if constexpr (index_node_parts<D>::value) {
    f(n);
    for_each_index_node(n.arg_, f);
  } else if constexpr (is_view_v<D> || ::gradix::detail::is_param_node<D>::value) {
  } else if constexpr (is_let_node<D>::value) {
    for_each_index_node(n.z_, f);
    for_each_index_node(n.body_, f);
  } else if constexpr (requires { n.lhs_; n.rhs_; }) {
    for_each_index_node(n.lhs_, f);
    for_each_index_node(n.rhs_, f);
  } else if constexpr (requires { n.arg_; n.pos_; }) {
    for_each_index_node(n.pos_, f);
    for_each_index_node(n.arg_, f);
  } else if constexpr (requires { n.pos_; }) {
    for_each_index_node(n.pos_, f);
  } else if constexpr (requires { n.arg_; }) {
    for_each_index_node(n.arg_, f);
  }
}
}  // namespace detail

/// Validates every device index vector of expression e on l's device (see the file comment).
/// Waits for the device once per device index vector whose bounds the host does not know
/// (grid::device_indices records them); an expression without such a vector launches nothing.
template <class L, class E>
void validate_expression(L& l, E const& e, launch_options o = {}) {
  detail::for_each_index_node(e, [&](auto const& n) {
    using P = detail::index_node_parts<std::remove_cvref_t<decltype(n)>>;
    using Idx = typename P::index_kind;
    if constexpr (is_device_index<Idx>::value) {
      index_t const extent = n.arg_.shape().extent(P::axis);
      auto const& iv = n.idx_;
      // bounds the host knows (grid::device_indices, as of its last upload): no kernel when
      // they are in range
      if (!(iv.bounds_ && iv.bounds_->within(extent))) {
        std::string const op = std::string("gradix::") + Idx::name;
        validate_indices(l, iv.data_, iv.size_, iv.stride_, extent, op.c_str(), P::axis, o);
      }
    }
  });
}

}  // namespace gradix::grid
