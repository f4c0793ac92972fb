#pragma once
/// \file
/// An adjoint buffer: the target of an update kernel that writes into a call's workspace
/// instead of a parameter's gradient: the adjoint of a kept node (a matrix product, a let's
/// operand, a row node's output), materialised so that its own backward can read it whole
/// (docs/ad.md, "Matrix products", "Shared values"). It presents the same target as dense
/// storage (data, strides, shape) and tracks nothing: the call clears it before its kernels
/// run and drops it when it returns.
///
/// The library's four kinds of temporary memory, one name each: the call's workspace
/// (exec/workspace.hpp: kept values and these adjoint buffers), the host kernels' per-thread
/// scratch (backend/host/scratch.hpp: rows a fused kernel holds), and the grid's
/// device_buffer (backend/grid/reduce.hpp: a flag or sort keys for one launch).

#include "gradix/config.hpp"
#include "gradix/core/array.hpp"
#include "gradix/core/layout.hpp"
#include "gradix/core/shape.hpp"

namespace gradix {

/// A row-major buffer of shape S in a call's workspace, as an update kernel's target.
template <class T, class S>
class adjoint_buffer {
 public:
  using value_type = T;
  using shape_type = S;
  static constexpr std::size_t rank = S::rank;
  static constexpr std::size_t axis = 0;
  static constexpr bool sparse = false;
  static constexpr int unit_axis = rank == 0 ? -1 : int(rank) - 1;

  constexpr adjoint_buffer() = default;
  constexpr adjoint_buffer(T* data, S s) : data_(data), shape_(s), strides_(contiguous_strides<row_major>(s.extents())) {}

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
