#pragma once
/// \file
/// The grid executor's whole-plan runner for plans of plain uses only (plain, fused and
/// multi uses: no product, row, let or staged element, so no buffer of the call): the
/// reservations of sparse storages, then the update kernels, fused into as few launches as
/// the uses allow (run_fused_uses: one launch for every use whose targets do not collide).
/// The plan runner written once for every executor (exec/run.hpp, run_plan_on) hands such a
/// plan to grid::executor::run_whole; every other plan runs element by element there.

#include "gradix/ad/kernel.hpp"
#include "gradix/ad/plan.hpp"
#include "gradix/backend/grid/launch.hpp"
#include "gradix/backend/grid/reduce.hpp"
#include "gradix/backend/grid/scatter.hpp"
#include "gradix/backend/grid/update.hpp"
#include "gradix/config.hpp"
#include "gradix/core/tuple.hpp"
#include "gradix/exec/checks.hpp"
#include "gradix/exec/elements.hpp"

#include <cstddef>
#include <memory>
#include <tuple>
#include <type_traits>
#include <utility>

namespace gradix::grid {

/// How a device backward runs: the store of non-injective (lookup) maps, and the launch shape.
struct backward_options {
  scatter_mode mode = scatter_mode::atomic;
  launch_options launch = {};
};

namespace detail {
template <class U>
struct device_plan_element : std::false_type {};
template <class D, class V, class M, class G>
struct device_plan_element<ad::use<D, V, M, G>> : std::bool_constant<device_expression<V>> {};
template <class U1, class U2>
struct device_plan_element<ad::fused_use<U1, U2>>
    : std::bool_constant<device_plan_element<U1>::value && device_plan_element<U2>::value> {};
template <int I, class Top, class TMap, class V0, class... U>
struct device_plan_element<ad::multi_use<I, Top, TMap, V0, U...>>
    : std::bool_constant<device_expression<Top> && (std::is_same_v<V0, ad::no_v0> || device_expression<V0>)> {};

template <class Plan>
struct device_plan : std::false_type {};
template <class... E>
struct device_plan<tuple<E...>> : std::bool_constant<(device_plan_element<E>::value && ...)> {};

/// The compile-time check of a device backward on expression E.
template <class E>
constexpr bool check_device_backward() {
  static_assert(device_expression<E>,
                "gradix::grid::backward: the expression reads host memory; every leaf of a device expression "
                "must be a cuda_space view or a device parameter");
  return device_expression<E>;
}

/// The number of plain uses in a device plan (an upper bound on the storages it writes).
template <class U>
inline constexpr std::size_t device_uses_v = 1;
template <class U1, class U2>
inline constexpr std::size_t device_uses_v<ad::fused_use<U1, U2>> = 2;
template <int I, class Top, class M, class V0, class... U>
inline constexpr std::size_t device_uses_v<ad::multi_use<I, Top, M, V0, U...>> = sizeof...(U);
template <class Plan>
inline constexpr std::size_t device_plan_uses_v = 0;
template <class... E>
inline constexpr std::size_t device_plan_uses_v<tuple<E...>> = (std::size_t(0) + ... + device_uses_v<E>);

/// Takes the flags of every storage that plan p writes, into lock.
template <class Lock, class Plan>
void lock_targets(Lock& lock, Plan const& p) {
  for_each_kernel(p, [&](auto const& u) { lock.take(u.target_); });
}

/// The plain uses of a plan element (a fused pair: its two uses; a multi_use: its members).
template <class U>
auto plain_uses(U const& u) {
  using D = std::remove_cvref_t<U>;
  if constexpr (ad::is_fused<D>::value) {
    return ::gradix::make_tuple(u.first_, u.second_);
  } else if constexpr (ad::is_multi<D>::value) {
    return [&]<std::size_t... I>(std::index_sequence<I...>) {
      return ::gradix::make_tuple(member_as_use(u, get<I>(u.uses_))...);
    }(std::make_index_sequence<std::remove_cvref_t<decltype(u.uses_)>::size>{});
  } else {
    return ::gradix::make_tuple(u);
  }
}
/// Every plain use of a plan from element I on, in plan order.
template <std::size_t I = 0, class... E>
auto plan_uses(tuple<E...> const& p) {
  if constexpr (I == sizeof...(E)) return tuple<>{};
  else return ::gradix::tuple_cat(plain_uses(get<I>(p)), plan_uses<I + 1>(p));
}

/// The most uses one fused launch takes (a run of more is taken in runs of this many:
/// grid::executor::run_kernels).
inline constexpr std::size_t fuse_uses_max = 16;
/// Whether the uses U... run fused: reservations in one launch, updates in one launch (while
/// their storages differ). A kernel's parameters must fit what CUDA takes
/// (kernel_param_bytes, less a margin: 31,740 bytes with CUDA 12.1 and later, 3,072 with an
/// older nvcc; a GRU step's elementwise adjoint, gx::cells::gru_projected, takes more than
/// 4 KiB), and at most fuse_uses_max of them (8 before the 32 KB parameters).
template <class... U>
inline constexpr bool fuse_uses_v = sizeof...(U) >= 2 && sizeof...(U) <= fuse_uses_max &&
                                    sizeof(fused_kernel<use_work<U>...>) <= kernel_param_bytes - 1024 &&
                                    sizeof(fused_kernel<reserve_of_t<U>..., sort_of_t<U>...>) <= kernel_param_bytes - 1024;

/// Points a reservation kernel at its storage's memory as it is now (a later make_room of the
/// same storage, for another use of the launch, may have grown it).
template <class K, class G>
void refresh_reservation(K& k, G const& g) {
  if constexpr (G::sparse) {
    auto const r = g.current();
    k.slot_of_ = r.slot_of;
    k.ids_ = r.ids;
    k.data_ = r.data;
    k.count_ = r.count;
  }
}

/// The memory a use's target covers, to tell which uses of a launch write the same memory:
/// a dense storage's elements from its first to its last (two buffers that share memory, as
/// the placeholders of one let do, each with its own target object, are found to collide); a
/// sparse storage is the storage object itself (its slots move as it grows).
struct target_span {
  char const* begin = nullptr;
  char const* end = nullptr;
  bool overlaps(target_span const& o) const { return begin && o.begin && begin < o.end && o.begin < end; }
};
template <class G>
target_span span_of(G const* g) {
  if (!g) return {};
  if constexpr (G::sparse) {
    auto const p = reinterpret_cast<char const*>(g);
    return {p, p + 1};
  } else {
    auto const ext = g->shape().extents();
    auto const st = g->strides();
    std::size_t last = 0;
    for (std::size_t j = 0; j < ext.size(); ++j) {
      if (ext[j] == 0) return {};
      last += std::size_t(ext[j] - 1) * std::size_t(st[j]);
    }
    auto const p = reinterpret_cast<char const*>(g->data());
    return {p, p + (last + 1) * sizeof(typename G::value_type)};
  }
}

/// Runs uses us on l, fused. The uses are cut into groups, in plan order; each group is one
/// reservation launch and, after every group's reservations, one update launch. In atomic
/// mode one group holds every use: the reservations of one storage run in one block, one
/// after the other (first-touch order, as in separate launches), and the updates of uses that
/// share a storage add atomically, injective maps too (they run concurrently). In
/// deterministic mode a new group starts at a use whose storage is in the current one already
/// (a fused pair's two uses, for example), so the order of their adds stays fixed; a lookup's
/// keys are sorted by one block in the reservation launch when they fit a sort tile. Within a
/// launch each use's kernel gets its own range of blocks (member_context).
template <class L, class... U>
void run_fused_uses(L& l, tuple<U...> const& us, backward_options o) {
  constexpr std::size_t N = sizeof...(U);
  using Seq = std::index_sequence_for<U...>;
  bool const share = o.mode == scatter_mode::atomic;
  void const* target[N] = {};
  target_span span[N] = {};
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    ((target[I] = get<I>(us).target_, span[I] = span_of(get<I>(us).target_)), ...);
  }(Seq{});
  array<int, N> group{};
  int groups = 0;
  {
    std::size_t in_group[N] = {};
    std::size_t k = 0;
    bool any = false;
    for (std::size_t i = 0; i < N; ++i) {
      group[i] = -1;
      if (!target[i]) continue;
      for (std::size_t q = 0; q < k && !share; ++q)
        if (span[in_group[q]].overlaps(span[i])) {
          ++groups;
          k = 0;
          break;
        }
      in_group[k++] = i;
      group[i] = groups;
      any = true;
    }
    if (!any) return;
    ++groups;
  }
  // whether another use of the same group writes memory this one writes
  array<bool, N> shared{};
  for (std::size_t i = 0; i < N; ++i)
    for (std::size_t j = 0; j < N; ++j)
      if (i != j && group[i] >= 0 && group[i] == group[j] && span[i].overlaps(span[j])) shared[i] = true;
  index_t const cap = o.launch.max_blocks > 0 ? o.launch.max_blocks : max_grid_blocks;
  // 1. the reservations, group by group (each group's storages make room just before its
  //    launch), and beside them, in deterministic mode, the one-block key sorts of its lookups
  index_t const rt = reserve_threads(l, o.launch);
  std::unique_ptr<device_buffer<L>> keys[N];
  array<bool, N> sorted{};
  for (int g = 0; g < groups; ++g) {
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      // (braced lists: the storages make room in use order, the order the kernels run in)
      std::tuple<ready_reserve<U>...> rr{make_reserve(get<I>(us), group[I] == g)...};
      std::tuple<ready_sort<U>...> rs{make_sort(l, get<I>(us), o.mode, keys[I], group[I] == g)...};
      ((std::get<I>(rr).active ? refresh_reservation(std::get<I>(rr).k, *get<I>(us).target_) : void()), ...);
      array<bool, N> const active{{std::get<I>(rr).active...}};
      ((group[I] == g ? void(sorted[I] = std::get<I>(rs).active) : void()), ...);
      std::size_t shared_bytes = std::size_t(rt + 1) * sizeof(std::int32_t);
      ((shared_bytes = std::get<I>(rs).shared > shared_bytes ? std::get<I>(rs).shared : shared_bytes), ...);
      fused_kernel<reserve_of_t<U>..., sort_of_t<U>...> k{::gradix::make_tuple(std::get<I>(rr).k..., std::get<I>(rs).k...),
                                                          {},
                                                          {}};
      // a block per storage (its uses' reservations one after the other), then one per sort
      index_t next = 0;
      for (std::size_t i = 0; i < N; ++i) {
        k.begin_[i] = k.end_[i] = 0;
        if (!active[i]) continue;
        index_t b = -1;
        for (std::size_t j = 0; j < i && b < 0; ++j)
          if (active[j] && target[j] == target[i]) b = k.begin_[j];
        if (b < 0) b = next++;
        k.begin_[i] = b;
        k.end_[i] = b + 1;
      }
      for (std::size_t i = 0; i < N; ++i) {
        bool const on = group[i] == g && sorted[i];
        k.begin_[N + i] = on ? next : 0;
        k.end_[N + i] = on ? ++next : 0;
      }
      static_assert(std::is_trivially_copyable_v<decltype(k)>, "gradix::grid: a fused launch must be trivially copyable");
      if (next > 0) l.launch(launch_shape{next, rt, shared_bytes}, k);
    }(Seq{});
  }
  // 2. the updates, group by group
  for (int g = 0; g < groups; ++g) {
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      std::tuple<use_work<U>...> const ws{(group[I] == g ? make_work(l, get<I>(us), o.mode, keys[I], o.launch, sorted[I])
                                                        : idle_work(get<I>(us)))...};
      fused_kernel<use_work<U>...> k{::gradix::make_tuple(std::get<I>(ws)...), {}, {}};
      ((get<I>(k.w_).atomic_ = group[I] == g && shared[I]), ...);
      bool const blockwise = (get<I>(k.w_).blockwise() || ...);
      index_t t = blockwise ? block_lanes : (o.launch.threads > 0 ? o.launch.threads : 256);
      if (t > l.max_threads()) t = l.max_threads();
      std::size_t shared_bytes = 0;
      ((shared_bytes = get<I>(k.w_).shared_bytes() > shared_bytes ? get<I>(k.w_).shared_bytes() : shared_bytes), ...);
      index_t next = 0;
      ((k.begin_[I] = next, next += get<I>(k.w_).blocks(t, cap), k.end_[I] = next), ...);
      static_assert(std::is_trivially_copyable_v<decltype(k)>, "gradix::grid: a fused launch must be trivially copyable");
      if (next > 0) l.launch(launch_shape{next, t, shared_bytes}, k);
    }(Seq{});
    for (std::size_t i = 0; i < N; ++i)
      if (group[i] == g) keys[i].reset();
  }
}

