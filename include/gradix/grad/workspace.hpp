#pragma once
/// \file
/// The target of an update kernel that writes into a call's workspace instead of a
/// parameter's gradient: the adjoint of a matrix product, materialised so that its backward
/// can be two products (docs/ad.md, "Matrix products"). It presents the same target as dense
/// storage (data, strides, shape) and tracks nothing: the call clears it before its kernels
/// run and drops it when it returns.

#include "gradix/config.hpp"
#include "gradix/core/array.hpp"
#include "gradix/core/layout.hpp"
#include "gradix/core/shape.hpp"

namespace gradix {

/// A row-major buffer of shape S in a call's workspace, as an update kernel's target.
template <class T, class S>
class workspace_grad {
 public:
  using value_type = T;
  using shape_type = S;
  static constexpr std::size_t rank = S::rank;
  static constexpr std::size_t axis = 0;
  static constexpr bool sparse = false;
  static constexpr int unit_axis = rank == 0 ? -1 : int(rank) - 1;

  constexpr workspace_grad() = default;
  constexpr workspace_grad(T* data, S s) : data_(data), shape_(s), strides_(contiguous_strides<row_major>(s.extents())) {}

  constexpr S const& shape() const { return shape_; }
  constexpr T* data() const { return data_; }
  constexpr array<index_t, rank> const& strides() const { return strides_; }
  // nothing is tracked: every slice counts as touched
  constexpr void touch(index_t) const {}
  constexpr void touch_all() const {}
  constexpr bool is_touched(index_t) const { return true; }

 private:
  T* data_ = nullptr;
  S shape_{};
  array<index_t, rank> strides_{};
};

}  // namespace gradix
