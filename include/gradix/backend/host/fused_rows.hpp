#pragma once
/// \file
/// The row-by-row form of a plain use's update kernel, for a backward with a fused optimizer
/// step (exec/fused_sink.hpp): the kernel's outer coordinates are ordered by the slice they
/// write (ties: by coordinate), each slice's gradient is summed into a row buffer in that
/// order (the order in which the plain kernel adds into a zeroed slot: the same bits) and
/// handed to the sink's `apply` as soon as its last contribution is in. Nothing is written
/// into gradient storage. The form exists for a rank-2 storage whose sparse/dense axis is
/// reached through an index vector along one outer domain axis, with the inner domain axis
/// walking a whole slice contiguously (a table's rows gathered by an index vector: the
/// founding benchmark's uses, an embedding_bag's scatter); fused_rows_fit checks the run-time
/// part. The rows run on the thread pool, a slice on one thread; its scratch is reserved by
/// the pre-pass.

#include "gradix/ad/kernel.hpp"
#include "gradix/ad/map.hpp"
#include "gradix/ad/region.hpp"
#include "gradix/backend/host/scratch.hpp"
#include "gradix/backend/host/thread_pool.hpp"
#include "gradix/config.hpp"
#include "gradix/core/coords.hpp"
#include "gradix/eval/map.hpp"
#include "gradix/exec/fused_sink.hpp"

#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>