/// The order in which update_kernel's threads take the elements of a rank-R domain with
/// no projected axis: axis Fast first, row-major order when Fast is -1 or the last axis.
template <class U>
inline constexpr int walk_order_v = [] {
  constexpr int f = use_axes<U>::fast;
  constexpr int r = int(ad::kernel_traits<U>::domain_rank);
  return f < 0 ? r - 1 : f;
}();

/// A use as a member of run_pointwise_uses's launch: its one-thread-per-element kernel
/// (update_kernel), adding atomically when another member writes the same memory.
template <class Use>
struct pointwise_member {
  using W = use_work<Use>;
  static constexpr bool uses_barriers = false;
  typename W::thread_kernel k_;
  bool atomic_;
  GRADIX_KERNEL_BODY
  template <class Ctx>
  GRADIX_HOST_DEVICE void operator()(Ctx const& c) const {
    if constexpr (W::K::injective) {
      if (atomic_) {
        typename W::thread_atomic_kernel{k_.dom_, k_.v_, k_.map_, k_.data_, k_.addr_, k_.n_outer_, k_.n_proj_}(c);
        return;
      }
    }
    k_(c);
  }
};

/// Whether uses U... can run as members of one launch that all cover the same blocks, each
/// thread taking the same elements in every member (run_pointwise_uses): rank-R domains, no
/// projected axis, one walk order, and the launch's parameters within what CUDA gives a
/// kernel (kernel_param_bytes, less a margin).
template <std::size_t R, class... U>
inline constexpr bool pointwise_launch_v = sizeof...(U) >= 2 &&
                                           ((ad::kernel_traits<U>::domain_rank == R && use_axes<U>::projected == 0 &&
                                             walk_order_v<U> == int(R) - 1) &&
                                            ...) &&
                                           sizeof(fused_kernel<pointwise_member<U>...>) <= kernel_param_bytes - 1024;

