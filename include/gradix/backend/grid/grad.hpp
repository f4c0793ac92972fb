#pragma once
/// \file
/// Gradient storage in device memory, for device parameters (backend/grid/param.hpp) and the
/// device backward (backend/grid/backward.hpp). Two kinds, as on the host (grad/storage.hpp):
///
/// - `device_dense_grad<T, Shape, Layout, L>`: the whole gradient, in the parameter's layout,
///   cleared when made. `zero()` clears all of it (one memset in the launcher's order).
/// - `device_sparse_grad<T, Shape, Layout, Axis, L>`: only the slices along Axis that a
///   backward wrote. Device memory: a slot map (one int32 per position along Axis, -1 = not
///   stored; set once, when the storage is made), the stored positions' ids, their slices
///   (each slice in the layout's order over the other axes, as the host's
///   sparse_grad_storage) and the count. The host keeps only an upper bound on the count,
///   and grows the ids and slices in stream order when the bound passes their capacity. Slot
///   assignment runs on the device (`reserve_sorted`): no host round trip per call, and
///   nothing proportional to the extent along Axis is allocated or cleared after the storage
///   is made (`zero()` resets the map entries of the stored slices only).
///
/// Both expose what the plan types of ad/ and the device update kernels read: `rank`, `axis`,
/// `sparse`, `unit_axis`, `strides()`, `data()` and, when sparse, `slot_map()` (device
/// pointers). `download()` copies the gradient to a dense host tensor (it waits for the
/// device).

#include "gradix/backend/grid/launch.hpp"
#include "gradix/backend/grid/memory.hpp"
#include "gradix/backend/grid/reduce.hpp"
#include "gradix/backend/grid/scatter.hpp"
#include "gradix/config.hpp"
#include "gradix/core/array.hpp"
#include "gradix/core/error.hpp"
#include "gradix/core/layout.hpp"
#include "gradix/core/shape.hpp"
#include "gradix/core/tensor.hpp"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>
#include <vector>

namespace gradix::grid {

/// Dense gradient storage on launcher L's device: a device tensor of the parameter's shape and
/// layout, zero when made.
template <class T, class Shape, class Layout, class L>
class device_dense_grad {
 public:
  using value_type = T;
  using shape_type = Shape;
  using layout_type = Layout;
  using space_type = cuda_space;
  using launcher_type = L;
  static constexpr std::size_t rank = Shape::rank;
  static constexpr std::size_t axis = 0;
  static constexpr bool sparse = false;
  static constexpr int unit_axis = rank == 0 ? -1 : int(Layout::template unit_axis<rank>);

  device_dense_grad(L& l, Shape s)
      : g_(device_tensor<T, Shape, L, Layout>::zeros(l, s)), strides_(contiguous_strides<Layout>(s.extents())) {}

  Shape const& shape() const { return g_.shape(); }
  L& launcher() const { return g_.launcher(); }
  T* data() const { return g_.data(); }
  array<index_t, rank> const& strides() const { return strides_; }
  /// A device view of the gradient.
  tensor_view<T const, Shape, Layout, cuda_space> view() const { return g_.cview(); }
  /// Clears the gradient (in the launcher's order).
  void zero() { g_.launcher().fill_zero(g_.data(), g_.bytes()); }
  /// The gradient as a host tensor (waits for the device).
  tensor<T, Shape, Layout> download() const { return g_.download(); }
  /// Taken by grid::backward, backward_only and zero_grad for the length of the call
  /// (backend/grid/backward.hpp: one host thread at a time per storage).
  bool& busy_flag() { return busy_; }

 private:
  device_tensor<T, Shape, L, Layout> g_;
  array<index_t, rank> strides_;
  bool busy_ = false;
};

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
/// is new when its position has no slot), and *total_ = their number. Chunks of threads()
/// keys, an inclusive Hillis-Steele scan of each in shared memory, a carry between chunks.
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
      detail::block_inclusive_scan(c, sh);
      if (s < n_) rank_[s] = carry + sh[t] - f;
      carry += sh[b - 1];
      c.sync();  // everyone has read sh[b - 1] before the next chunk writes sh
    }
    if (t == 0) *total_ = carry;
  }
};

/// For each new head s: slot = *count_ + rank_[s]; slot_of_[position] = slot, ids_[slot] =
/// position, and the slot's slice (cols_ elements) cleared.
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

/// For k < *count_: slot_of_[ids_[k]] = -1.
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

