#pragma once
/// \file
/// Gradient storage of a parameter.
///
/// - dense_grad<Axis>: a dense tensor of the parameter's shape, allocated once. It tracks
///   the slices along Axis that backward writes, so zero_grad clears only those; a use
///   that writes as many positions along Axis as there are, through an affine map or a
///   reshape (it reads the whole table, or writes across Axis), marks everything instead:
///   one full clear. Index vectors are always listed exactly (they may repeat positions).
/// - sparse_grad<Axis>: slices along Axis, always coalesced: a slot map (int32 per position
///   along Axis, allocated once) from slice id to a compact slice. Slots are reserved in a
///   serial pre-pass of backward, in first-touch order, so storage is deterministic; the
///   update kernels then add in place and never allocate. Never append-then-coalesce.
///
/// Both present the same target to update kernels: element (t_0, ..., t_{R-1}) lives at
/// data + sum_k stride_k * t_k, where t_Axis is first mapped through the slot map (sparse).

#include "gradix/config.hpp"
#include "gradix/core/array.hpp"
#include "gradix/core/coords.hpp"
#include "gradix/core/error.hpp"
#include "gradix/core/layout.hpp"
#include "gradix/core/shape.hpp"
#include "gradix/core/tensor.hpp"

#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <type_traits>
#include <utility>
#include <vector>

namespace gradix {

/// Gradient storage kinds, chosen per parameter: `param(t, sparse_grad<1>)`.
template <std::size_t Axis>
struct dense_grad_t {
  static constexpr std::size_t axis = Axis;
  static constexpr bool sparse = false;
};
template <std::size_t Axis>
struct sparse_grad_t {
  static constexpr std::size_t axis = Axis;
  static constexpr bool sparse = true;
};
template <std::size_t Axis = 0>
inline constexpr dense_grad_t<Axis> dense_grad{};
template <std::size_t Axis>
inline constexpr sparse_grad_t<Axis> sparse_grad{};

/// A storage's tracking state, taken before a backward's pre-pass (see mark()/rollback()).
struct grad_mark {
  std::size_t count = 0;  // touched slices (dense) or stored slices (sparse)
  bool all = false;       // dense: everything touched
};

/// Where a gradient storage's element lives, copied into locals (or into a kernel): its
/// strides and, along a sparse storage's axis, its slot map (pointers into the storage's
/// memory, host or device). The one addressing every backend's update loops use.
template <std::size_t R, bool Sparse, std::size_t SAxis>
struct target_address {
  array<index_t, R> st_;
  std::int32_t const* slots_;
  /// Offset of target coordinate t (through the slot map along the sparse axis).
  GRADIX_HOST_DEVICE GRADIX_ALWAYS_INLINE constexpr index_t offset(coord<R> const& t) const {
    index_t off = 0;
    for (std::size_t k = 0; k < R; ++k) {
      index_t x = t[k];
      if constexpr (Sparse) {
        if (k == SAxis) x = slots_[x];
      }
      off += x * st_[k];
    }
    return off;
  }
};
/// The addressing of storage G.
template <class G>
using target_address_t = target_address<G::rank, G::sparse, G::axis>;
template <class G>
constexpr target_address_t<G> target_address_of(G const& g) {
  target_address_t<G> a{g.strides(), nullptr};
  if constexpr (G::sparse) a.slots_ = g.slot_map();
  return a;
}

namespace detail {
/// Calls f(offset) for every element offset of slice `id` along `axis` of a tensor with
/// extents ext and strides st (the innermost loop over the contiguous remaining axis).
template <std::size_t R, class F>
constexpr void for_each_in_slice(array<index_t, R> const& ext, array<index_t, R> const& st, std::size_t axis,
                       index_t base, F&& f) {
  coord<R> c{};
  index_t const n = coords::count(ext, coords::all_but<R>(axis));
  for (index_t e = 0; e < n; ++e) {
    index_t off = base;
    for (std::size_t k = 0; k < R; ++k)
      if (k != axis) off += c[k] * st[k];
    f(off);
    coords::next(c, ext, coords::all_but<R>(axis));
  }
}
}  // namespace detail

/// Dense gradient storage with touched-slice tracking along Axis.
template <class T, class Shape, class Layout, std::size_t Axis>
class dense_grad_storage {
 public:
  using value_type = T;
  using shape_type = Shape;
  static constexpr std::size_t rank = Shape::rank;
  static constexpr std::size_t axis = Axis;
  static constexpr bool sparse = false;
  /// The contiguous axis of the storage (-1 for rank 0).
  static constexpr int unit_axis = rank == 0 ? -1 : int(Layout::template unit_axis<rank>);

