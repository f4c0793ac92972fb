#pragma once
/// \file
/// Owning device tensors: memory from a launcher (backend/grid/launch.hpp), given back when
/// the tensor goes, in the launcher's order (for gradix::cuda::launcher: cudaMallocAsync and
/// cudaFreeAsync in its stream). Elements are reached only through cuda_space views, and
/// moved to and from the host with upload / download (explicit copies; no managed memory).

#include "gradix/config.hpp"
#include "gradix/core/error.hpp"
#include "gradix/core/layout.hpp"
#include "gradix/core/shape.hpp"
#include "gradix/core/tensor.hpp"
#include "gradix/core/view.hpp"
#include "gradix/expr/index.hpp"

#include <cstddef>
#include <memory>
#include <mutex>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

namespace gradix::grid {

/// A tensor of T with shape Shape and layout Layout (row_major or col_major) in the device
/// memory of launcher L. Move-only (a moved-from tensor holds nothing: upload and download
/// throw). Its elements are uninitialised until written (zeros() clears them). The launcher
/// must outlive the tensor (its memory goes back through it).
template <class T, class Shape, class L, class Layout = row_major>
class device_tensor {
  static_assert(storage_element<T>, "gradix::device_tensor: the element type must be an arithmetic type other than bool, "
                                    "gx::bfloat16 or gx::half");
  static_assert(is_shape_v<Shape>, "gradix::device_tensor: Shape must be a gradix::shape<...>");
  static_assert(std::is_same_v<Layout, row_major> || std::is_same_v<Layout, col_major>,
                "gradix::device_tensor: the layout of an owning tensor is row_major or col_major");

 public:
  using value_type = T;
  using shape_type = Shape;
  using layout_type = Layout;
  using space_type = cuda_space;
  using view_type = tensor_view<T, Shape, Layout, cuda_space>;
  using const_view_type = tensor_view<T const, Shape, Layout, cuda_space>;

  /// Uninitialised device memory for shape s (the element count is checked for overflow).
  device_tensor(L& l, Shape s) : l_(&l), shape_(s) {
    index_t n = ::gradix::detail::checked_size(s, "gradix::device_tensor");
    p_ = static_cast<T*>(l.allocate(std::size_t(n) * sizeof(T)));
  }
  /// Device memory for shape s, cleared (in l's order).
  static device_tensor zeros(L& l, Shape s) {
    device_tensor t(l, s);
    l.fill_zero(t.p_, t.bytes());
    return t;
  }
  /// A device copy of host tensor h (same shape and layout), in l's order.
  static device_tensor from_host(L& l, tensor<T, Shape, Layout> const& h) {
    device_tensor t(l, h.shape());
    t.upload(h);
    return t;
  }
  device_tensor(device_tensor&& o) noexcept : l_(o.l_), p_(std::exchange(o.p_, nullptr)), shape_(o.shape_) {}
  device_tensor& operator=(device_tensor&& o) noexcept {
    if (this != &o) {
      release();
      l_ = o.l_;
      p_ = std::exchange(o.p_, nullptr);
      shape_ = o.shape_;
    }
    return *this;
  }
  device_tensor(device_tensor const&) = delete;
  device_tensor& operator=(device_tensor const&) = delete;
  ~device_tensor() { release(); }

  Shape const& shape() const { return shape_; }
  index_t size() const { return shape_.size(); }
  std::size_t bytes() const { return std::size_t(size()) * sizeof(T); }
  T* data() const { return p_; }
  view_type view() const { return view_type(p_, shape_); }
  const_view_type cview() const { return const_view_type(p_, shape_); }
  L& launcher() const { return *l_; }