/// Sparse gradient storage along Axis of a tensor of T (shape Shape, layout Layout) on
/// launcher L's device (see the file comment).
template <class T, class Shape, class Layout, std::size_t Axis, class L>
class device_sparse_grad {
 public:
  using value_type = T;
  using shape_type = Shape;
  using layout_type = Layout;
  using space_type = cuda_space;
  using launcher_type = L;
  static constexpr std::size_t rank = Shape::rank;
  static constexpr std::size_t axis = Axis;
  static constexpr bool sparse = true;
  static_assert(Axis < rank,
                "gradix::grid::device_sparse_grad: the sparse axis is out of range for the tensor's rank (a "
                "rank-0 parameter has no axis to be sparse along; use dense_grad)");
  /// The contiguous axis inside a slice (-1 when a slice is one element), as on the host.
  static constexpr int unit_axis = [] {
    if (rank <= 1) return -1;
    if constexpr (std::is_same_v<Layout, col_major>) return Axis == 0 ? 1 : 0;
    else return Axis == rank - 1 ? int(rank) - 2 : int(rank) - 1;
  }();

  device_sparse_grad(L& l, Shape s) : l_(&l), shape_(s) {
    index_t const n = s.extent(Axis);
    if (n > index_t(INT32_MAX))
      ::gradix::detail::fail("gradix::grid::device_sparse_grad: extent ", n, " of the sparse axis ", Axis,
                             " exceeds the slot map's limit of ", INT32_MAX);
    array<index_t, rank> ext = s.extents();
    ext[Axis] = 1;
    strides_ = contiguous_strides<Layout>(ext);
    for (std::size_t k = 0; k < rank; ++k)
      if (k != Axis) slice_ *= s.extent(k);
    strides_[Axis] = slice_;
    slot_of_ = static_cast<std::int32_t*>(l.allocate(std::size_t(n ? n : 1) * sizeof(std::int32_t)));
    try {
      count_ = static_cast<std::int32_t*>(l.allocate(2 * sizeof(std::int32_t)));  // count, a call's total
    } catch (...) {
      l.deallocate(slot_of_);
      throw;
    }
    l.fill_zero(count_, 2 * sizeof(std::int32_t));
    if (n > 0) l.launch(shape_for(n, {}, l.max_threads()), fill_int32_kernel{slot_of_, n, -1});
    if constexpr (requires { l.allocate_host_visible(std::size_t(8)); }) {
      // (none: make_room reads the count back instead, as with a launcher without it)
      published_ = static_cast<std::uint64_t*>(l.allocate_host_visible(sizeof(std::uint64_t)));
      if (published_) *published_ = 0;
    }
  }
  device_sparse_grad(device_sparse_grad const&) = delete;
  device_sparse_grad& operator=(device_sparse_grad const&) = delete;
  /// (A moved-from storage holds no memory; only its destruction is allowed.)
  device_sparse_grad(device_sparse_grad&& o) noexcept
      : l_(o.l_), shape_(o.shape_), strides_(o.strides_), slice_(o.slice_),
        slot_of_(std::exchange(o.slot_of_, nullptr)), count_(std::exchange(o.count_, nullptr)),
        ids_(std::exchange(o.ids_, nullptr)), data_(std::exchange(o.data_, nullptr)),
        capacity_(std::exchange(o.capacity_, 0)), bound_(std::exchange(o.bound_, 0)),
        published_(std::exchange(o.published_, nullptr)), issued_(o.issued_), zeroed_at_(o.zeroed_at_) {
    for (std::uint32_t k = 0; k < publish_window; ++k) recent_n_[k] = o.recent_n_[k];
  }
  device_sparse_grad& operator=(device_sparse_grad&&) = delete;
  ~device_sparse_grad() {
    free_slices();
    if (slot_of_) l_->deallocate(slot_of_);
    if (count_) l_->deallocate(count_);
    if constexpr (requires { l_->deallocate_host_visible(published_); }) {
      if (published_) l_->deallocate_host_visible(published_);
    }
  }

  Shape const& shape() const { return shape_; }
  L& launcher() const { return *l_; }
  /// Elements per slice, and the capacity in slices (device memory held: their product).
  index_t slice_elements() const { return slice_; }
  index_t capacity() const { return capacity_; }
  array<index_t, rank> const& strides() const { return strides_; }
  /// Device pointers: the slices (valid until the next reserve_sorted), the slot map.
  T* data() const { return data_; }
  std::int32_t const* slot_map() const { return slot_of_; }