  static_assert(rank == 0 || Axis < rank,
                "gradix::dense_grad: the tracked axis is out of range for the tensor's rank");

  /// (A rank-0 gradient has one slice: the element.)
  constexpr explicit dense_grad_storage(Shape s)
      : g_(s), flag_(std::size_t(slices(s)), 0) {
    touched_.reserve(std::size_t(slices(s)));
    strides_ = contiguous_strides<Layout>(s.extents());
  }

  /// The gradient as a tensor (zeros where nothing was written).
  constexpr tensor<T, Shape, Layout> const& dense() const { return g_; }
  constexpr tensor<T, Shape, Layout> to_dense() const { return g_; }
  constexpr Shape const& shape() const { return g_.shape(); }

  // --- used by backward's pre-pass and kernels
  constexpr void touch(index_t id) {
    if constexpr (rank == 0) id = 0;
    if (!all_ && !flag_[std::size_t(id)]) {
      flag_[std::size_t(id)] = 1;
      touched_.push_back(id);
    }
  }
  /// Has slice `id` been touched since the last zero (everything has after touch_all())?
  constexpr bool is_touched(index_t id) const {
    if constexpr (rank == 0) id = 0;
    return all_ || flag_[std::size_t(id)] != 0;
  }
  constexpr void touch_all() { all_ = true; }
  constexpr T* data() { return g_.data(); }
  constexpr array<index_t, rank> const& strides() const { return strides_; }
  constexpr index_t slot(index_t id) const { return id; }  // identity: no slot map
  /// Slices along Axis written since the last zero (all of them after touch_all()).
  constexpr bool all_touched() const { return all_; }
  constexpr std::vector<index_t> const& touched() const { return touched_; }

  /// Clears what backward wrote: the touched slices, or everything after a full write.
  constexpr void zero() {
    if (all_) {
      if (std::is_constant_evaluated())
        for (index_t k = 0; k < g_.size(); ++k) g_.data()[k] = T(0);
      else
        std::memset(static_cast<void*>(g_.data()), 0, std::size_t(g_.size()) * sizeof(T));
      all_ = false;
    } else if constexpr (rank == 0) {
      if (!touched_.empty()) g_.data()[0] = T(0);
    } else {
      auto ext = g_.shape().extents();
      for (index_t id : touched_)
        detail::for_each_in_slice<rank>(ext, strides_, Axis, id * strides_[Axis],
                                        [&](index_t off) { g_.data()[off] = T(0); });
    }
    for (index_t id : touched_) flag_[std::size_t(id)] = 0;
    touched_.clear();
  }

  /// The tracking state before a backward's pre-pass, so that a failing backward can restore
  /// it (strong guarantee; the pre-pass never writes gradient values).
  constexpr grad_mark mark() const { return {touched_.size(), all_}; }
  constexpr void rollback(grad_mark m) {
    for (std::size_t k = m.count; k < touched_.size(); ++k) flag_[std::size_t(touched_[k])] = 0;
    touched_.resize(m.count);
    all_ = m.all;
  }
  /// Set while a backward or zero_grad uses this storage (see api/guard.hpp).
  constexpr bool& busy_flag() { return busy_; }

 private:
  tensor<T, Shape, Layout> g_;
  std::vector<std::uint8_t> flag_;
  std::vector<index_t> touched_;
  array<index_t, rank> strides_{};
  bool all_ = false;
  bool busy_ = false;