  /// Copies host tensor h (same shape and layout) into this tensor, in the launcher's order.
  /// A shape mismatch is a gradix::error naming both shapes; nothing is copied then.
  void upload(tensor<T, Shape, Layout> const& h) {
    check_held("upload");
    if (!(h.shape() == shape_))
      ::gradix::detail::fail("gradix::device_tensor::upload: host shape ", to_string(h.shape()),
                             " differs from device shape ", to_string(shape_));
    l_->copy_to_device(p_, h.data(), bytes());
  }
  /// A host copy of the elements (waits for everything enqueued before it).
  tensor<T, Shape, Layout> download() const {
    check_held("download");
    tensor<T, Shape, Layout> h(shape_, ::gradix::detail::uninit);
    l_->copy_to_host(h.data(), p_, bytes());
    return h;
  }

 private:
  void check_held(char const* what) const {
    if (!p_ && size() > 0)
      ::gradix::detail::fail("gradix::device_tensor::", what, ": the tensor was moved from and holds no memory");
  }
  void release() {
    if (p_) l_->deallocate(p_);
    p_ = nullptr;
  }
  L* l_;
  T* p_ = nullptr;
  Shape shape_;
};

/// The sorted order of an index vector's values that a device_indices keeps for the
/// deterministic backward (update.hpp): the keys (value, position) of its n values sorted by
/// value, then position, in device memory of the vector's launcher. A deterministic backward
/// whose lookup reads the whole vector sorts them once, here, and reuses them until the next
/// upload, instead of sorting at every call. Only one host thread, the first to ask, with the
/// vector's own launcher, uses them (so the sort is in that thread's stream before every read
/// of it); other threads and launchers sort their own keys at every call, as before.
class index_order {
 public:
  index_order() = default;
  index_order(index_order const&) = delete;
  index_order& operator=(index_order const&) = delete;
  virtual ~index_order() = default;

  /// Device memory of at least `bytes` for the keys, for launcher l in the calling thread, or
  /// nullptr when another launcher or thread owns them. *made: whether the keys there are
  /// made (since the last upload); if not, the caller makes them there and calls made().
  void* keys_for(void const* l, std::size_t bytes, bool* made) {
    std::lock_guard<std::mutex> g(m_);
    if (l != launcher_) return nullptr;
    if (owner_ == std::thread::id{}) owner_ = std::this_thread::get_id();
    else if (owner_ != std::this_thread::get_id()) return nullptr;
    if (bytes_ < bytes) {
      void* const p = allocate(bytes);  // (throws: nothing changed)
      if (p_) deallocate(p_);
      p_ = p;
      bytes_ = bytes;
      made_ = false;
    }
    *made = made_;
    return p_;
  }
  /// The keys at keys_for's memory are made (enqueued in the owner's stream).
  void made() {
    std::lock_guard<std::mutex> g(m_);
    made_ = true;
  }
  /// The values changed: the keys must be made again.
  void stale() {
    std::lock_guard<std::mutex> g(m_);
    made_ = false;
  }
  /// Bytes of device memory held for the keys (0 until a deterministic backward asks).
  std::size_t bytes() const {
    std::lock_guard<std::mutex> g(m_);
    return bytes_;
  }

 protected:
  explicit index_order(void const* l) : launcher_(l) {}
  virtual void* allocate(std::size_t bytes) = 0;
  virtual void deallocate(void* p) = 0;
  /// (For the derived class's destructor.)
  void release() {
    if (p_) deallocate(p_);
    p_ = nullptr;
  }

 private:
  mutable std::mutex m_;
  void const* launcher_ = nullptr;
  std::thread::id owner_{};
  void* p_ = nullptr;
  std::size_t bytes_ = 0;
  bool made_ = false;
};

namespace detail {
template <class L>
class index_order_on final : public index_order {
 public:
  explicit index_order_on(L& l) : index_order(&l), l_(&l) {}
  ~index_order_on() override { release(); }

