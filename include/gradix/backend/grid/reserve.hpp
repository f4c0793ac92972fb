#pragma once
/// \file
/// The device pre-pass of one use (`prepare`): a sparse storage first reserves its slots on
/// the device, with one reserve_kernel launch: the positions along the storage's axis that
/// the use writes get slots in order of first touch. Nothing proportional to a table's extent
/// is touched, and a dense storage needs nothing (no_work). The reservation kernels are also
/// members of backend/grid/backward.hpp's fused launches (make_reserve).

#include "gradix/ad/kernel.hpp"
#include "gradix/ad/map.hpp"
#include "gradix/backend/grid/grad.hpp"
#include "gradix/backend/grid/launch.hpp"
#include "gradix/backend/grid/reduce.hpp"
#include "gradix/backend/grid/update_kernels.hpp"
#include "gradix/config.hpp"
#include "gradix/core/coords.hpp"
#include "gradix/core/error.hpp"
#include "gradix/eval/map.hpp"

#include <cstdint>
#include <type_traits>
#include <utility>

namespace gradix::grid {

/// Slot reservation of one use in a sparse storage, in one block, first-touch order: the
/// positions pos(p) along the storage's axis of the points p < n_ over the axes in Dep (the
/// axes the map's component C depends on), in the odometer's order.
///   1. every thread marks its points: a position without a slot (-1) becomes INT32_MIN,
///      then holds max(-2 - p) = -2 - (its first point); stored slots (>= 0) are only read.
///      When no point found a position without a slot (every call after the first, when a
///      call keeps reading the same positions), the kernel ends here;
///   2. the points where pos(p) holds -2 - p (the first touch of a new position) are counted
///      by an exclusive scan (each thread owns consecutive points, one scan over the
///      threads), and the k-th gets slot count + k: slot_of[pos] and ids[slot] are set;
///   3. the new slices (contiguous, after the old count) are cleared and count is advanced.
/// Thread 0 then publishes (seq_, count) to host-visible memory when there is some
/// (device_sparse_grad::make_room reads it without waiting).
/// Slots and their order depend on the map alone: the same on every run and launch shape,
/// and, as on the host (grad/storage.hpp), in order of first touch.
template <class D, class M, std::size_t C, std::uint64_t Dep, class T>
struct reserve_kernel {
  static constexpr bool uses_barriers = true;
  D dom_;
  M map_;
  index_t n_;
  std::int32_t* slot_of_;
  std::int32_t* ids_;
  T* data_;
  std::int32_t* count_;
  index_t slice_;
  std::uint64_t* published_;  // host-visible (null: none): (seq_ << 32) | the count after this call
  std::uint32_t seq_;
  GRADIX_HOST_DEVICE void publish(std::int32_t count) const {
    if (published_) *published_ = (std::uint64_t(seq_) << 32) | std::uint32_t(count);
  }
  GRADIX_HOST_DEVICE index_t pos(index_t p) const {
    coord<D::rank> d{};
    coords::unravel_axes(d, dom_.extents(), Dep, p);
    return ev::ax_value(get<C>(map_), d);
  }
  GRADIX_KERNEL_BODY
  template <class Ctx>
  GRADIX_HOST_DEVICE void operator()(Ctx const& c) const {
    std::int32_t* const sh = c.template shared<std::int32_t>();
    index_t const t = c.thread(), b = c.threads();
    if (t == 0) sh[b] = 0;  // set when a position without a slot is seen
    c.sync();
    for (index_t p = t; p < n_; p += b) {
      std::int32_t* const s = slot_of_ + pos(p);
      if (*s >= 0) continue;  // stored already (a slot does not change here): nothing to mark
      sh[b] = 1;
      c.atomic_cas(s, -1, INT32_MIN);
      c.atomic_max(s, std::int32_t(-2 - p));
    }
    std::int32_t const base = *count_;
    c.sync();
    if (sh[b] == 0) {  // every position has its slot (the same answer in every thread)
      if (t == 0) publish(base);
      return;
    }
    // each thread owns consecutive points [lo, hi): it counts its first touches of new
    // positions, one exclusive scan over the threads (Hillis-Steele in shared memory) gives
    // its first slot, and it assigns its points' slots in order
    index_t const per = (n_ + b - 1) / b;
    index_t const lo = t * per < n_ ? t * per : n_;
    index_t const hi = lo + per < n_ ? lo + per : n_;
    std::int32_t mine = 0;
    for (index_t p = lo; p < hi; ++p)
      if (slot_of_[pos(p)] == std::int32_t(-2 - p)) ++mine;
    sh[t] = mine;
    c.sync();
    detail::block_inclusive_scan(c, sh);
    std::int32_t const carry = sh[b - 1];
    std::int32_t next = base + sh[t] - mine;
    for (index_t p = lo; p < hi; ++p) {
      index_t const x = pos(p);
      if (slot_of_[x] == std::int32_t(-2 - p)) {  // only this thread holds x's first touch
        slot_of_[x] = next;
        ids_[next] = std::int32_t(x);
        ++next;
      }
    }
    index_t const fresh = index_t(carry) * slice_;
    T* const first = data_ + index_t(base) * slice_;
    for (index_t e = t; e < fresh; e += b) first[e] = T(0);
    if (t == 0) {
      *count_ = base + carry;
      publish(base + carry);
    }
  }
};

namespace detail {
/// The axes of D that component C of a use's map (the sparse storage's axis) depends on.
template <class Use, std::size_t C>
inline constexpr std::uint64_t component_deps_v = [] {
  using CT = ad::map_component_t<typename Use::map_type, C>;
  std::uint64_t r = 0;
  [&]<std::size_t... J>(std::index_sequence<J...>) { ((r |= ad::depends_v<CT, J> ? bit(J) : 0), ...); }(
      std::make_index_sequence<ad::kernel_traits<Use>::domain_rank>{});
  return r;
}();

/// A launch member that does nothing (the reservation of a use whose storage is dense).
struct no_work {
  static constexpr bool uses_barriers = false;
  GRADIX_KERNEL_BODY
  template <class Ctx>
  GRADIX_HOST_DEVICE void operator()(Ctx const&) const {}
};

/// The reservation kernel of a use (no_work for dense storage).
template <class Use, bool Sparse = Use::storage_type::sparse>
struct reserve_of {
  using type = no_work;
};
template <class Use>
struct reserve_of<Use, true> {
  using G = typename Use::storage_type;
  using type = reserve_kernel<typename Use::domain_type, typename Use::map_type, G::axis, component_deps_v<Use, G::axis>,
                              typename G::value_type>;
};
template <class Use>
using reserve_of_t = typename reserve_of<Use>::type;

/// The reservation of use u, made ready to launch (the storage made room for it): `active`
/// false when there is nothing to reserve (dense storage, no target, an empty domain).
template <class Use>
struct ready_reserve {
  reserve_of_t<Use> k;
  bool active;
};
template <class Use>
ready_reserve<Use> make_reserve(Use const& u, bool wanted = true) {
  using G = typename Use::storage_type;
  if constexpr (!G::sparse) {
    return {{}, false};
  } else {
    using K = ad::kernel_traits<Use>;
    constexpr std::size_t RD = K::domain_rank;
    auto const ext = u.dom_.extents();
    bool empty = !u.target_ || !wanted;
    for (std::size_t j = 0; j < RD; ++j)
      if (ext[j] == 0) empty = true;
    if (empty) return {{u.dom_, u.map_, 0, nullptr, nullptr, nullptr, nullptr, 0, nullptr, 0}, false};
    index_t const n = coords::count(ext, component_deps_v<Use, G::axis>);
    if (n > index_t(INT32_MAX) - 2)
      ::gradix::detail::fail("gradix::grid::backward: a use writes ", n, " positions of a sparse gradient in one call (at most ",
                             INT32_MAX - 2, ")");
    auto const r = u.target_->make_room(n);
    static_assert(std::is_trivially_copyable_v<reserve_of_t<Use>>,
                  "gradix::grid: a reservation kernel must be trivially copyable");
    return {{u.dom_, u.map_, n, r.slot_of, r.ids, r.data, r.count, r.slice, r.published, r.sequence}, true};
  }
}
/// Threads per block of reservation launches (the block's size changes no slot: by default
/// the largest block, for the shortest scan).
template <class L>
index_t reserve_threads(L& l, launch_options o) {
  return reduce_threads(o.threads > 0 ? o : launch_options{l.max_threads(), o.max_blocks}, l.max_threads());
}
}  // namespace detail

/// The pre-pass of one use on the device: a sparse storage reserves the slots of the
/// positions the use writes along its axis (a dense one needs nothing), with one
/// reserve_kernel launch.
template <class L, class Use>
void prepare(L& l, Use const& u, launch_options o = {}) {
  auto const r = detail::make_reserve(u);
  if (!r.active) return;
  index_t const th = detail::reserve_threads(l, o);
  l.launch(launch_shape{1, th, std::size_t(th + 1) * sizeof(std::int32_t)}, r.k);
}

}  // namespace gradix::grid