  static constexpr index_t slices(Shape const& s) {
    if constexpr (rank == 0) return 1;
    else return s.extent(Axis);
  }
};

/// Sparse gradient storage along Axis: coalesced slices through a slot map.
template <class T, class Shape, class Layout, std::size_t Axis>
class sparse_grad_storage {
 public:
  using value_type = T;
  using shape_type = Shape;
  static constexpr std::size_t rank = Shape::rank;
  static constexpr std::size_t axis = Axis;
  static constexpr bool sparse = true;
  static_assert(Axis < rank,
                "gradix::sparse_grad: the sparse axis is out of range for the tensor's rank (a "
                "rank-0 parameter has no axis to be sparse along; use dense_grad)");
  /// The contiguous axis inside a slice (-1 when a slice is one element).
  static constexpr int unit_axis = [] {
    if (rank <= 1) return -1;
    if constexpr (std::is_same_v<Layout, col_major>) return Axis == 0 ? 1 : 0;
    else return Axis == rank - 1 ? int(rank) - 2 : int(rank) - 1;
  }();

  constexpr explicit sparse_grad_storage(Shape s) : shape_(s), slot_(checked_slots(s), -1) {
    // strides inside the compact storage: the layout's order over the other axes, and one
    // slice per slot along Axis
    array<index_t, rank> ext = s.extents();
    ext[Axis] = 1;
    strides_ = contiguous_strides<Layout>(ext);
    slice_size_ = 1;
    for (std::size_t k = 0; k < rank; ++k)
      if (k != Axis) slice_size_ *= s.extent(k);
    strides_[Axis] = slice_size_;
  }
  sparse_grad_storage(sparse_grad_storage const&) = delete;
  sparse_grad_storage& operator=(sparse_grad_storage const&) = delete;
  constexpr sparse_grad_storage(sparse_grad_storage&& o) noexcept
      : shape_(o.shape_), slot_(std::move(o.slot_)), ids_(std::move(o.ids_)),
        data_(std::exchange(o.data_, nullptr)), capacity_(std::exchange(o.capacity_, 0)),
        slice_size_(o.slice_size_), strides_(o.strides_), busy_(o.busy_) {}
  constexpr ~sparse_grad_storage() { release(); }

  constexpr Shape const& shape() const { return shape_; }
  /// Number of stored slices.
  constexpr index_t size() const { return index_t(ids_.size()); }
  /// Slice id (position along Axis) of slot k, in first-touch order.
  constexpr index_t id(index_t k) const { return ids_[std::size_t(k)]; }
  /// Slot of a slice id, or -1.
  constexpr index_t find(index_t id) const { return slot_[std::size_t(id)]; }
  /// Pointer to the elements of slot k (slice_elements() of them, in the layout's order).
  constexpr T const* slice_data(index_t k) const { return data_ + k * slice_size_; }
  constexpr index_t slice_elements() const { return slice_size_; }
  /// Gradient element at a full coordinate (0 when its slice is not stored).
  constexpr T at(coord<rank> const& c) const {
    index_t s = slot_[std::size_t(c[Axis])];
    if (s < 0) return T(0);
    index_t off = 0;
    for (std::size_t k = 0; k < rank; ++k) off += (k == Axis ? s : c[k]) * strides_[k];
    return data_[off];
  }
  /// The gradient as a dense tensor (allocates it).
  constexpr tensor<T, Shape, Layout> to_dense() const {
    tensor<T, Shape, Layout> d(shape_);
    auto dv = d.view();
    auto ext = shape_.extents();
    for (index_t k = 0; k < size(); ++k) {
      index_t id_ = ids_[std::size_t(k)];
      coord<rank> c{};
      index_t n = slice_size_;
      for (index_t e = 0; e < n; ++e) {
        c[Axis] = id_;
        dv[c] = at(c);
        coords::next(c, ext, coords::all_but<rank>(Axis));
      }
    }
    return d;
  }

