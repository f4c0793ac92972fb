#pragma once
/// \file
/// Parameters: a tensor with gradient storage. `auto p = param(tensor, sparse_grad<1>)`.
/// In expressions a parameter is a leaf that receives gradients from backward; plain
/// tensors are constants. A parameter is not copyable (expressions point at its gradient
/// storage); moving it keeps that storage in place.

#include "gradix/config.hpp"
#include "gradix/core/rng.hpp"
#include "gradix/core/tensor.hpp"
#include "gradix/expr/index.hpp"
#include "gradix/expr/param.hpp"
#include "gradix/grad/storage.hpp"

#include <new>
#include <type_traits>
#include <utility>

namespace gradix {

template <class T, class Shape, class Layout = row_major, class Spec = dense_grad_t<0>>
class parameter {
 public:
  using is_gradix_param = void;
  using value_type = T;  // the stored element type (the gradient's is compute_type_t<T>: float for bfloat16, half)
  using shape_type = Shape;
  using layout_type = Layout;
  using grad_spec = Spec;
  static constexpr std::size_t rank = Shape::rank;
  // (a dense rank-0 gradient tracks its one element; a sparse one has no axis)
  static constexpr bool spec_ok = Spec::axis < rank || (rank == 0 && !Spec::sparse);
  static_assert(spec_ok,
                "gradix::param: the gradient axis is out of range for the tensor's rank (a "
                "rank-0 parameter takes dense_grad only)");
  // after a failed check, dense storage: one message, not a second one from the storage
  using storage_type =
      grad_storage_t<compute_type_t<T>, Shape, Layout, std::conditional_t<spec_ok, Spec, dense_grad_t<0>>>;

  constexpr explicit parameter(tensor<T, Shape, Layout> value) : impl_(make_impl(std::move(value))) {
#if defined(GRADIX_CHECK_LIFETIMES)
    if (!std::is_constant_evaluated()) impl_->gen_ = detail::lifetime_begin(impl_);
#endif
  }
  constexpr parameter(parameter&& o) noexcept : impl_(std::exchange(o.impl_, nullptr)) {}
  constexpr parameter& operator=(parameter&& o) noexcept {
    if (this != &o) {
      release();
      impl_ = std::exchange(o.impl_, nullptr);
    }
    return *this;
  }
  parameter(parameter const&) = delete;
  parameter& operator=(parameter const&) = delete;
  constexpr ~parameter() { release(); }

  /// The value (change it freely between backward calls: expressions read it when run).
  constexpr tensor<T, Shape, Layout>& value() { return impl_->value_; }
  constexpr tensor<T, Shape, Layout> const& value() const { return impl_->value_; }
  /// The accumulated gradient (dense or sparse storage, see grad/storage.hpp).
  constexpr storage_type& grad() { return impl_->grad_; }
  constexpr storage_type const& grad() const { return impl_->grad_; }
  constexpr Shape const& shape() const { return impl_->value_.shape(); }

  /// How optimizer updates round into a half-width value (bfloat16, half; see core/half.hpp):
  /// to nearest, ties to even unless set to `stochastic_rounding(seed)`. Ignored for other
  /// element types.
  constexpr gradix::rounding rounding() const { return impl_->rounding_; }
  constexpr void set_rounding(gradix::rounding r) {
    impl_->rounding_ = r;
    impl_->updates_ = 0;
  }
  /// Updates rounded so far under the current rounding (the counter stochastic rounding draws
  /// from; saved by checkpoints).
  constexpr std::uint64_t rounded_updates() const { return impl_->updates_; }
  constexpr void set_rounded_updates(std::uint64_t n) { impl_->updates_ = n; }
  /// The random-bits key of the next update (and counts it): rng::bits(seed, n).
  constexpr std::uint64_t next_rounding_key() { return rng::bits(impl_->rounding_.seed, impl_->updates_++); }

  /// The leaf node that expressions hold.
  constexpr param_node<tensor_view<T const, Shape, Layout>, storage_type> node() const {
    param_node<tensor_view<T const, Shape, Layout>, storage_type> n{impl_->value_.view(), &impl_->grad_,
                                                                    &impl_->value_};
#if defined(GRADIX_CHECK_LIFETIMES)
    n.src_gen_ = impl_->gen_;
#endif
    return n;
  }

  /// An index expression (`E(all, indices(i))`); with integers only, element access to the value.
  template <class... A>
    requires(sizeof...(A) == rank && !(std::is_integral_v<A> && ...))
  constexpr auto operator()(A const&... a) const& {
    return index(node(), a...);
  }
  template <class... A>
    requires(sizeof...(A) == rank && !(std::is_integral_v<A> && ...))
  void operator()(A const&... a) && = delete;  // the expression would outlive the parameter
  template <class... I>
    requires(sizeof...(I) == rank && (std::is_integral_v<I> && ...))
  constexpr T const& operator()(I... i) const {
    return impl_->value_(i...);
  }

 private:
  struct impl {
    constexpr explicit impl(tensor<T, Shape, Layout> v) : value_(std::move(v)), grad_(value_.shape()) {}
    tensor<T, Shape, Layout> value_;
    storage_type grad_;
    gradix::rounding rounding_{};
    std::uint64_t updates_ = 0;
#if defined(GRADIX_CHECK_LIFETIMES)
    std::uint64_t gen_ = 0;
#endif
  };
  static constexpr impl* make_impl(tensor<T, Shape, Layout>&& value) {
    try {
      return new impl(std::move(value));
    } catch (std::bad_alloc const&) {  // the gradient storage's tracking arrays
      detail::fail("gradix::param: out of memory allocating the gradient storage for shape ",
                   to_string(value.shape()));
    }
  }
  constexpr void release() {
#if defined(GRADIX_CHECK_LIFETIMES)
    if (impl_ && !std::is_constant_evaluated()) detail::lifetime_end(impl_);
#endif
    delete impl_;
  }
  impl* impl_;  // owned; a plain pointer so that a parameter works in constant evaluation
};

/// A parameter from a tensor; the gradient storage is dense (tracking slices along axis 0)
/// unless given: `param(t, sparse_grad<1>)`, `param(t, dense_grad<1>)`.
template <class T, class S, class L, class Spec = dense_grad_t<0>>
constexpr auto param(tensor<T, S, L> value, Spec = {}) {
  constexpr bool ok = Spec::axis < S::rank || (S::rank == 0 && !Spec::sparse);
  static_assert(ok, "gradix::param: the gradient axis is out of range for the tensor's rank (a "
                    "rank-0 parameter takes dense_grad only)");
  // after a failed check, a dense parameter: one message, not a second one
  using P = parameter<T, S, L, std::conditional_t<ok, Spec, dense_grad_t<0>>>;
  return P(std::move(value));
}

}  // namespace gradix
