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

/// slot_[k] = v for k < n_.
struct fill_int32_kernel {
  static constexpr bool uses_barriers = false;
  std::int32_t* p_;
  index_t n_;
  std::int32_t v_;
  GRADIX_KERNEL_BODY
  template <class Ctx>
  GRADIX_HOST_DEVICE void operator()(Ctx const& c) const {
    for (index_t k = grid_first(c); k < n_; k += grid_step(c)) p_[k] = v_;
  }
};

/// One block: rank_[s] = the number of new segment heads before s in the sorted keys (a head
/// is new when its row has no slot), and *total_ = their number. Chunks of threads() keys,
/// an inclusive Hillis-Steele scan of each in shared memory, a carry between chunks.
struct new_rows_scan_kernel {
  static constexpr bool uses_barriers = true;
  using value_type = std::int32_t;
  scatter_key const* keys_;
  std::int32_t const* slot_of_;
  index_t n_;
  std::int32_t* rank_;
  std::int32_t* total_;
  GRADIX_HOST_DEVICE bool is_new(index_t s) const {
    if (s >= n_) return false;
    index_t const t = keys_[s].target;
    return (s == 0 || keys_[s - 1].target != t) && slot_of_[t] < 0;
  }
  GRADIX_KERNEL_BODY
  template <class Ctx>
  GRADIX_HOST_DEVICE void operator()(Ctx const& c) const {
    std::int32_t* const sh = c.template shared<std::int32_t>();
    index_t const t = c.thread(), b = c.threads();
    std::int32_t carry = 0;
    for (index_t base = 0; base < n_; base += b) {
      index_t const s = base + t;
      std::int32_t const f = is_new(s) ? 1 : 0;
      sh[t] = f;
      c.sync();
      for (index_t off = 1; off < b; off *= 2) {
        std::int32_t const add = t >= off ? sh[t - off] : 0;
        c.sync();
        sh[t] += add;
        c.sync();
      }
      if (s < n_) rank_[s] = carry + sh[t] - f;
      carry += sh[b - 1];
      c.sync();  // everyone has read sh[b - 1] before the next chunk writes sh
    }
    if (t == 0) *total_ = carry;
  }
};

/// For each new head s: slot = *count_ + rank_[s]; slot_of_[row] = slot, ids_[slot] = row,
/// and the slot's slice cleared.
template <class T>
struct assign_slots_kernel {
  static constexpr bool uses_barriers = false;
  scatter_key const* keys_;
  std::int32_t* slot_of_;
  std::int32_t* ids_;
  T* data_;
  std::int32_t const* rank_;
  std::int32_t const* count_;
  index_t n_;
  index_t cols_;
  GRADIX_KERNEL_BODY
  template <class Ctx>
  GRADIX_HOST_DEVICE void operator()(Ctx const& c) const {
    for (index_t s = grid_first(c); s < n_; s += grid_step(c)) {
      index_t const t = keys_[s].target;
      if ((s > 0 && keys_[s - 1].target == t) || slot_of_[t] >= 0) continue;
      std::int32_t const slot = *count_ + rank_[s];
      slot_of_[t] = slot;
      ids_[slot] = std::int32_t(t);
      for (index_t d = 0; d < cols_; ++d) data_[index_t(slot) * cols_ + d] = T(0);
    }
  }
};

/// *count_ += *total_ (one thread).
struct bump_count_kernel {
  static constexpr bool uses_barriers = false;
  std::int32_t* count_;
  std::int32_t const* total_;
  GRADIX_KERNEL_BODY
  template <class Ctx>
  GRADIX_HOST_DEVICE void operator()(Ctx const& c) const {
    if (grid_first(c) == 0) *count_ += *total_;
  }
};

/// ... or of a row's slot in sparse storage (segment_sum_kernel, backend/grid/scatter.hpp).
template <class T>
struct slot_rows {
  T* data_;
  std::int32_t const* slot_of_;
  index_t cols_;
  GRADIX_HOST_DEVICE T& at(index_t t, index_t d) const { return data_[index_t(slot_of_[t]) * cols_ + d]; }
};

/// For k < *count_: slot_of_[ids_[k]] = -1; then (thread 0, in a later launch) *count_ = 0.
struct forget_slots_kernel {
  static constexpr bool uses_barriers = false;
  std::int32_t* slot_of_;
  std::int32_t const* ids_;
  std::int32_t const* count_;
  index_t bound_;
  GRADIX_KERNEL_BODY
  template <class Ctx>
  GRADIX_HOST_DEVICE void operator()(Ctx const& c) const {
    index_t const n = *count_;
    for (index_t k = grid_first(c); k < bound_ && k < n; k += grid_step(c)) slot_of_[ids_[k]] = -1;
  }
};

/// Sparse row gradient storage of a rows x cols table of T on launcher L's device.
template <class T, class L>
class device_sparse_rows {
 public:
  using value_type = T;

  device_sparse_rows(L& l, index_t rows, index_t cols) : l_(&l), rows_(rows), cols_(cols) {
    if (rows < 0 || cols < 0 || rows > index_t(INT32_MAX))
      ::gradix::detail::fail("gradix::device_sparse_rows: ", rows, " rows of ", cols,
                             " columns (rows must be at most ", INT32_MAX, ", the slot map's limit)");
    slot_of_ = static_cast<std::int32_t*>(l.allocate(std::size_t(rows ? rows : 1) * sizeof(std::int32_t)));
    count_ = static_cast<std::int32_t*>(l.allocate(2 * sizeof(std::int32_t)));  // count, and a call's total
    l.fill_zero(count_, 2 * sizeof(std::int32_t));
    if (rows > 0) l.launch(shape_for(rows, {}, l.max_threads()), fill_int32_kernel{slot_of_, rows, -1});
  }
  device_sparse_rows(device_sparse_rows const&) = delete;
  device_sparse_rows& operator=(device_sparse_rows const&) = delete;
  ~device_sparse_rows() {
    free_slices();
    l_->deallocate(slot_of_);
    l_->deallocate(count_);
  }

