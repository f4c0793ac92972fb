#pragma once
/// \file
/// Device update kernels: run one `use` of a backward plan (ad/kernel.hpp) on a device grid.
/// For every d of the use's domain D, add v(d) to the gradient storage at m(d). The plan types
/// are the host's; only the loops differ (the host's are in backend/host/update.hpp). This
/// header chooses the kernel of a use (make_work, run) and runs fused pairs and multi_uses use
/// by use; the kernels are in backend/grid/update_kernels.hpp, the pre-pass (`prepare`: sparse
/// slot reservation) in backend/grid/reserve.hpp.
///
/// Axes of D, from the use's type (ad::kernel_traits): projected axes reach no target axis and
/// are summed per outer coordinate, by its thread in the odometer's order, or, when v depends
/// on them and they hold at least block_proj_min points (and the launcher allows blocks of
/// block_lanes threads), by a block of block_lanes threads (lanes, then a fixed tree in shared
/// memory); when v does not depend on them they collapse to `extent x v`. The other axes are
/// *outer*, one target element per outer coordinate. Among the outer axes,
/// a *column* axis J reaches exactly one target component, as ax_dom<J> itself; the rest are
/// *key* axes (index lookups, reshapes, an axis read twice). The store follows from the map:
///
/// - injective map (ad::kernel_traits::injective): one thread (or block) per outer
///   coordinate, a plain `+=` (no two threads share a target element);
/// - otherwise, `scatter_mode::atomic`: the same loop with an atomic add;
/// - otherwise, `scatter_mode::deterministic`: the key coordinates are sorted by (target
///   position of the key components, key coordinate), and one thread (or block) per
///   (segment, column coordinate) adds the segment's values in key order, then stores once.
///   With a key fixed, the column axes reach distinct target elements, so no two threads
///   share one. The same bits on every run, launch shape and block order.
///
/// Sparse storage first reserves its slots on the device (`prepare`, one reserve_kernel
/// launch, backend/grid/reserve.hpp): the positions along the storage's axis that the use
/// writes get slots in order of first touch. Nothing proportional to a table's extent is
/// touched.

#include "gradix/ad/kernel.hpp"
#include "gradix/ad/map.hpp"
#include "gradix/ad/value.hpp"
#include "gradix/backend/grid/grad.hpp"
#include "gradix/backend/grid/launch.hpp"
#include "gradix/backend/grid/reduce.hpp"
#include "gradix/backend/grid/reserve.hpp"
#include "gradix/backend/grid/scatter.hpp"
#include "gradix/backend/grid/update_kernels.hpp"
#include "gradix/config.hpp"
#include "gradix/core/array.hpp"
#include "gradix/core/coords.hpp"
#include "gradix/eval/evaluator.hpp"
#include "gradix/eval/map.hpp"
#include "gradix/grad/storage.hpp"

#include <cstdint>
#include <memory>
#include <type_traits>
#include <utility>

namespace gradix::grid {

namespace detail {
/// Which kernel stores a use (see run()).
enum class store_kind : std::uint8_t { none, thread, block, segment, segment_block };

/// One use's update, with the kernel chosen at run time (kind_): update_kernel (thread),
/// update_block_kernel (block), use_segment_kernel (segment) or use_segment_block_kernel
/// (segment_block). run() launches the chosen kernel; a fused launch (backward.hpp) runs the
/// work itself as a member.
template <class Use>
struct use_work {
  using K = ad::kernel_traits<Use>;
  using A = use_axes<Use>;
  using G = typename Use::storage_type;
  using T = typename G::value_type;
  using D = typename Use::domain_type;
  using V = typename Use::value_expr;
  using M = typename Use::map_type;
  using Addr = target_address_t<G>;
  static constexpr std::size_t RD = K::domain_rank;
  using VT = value_at_t<V, RD>;
  /// Whether the use has projected axes that v depends on (a block may sum them).
  static constexpr bool may_block = A::projected != 0 && !K::collapses_projected;
  static constexpr bool uses_barriers = may_block;
  using thread_kernel = update_kernel<D, V, M, T, Addr, A::projected, K::collapses_projected, !K::injective, A::fast>;
  /// update_kernel that adds atomically although the map is injective: for an injective use
  /// that shares its launch with another use of the same storage (atomic mode).
  using thread_atomic_kernel = update_kernel<D, V, M, T, Addr, A::projected, K::collapses_projected, true, A::fast>;