  /// Gives every position of the n keys (sorted by target = position along Axis, positions
  /// validated) that has no slot yet the next slot, in position order, with a cleared slice:
  /// a one-block exclusive scan over the new segment heads, then one thread per head. Makes
  /// no host round trip; grows the slices (in stream order) when the bound on the count
  /// passes the capacity.
  void reserve_sorted(scatter_key const* keys, index_t n, launch_options o = {}) {
    if (n == 0) return;
    L& l = *l_;
    index_t const ext = shape_.extent(Axis);
    index_t const bound = bound_ + n < ext ? bound_ + n : ext;
    if (bound > capacity_) grow(bound);
    bound_ = bound;
    note_issued(n);  // (publishes nothing: a later bound adds its n)
    detail::device_buffer<L> rank_buf(l, std::size_t(n) * sizeof(std::int32_t));
    std::int32_t* const rk = rank_buf.template as<std::int32_t>();
    index_t const st = detail::reduce_threads(o, l.max_threads());
    l.launch(launch_shape{1, st, std::size_t(st) * sizeof(std::int32_t)},
             new_rows_scan_kernel{keys, slot_of_, n, rk, count_ + 1});
    l.launch(shape_for(n, o, l.max_threads()), assign_slots_kernel<T>{keys, slot_of_, ids_, data_, rk, count_, n, slice_});
    l.launch(launch_shape{1, 1, 0}, bump_count_kernel{count_, count_ + 1});
  }

  /// What a slot reservation kernel writes (device pointers; valid until the next grow).
  struct reservation {
    std::int32_t* slot_of;
    std::int32_t* ids;
    T* data;
    std::int32_t* count;
    index_t slice;
    std::uint64_t* published;  // (null: publish nothing)
    std::uint32_t sequence;
  };
  /// Makes room for up to n new slices and returns the pointers a reservation kernel writes
  /// (reserve.hpp's reserve_kernel). The host keeps an upper bound on the count (the count
  /// after its last read, plus the n of every call since). Only when that bound passes the
  /// capacity does it read the count back (one wait for the device), and only when the count
  /// plus n still does not fit does it grow: to max(2 x capacity, count + 4 n), at most the
  /// axis's extent (so at most 2 count + 8 n slices, as capacity < count + n then). So the
  /// memory stays proportional to what is stored and a call's n, and a run of calls that keep
  /// touching the same positions waits for the device once every few calls at most.
  ///
  /// With a launcher that has host-visible memory, each reservation kernel also publishes
  /// (its sequence number, the count after it) there; a bound that passes the capacity is
  /// first tightened from the last publication the host sees (that count, plus the n of the
  /// reservations issued after it), and the count is read back only when that is not enough
  /// (or the publication is older than the last 64 reservations, or than the last zero()).
  reservation make_room(index_t n) {
    index_t const ext = shape_.extent(Axis);
    auto const clamp = [ext](index_t v) { return v < ext ? v : ext; };
    if (clamp(bound_ + n) > capacity_) {
      index_t const seen = published_bound();
      bound_ = seen >= 0 && clamp(seen + n) <= capacity_ ? seen : size();
    }
    index_t const need = clamp(bound_ + n);
    if (need > capacity_) grow(need, clamp(bound_ + 4 * n));
    bound_ = need;
    note_issued(n);
    return {slot_of_, ids_, data_, count_, slice_, published_, issued_};
  }

  /// The pointers a reservation kernel writes, as they are now (no room made).
  reservation current() const { return {slot_of_, ids_, data_, count_, slice_, published_, issued_}; }

  /// Forgets the stored slices (keeps the memory); touches only their map entries.
  void zero() {
    zeroed_at_ = issued_;
    if (bound_ > 0) {
      l_->launch(shape_for(bound_, {}, l_->max_threads()), forget_slots_kernel{slot_of_, ids_, count_, bound_});
      l_->fill_zero(count_, sizeof(std::int32_t));
    }
    bound_ = 0;
  }

