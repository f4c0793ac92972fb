#pragma once
/// \file
/// Run-time checks a call makes before it runs an expression (the host entry points of api/
/// and the grid backend use them alike), and the guard that keeps
/// concurrent calls off one parameter's gradient.
///
/// - prepare_leaves: a parameter leaf re-reads its value's data pointer (the value may have
///   been replaced by a tensor of the same shape since the expression was built); a value
///   whose shape changed since, or that no longer matches its gradient storage, throws.
/// - aliases: whether a destination's memory is read through anything but the identity
///   map (then assign goes through a temporary).
/// - storage_guard: marks gradient storages busy for the length of a backward or zero_grad;
///   a second user thread reaching a busy storage gets gradix::error instead of a race.

#include "gradix/config.hpp"
#include "gradix/core/error.hpp"
#include "gradix/core/shape.hpp"
#include "gradix/core/view.hpp"
#include "gradix/expr/visit.hpp"
#include "gradix/grad/storage.hpp"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>

namespace gradix::detail {

/// A parameter leaf over device memory (backend/grid/param.hpp).
template <class N>
struct is_device_param_node : std::false_type {};
template <class V, class G>
struct is_device_param_node<param_node<V, G>> : std::is_same<typename V::space_type, cuda_space> {};

/// Refreshes parameter leaves of e (a copy the API owns) from their parameters' values;
/// throws gradix::error naming `op` when a parameter's shape changed.
template <class N>
constexpr void prepare_leaves(N& e, char const* op) {
  for_each_leaf(e, [&](auto& leaf, bool) {
    using L = std::remove_cvref_t<decltype(leaf)>;
#if defined(GRADIX_CHECK_LIFETIMES)
    if (!std::is_constant_evaluated()) {
      if constexpr (is_param_node<L>::value) {
        if (!lifetime_alive(leaf.src_, leaf.src_gen_))
          fail(op, ": the expression reads a parameter that was destroyed after the expression "
                   "was built (checked by GRADIX_CHECK_LIFETIMES)");
      } else if constexpr (is_index_vec<L>::value) {
        if (!lifetime_alive(leaf.data_, leaf.gen_))
          fail(op, ": the expression gathers with an index tensor of ", leaf.size_,
               " indices that was destroyed or reallocated after the expression was built "
               "(checked by GRADIX_CHECK_LIFETIMES)");
      } else {
        if (!lifetime_alive(leaf.data_, leaf.gen_))
          fail(op, ": the expression reads a tensor of shape ", to_string(leaf.shape()),
               " that was destroyed or reallocated after the expression was built (checked by "
               "GRADIX_CHECK_LIFETIMES)");
      }
    }
#endif
    if constexpr (is_device_param_node<L>::value) {
      // a device parameter (backend/grid/param.hpp): its value cannot be replaced, so the
      // view stays valid; only the gradient storage's shape is checked
      if (!(leaf.grad_->shape() == leaf.view_.shape()))
        fail(op, ": a device parameter's value has shape ", to_string(leaf.view_.shape()),
             " but its gradient storage has shape ", to_string(leaf.grad_->shape()));
    } else if constexpr (is_param_node<L>::value) {
      auto const& v = *leaf.src_;
      if (!(v.shape() == leaf.view_.shape()))
        fail(op, ": a parameter's value now has shape ", to_string(v.shape()),
             ", but the expression was built when it had shape ", to_string(leaf.view_.shape()),
             "; build the expression again");
      if (!(leaf.grad_->shape() == v.shape()))
        fail(op, ": a parameter's value has shape ", to_string(v.shape()),
             " but its gradient storage has shape ", to_string(leaf.grad_->shape()),
             "; a parameter keeps its shape (make a new parameter for a new shape)");
      leaf.view_ = v.view();
    }
  });
}

/// The API's copy of an expression, with its parameter leaves refreshed.
template <class E>
constexpr auto prepared_node(E const& e_in, char const* op) {
  auto e = as_node(e_in);
  prepare_leaves(e, op);
  return e;
}

/// The byte range [lo, hi) a view's elements occupy (an empty view: lo == hi).
struct byte_range {
  std::uintptr_t lo = 0, hi = 0;
};
template <class V>
byte_range range_of(V const& v) {
  using T = std::remove_const_t<typename V::element_type>;
  for (std::size_t k = 0; k < V::rank; ++k)
    if (v.extent(k) == 0) return {};
  index_t lo = 0, hi = 0;
  for (std::size_t k = 0; k < V::rank; ++k) {
    index_t span = (v.extent(k) - 1) * v.stride(k);
    (span < 0 ? lo : hi) += span;
  }
  auto base = reinterpret_cast<std::uintptr_t>(v.data());
  return {base + std::uintptr_t(lo * index_t(sizeof(T))),
          base + std::uintptr_t((hi + 1) * index_t(sizeof(T)))};
}
template <class I>
byte_range range_of_index(I const& idx) {
  using T = typename I::index_type;
  if (idx.size_ == 0) return {};
  index_t span = (idx.size_ - 1) * idx.stride_;
  auto base = reinterpret_cast<std::uintptr_t>(idx.data_);
  index_t lo = span < 0 ? span : 0, hi = span < 0 ? 0 : span;
  return {base + std::uintptr_t(lo * index_t(sizeof(T))),
          base + std::uintptr_t((hi + 1) * index_t(sizeof(T)))};
}
inline bool overlap(byte_range a, byte_range b) { return a.lo < b.hi && b.lo < a.hi; }

/// Same rank and strides (same element addressing from the same base).
template <class A, class B>
constexpr bool same_strides(A const& a, B const& b) {
  if constexpr (A::rank != B::rank) return false;
  else return a.strides() == b.strides();
}

/// Does evaluating e into dst element by element read memory that dst writes, other than
/// each element at the coordinate being written? (`x = x * 2 + 1` does not; `x =
/// transpose(x)`, `x = x(range(4, -1, -1))` or a gather from x does.)
template <class DV, class N>
constexpr bool aliases(DV const& dst, N const& e) {
  bool hit = false;
  if (std::is_constant_evaluated()) {
    // (no address order in constant evaluation: same data pointer only)
    for_each_leaf(e, [&](auto const& leaf, bool in_place) {
      using L = std::remove_cvref_t<decltype(leaf)>;
      if constexpr (is_view_v<L> || is_param_node<L>::value) {
        auto const& v = [&]() -> auto const& {
          if constexpr (is_param_node<L>::value) return leaf.view_;
          else return leaf;
        }();
        if (static_cast<void const*>(v.data()) == static_cast<void const*>(dst.data()) &&
            !(in_place && same_strides(v, dst)))
          hit = true;
      }
    });
    return hit;
  }
  byte_range const d = range_of(dst);
  if (d.lo == d.hi) return false;
  for_each_leaf(e, [&](auto const& leaf, bool in_place) {
    using L = std::remove_cvref_t<decltype(leaf)>;
    if constexpr (is_index_vec<L>::value) {
      if (overlap(range_of_index(leaf), d)) hit = true;
    } else {
      auto const& v = [&]() -> auto const& {
        if constexpr (is_param_node<L>::value) return leaf.view_;
        else return leaf;
      }();
      if (!overlap(range_of(v), d)) return;
      using VT = std::remove_const_t<typename std::remove_cvref_t<decltype(v)>::element_type>;
      using DT = std::remove_const_t<typename DV::element_type>;
      bool same_place = in_place && sizeof(VT) == sizeof(DT) &&
                        static_cast<void const*>(v.data()) == static_cast<void const*>(dst.data()) &&
                        same_strides(v, dst);
      if (!same_place) hit = true;
    }
  });
  return hit;
}

/// The busy flags of the device storages (backend/grid/grad.hpp) a call writes, taken for the
/// call's length, so that two host threads running a backward or zero_grad on one device
/// parameter at once get an error instead of racing on its slots. storage_guard does the
/// same for host storages, with a rollback on failure besides; a device call that fails part
/// way leaves what it wrote.
template <std::size_t N>
class busy_lock {
 public:
  explicit constexpr busy_lock(char const* op) : op_(op) {}
  busy_lock(busy_lock const&) = delete;
  busy_lock& operator=(busy_lock const&) = delete;
  constexpr ~busy_lock() {
    for (std::size_t k = 0; k < n_; ++k) {
      if (std::is_constant_evaluated()) *flags_[k] = false;
      else std::atomic_ref<bool>(*flags_[k]).store(false, std::memory_order_release);
    }
  }
  template <class G>
  constexpr void take(G* g) {
    if (!g) return;
    bool* f = &g->busy_flag();
    for (std::size_t k = 0; k < n_; ++k)
      if (flags_[k] == f) return;
    bool was = false;
    if (std::is_constant_evaluated()) was = std::exchange(*f, true);
    else was = std::atomic_ref<bool>(*f).exchange(true, std::memory_order_acquire);
    if (was)
      fail(op_, ": a device parameter's gradient is in use by another thread (a concurrent backward, grad or "
                "zero_grad on the same parameter); give each thread its own parameters or serialise the calls");
    flags_[n_++] = f;
  }
  /// Nothing to restore (the plan runner's failure path, exec/run.hpp: a device pre-pass that
  /// fails leaves its reservations).
  constexpr void rollback() {}