  index_t rows() const { return rows_; }
  index_t cols() const { return cols_; }
  /// Capacity in rows of the slices (device memory held: capacity x cols elements).
  index_t capacity() const { return capacity_; }

  /// Adds src(i, :) into row idx[i * stride] for i < n (device memory; see the file
  /// comment). Validates every index first: out of range, a gradix::error naming `op`, and
  /// nothing stored or changed.
  template <class I, class E>
  void scatter_add(I const* idx, index_t n, index_t stride, E const& src, char const* op = "gradix::scatter_add",
                   launch_options o = {}) {
    static_assert(shape_of_t<E>::rank == 2, "gradix::device_sparse_rows::scatter_add: src is rank 2 (n x cols)");
    auto const se = src.shape().extents();
    if (se[0] != n || se[1] != cols_)
      ::gradix::detail::fail(op, ": the source rows have shape ", to_string(src.shape()), " for ", n,
                             " indices into rows of ", cols_, " columns");
    L& l = *l_;
    validate_indices(l, idx, n, stride, rows_, op, 0, o);
    if (n == 0) return;
    index_t const bound = bound_ + n < rows_ ? bound_ + n : rows_;
    if (bound > capacity_) grow(bound);
    bound_ = bound;
    index_t const m = detail::key_count(n);
    detail::scratch<L> keys(l, std::size_t(m) * sizeof(scatter_key));
    detail::scratch<L> rank(l, std::size_t(n) * sizeof(std::int32_t));
    scatter_key* const kp = keys.template as<scatter_key>();
    detail::sort_keys(l, kp, m, idx, n, stride, o);
    index_t const st = detail::reduce_threads(o, l.max_threads());
    std::int32_t* const rk = rank.template as<std::int32_t>();
    l.launch(launch_shape{1, st, std::size_t(st) * sizeof(std::int32_t)},
             new_rows_scan_kernel{kp, slot_of_, n, rk, count_ + 1});
    l.launch(shape_for(n, o, l.max_threads()), assign_slots_kernel<T>{kp, slot_of_, ids_, data_, rk, count_, n, cols_});
    l.launch(launch_shape{1, 1, 0}, bump_count_kernel{count_, count_ + 1});
    if (cols_ > 0)
      l.launch(shape_for(n * cols_, o, l.max_threads()),
               segment_sum_kernel<slot_rows<T>, E, T>{{data_, slot_of_, cols_}, src, kp, n, cols_});
  }

  /// Forgets the stored rows (keeps the memory); touches only their map entries.
  void zero() {
    if (bound_ > 0) {
      l_->launch(shape_for(bound_, {}, l_->max_threads()), forget_slots_kernel{slot_of_, ids_, count_, bound_});
      l_->fill_zero(count_, sizeof(std::int32_t));
    }
    bound_ = 0;
  }

  /// The number of stored rows (waits for the device).
  index_t size() const {
    std::int32_t n = 0;
    l_->copy_to_host(&n, count_, sizeof n);
    return n;
  }
  /// The stored rows' ids in slot order (waits for the device).
  std::vector<std::int32_t> ids() const {
    std::vector<std::int32_t> r(static_cast<std::size_t>(size()));
    if (!r.empty()) l_->copy_to_host(r.data(), ids_, r.size() * sizeof(std::int32_t));
    return r;
  }
  /// The gradient as a dense host tensor [rows, cols] (waits for the device).
  tensor<T, shape<dyn, dyn>> download_dense() const {
    tensor<T, shape<dyn, dyn>> d(dims(rows_, cols_));
    auto const id = ids();
    std::vector<T> slices(id.size() * std::size_t(cols_));
    if (!slices.empty()) l_->copy_to_host(slices.data(), data_, slices.size() * sizeof(T));
    for (std::size_t k = 0; k < id.size(); ++k)
      for (index_t c = 0; c < cols_; ++c) d(index_t(id[k]), c) = slices[k * std::size_t(cols_) + std::size_t(c)];
    return d;
  }

 private:
  void grow(index_t need) {
    index_t cap = capacity_ ? capacity_ * 2 : 16;
    if (cap < need) cap = need;
    if (cap > rows_) cap = rows_;
    auto* ids = static_cast<std::int32_t*>(l_->allocate(std::size_t(cap) * sizeof(std::int32_t)));
    index_t const elems = cap * cols_ > 0 ? cap * cols_ : 1;
    auto* data = static_cast<T*>(l_->allocate(std::size_t(elems) * sizeof(T)));
    if (capacity_ > 0) {
      l_->copy_device_to_device(ids, ids_, std::size_t(capacity_) * sizeof(std::int32_t));
      l_->copy_device_to_device(data, data_, std::size_t(capacity_ * cols_) * sizeof(T));
    }
    free_slices();
    ids_ = ids;
    data_ = data;
    capacity_ = cap;
  }
  void free_slices() {
    if (ids_) l_->deallocate(ids_);
    if (data_) l_->deallocate(data_);
    ids_ = nullptr;
    data_ = nullptr;
  }

  L* l_;
  index_t rows_, cols_;
  std::int32_t* slot_of_ = nullptr;
  std::int32_t* count_ = nullptr;  // [0]: stored rows, [1]: new rows of the last call
  std::int32_t* ids_ = nullptr;
  T* data_ = nullptr;
  index_t capacity_ = 0;
  index_t bound_ = 0;  // host-side upper bound on the count
};

}  // namespace gradix::grid