namespace gradix::host {

namespace detail {
/// A map component that is idx(off + scale * d[J]) for an index vector (plain or unique).
template <class C>
struct row_lookup : std::false_type {};
template <std::size_t J, class I>
struct row_lookup<ad::ax_lookup<ad::ax_dom<J>, index_vec<I>>> : std::true_type {
  static constexpr std::size_t axis = J;
};
template <std::size_t J, class I>
struct row_lookup<ad::ax_lookup<ad::ax_dom<J>, unique_vec<I>>> : std::true_type {
  static constexpr std::size_t axis = J;
};
constexpr std::size_t round_up_64(std::size_t b) { return (b + 63) / 64 * 64; }
/// Digits of the radix sort of run_rows.
inline constexpr int radix_bits = 11;
inline constexpr index_t radix_size = index_t(1) << radix_bits;
/// Sorts the n pairs (slice, coordinate) at a by slice, keeping the order of equal slices
/// (stable LSD radix sort, radix_bits per pass, as many passes as max_slice needs; tmp holds
/// n pairs, count radix_size + 1 counters). Returns where the sorted pairs are (a or tmp).
/// std::sort of the recommender's 40,960 pairs per table took 2.9 ms; this takes a pass per
/// 11 bits of the largest slice id.
inline std::pair<index_t, index_t>* radix_by_slice(std::pair<index_t, index_t>* a, std::pair<index_t, index_t>* tmp,
                                                   index_t n, index_t max_slice, index_t* count) {
  for (int shift = 0; (max_slice >> shift) > 0; shift += radix_bits) {
    for (index_t b = 0; b <= radix_size; ++b) count[b] = 0;
    for (index_t k = 0; k < n; ++k) ++count[((a[k].first >> shift) & (radix_size - 1)) + 1];
    for (index_t b = 1; b <= radix_size; ++b) count[b] += count[b - 1];
    for (index_t k = 0; k < n; ++k) tmp[count[(a[k].first >> shift) & (radix_size - 1)]++] = a[k];
    std::swap(a, tmp);
  }
  return a;
}
}  // namespace detail

/// Whether the kernel of Use has a row-by-row form (types only; the file comment).
template <class Use>
inline constexpr bool fused_rows_ok = [] {
  if constexpr (!ad::is_plain_use<Use>::value) {
    return false;
  } else {
  using K = ad::kernel_traits<Use>;
  using G = typename Use::storage_type;
  if constexpr (G::rank != 2 || K::inner_axis < 0 || K::target_unit_axis < 0 ||
                K::target_unit_axis == int(G::axis)) {
    return false;
  } else {
    using C = ad::map_component_t<typename Use::map_type, G::axis>;
    if constexpr (!detail::row_lookup<C>::value) {
      return false;
    } else {
      constexpr std::uint64_t outer = ad::detail::non_inner_mask<K> & ~K::projected_mask;
      return outer == (std::uint64_t(1) << detail::row_lookup<C>::axis);
    }
  }
  }
}();

/// The run-time part: the inner axis walks whole slices, contiguous in a slice (a row
/// buffer is a slice).
template <class Use>
bool fused_rows_fit(Use const& u) {
  if constexpr (!fused_rows_ok<Use>) {
    return false;
  } else {
    using K = ad::kernel_traits<Use>;
    using G = typename Use::storage_type;
    if (!u.target_) return false;
    constexpr std::size_t U = std::size_t(K::target_unit_axis);
    auto const& unit = get<U>(u.map_);
    G const& g = *u.target_;
    return unit.off_ == 0 && unit.scale_ == 1 && g.strides()[U] == 1 &&
           u.dom_.extents()[std::size_t(K::inner_axis)] == g.shape().extent(U);
  }
}

/// Row buffers of the row-by-row form: one per thread that may run its rows (at most 64).
inline index_t fused_row_buffers() {
  index_t const t = index_t(pool().size());
  return t < 64 ? t : 64;
}

/// Scratch bytes of the row-by-row form: the order (twice: the radix sort's two buffers), the
/// sort's counters and a row per thread.
template <class Use>
std::size_t fused_rows_bytes(Use const& u) {
  if constexpr (!fused_rows_ok<Use>) {
    return 0;
  } else {
    using K = ad::kernel_traits<Use>;
    using G = typename Use::storage_type;
    using C = ad::map_component_t<typename Use::map_type, G::axis>;
    auto const ext = u.dom_.extents();
    return 2 * detail::round_up_64(std::size_t(ext[detail::row_lookup<C>::axis]) * sizeof(std::pair<index_t, index_t>)) +
           detail::round_up_64(std::size_t(detail::radix_size + 1) * sizeof(index_t)) +
           std::size_t(fused_row_buffers()) *
               detail::round_up_64(std::size_t(ext[std::size_t(K::inner_axis)]) * sizeof(typename G::value_type)) +
           64;
  }
}

/// Runs use u row by row into sink (body_at(o, row): the plain kernel's work for outer
/// coordinate o, added into row). The sorted positions are cut into one range per thread at
/// slice boundaries: a slice is summed and applied by one thread, in the same order whatever
/// the thread count (the same bits); sink.begin runs first, on the calling thread, rows or not.
template <class Use, class Body>
void run_rows(Use const& u, gradix::detail::fused_sink& sink, Body&& body_at) {
  using K = ad::kernel_traits<Use>;
  using G = typename Use::storage_type;
  using T = typename G::value_type;
  constexpr std::size_t RD = K::domain_rank;
  using C = ad::map_component_t<typename Use::map_type, G::axis>;
  constexpr std::size_t J = detail::row_lookup<C>::axis;
  using pair = std::pair<index_t, index_t>;
  auto const ext = u.dom_.extents();
  index_t const n = ext[J], n_in = ext[std::size_t(K::inner_axis)];
  bool empty = false;
  for (std::size_t j = 0; j < RD; ++j) empty = empty || ext[j] == 0;
  sink.applied = true;
  sink.begin(sink.ctx);  // (also with no rows: the unfused step draws its rounding key either way)
  if (empty) return;
  // (reserved by the pre-pass: host::executor::scratch_bytes)
  unsigned char* const mem = scratch().try_get<unsigned char>(fused_rows_bytes(u));
  std::size_t const pairs_bytes = detail::round_up_64(std::size_t(n) * sizeof(pair));
  std::size_t const row_bytes = detail::round_up_64(std::size_t(n_in) * sizeof(T));
  pair* const made = reinterpret_cast<pair*>(mem);
  pair* const tmp = reinterpret_cast<pair*>(mem + pairs_bytes);
  index_t* const count = reinterpret_cast<index_t*>(mem + 2 * pairs_bytes);
  unsigned char* const rows_mem = mem + 2 * pairs_bytes + detail::round_up_64(std::size_t(detail::radix_size + 1) * sizeof(index_t));
  auto const& comp = get<G::axis>(u.map_);
  index_t max_slice = 0;
  {
    coord<RD> d{};
    for (index_t k = 0; k < n; ++k) {
      d[J] = k;
      index_t const id = ev::ax_value(comp, d);  // (checked by the plan's index pre-pass)
      made[k] = {id, k};
      max_slice = id > max_slice ? id : max_slice;
    }
  }
  // by slice, ties by coordinate (the order made): the plain kernel's order
  pair const* const order = detail::radix_by_slice(made, tmp, n, max_slice, count);
  // one range per thread when the rows are worth it, cut where the slice changes
  index_t tasks = 1;
  if (n * n_in >= 2 * parallel_min_elements) tasks = fused_row_buffers();
  if (tasks > n) tasks = n;
  index_t cut[65];
  index_t rows[64];
  cut[0] = 0;
  for (index_t t = 1; t < tasks; ++t) {
    index_t b = n * t / tasks;
    if (b < cut[t - 1]) b = cut[t - 1];
    while (b > 0 && b < n && order[b].first == order[b - 1].first) ++b;
    cut[t] = b;
  }
  cut[tasks] = n;
  auto task = [&](index_t t) {
    T* const row = reinterpret_cast<T*>(rows_mem + std::size_t(t) * row_bytes);
    index_t applied = 0;
    coord<RD> o{};
    for (index_t k = cut[t]; k < cut[t + 1];) {
      index_t const id = order[k].first;
      for (index_t i = 0; i < n_in; ++i) row[i] = T(0);
      for (; k < cut[t + 1] && order[k].first == id; ++k) {
        o[J] = order[k].second;
        body_at(o, row);
      }
      sink.apply(sink.ctx, id, row);
      ++applied;
    }
    rows[t] = applied;
  };
  pool().run(tasks, task);
  for (index_t t = 0; t < tasks; ++t) sink.rows += rows[t];
}

}  // namespace gradix::host