/// Runs uses us, whose domains all have extents ext, in one launch in which every member
/// covers the same blocks and each thread takes the same elements in every member, one
/// member after the other: a use may then read, at its own element, what an earlier member
/// wrote at that element into `through` (a pointwise let's buffer: exec/fusion.hpp,
/// pointwise_let). Uses that write `through` add plainly (each element is one thread's);
/// uses whose targets share other memory add atomically in atomic mode. Returns false, having
/// run nothing, when the uses or the shapes do not allow it (a domain of other extents, a
/// kernel that is not one thread per element, shared targets in deterministic mode).
template <class L, std::size_t R, class... U>
bool run_pointwise_uses(L& l, tuple<U...> const& us, target_span through, array<index_t, R> const& ext,
                        backward_options o) {
  if constexpr (!pointwise_launch_v<R, U...>) {
    return false;
  } else {
    constexpr std::size_t N = sizeof...(U);
    using Seq = std::index_sequence_for<U...>;
    index_t total = 1;
    for (std::size_t j = 0; j < R; ++j) total *= ext[j];
    if (total == 0 || !through.begin) return false;
    bool same = true;
    target_span span[N] = {};
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      auto one = [&](auto const& u, target_span& sp) {
        auto const e = u.dom_.extents();
        for (std::size_t j = 0; j < R; ++j) same = same && e[j] == ext[j];
        sp = span_of(u.target_);
      };
      (one(get<I>(us), span[I]), ...);
    }(Seq{});
    if (!same) return false;
    // a use's target is `through` itself, or memory apart from it
    array<bool, N> shared{};
    for (std::size_t i = 0; i < N; ++i) {
      bool const in = span[i].begin == through.begin && span[i].end == through.end;
      if (!in && span[i].overlaps(through)) return false;
      for (std::size_t j = 0; j < N && !in; ++j)
        if (i != j && span[i].overlaps(span[j])) shared[i] = true;
      if (shared[i] && o.mode != scatter_mode::atomic) return false;
    }
    std::unique_ptr<device_buffer<L>> keys[N];
    auto const ws = [&]<std::size_t... I>(std::index_sequence<I...>) {
      return std::tuple<use_work<U>...>{make_work(l, get<I>(us), o.mode, keys[I], o.launch)...};
    }(Seq{});
    bool ok = true;
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      ((ok = ok && (std::get<I>(ws).kind_ == store_kind::none ||
                    (std::get<I>(ws).kind_ == store_kind::thread && std::get<I>(ws).n_outer_ == total))),
       ...);
    }(Seq{});
    if (!ok) return false;
    fused_kernel<pointwise_member<U>...> k{[&]<std::size_t... I>(std::index_sequence<I...>) {
                                             return ::gradix::make_tuple(
                                                 pointwise_member<U>{std::get<I>(ws).as_thread(), shared[I]}...);
                                           }(Seq{}),
                                           {},
                                           {}};
    index_t t = o.launch.threads > 0 ? o.launch.threads : 256;
    if (t > l.max_threads()) t = l.max_threads();
    index_t const cap = o.launch.max_blocks > 0 ? o.launch.max_blocks : max_grid_blocks;
    index_t nb = (total + t - 1) / t;
    if (nb > cap) nb = cap;
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      ((k.begin_[I] = 0, k.end_[I] = std::get<I>(ws).kind_ == store_kind::thread ? nb : 0), ...);
    }(Seq{});
    static_assert(std::is_trivially_copyable_v<decltype(k)>, "gradix::grid: a fused launch must be trivially copyable");
    l.launch(launch_shape{nb, t, 0}, k);
    return true;
  }
}