 private:
  char const* op_;
  bool* flags_[N > 0 ? N : 1] = {};
  std::size_t n_ = 0;
};

/// Marks the gradient storages of a backward (or zero_grad) busy until it ends, and keeps
/// each one's tracking state from before (grad_mark) so that a backward failing in its
/// pre-pass can restore it. A storage already busy (another user thread is in a backward or
/// zero_grad on the same parameter) throws gradix::error, after releasing what this guard
/// took. Holds at most N storages.
template <std::size_t N>
class storage_guard {
 public:
  explicit constexpr storage_guard(char const* op) : op_(op) {}
  storage_guard(storage_guard const&) = delete;
  storage_guard& operator=(storage_guard const&) = delete;
  constexpr ~storage_guard() { release(); }

  /// Takes g's busy flag and records its state (once per storage; nullptr is ignored).
  template <class G>
  constexpr void take(G* g) {
    if (!g) return;
    bool* f = &g->busy_flag();
    for (std::size_t k = 0; k < n_; ++k)
      if (e_[k].flag == f) return;
    if (std::is_constant_evaluated()) {
      *f = true;
      e_[n_++] = entry{f, nullptr, g->mark(), nullptr};
      return;
    }
    if (std::atomic_ref<bool>(*f).exchange(true, std::memory_order_acquire))
      fail(op_, ": a parameter's gradient is in use by another thread (a concurrent backward, "
                "grad or zero_grad on the same parameter); give each thread its own parameters "
                "or serialise the calls");
    e_[n_++] = entry{f, g, g->mark(), [](void* p, grad_mark m) { static_cast<G*>(p)->rollback(m); }};
  }
  /// Restores every storage to the state recorded by take().
  void rollback() {
    for (std::size_t k = n_; k-- > 0;)
      if (e_[k].undo) e_[k].undo(e_[k].storage, e_[k].mark);
  }

 private:
  struct entry {
    bool* flag = nullptr;
    void* storage = nullptr;
    grad_mark mark{};
    void (*undo)(void*, grad_mark) = nullptr;
  };
  constexpr void release() {
    for (std::size_t k = n_; k-- > 0;) {
      if (std::is_constant_evaluated()) *e_[k].flag = false;
      else std::atomic_ref<bool>(*e_[k].flag).store(false, std::memory_order_release);
    }
    n_ = 0;
  }
  char const* op_;
  entry e_[N > 0 ? N : 1] = {};
  std::size_t n_ = 0;
};

}  // namespace gradix::detail