  // --- used by backward's pre-pass and kernels
  /// Reserves the slot of slice `id` (zero-filled); serial. May grow the compact storage.
  constexpr index_t reserve(index_t id) {
    std::int32_t s = slot_[std::size_t(id)];
    if (s >= 0) return s;
    index_t k = index_t(ids_.size());
    if (k == capacity_) grow();
    for (index_t e = 0; e < slice_size_; ++e) std::construct_at(data_ + k * slice_size_ + e, T(0));
    slot_[std::size_t(id)] = std::int32_t(k);
    ids_.push_back(std::int32_t(id));
    return k;
  }
  constexpr void touch(index_t id) { reserve(id); }
  /// Is a slot reserved for slice `id`?
  constexpr bool is_touched(index_t id) const { return slot_[std::size_t(id)] >= 0; }
  constexpr T* data() { return data_; }
  constexpr array<index_t, rank> const& strides() const { return strides_; }
  constexpr index_t slot(index_t id) const { return slot_[std::size_t(id)]; }
  constexpr std::int32_t const* slot_map() const { return slot_.data(); }

  /// Forgets the stored slices (keeps the memory for the next backward).
  constexpr void zero() {
    for (std::int32_t i : ids_) slot_[std::size_t(i)] = -1;
    ids_.clear();
  }
  /// The stored slices before a backward's pre-pass: a failing backward forgets the slots it
  /// reserved after the mark (strong guarantee; reserved slots hold zeros until kernels run).
  constexpr grad_mark mark() const { return {ids_.size(), false}; }
  constexpr void rollback(grad_mark m) {
    for (std::size_t k = m.count; k < ids_.size(); ++k) slot_[std::size_t(ids_[k])] = -1;
    ids_.resize(m.count);
  }
  /// Set while a backward or zero_grad uses this storage (see api/guard.hpp).
  constexpr bool& busy_flag() { return busy_; }

  /// Bytes held by the compact storage, slot map and id list.
  constexpr std::size_t bytes() const {
    return std::size_t(capacity_ * slice_size_) * sizeof(T) + slot_.capacity() * sizeof(std::int32_t) +
           ids_.capacity() * sizeof(std::int32_t);
  }

 private:
  constexpr void grow() {
    index_t cap = capacity_ ? capacity_ * 2 : 16;
    index_t limit = shape_.extent(Axis);
    if (cap > limit) cap = limit;
    std::size_t const n = std::size_t(cap * slice_size_);
    ids_.reserve(std::size_t(cap));  // first: reserve() then cannot fail after taking a slot
    T* p = detail::allocate_buffer<T>(n);
    if (data_) {
      if (std::is_constant_evaluated())
        for (index_t e = 0; e < capacity_ * slice_size_; ++e) std::construct_at(p + e, data_[e]);
      else
        std::memcpy(static_cast<void*>(p), data_, std::size_t(capacity_ * slice_size_) * sizeof(T));
      release();
    }
    data_ = p;
    capacity_ = cap;
  }
  constexpr void release() {
    // (storage allocated in constant evaluation is freed there too: it cannot outlive it)
    if (data_) detail::deallocate_buffer(data_, std::size_t(capacity_ * slice_size_));
    data_ = nullptr;
  }

  // The slot map holds int32 slot numbers.
  static constexpr std::size_t checked_slots(Shape const& s) {
    if (s.extent(Axis) > index_t(INT32_MAX))
      detail::fail("gradix::sparse_grad: extent ", s.extent(Axis), " of the sparse axis ", Axis,
                   " exceeds the slot map's limit of ", INT32_MAX);
    return std::size_t(s.extent(Axis));
  }

  Shape shape_;
  std::vector<std::int32_t> slot_;
  std::vector<std::int32_t> ids_;
  T* data_ = nullptr;
  index_t capacity_ = 0;
  index_t slice_size_ = 1;
  array<index_t, rank> strides_{};
  bool busy_ = false;
};

template <class T, class Shape, class Layout, class Spec>
using grad_storage_t =
    std::conditional_t<Spec::sparse, sparse_grad_storage<T, Shape, Layout, Spec::axis>,
                       dense_grad_storage<T, Shape, Layout, Spec::axis>>;

}  // namespace gradix