 private:
  void* allocate(std::size_t bytes) override { return l_->allocate(bytes); }
  void deallocate(void* p) override { l_->deallocate(p); }
  L* l_;
};
}  // namespace detail

/// Index values in device memory whose bounds the host knows: the values come only from the
/// host (from_host, upload), which records their smallest and largest value as it copies them,
/// and the class gives no writable access to the device memory. A gather by
/// `grid::indices(device_indices)` is then validated by a comparison on the host, with no
/// validation kernel and no wait for the device (grid::scatter_add_rows takes one too); only
/// when a bound is out of range does the validation kernel run, to name the first bad
/// position as usual. (grid::indices(device_indices) is in param.hpp.)
///
/// In a deterministic backward (grid::backward_options), a lookup that reads the whole vector
/// (`E(all, grid::indices(i))`, not a slice of it) takes its values' sorted order from here:
/// sorted on the device at the first such call after an upload, then kept (16 bytes per
/// value, `order_bytes()`), so later calls launch no sort. See index_order for threads.
template <class I, class L>
class device_indices {
  static_assert(std::is_integral_v<I> && !std::is_same_v<I, bool>,
                "gradix::grid::device_indices: index values must be integers");

 public:
  using value_type = I;
  using launcher_type = L;
  /// A device copy of the n values at host (in l's order).
  device_indices(L& l, I const* host, index_t n)
      : t_(l, dims(n)), b_(std::make_unique<index_bounds>()), o_(std::make_unique<detail::index_order_on<L>>(l)) {
    upload(host, n);
  }
  template <class S, class Layout>
  static device_indices from_host(L& l, tensor<I, S, Layout> const& h) {
    static_assert(S::rank == 1, "gradix::grid::device_indices: the host index tensor must have rank 1");
    return device_indices(l, h.data(), h.size());
  }
  template <class A>
  static device_indices from_host(L& l, std::vector<I, A> const& h) {
    return device_indices(l, h.data(), index_t(h.size()));
  }
  /// Replaces the values with the n values at host (n must be size()); records their bounds.
  void upload(I const* host, index_t n) {
    held("upload");
    if (n != size())
      ::gradix::detail::fail("gradix::grid::device_indices::upload: ", n, " values for a vector of ", size());
    long long lo = 0, hi = -1;
    for (index_t k = 0; k < n; ++k) {
      long long const v = static_cast<long long>(host[k]);
      if (k == 0 || v < lo) lo = v;
      if (k == 0 || v > hi) hi = v;
    }
    // (an unsigned value past LLONG_MAX turns negative above: lo < 0, so the kernel checks)
    if (n > 0) t_.launcher().copy_to_device(t_.data(), host, std::size_t(n) * sizeof(I));
    b_->lo = lo;
    b_->hi = hi;
    o_->stale();
  }
  index_t size() const { return t_.size(); }
  /// The smallest and largest value (0 and -1 when empty).
  long long min() const { return bounds().lo; }
  long long max() const { return bounds().hi; }
  /// The bounds, at an address that stays the same for the object's life (moves included),
  /// so expressions built over it see later uploads.
  index_bounds const& bounds() const {
    held("bounds");
    return *b_;
  }
  /// Where the sorted order of the values is kept (same address for the object's life).
  index_order& order() const {
    held("order");
    return *o_;
  }
  /// Device memory held for the sorted order (0 until a deterministic backward needs it).
  std::size_t order_bytes() const { return order().bytes(); }
  tensor_view<I const, shape<dyn>, row_major, cuda_space> cview() const { return t_.cview(); }
  L& launcher() const { return t_.launcher(); }

 private:
  void held(char const* what) const {
    if (!b_) ::gradix::detail::fail("gradix::grid::device_indices::", what, ": the vector was moved from and holds nothing");
  }
  device_tensor<I, shape<dyn>, L> t_;
  std::unique_ptr<index_bounds> b_;
  std::unique_ptr<index_order> o_;
};

/// device_tensor for a shape value: `grid::make_device_tensor<float>(l, dims(n, fix<4>))`.
template <class T, class Layout = row_major, class L, class Shape>
device_tensor<T, Shape, L, Layout> make_device_tensor(L& l, Shape s) {
  return device_tensor<T, Shape, L, Layout>(l, s);
}

}  // namespace gradix::grid