  D dom_;
  V v_;
  M map_;
  T* data_;
  Addr addr_;
  index_t n_outer_;
  index_t n_proj_;
  scatter_key const* keys_;
  index_t n_keys_;
  index_t n_cols_;
  store_kind kind_;
  bool atomic_;  // add atomically even where the map is injective (see thread_atomic_kernel)

  thread_kernel as_thread() const { return {dom_, v_, map_, data_, addr_, n_outer_, n_proj_}; }
  auto as_block() const
    requires may_block
  {
    return update_block_kernel<D, V, M, T, Addr, A::projected, !K::injective>{dom_, v_, map_, data_, addr_, n_outer_, n_proj_};
  }
  auto as_segment() const
    requires(!K::injective)
  {
    return use_segment_kernel<D, V, M, T, Addr, A::key, A::column, A::projected, K::collapses_projected>{
        dom_, v_, map_, data_, addr_, keys_, n_keys_, n_cols_, n_proj_};
  }
  auto as_segment_block() const
    requires(!K::injective && may_block)
  {
    return use_segment_block_kernel<D, V, M, T, Addr, A::key, A::column, A::projected>{
        dom_, v_, map_, data_, addr_, keys_, n_keys_, n_cols_, n_proj_};
  }

  GRADIX_KERNEL_BODY
  template <class Ctx>
  GRADIX_HOST_DEVICE void operator()(Ctx const& c) const {
    if (kind_ == store_kind::thread) {
      if constexpr (K::injective) {
        if (atomic_) thread_atomic_kernel{dom_, v_, map_, data_, addr_, n_outer_, n_proj_}(c);
        else thread_kernel{dom_, v_, map_, data_, addr_, n_outer_, n_proj_}(c);
      } else {
        thread_kernel{dom_, v_, map_, data_, addr_, n_outer_, n_proj_}(c);
      }
    }
    if constexpr (may_block) {
      if (kind_ == store_kind::block) {
        if constexpr (K::injective) {
          if (atomic_) update_block_kernel<D, V, M, T, Addr, A::projected, true>{dom_, v_, map_, data_, addr_, n_outer_, n_proj_}(c);
          else update_block_kernel<D, V, M, T, Addr, A::projected, false>{dom_, v_, map_, data_, addr_, n_outer_, n_proj_}(c);
        } else {
          update_block_kernel<D, V, M, T, Addr, A::projected, true>{dom_, v_, map_, data_, addr_, n_outer_, n_proj_}(c);
        }
      }
    }
    if constexpr (!K::injective) {
      if (kind_ == store_kind::segment)
        use_segment_kernel<D, V, M, T, Addr, A::key, A::column, A::projected, K::collapses_projected>{
            dom_, v_, map_, data_, addr_, keys_, n_keys_, n_cols_, n_proj_}(c);
      if constexpr (may_block) {
        if (kind_ == store_kind::segment_block)
          use_segment_block_kernel<D, V, M, T, Addr, A::key, A::column, A::projected>{
              dom_, v_, map_, data_, addr_, keys_, n_keys_, n_cols_, n_proj_}(c);
      }
    }
  }

