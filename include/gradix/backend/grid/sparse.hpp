#pragma once
/// \file
/// Sparse gradient storage on the device for a rows x columns table (sparse along axis 0,
/// each stored row a contiguous slice), with slot assignment on the device: a backward call
/// makes no host round trip to find or create slots.
///
/// Device memory: a slot map (one int32 per table row, -1 = not stored; allocated and set
/// once, when the storage is made), the ids of the stored rows, their slices, and the count.
/// The host keeps only an upper bound on the count (every call adds at most its number of
/// indices), and grows the slices and ids in stream order when that bound passes the
/// capacity. So nothing proportional to the table's rows is allocated or cleared after
/// construction: zero() resets only the stored rows' map entries.
///
/// scatter_add adds rows through the deterministic path of backend/grid/scatter.hpp: the
/// (row, position) keys are sorted, each new row of a call gets the next slot in row order
/// (an exclusive scan over the sorted segment heads), its slice is zeroed, and each segment's
/// rows are summed in position order and added into its slot once. The same bits, slots and
/// ids on every run and launch shape.

#include "gradix/backend/grid/grad.hpp"
#include "gradix/backend/grid/launch.hpp"
#include "gradix/backend/grid/reduce.hpp"
#include "gradix/backend/grid/scatter.hpp"
#include "gradix/config.hpp"
#include "gradix/core/error.hpp"
#include "gradix/core/tensor.hpp"
#include "gradix/core/view.hpp"
#include "gradix/eval/evaluator.hpp"

#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>
#include <vector>

namespace gradix::grid {

/// ... or of a row's slot in sparse storage (segment_sum_kernel, backend/grid/scatter.hpp).
template <class T>
struct slot_rows {
  T* data_;
  std::int32_t const* slot_of_;
  index_t cols_;
  GRADIX_HOST_DEVICE T& at(index_t t, index_t d) const { return data_[index_t(slot_of_[t]) * cols_ + d]; }
};

/// Sparse row gradient storage of a rows x cols table of T on launcher L's device: the
/// device_sparse_grad of a row-major table along axis 0 (backend/grid/grad.hpp), with a
/// scatter-add of rows.
template <class T, class L>
class device_sparse_rows : public device_sparse_grad<T, shape<dyn, dyn>, row_major, 0, L> {
  using base = device_sparse_grad<T, shape<dyn, dyn>, row_major, 0, L>;

 public:
  device_sparse_rows(L& l, index_t rows, index_t cols) : base(l, checked_dims(rows, cols)) {}

  index_t rows() const { return this->shape().extent(0); }
  index_t cols() const { return this->shape().extent(1); }

  /// Adds src(i, :) into row idx[i * stride] for i < n (device memory; see the file
  /// comment). Validates every index first: out of range, a gradix::error naming `op`, and
  /// nothing stored or changed.
  template <class I, class E>
  void scatter_add(I const* idx, index_t n, index_t stride, E const& src, char const* op = "gradix::scatter_add",
                   launch_options o = {}) {
    static_assert(shape_of_t<E>::rank == 2, "gradix::device_sparse_rows::scatter_add: src is rank 2 (n x cols)");
    index_t const cols = this->cols();
    auto const se = src.shape().extents();
    if (se[0] != n || se[1] != cols)
      ::gradix::detail::fail(op, ": the source rows have shape ", to_string(src.shape()), " for ", n,
                             " indices into rows of ", cols, " columns");
    L& l = this->launcher();
    validate_indices(l, idx, n, stride, rows(), op, 0, o);
    if (n == 0) return;
    index_t const m = detail::key_count(n);
    detail::device_buffer<L> keys(l, std::size_t(m) * sizeof(scatter_key));
    scatter_key* const kp = keys.template as<scatter_key>();
    detail::sort_keys(l, kp, m, idx, n, stride, o);
    this->reserve_sorted(kp, n, o);
    if (cols > 0)
      l.launch(shape_for(n * cols, o, l.max_threads()),
               segment_sum_kernel<slot_rows<T>, E, T>{{this->data(), this->slot_map(), cols}, src, kp, n, cols});
  }

  /// The gradient as a dense host tensor [rows, cols] (waits for the device).
  tensor<T, shape<dyn, dyn>> download_dense() const { return this->download(); }

 private:
  static shape<dyn, dyn> checked_dims(index_t rows, index_t cols) {
    if (rows < 0 || cols < 0 || rows > index_t(INT32_MAX))
      ::gradix::detail::fail("gradix::device_sparse_rows: ", rows, " rows of ", cols,
                             " columns (rows must be at most ", INT32_MAX, ", the slot map's limit)");
    return shape<dyn, dyn>(dims(rows, cols));
  }
};

}  // namespace gradix::grid
