#pragma once
/// \file
/// Leaves that take part in AD: parameter leaves (a view plus a pointer to the parameter's
/// gradient storage; identity is that pointer, a run-time fact) and detach (no gradient).

#include "gradix/config.hpp"
#include "gradix/core/view.hpp"
#include "gradix/expr/node.hpp"

namespace gradix {

/// out[c] = value of the parameter at c
/// backward: d_param[c] += d_out[c] (into the storage G points at)
///
/// `view_` is the value as it was when the expression was built; `src_` the parameter's
/// value tensor itself. Before an expression runs, the API refreshes view_ from src_ (the
/// value may have been replaced by one of the same shape) and rejects a changed shape.
template <class View, class G>
struct param_node {
  using is_gradix_expression = void;
  using view_type = View;
  using grad_type = G;
  using value_type = typename View::value_type;
  using shape_type = typename View::shape_type;
  using layout_type = typename View::layout_type;
  using space_type = typename View::space_type;
  using source_type = tensor<typename View::storage_type, shape_type, layout_type>;
  View view_;
  G* grad_;
  source_type const* src_;
#if defined(GRADIX_CHECK_LIFETIMES)
  std::uint64_t src_gen_ = 0;  // generation of the parameter (core/lifetime.hpp)
#endif
  GRADIX_HOST_DEVICE constexpr shape_type const& shape() const { return view_.shape(); }
};

/// out[c] = arg[c]; backward: nothing (the gradient stops here)
template <class Arg>
struct detach_node {
  using is_gradix_expression = void;
  using is_elementwise_node = void;  // reads arg_ at its own coordinate
  using value_type = value_type_t<Arg>;
  using shape_type = shape_of_t<Arg>;
  using layout_type = layout_of_t<Arg>;
  using space_type = space_of_t<Arg>;
  Arg arg_;
  GRADIX_HOST_DEVICE constexpr shape_type shape() const { return arg_.shape(); }
};

/// Stops gradients: `detach(e)` has e's value and no derivative.
template <operand X>
constexpr auto detach(X&& x) {
  return detach_node<detail::node_t<X>>{detail::as_node(static_cast<X&&>(x))};
}

}  // namespace gradix