  /// Whether the chosen kernel runs block by block (block_lanes threads per block).
  bool blockwise() const { return kind_ == store_kind::block || kind_ == store_kind::segment_block; }
  /// The shared memory it needs per block.
  std::size_t shared_bytes() const { return blockwise() ? std::size_t(block_lanes) * sizeof(VT) : 0; }
  /// The blocks it takes with t threads per block, at most cap (0: nothing to run).
  index_t blocks(index_t t, index_t cap) const {
    index_t n = 0;
    switch (kind_) {
      case store_kind::none: return 0;
      case store_kind::thread: n = (n_outer_ + t - 1) / t; break;
      case store_kind::block: n = n_outer_; break;
      case store_kind::segment: n = (n_keys_ * n_cols_ + t - 1) / t; break;
      case store_kind::segment_block: n = n_keys_ * n_cols_; break;
    }
    if (n > cap) n = cap;
    return n < 1 ? 1 : n;
  }
};

/// Whether axis expression Ax reads a whole device_index_vec at d[J] itself (up to the
/// shift and scale that the lookup's value gets; the inner d[J] is checked at run time).
template <class Ax, std::size_t J>
struct reads_index_at : std::false_type {};
template <class I, std::size_t J>
struct reads_index_at<ad::ax_lookup<ad::ax_dom<J>, device_index_vec<I>>, J> : std::true_type {};

/// The target component through which a use's keys can take their order from its index
/// vector (grid::index_order), or -1: the use has one key axis J, and among the key
/// components one reads a device index vector at d[J]; the others are constants. The keys of
/// such a use, sorted by (target, key coordinate), are then in the order of the vector's
/// values sorted by (value, position), and two keys share a target exactly when the values
/// are equal (a key's target is off + scale * value times a positive stride, plus constants).
template <class M, std::uint64_t KeyComps, std::uint64_t Key>
struct order_component {
  static constexpr int value = -1;
};
template <class... Ax, std::uint64_t KC, std::uint64_t Key>
  requires(Key != 0 && (Key & (Key - 1)) == 0)
struct order_component<tuple<Ax...>, KC, Key> {
  static constexpr std::size_t J = std::size_t(__builtin_ctzll(Key));
  static constexpr int value = [] {
    int found = -1, k = 0;
    bool ok = true;
    auto one = [&](bool key_comp, bool constant, bool lookup) {
      if (key_comp && !constant) {
        if (lookup && found < 0) found = k;
        else ok = false;
      }
      ++k;
    };
    (one(((KC >> k) & 1) != 0, std::is_same_v<Ax, ad::ax_const>, reads_index_at<Ax, J>::value), ...);
    return ok ? found : -1;
  }();
};

/// The index order that use u's keys can come from (order_component), or nullptr: also the
/// lookup must read the vector as a whole, position d[J] at key coordinate d[J], with a
/// nonzero scale.
template <class Use>
index_order* order_of(Use const& u) {
  using A = use_axes<Use>;
  constexpr int C = order_component<typename Use::map_type, A::key_components, A::key>::value;
  if constexpr (C < 0) {
    return nullptr;
  } else {
    constexpr std::size_t J = std::size_t(__builtin_ctzll(A::key));
    auto const& a = get<std::size_t(C)>(u.map_);
    bool const whole = a.scale_ != 0 && a.inner_.off_ == 0 && a.inner_.scale_ == 1 && a.idx_.stride_ == 1 &&
                       u.dom_.extents()[J] == a.idx_.size_;
    return whole ? a.idx_.order_ : nullptr;
  }
}

/// The keys of use u (m of them, padded) from its index vector's kept order, or nullptr
/// (order_of; another thread's or launcher's order). *made: whether they are made already.
template <class L, class Use>
scatter_key* kept_keys(L& l, Use const& u, index_t m, bool* made) {
  index_order* const o = order_of(u);
  if (!o) return nullptr;
  return static_cast<scatter_key*>(o->keys_for(&l, std::size_t(m) * sizeof(scatter_key), made));
}

/// The update of use u, chosen as run() describes, with u's storage as it is now (after its
/// reservation). In deterministic mode a lookup's keys are made and sorted here, into
/// `keys`, which must outlive the launch of the work.
template <class Use>
use_work<Use> idle_work(Use const& u) {
  return {u.dom_, u.v_, u.map_, nullptr, {}, 0, 0, nullptr, 0, 0, store_kind::none, false};
}
template <class L, class Use>
use_work<Use> make_work(L& l, Use const& u, scatter_mode mode, std::unique_ptr<device_buffer<L>>& keys, launch_options o,
                        bool presorted = false) {
  using W = use_work<Use>;
  using K = typename W::K;
  using A = typename W::A;
  using G = typename W::G;
  W w = idle_work(u);
  if (!u.target_) return w;  // a use that grad() does not want
  auto const ext = u.dom_.extents();
  for (std::size_t j = 0; j < W::RD; ++j)
    if (ext[j] == 0) return w;
  G& g = *u.target_;
  w.data_ = g.data();
  w.addr_ = target_address_of(g);
  w.n_proj_ = coords::count(ext, A::projected);
  bool const long_proj = W::may_block && w.n_proj_ >= block_proj_min && block_lanes <= l.max_threads();
  if (K::injective || mode == scatter_mode::atomic) {
    w.n_outer_ = coords::count(ext, A::outer);
    w.kind_ = long_proj ? store_kind::block : store_kind::thread;
    return w;
  }
  if constexpr (!K::injective) {
    constexpr std::size_t RT = K::target_rank;
    w.n_keys_ = coords::count(ext, A::key);
    w.n_cols_ = coords::count(ext, A::column);
    array<index_t, RT> kst = contiguous_strides<row_major>(g.shape().extents());
    for (std::size_t k = 0; k < RT; ++k)
      if (!((A::key_components >> k) & 1)) kst[k] = 0;
    index_t const m = key_count(w.n_keys_);
    auto sort_into = [&](scatter_key* kp) {
      l.launch(shape_for(m, o, l.max_threads()),
               use_keys_kernel<typename W::D, typename W::M, A::key, RT>{u.dom_, u.map_, kst, w.n_keys_, m, kp});
      bitonic_sort(l, kp, m, o);
    };
    bool made = false;
    if (scatter_key* const kp = kept_keys(l, u, m, &made)) {
      // the index vector's kept order (made here once per upload, unless make_sort made it)
      if (!made) {
        sort_into(kp);
        order_of(u)->made();
      }
      w.keys_ = kp;
    } else {
      if (!presorted) {  // (else make_sort made and sorted them in the reservation launch)
        keys = std::make_unique<device_buffer<L>>(l, std::size_t(m) * sizeof(scatter_key));
        sort_into(keys->template as<scatter_key>());
      }
      w.keys_ = keys->template as<scatter_key>();
    }
    w.kind_ = long_proj ? store_kind::segment_block : store_kind::segment;
  }
  return w;
}
}  // namespace detail

namespace detail {
/// The one-block key sort of a use (use_sort_kernel; no_work when its map is injective).
template <class Use, bool Injective = ad::kernel_traits<Use>::injective>
struct sort_of {
  using type = no_work;
};
template <class Use>
struct sort_of<Use, false> {
  using type = use_sort_kernel<typename Use::domain_type, typename Use::map_type, use_axes<Use>::key,
                               ad::kernel_traits<Use>::target_rank>;
};
template <class Use>
using sort_of_t = typename sort_of<Use>::type;

/// The key sort of use u in one block, made ready to launch (its keys in `keys`): active when
/// the use stores through sorted keys (a lookup, in deterministic mode) and its keys fit in a
/// block's shared memory, whose bytes it needs (`shared`).
template <class Use>
struct ready_sort {
  sort_of_t<Use> k;
  bool active;
  std::size_t shared;
};
template <class L, class Use>
ready_sort<Use> make_sort(L& l, Use const& u, scatter_mode mode, std::unique_ptr<device_buffer<L>>& keys, bool wanted) {
  using K = ad::kernel_traits<Use>;
  if constexpr (K::injective) {
    return {{}, false, 0};
  } else {
    using A = use_axes<Use>;
    using G = typename Use::storage_type;
    constexpr std::size_t RT = K::target_rank;
    auto const ext = u.dom_.extents();
    index_t const n = coords::count(ext, A::key);
    index_t const m = key_count(n);
    array<index_t, RT> kst{};
    ready_sort<Use> r{{u.dom_, u.map_, kst, n, m, nullptr}, false, 0};
    bool empty = !u.target_ || !wanted || mode != scatter_mode::deterministic || m > sort_tile_for(l) || m < 2;
    for (std::size_t j = 0; j < K::domain_rank; ++j)
      if (ext[j] == 0) empty = true;
    if (empty) return r;
    G& g = *u.target_;
    kst = contiguous_strides<row_major>(g.shape().extents());
    for (std::size_t k = 0; k < RT; ++k)
      if (!((A::key_components >> k) & 1)) kst[k] = 0;
    bool made = false;
    if (scatter_key* const kp = kept_keys(l, u, m, &made)) {
      // the index vector's kept order: nothing to sort when made; else made here (marked
      // made now, so that another use of the vector in this launch does not sort it too;
      // run_device_plan marks it stale again if a launch fails)
      if (made) return r;
      order_of(u)->made();
      r.k.keys_ = kp;
    } else {
      keys = std::make_unique<device_buffer<L>>(l, std::size_t(m) * sizeof(scatter_key));
      r.k.keys_ = keys->template as<scatter_key>();
    }
    r.k.kst_ = kst;
    r.active = true;
    r.shared = std::size_t(m) * sizeof(scatter_key);
    return r;
  }
}
}  // namespace detail

/// Runs one use on the device (after prepare), in mode `mode` when its map is not injective:
/// one thread per outer coordinate (plain stores when the map is injective, atomic adds in
/// atomic mode), or one block per outer coordinate when the projected axes are long and do not
/// collapse; in deterministic mode, one thread (or block) per segment of sorted keys and
/// column coordinate.
template <class L, class Use>
void run(L& l, Use const& u, scatter_mode mode, launch_options o = {}) {
  std::unique_ptr<detail::device_buffer<L>> keys;
  auto const w = detail::make_work(l, u, mode, keys, o);
  using W = std::remove_cvref_t<decltype(w)>;
  using VT = typename W::VT;
  switch (w.kind_) {
    case detail::store_kind::none: return;
    case detail::store_kind::thread: {
      static_assert(std::is_trivially_copyable_v<typename W::thread_kernel>,
                    "gradix::grid: an update kernel must be trivially copyable");
      l.launch(shape_for(w.n_outer_, o, l.max_threads()), w.as_thread());
      return;
    }
    case detail::store_kind::block:
      if constexpr (W::may_block) detail::launch_blocks<VT>(l, w.as_block(), w.n_outer_, o);
      return;
    case detail::store_kind::segment:
      if constexpr (!W::K::injective) {
        static_assert(std::is_trivially_copyable_v<decltype(w.as_segment())>,
                      "gradix::grid: an update kernel must be trivially copyable");
        l.launch(shape_for(w.n_keys_ * w.n_cols_, o, l.max_threads()), w.as_segment());
      }
      return;
    case detail::store_kind::segment_block:
      if constexpr (!W::K::injective && W::may_block)
        detail::launch_blocks<VT>(l, w.as_segment_block(), w.n_keys_ * w.n_cols_, o);
      return;
  }
}

// ---------------------------------------------------------------------------------------
// Fused pairs and multi_uses: their uses run one by one (the host fuses their loop nests;
// on the device each use is its own kernel, with the same plan).

namespace detail {
/// The value expression of a member of a multi_use (ad/kernel.hpp): the region's path
/// derivative read at the region's map, times v0, negated, as region_value describes it.
template <class V>
struct member_value;
template <class Top, class P, class M, class D>
struct member_value<ad::at_map_node<ad::path_deriv_node<Top, P>, M, D>> {
  using type = ad::at_map_node<ad::path_deriv_node<Top, P>, M, D>;
  template <class MU, class V0>
  static type make(Top const& top, M const& tmap, V0 const&, MU const& mu) {
    return type{ad::path_deriv_node<Top, P>{top}, tmap, mu.dom_};
  }
};
template <class V0T, class X>
struct member_value<binary_node<op::mul, V0T, X>> {
  using type = binary_node<op::mul, V0T, X>;
  template <class Top, class M, class MU>
  static type make(Top const& top, M const& tmap, V0T const& v0, MU const& mu) {
    type r{v0, member_value<X>::make(top, tmap, v0, mu), {}};
    for (std::size_t j = 0; j < type::shape_type::rank; ++j) r.shape_.set_extent(j, mu.dom_.extent(j));
    return r;
  }
};
template <class X>
struct member_value<unary_node<op::neg, X>> {
  using type = unary_node<op::neg, X>;
  template <class Top, class M, class V0, class MU>
  static type make(Top const& top, M const& tmap, V0 const& v0, MU const& mu) {
    return type{member_value<X>::make(top, tmap, v0, mu)};
  }
};

/// Member k of a multi_use as a plain use.
template <class MultiUse, class MU>
auto member_as_use(MultiUse const& mu_all, MU const& mu) {
  using V = typename MU::value_expr;
  V v = member_value<V>::make(mu_all.top_, mu_all.tmap_, mu_all.v0_, mu);
  return ad::use<typename MU::domain_type, V, typename MU::map_type, typename MU::storage_type>{mu.dom_, v, mu.map_,
                                                                                              mu.target_};
}
}  // namespace detail

template <class L, class U1, class U2>
void prepare(L& l, ad::fused_use<U1, U2> const& f, launch_options o = {}) {
  prepare(l, f.first_, o);
  prepare(l, f.second_, o);
}
template <class L, class U1, class U2>
void run(L& l, ad::fused_use<U1, U2> const& f, scatter_mode mode, launch_options o = {}) {
  run(l, f.first_, mode, o);
  run(l, f.second_, mode, o);
}
template <class L, int I, class Top, class TMap, class V0, class... U>
void prepare(L& l, ad::multi_use<I, Top, TMap, V0, U...> const& m, launch_options o = {}) {
  for_each_element(m.uses_, [&](auto const& mu) { prepare(l, detail::member_as_use(m, mu), o); });
}
template <class L, int I, class Top, class TMap, class V0, class... U>
void run(L& l, ad::multi_use<I, Top, TMap, V0, U...> const& m, scatter_mode mode, launch_options o = {}) {
  for_each_element(m.uses_, [&](auto const& mu) { run(l, detail::member_as_use(m, mu), mode, o); });
}

}  // namespace gradix::grid