  /// The number of stored slices (waits for the device).
  index_t size() const {
    std::int32_t n = 0;
    l_->copy_to_host(&n, count_, sizeof n);
    return n;
  }
  /// The stored positions in slot order (waits for the device).
  std::vector<std::int32_t> ids() const {
    std::vector<std::int32_t> r(static_cast<std::size_t>(size()));
    if (!r.empty()) l_->copy_to_host(r.data(), ids_, r.size() * sizeof(std::int32_t));
    return r;
  }
  /// The gradient as a dense host tensor (zeros where nothing is stored; waits for the device).
  tensor<T, Shape, Layout> download() const {
    tensor<T, Shape, Layout> d(shape_);
    auto const id = ids();
    std::vector<T> slices(id.size() * std::size_t(slice_));
    if (!slices.empty()) l_->copy_to_host(slices.data(), data_, slices.size() * sizeof(T));
    auto dv = d.view();
    array<index_t, rank> ext = shape_.extents();
    ext[Axis] = 1;
    for (std::size_t k = 0; k < id.size(); ++k) {
      for (index_t e = 0; e < slice_; ++e) {
        // element e of the slice in storage order, back to its coordinate
        coord<rank> c{};
        index_t rem = e;
        for (std::size_t j = 0; j < rank; ++j) {
          if (j == Axis) continue;
          c[j] = (rem / strides_[j]) % ext[j];
        }
        c[Axis] = index_t(id[k]);
        dv[c] = slices[k * std::size_t(slice_) + std::size_t(e)];
      }
    }
    return d;
  }

  /// Taken by grid::backward, backward_only and zero_grad for the length of the call
  /// (backend/grid/backward.hpp: one host thread at a time per storage).
  bool& busy_flag() { return busy_; }

 private:
  bool busy_ = false;
  void note_issued(index_t n) {
    ++issued_;
    recent_n_[issued_ % publish_window] = n;
  }
  /// An upper bound on the count from the last publication the host sees, or -1.
  index_t published_bound() const {
    if (!published_) return -1;
    std::uint64_t const w = std::atomic_ref<std::uint64_t>(*published_).load(std::memory_order_acquire);
    std::uint32_t const seq = std::uint32_t(w >> 32);
    index_t const count = index_t(std::uint32_t(w));
    std::uint32_t const behind = issued_ - seq;  // reservations issued after it
    // (a publication made before the last zero(), or too old to add up, tells nothing)
    if (behind >= publish_window || behind >= issued_ - zeroed_at_) return -1;
    index_t b = count;
    for (std::uint32_t k = 1; k <= behind; ++k) b += recent_n_[(seq + k) % publish_window];
    return b;
  }
  void grow(index_t need, index_t want = 0) {
    index_t cap = capacity_ ? capacity_ * 2 : 16;
    if (cap < want) cap = want;
    if (cap < need) cap = need;
    index_t const ext = shape_.extent(Axis);
    if (cap > ext) cap = ext;
    auto* ids = static_cast<std::int32_t*>(l_->allocate(std::size_t(cap) * sizeof(std::int32_t)));
    T* data = nullptr;
    try {
      index_t const elems = cap * slice_ > 0 ? cap * slice_ : 1;
      data = static_cast<T*>(l_->allocate(std::size_t(elems) * sizeof(T)));
    } catch (...) {
      l_->deallocate(ids);
      throw;
    }
    if (capacity_ > 0) {
      l_->copy_device_to_device(ids, ids_, std::size_t(capacity_) * sizeof(std::int32_t));
      if (capacity_ * slice_ > 0) l_->copy_device_to_device(data, data_, std::size_t(capacity_ * slice_) * sizeof(T));
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
  Shape shape_;
  array<index_t, rank> strides_{};
  index_t slice_ = 1;
  std::int32_t* slot_of_ = nullptr;
  std::int32_t* count_ = nullptr;  // [0]: stored slices, [1]: new slices of the last call
  std::int32_t* ids_ = nullptr;
  T* data_ = nullptr;
  index_t capacity_ = 0;
  index_t bound_ = 0;  // host-side upper bound on the count
  // What the reservation kernels publish, in memory the host reads without a wait (null when
  // the launcher has none): (sequence number << 32) | count after that reservation. The host
  // numbers its reservations (issued_) and keeps the n of the last publish_window ones.
  static constexpr std::uint32_t publish_window = 64;
  std::uint64_t* published_ = nullptr;
  std::uint32_t issued_ = 0;
  std::uint32_t zeroed_at_ = 0;  // issued_ at the last zero()
  index_t recent_n_[publish_window] = {};
};

/// The device storage of a parameter of T (Shape, Layout) with gradient spec Spec
/// (dense_grad<A> or sparse_grad<A>; a dense device gradient tracks no slices).
template <class T, class Shape, class Layout, class Spec, class L>
using device_grad_t = std::conditional_t<Spec::sparse, device_sparse_grad<T, Shape, Layout, Spec::axis, L>,
                                         device_dense_grad<T, Shape, Layout, L>>;

}  // namespace gradix::grid
