#pragma once
/// \file
/// Device parameters: a device tensor with gradient storage in device memory
/// (backend/grid/grad.hpp). `auto p = grid::param(grid::device_tensor<...>::from_host(l, t),
/// sparse_grad<1>)`. In expressions a device parameter is a leaf, as a host parameter is
/// (`param_node` over a cuda_space view), so the same plan types of ad/ derive its backward;
/// grid::backward (backend/grid/backward.hpp) runs them on the device.
///
/// The value's memory is fixed for the parameter's life (write into it with `upload` or
/// grid::assign; it cannot be replaced by another tensor), so an expression's view of it
/// stays valid. Not copyable; moving keeps the storage in place (expressions point at it).
///
/// The value may be half-width (gx::bfloat16, gx::half: storage only, docs/ops.md): the
/// gradient storage and an optimizer's state are then float, and an optimizer's update rounds
/// into the value once per element and step, to nearest (ties to even) or stochastically
/// (`set_rounding`), as for a host parameter (docs/optim.md, "Half-width parameters").

#include "gradix/backend/grid/grad.hpp"
#include "gradix/backend/grid/memory.hpp"
#include "gradix/config.hpp"
#include "gradix/core/error.hpp"
#include "gradix/core/half.hpp"
#include "gradix/core/rng.hpp"
#include "gradix/core/view.hpp"
#include "gradix/expr/index.hpp"
#include "gradix/expr/param.hpp"
#include "gradix/grad/storage.hpp"

#include <cstdint>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

namespace gradix::grid {

template <class T, class Shape, class Layout, class Spec, class L>
class device_parameter {
 public:
  using is_gradix_param = void;
  using value_type = T;
  using shape_type = Shape;
  using layout_type = Layout;
  using grad_spec = Spec;
  using launcher_type = L;
  static constexpr std::size_t rank = Shape::rank;
  using storage_type = device_grad_t<compute_type_t<T>, Shape, Layout, Spec, L>;  // float for bfloat16, half
  using node_type = param_node<tensor_view<T const, Shape, Layout, cuda_space>, storage_type>;

  explicit device_parameter(device_tensor<T, Shape, L, Layout> value)
      : impl_(std::make_unique<impl>(std::move(value))) {}

  /// The value (device memory; upload into it, or assign to its view, between backward calls).
  device_tensor<T, Shape, L, Layout>& value() { return impl_->value_; }
  device_tensor<T, Shape, L, Layout> const& value() const { return impl_->value_; }
  /// The accumulated gradient (device storage, dense or sparse).
  storage_type& grad() { return impl_->grad_; }
  storage_type const& grad() const { return impl_->grad_; }
  Shape const& shape() const { return impl_->value_.shape(); }
  L& launcher() const { return impl_->value_.launcher(); }

  /// How optimizer updates round into a half-width value (as gx::parameter's: to nearest,
  /// ties to even, unless set to `stochastic_rounding(seed)`; ignored for other types).
  gradix::rounding rounding() const { return impl_->rounding_; }
  void set_rounding(gradix::rounding r) {
    impl_->rounding_ = r;
    impl_->updates_ = 0;
  }
  /// Updates rounded so far under the current rounding (the counter stochastic rounding draws from).
  std::uint64_t rounded_updates() const { return impl_->updates_; }
  void set_rounded_updates(std::uint64_t n) { impl_->updates_ = n; }
  /// The random-bits key of the next update (and counts it): rng::bits(seed, n).
  std::uint64_t next_rounding_key() { return rng::bits(impl_->rounding_.seed, impl_->updates_++); }

  /// The leaf node that expressions hold.
  node_type node() const {
    node_type n{impl_->value_.cview(), &impl_->grad_, nullptr};
    return n;
  }

  /// An index expression (`E(all, indices(i))`, the indices a cuda_space view or a
  /// device_index_vec; ranges, at(j) and integers as on the host).
  template <class... A>
    requires(sizeof...(A) == rank)
  auto operator()(A const&... a) const& {
    return index(node(), a...);
  }
  template <class... A>
    requires(sizeof...(A) == rank)
  void operator()(A const&... a) && = delete;  // the expression would outlive the parameter

 private:
  struct impl {
    explicit impl(device_tensor<T, Shape, L, Layout> v)
        : value_(std::move(v)), grad_(value_.launcher(), value_.shape()) {}
    device_tensor<T, Shape, L, Layout> value_;
    storage_type grad_;
    gradix::rounding rounding_{};
    std::uint64_t updates_ = 0;
  };
  std::unique_ptr<impl> impl_;
};

/// A device parameter from a device tensor; the gradient storage is dense unless given:
/// `grid::param(l, std::move(t), sparse_grad<1>)`.
template <class T, class S, class L, class Layout, class Spec = dense_grad_t<0>>
auto param(device_tensor<T, S, L, Layout> value, Spec = {}) {
  static_assert(std::is_floating_point_v<T> || is_half_width_v<T>,
                "gradix::grid::param: a parameter's elements are floating point (float, double, "
                "gx::bfloat16 or gx::half)");
  static_assert(Spec::axis < S::rank || (S::rank == 0 && !Spec::sparse),
                "gradix::grid::param: the gradient axis is out of range for the tensor's rank (a "
                "rank-0 parameter takes dense_grad only)");
  return device_parameter<T, S, Layout, Spec, L>(std::move(value));
}

/// Indices in device memory for `E(all, grid::indices(i))`: a rank-1 device tensor of integers.
/// Its values are checked by a validation kernel each time a device backend runs the
/// expression (one wait for the device per index vector), since the device tensor can be
/// written behind the host's back. Index vectors that stay fixed over many calls are cheaper
/// as grid::device_indices.
template <class I, class S, class L, class Layout>
auto indices(device_tensor<I, S, L, Layout> const& t) {
  static_assert(S::rank == 1, "gradix::grid::indices: an index tensor must have rank 1");
  return ::gradix::indices(t.cview());
}

template <class I, class L>
auto indices(device_indices<I, L> const& t) {
  auto r = ::gradix::indices(t.cview());
  r.bounds_ = &t.bounds();  // read when the expression runs: later uploads are seen
  r.order_ = &t.order();
  return r;
}
/// (The expression would outlive the index vector.)
template <class I, class L>
void indices(device_indices<I, L>&&) = delete;

}  // namespace gradix::grid