/// Runs a plan of plain, fused and multi uses on l: the reservations of sparse storages, then
/// the update kernels; fused (run_fused_uses) when the plan's uses allow it, else one launch
/// each, use after use. (Plans with buffers run through exec/run.hpp: run_plan below.)
template <class L, class Plan>
void run_device_plan(L& l, Plan const& p, backward_options o, char const* op) {
  static_assert(device_plan<Plan>::value, "gradix internal: run_device_plan on a plan with buffers");
  if constexpr (device_plan<Plan>::value) {
    ::gradix::detail::busy_lock<device_plan_uses_v<Plan>> lock(op);
    lock_targets(lock, p);
    auto const us = plan_uses(p);
    try {
      if constexpr ([]<class... U>(tuple<U...> const*) { return fuse_uses_v<U...>; }(static_cast<decltype(us) const*>(nullptr))) {
        run_fused_uses(l, us, o);
      } else {
        for_each_element(us, [&](auto const& u) { prepare(l, u, o.launch); });
        for_each_element(us, [&](auto const& u) { run(l, u, o.mode, o.launch); });
      }
    } catch (...) {
      // an index vector's kept order marked made before its sort was launched is not
      if (o.mode == scatter_mode::deterministic)
        for_each_element(us, [&](auto const& u) {
          if (index_order* const q = order_of(u)) q->stale();
        });
      throw;
    }
  }
}

}  // namespace detail

}  // namespace gradix::grid
