#pragma once
/// \file
/// Host update kernels: run one `use` of a backward plan. For every d of the use's domain D,
/// add v(d) to the gradient at m(d).
///
/// Loop nest (from the kernel's type, ad/plan.hpp): the domain axis that reaches the
/// target's contiguous axis affinely is innermost (SIMD packs when its step is 1); projected
/// axes are summed in a register tile that is written once, or, when v does not depend on
/// them, collapse to `extent x v`; the remaining axes are outer, and the target position
/// (with index lookups and the slot map) is computed once per outer coordinate.
///
/// Threads: an injective map splits the outer coordinates freely. Otherwise the outer
/// coordinates are ordered by target position (ties: by coordinate) and split at position
/// boundaries (owner computes), so each target element receives its additions in the same
/// order as with one thread: bit-identical results for any thread count.

#include "gradix/ad/plan.hpp"
#include "gradix/ad/product.hpp"
#include "gradix/backend/host/assign.hpp"
#include "gradix/backend/host/thread_pool.hpp"
#include "gradix/config.hpp"
#include "gradix/core/simd.hpp"
#include "gradix/eval/ad.hpp"
#include "gradix/eval/cost.hpp"
#include "gradix/eval/map.hpp"
#include "gradix/eval/reduce.hpp"
#include "gradix/eval/sweep.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <new>
#include <type_traits>
#include <utility>

namespace gradix::host {

/// A buffer that only grows, reused by every backward of one user thread (no allocation
/// once warm). backward reserves what its kernels need in its pre-pass, so kernels never
/// allocate (and nothing can fail once the first gradient element is written).
struct scratch_buffer {
  void* p_ = nullptr;
  std::size_t bytes_ = 0;
  scratch_buffer() = default;
  scratch_buffer(scratch_buffer const&) = delete;
  scratch_buffer& operator=(scratch_buffer const&) = delete;
  ~scratch_buffer() { ::operator delete(p_, std::align_val_t{64}); }
  /// Makes room for `need` bytes (std::bad_alloc when out of memory, the old buffer kept).
  void reserve(std::size_t need) {
    if (need <= bytes_) return;
    std::size_t b = std::max(need, bytes_ * 2);
    void* q = ::operator new(b, std::align_val_t{64});
    ::operator delete(p_, std::align_val_t{64});
    p_ = q;
    bytes_ = b;
  }
  /// n elements of T from the reserved room, or nullptr when it is too small.
  template <class T>
  T* try_get(std::size_t n) {
    return n * sizeof(T) <= bytes_ ? static_cast<T*>(p_) : nullptr;
  }
};
/// The calling thread's scratch buffer (per user thread: concurrent backward calls from
/// several threads never share it).
/// Out of line, as host::pool(): one copy of the thread-local start and exit registration.
[[gnu::noinline]] inline scratch_buffer& scratch() {
  thread_local scratch_buffer s;
  return s;
}

namespace detail {

/// Odometer over the axes in Mask of a domain (other coordinates left as they are).
template <std::size_t R>
GRADIX_ALWAYS_INLINE constexpr bool next_coord(coord<R>& c, array<index_t, R> const& ext, std::uint64_t mask) {
  for (std::size_t j = R; j-- > 0;) {
    if (!((mask >> j) & 1)) continue;
    if (++c[j] < ext[j]) return true;
    c[j] = 0;
  }
  return false;
}
/// Coordinate of the k-th element of the odometer over Mask.
template <std::size_t R>
coord<R> nth_coord(array<index_t, R> const& ext, std::uint64_t mask, index_t k) {
  coord<R> c{};
  for (std::size_t j = R; j-- > 0;) {
    if (!((mask >> j) & 1)) continue;
    c[j] = k % ext[j];
    k /= ext[j];
  }
  return c;
}

/// A map component that is idx(off + scale * d[J]) for a plain index vector.
template <class C>
struct is_direct_lookup : std::false_type {};
template <std::size_t J, class I>
struct is_direct_lookup<ad::ax_lookup<ad::ax_dom<J>, index_vec<I>>> : std::true_type {
  static constexpr std::size_t axis = J;
};
template <std::size_t J, class I>
struct is_direct_lookup<ad::ax_lookup<ad::ax_dom<J>, unique_vec<I>>> : std::true_type {
  static constexpr std::size_t axis = J;
};

template <class C>
struct is_reshape_ax : std::false_type {};
template <class M, std::size_t K, std::size_t RO, std::size_t RI>
struct is_reshape_ax<ad::ax_reshape<M, K, RO, RI>> : std::true_type {};

/// A storage's addressing, copied into locals: strides and, when sparse, the slot map.
template <class G>
struct target_addressing {
  array<index_t, G::rank> st_;
  std::int32_t const* slots_;
  constexpr explicit target_addressing(G const& g) : st_(g.strides()), slots_(nullptr) {
    if constexpr (G::sparse) slots_ = g.slot_map();
  }
  /// Offset of target coordinate t (through the slot map along the sparse axis).
  template <std::size_t R>
  GRADIX_ALWAYS_INLINE constexpr index_t offset(coord<R> const& t) const {
    index_t off = 0;
    for (std::size_t k = 0; k < R; ++k) {
      index_t x = t[k];
      if constexpr (G::sparse) {
        if (k == G::axis) x = slots_[x];
      }
      off += x * st_[k];
    }
    return off;
  }
};

}  // namespace detail

/// Pre-pass of one use (serial): reserve sparse slots / mark touched dense slices along the
/// storage's axis, for every position the use will write.
template <class Use>
constexpr void prepare(Use const& u) {
  if (!u.target_) return;  // a use that grad() does not want
  using K = ad::kernel_traits<Use>;
  using G = typename Use::storage_type;
  constexpr std::size_t RD = K::domain_rank;
  constexpr std::size_t S = G::axis;
  if constexpr (K::target_rank == 0) {
    u.target_->touch(0);  // the one element (zero_grad clears it)
  } else {
    auto ext = u.dom_.extents();
    for (std::size_t j = 0; j < RD; ++j)
      if (ext[j] == 0) return;
    using C = ad::map_component_t<typename Use::map_type, S>;
    std::uint64_t mask = [] {
      std::uint64_t r = 0;
      [&]<std::size_t... J>(std::index_sequence<J...>) {
        ((r |= ad::depends_v<C, J> ? (std::uint64_t(1) << J) : 0), ...);
      }(std::make_index_sequence<RD>{});
      return r;
    }();
    G& g = *u.target_;
    auto const& comp = get<S>(u.map_);
    if constexpr (!G::sparse && (ad::injective_ax<C>::value || detail::is_reshape_ax<C>::value)) {
      // a use that writes at least as many positions along S as there are (a whole-table
      // use, a reshape across S): mark everything, so zero_grad does one full clear.
      // (An index vector may repeat positions: its slices are listed exactly, below.)
      index_t n = 1;
      for (std::size_t j = 0; j < RD; ++j)
        if ((mask >> j) & 1) n *= ext[j];
      if (n >= g.shape().extent(S)) {
        g.touch_all();
        return;
      }
    }
    if constexpr (detail::is_direct_lookup<C>::value) {
      // the common case, a gather by an index vector along one domain axis: a tight loop
      // (the map's state copied into locals, which touch() cannot modify; touch() itself
      // runs only for positions not yet touched)
      constexpr std::size_t J = detail::is_direct_lookup<C>::axis;
      auto const idx = comp.idx_;
      index_t const off = comp.off_, scale = comp.scale_;
      index_t const in_off = comp.inner_.off_, in_scale = comp.inner_.scale_;
      index_t const n = ext[J];
      for (index_t k = 0; k < n; ++k) {
        index_t id = off + scale * idx(in_off + in_scale * k);
        if (!g.is_touched(id)) g.touch(id);
      }
    } else {
      coord<RD> d{};
      do {
        g.touch(ev::ax_value(comp, d));
      } while (detail::next_coord(d, ext, mask));
    }
  }
}

namespace detail {
/// The domain axes of a kernel's outer loops: neither the inner axis nor projected ones.
template <class K>
inline constexpr std::uint64_t outer_mask_v = ad::detail::non_inner_mask<K> & ~K::projected_mask;

/// The loop sizes of one use: outer, inner and projected extents (empty: nothing to do).
template <class Use>
struct use_sizes {
  index_t n_outer = 1, n_in = 1, n_proj = 1;
  bool empty = false;
};
template <class Use>
constexpr use_sizes<Use> sizes_of(Use const& u) {
  using K = ad::kernel_traits<Use>;
  constexpr std::size_t RD = K::domain_rank;
  constexpr int I = K::inner_axis;
  constexpr std::uint64_t P = K::projected_mask;
  constexpr std::uint64_t O = outer_mask_v<K>;
  use_sizes<Use> r;
  auto ext = u.dom_.extents();
  for (std::size_t j = 0; j < RD; ++j) {
    if (ext[j] == 0) r.empty = true;
    if ((O >> j) & 1) r.n_outer *= ext[j];
    if ((P >> j) & 1) r.n_proj *= ext[j];
  }
  constexpr index_t static_in = [] {
    if constexpr (I >= 0) return extent_v<typename Use::domain_type, std::size_t(I)>;
    else return index_t(1);
  }();
  r.n_in = static_in != dyn ? static_in : ext[std::size_t(I < 0 ? 0 : I)];
  return r;
}
/// Whether run(u) splits u over the pool.
template <class Use>
bool runs_parallel(use_sizes<Use> const& z) {
  using K = ad::kernel_traits<Use>;
  index_t work = z.n_outer * z.n_in * (K::collapses_projected ? 1 : z.n_proj);
  if (z.empty || pool().size() < 2 || work < 2 * parallel_min_elements || z.n_outer < 2) return false;
  if constexpr (!K::injective) {
    // owner-computes first sorts the outer coordinates by target, serially: worth it only
    // when each outer coordinate brings enough work (at least ~24 log2(outer) elements; a
    // scatter of 64-wide rows is faster serial)
    index_t per = work / z.n_outer, lg = 1;
    while ((index_t(1) << lg) < z.n_outer) ++lg;
    if (per < 24 * lg) return false;
  }
  return true;
}
}  // namespace detail

/// Scratch bytes run(u) needs (the owner-computes order of a non-injective parallel use);
/// backward reserves the largest in its pre-pass.
template <class Use>
std::size_t scratch_bytes(Use const& u) {
  if (!u.target_) return 0;
  if constexpr (ad::kernel_traits<Use>::injective) {
    return 0;
  } else {
    auto z = detail::sizes_of(u);
    if (!detail::runs_parallel(z)) return 0;
    return std::size_t(z.n_outer) * sizeof(std::pair<index_t, index_t>);
  }
}

/// Runs one use (after prepare).
template <class Use>
void run(Use const& u) {
  if (!u.target_) return;  // a use that grad() does not want
  using K = ad::kernel_traits<Use>;
  using G = typename Use::storage_type;
  using T = typename G::value_type;
  using V = typename Use::value_expr;
  using VT [[maybe_unused]] = value_type_t<V>;
  constexpr std::size_t RD = K::domain_rank;
  constexpr int I = K::inner_axis;
  constexpr std::uint64_t P = K::projected_mask;
  constexpr std::uint64_t O = detail::outer_mask_v<K>;

  auto ext = u.dom_.extents();
  auto const sizes = detail::sizes_of(u);
  if (sizes.empty) return;
  index_t const n_outer = sizes.n_outer, n_proj = sizes.n_proj;
  // a static inner extent gives the inner loop a constant trip count
  constexpr index_t static_in = [] {
    if constexpr (I >= 0) return extent_v<typename Use::domain_type, std::size_t(I)>;
    else return index_t(1);
  }();
  index_t const n_in = static_in != dyn ? static_in : sizes.n_in;

  // Copy the kernel's state into locals: gradient stores cannot alias it.
  ev::evaluator<V> const vev(u.v_);
  auto const map = u.map_;
  G const& g = *u.target_;
  detail::target_addressing<G> const addr(g);
  T* const data = u.target_->data();
  index_t const tstride = [&] {
    if constexpr (I >= 0) {
      return g.strides()[std::size_t(K::target_unit_axis)] *
             get<std::size_t(K::target_unit_axis)>(map).scale_;
    } else {
      return index_t(0);
    }
  }();
  T const mult = K::collapses_projected ? T(n_proj) : T(1);

  // The work of one outer coordinate o (inner and projected coordinates 0); without projected
  // axes (or when they collapse), only the inner elements [i_begin, i_end).
  auto body = [&](coord<RD> const& o, [[maybe_unused]] index_t i_begin = 0,
                  [[maybe_unused]] index_t i_end = std::numeric_limits<index_t>::max()) {
    // locals: the gradient stores below cannot alias them
    [[maybe_unused]] index_t const nin = n_in;
    [[maybe_unused]] index_t const ts = tstride;
    [[maybe_unused]] T const mul = mult;
    T* tp = data + addr.offset(ev::map_value(map, o));
    if constexpr (I < 0) {
      if constexpr (K::collapses_projected) {
        *tp += T(vev(o)) * mul;
      } else if constexpr (P == 0) {
        *tp += T(vev(o));
      } else {
#if defined(GRADIX_HAS_VECTOR_EXT)
        // the sum over the projected axes (an adjoint summed over a broadcast: a reduction's
        // staged adjoint, a softmax's row sum): the fastest of them in SIMD packs of v, the
        // lanes and the tail added in a fixed order (the same bits for any thread count)
        constexpr std::size_t JP = std::size_t(63 - __builtin_clzll(P));
        constexpr std::uint64_t P2 = P & ~(std::uint64_t(1) << JP);
        constexpr int W = simd::width<T>;
        index_t const nj = ext[JP];
        simd::pack<T, W> s{};
        T tail{};
        coord<RD> d = o;
        do {
          auto in = vev.template outer<int(JP)>(d);
          index_t i = 0;
          for (; i + W <= nj; i += W) s += ev::pack_as<T, W>(in, i);
          for (; i < nj; ++i) tail += T(in.elem(i));
        } while (detail::next_coord(d, ext, P2));
        T acc{};
        for (int w = 0; w < W; ++w) acc += s[w];
        *tp += acc + tail;
#else
        VT acc{};
        coord<RD> d = o;
        do acc += vev(d);
        while (detail::next_coord(d, ext, P));
        *tp += T(acc);
#endif
      }
    } else {
      constexpr int W = simd::width<T>;
      if constexpr (P == 0 || K::collapses_projected) {
        auto in = vev.template outer<I>(o);
        index_t i = i_begin;
        index_t const nin_end = i_end < nin ? i_end : nin;
#if defined(GRADIX_HAS_VECTOR_EXT)
        if (ts == 1) {
          for (; i + W <= nin_end; i += W) {
            auto x = ev::pack_as<T, W>(in, i);
            if constexpr (K::collapses_projected) x *= mul;
            simd::store<T, W>(tp + i, simd::load<T, W>(tp + i) + x);
          }
        }
#endif
        // no `* mul` unless collapsed (mul is 1 then): g++ may contract a product in v with
        // the addition, and must do so as in the pack loop above and the fused kernel
        // below, so that every path gives the same bits
        for (T* q = tp + i * ts; i < nin_end; ++i, q += ts) {
          T x = T(in.elem(i));
          if constexpr (K::collapses_projected) x *= mul;
          *q += x;
        }
      } else {
        // register tile over the inner axis, summed over the projected axes, written once
        // (the whole inner extent when it is static and at most 16 packs)
        constexpr index_t TILE =
            static_in != dyn && static_in % W == 0 && static_in <= 16 * W ? static_in : 4 * W;
        for (index_t t0 = 0; t0 < nin; t0 += TILE) {
          index_t len = nin - t0 < TILE ? nin - t0 : TILE;
          T acc[TILE] = {};
          coord<RD> d = o;
          do {
            auto in = vev.template outer<I>(d);
#if defined(GRADIX_HAS_VECTOR_EXT)
            if (len == TILE) {
              auto add = [&](index_t q) {
                simd::store<T, W>(acc + q, simd::load<T, W>(acc + q) +
                                               ev::pack_as<T, W>(in, t0 + q));
              };
              if constexpr (ev::cheap_body_v<V>) {
                GRADIX_UNROLL(16)
                for (index_t q = 0; q < TILE; q += W) add(q);
              } else {  // an expensive v is not copied (eval/cost.hpp)
                GRADIX_NO_UNROLL
                for (index_t q = 0; q < TILE; q += W) add(q);
              }
              continue;
            }
#endif
            for (index_t q = 0; q < len; ++q) acc[q] += T(in.elem(t0 + q));
          } while (detail::next_coord(d, ext, P));
          for (index_t q = 0; q < len; ++q) tp[(t0 + q) * ts] += acc[q];
        }
      }
    }
  };

  thread_pool& tp = pool();
  using pair = std::pair<index_t, index_t>;
  // the order of a non-injective use lives in the scratch reserved by backward's pre-pass;
  // should the pool have grown since (set_num_threads from another thread), run serially
  // rather than allocate here
  pair* order = nullptr;
  if constexpr (!K::injective) {
    if (detail::runs_parallel(sizes)) order = scratch().try_get<pair>(std::size_t(n_outer));
  }
  if constexpr (K::injective && I >= 0 && (P == 0 || K::collapses_projected)) {
    // one outer coordinate (a vector domain): split the inner axis, at whole cache lines
    if (n_outer == 1 && !sizes.empty && tp.size() > 1 && n_in >= 2 * parallel_min_elements) {
      coord<RD> const o{};
      parallel_ranges(n_in, [&](index_t a, index_t b) { body(o, a, b); });
      return;
    }
  }
  if (!detail::runs_parallel(sizes) || (!K::injective && !order)) {
    coord<RD> o{};
    do body(o);
    while (detail::next_coord(o, ext, O));
    return;
  }
  if constexpr (K::injective) {
    parallel_ranges(
        n_outer,
        [&](index_t a, index_t b) {
          coord<RD> o = detail::nth_coord(ext, O, a);
          for (index_t k = a; k < b; ++k) {
            body(o);
            detail::next_coord(o, ext, O);
          }
        },
        std::max<index_t>(1, parallel_min_elements / std::max<index_t>(1, n_in)));
  } else {
    // owner computes: order outer coordinates by target position, split at boundaries
    {
      coord<RD> o{};
      index_t k = 0;
      do {
        order[k] = {addr.offset(ev::map_value(map, o)), k};
        ++k;
      } while (detail::next_coord(o, ext, O));
    }
    std::sort(order, order + n_outer);  // ties by outer index: a stable order
    index_t tasks = std::min<index_t>(n_outer, index_t(tp.size()) * 4);
    auto task = [&](index_t t) {
      index_t a = n_outer * t / tasks, b = n_outer * (t + 1) / tasks;
      // move both ends forward to the start of a target position's group
      while (a > 0 && a < n_outer && order[a].first == order[a - 1].first) ++a;
      while (b > 0 && b < n_outer && order[b].first == order[b - 1].first) ++b;
      for (index_t k = a; k < b; ++k) body(detail::nth_coord(ext, O, order[k].second));
    };
    tp.run(tasks, task);
  }
}

template <class U1, class U2>
constexpr void prepare(ad::fused_use<U1, U2> const& f) {
  prepare(f.first_);
  prepare(f.second_);
}

/// Runs one use as a plain serial loop over its whole domain, one element at a time: the
/// path of constant evaluation (no SIMD, no threads, no scratch memory). Projected axes are
/// summed element by element, so results equal run()'s up to rounding.
template <class Use>
constexpr void run_serial(Use const& u) {
  if (!u.target_) return;  // a use that grad() does not want
  using K = ad::kernel_traits<Use>;
  using G = typename Use::storage_type;
  using T = typename G::value_type;
  constexpr std::size_t RD = K::domain_rank;
  constexpr std::uint64_t all_mask = RD >= 64 ? ~std::uint64_t(0) : (std::uint64_t(1) << RD) - 1;
  auto ext = u.dom_.extents();
  for (std::size_t j = 0; j < RD; ++j)
    if (ext[j] == 0) return;
  ev::evaluator<typename Use::value_expr> const vev(u.v_);
  detail::target_addressing<G> const addr(*u.target_);
  T* const data = u.target_->data();
  coord<RD> d{};
  do data[addr.offset(ev::map_value(u.map_, d))] += T(vev(d));
  while (detail::next_coord(d, ext, all_mask));
}
template <class U1, class U2>
constexpr void run_serial(ad::fused_use<U1, U2> const& f) {
  run_serial(f.first_);
  run_serial(f.second_);
}

// ---------------------------------------------------------------------------------------
// Several uses of one region (ad::multi_use): one loop nest over the shared domain (axis I
// innermost), one reverse sweep of the region per element (eval/sweep.hpp) giving every
// use's adjoint, each added to its target in use order. Members with projected axes
// (ad::member_kind) sum first: a column member sums the inner range in registers and adds
// once per outer coordinate; row and scalar members (and column members of a domain with one
// outer coordinate) sum into per-block partials, and the partials are added to the target in
// block order at the end. The blocks are fixed by the domain's extents alone, so the result
// has the same bits with any number of threads.

namespace detail {
#if defined(GRADIX_HAS_VECTOR_EXT)
/// One block [i0, i1) of a sum in gradix's summation scheme (eval/reduce.hpp), computed by a
/// gradient kernel that also writes the adjoints of those elements (the loss value carried
/// by a kernel, docs/ad.md): pack_step(j) handles elements j .. j + W - 1 and returns their
/// values, scalar_step(j) element j. The lanes, padding and tree are the reduction's, so
/// the block's sum has the bits of the reduction's block.
/// Cheap: the lanes' packs stay in registers, pack_step is copied once per accumulator
/// pack; otherwise pack_step has one call site (an expensive body, eval/cost.hpp: a deep
/// chain copied NP times made its kernel NP times larger, and g++'s compile time grows
/// faster than the function's size) and the packs are indexed at run time: the same
/// additions in the same order.
template <class T, bool Cheap, class PS, class SS>
GRADIX_ALWAYS_INLINE T loss_block(index_t i0, index_t i1, PS&& pack_step, SS&& scalar_step) {
  using Op = op::sum_of;
  constexpr int L = ev::lanes_v<T>;
  constexpr int W = simd::width<T>;
  static_assert(L % W == 0, "gradix internal: SIMD packs wider than the summation lanes");
  constexpr int NP = L / W;  // lane q*W + w is lane w of pack q
  using X = simd::pack<T, W>;
  X acc[NP];
  GRADIX_UNROLL(16)
  for (int q = 0; q < NP; ++q) acc[q] = simd::splat<T, W>(Op::template identity<T>());
  index_t i = i0;
  int q = 0;  // the accumulator pack of the pack at i
  if constexpr (Cheap) {
    for (; i + L <= i1; i += L) {
      GRADIX_UNROLL(16)
      for (int k = 0; k < NP; ++k) acc[k] = Op::combine(acc[k], X(pack_step(i + k * W)));
    }
  }
  GRADIX_NO_UNROLL
  for (; i + W <= i1; i += W) {
    acc[q] = Op::combine(acc[q], X(pack_step(i)));
    q = q + 1 == NP ? 0 : q + 1;
  }
  if (i < i1) {  // the reduction's partial pack: padded, its elements from the scalar path
    X t = simd::splat<T, W>(Op::template pad<T>());
    for (index_t w = 0; w < i1 - i; ++w) t[w] = T(scalar_step(i + w));
    acc[q] = Op::combine(acc[q], t);
  }
  ev::lanes<Op, T> l;
  GRADIX_UNROLL(16)
  for (int q = 0; q < NP; ++q) simd::store<T, W>(l.v_ + q * W, acc[q]);
  return l.result();
}
#endif

template <int I, class Top, class TMap, class V0, class... U>
struct multi_parts {
  using U0 = std::tuple_element_t<0, std::tuple<U...>>;
  using T = value_type_t<Top>;
  static constexpr std::size_t RD = U0::domain_type::rank;
  static constexpr std::size_t NU = sizeof...(U);
  static_assert((std::is_same_v<typename U::domain_type, typename U0::domain_type> && ...),
                "gradix internal: the members of a multi_use have one domain");
  using PL = ad::path_list<typename ad::region_value<typename U::value_expr>::path_type...>;
  using sweep_type = ev::sweep<Top, PL>;
  static constexpr bool negative[NU] = {ad::region_value<typename U::value_expr>::negative...};
  static constexpr ad::member_kind kind[NU] = {
      ad::member_kind_v<ad::kernel_traits<U>::projected_mask, RD, I>...};
  /// outer coordinates: every domain axis but I
  static constexpr std::uint64_t outer = ad::all_axes_v<RD> & ~(std::uint64_t(1) << I);
  static constexpr bool has(ad::member_kind k) {
    for (std::size_t j = 0; j < NU; ++j)
      if (kind[j] == k) return true;
    return false;
  }
  static constexpr std::size_t count(ad::member_kind k) {
    std::size_t c = 0;
    for (std::size_t j = 0; j < NU; ++j) c += kind[j] == k ? 1 : 0;
    return c;
  }
  static constexpr bool has_v0 = !std::is_same_v<V0, ad::no_v0>;
  using v0_expr = std::conditional_t<has_v0, V0, ad::one_node<T, typename U0::domain_type>>;
  static constexpr v0_expr v0_of(ad::multi_use<I, Top, TMap, V0, U...> const& mu) {
    if constexpr (has_v0) return mu.v0_;
    else return v0_expr{get<0>(mu.uses_).dom_};
  }
};

/// How a multi_use runs: its loop sizes, and its blocks when a member sums over outer
/// coordinates (or over the inner axis of a domain with one outer coordinate). Blocks split
/// the outer coordinates (`by_outer`) or, with one outer coordinate, the inner axis at whole
/// cache lines; each holds a partial row per row member and a partial per scalar member (and
/// per column member when the inner axis is split), `stride` elements of T in all, padded
/// to a cache line. Everything here depends on the extents only, never on the thread count.
struct multi_layout {
  index_t n_outer = 1, n_in = 1;
  bool empty = false;
  index_t nb = 0;  // blocks (0: none needed)
  bool by_outer = true;
  index_t chunk = 0;    // inner elements per block when !by_outer
  index_t row_len = 0;  // elements of T per partial row (n_in, padded to a cache line)
  index_t stride = 0;   // elements of T per block
};
template <class P, class MU>
constexpr multi_layout layout_of(MU const& mu) {
  using T = typename P::T;
  constexpr int I = MU::inner_axis;
  multi_layout z;
  auto ext = get<0>(mu.uses_).dom_.extents();
  for (std::size_t j = 0; j < P::RD; ++j) {
    if (ext[j] == 0) z.empty = true;
    if ((P::outer >> j) & 1) z.n_outer *= ext[j];
  }
  z.n_in = ext[std::size_t(I)];
  if (z.empty) return z;
  z.by_outer = z.n_outer >= 2;
  bool const blocks = P::has(ad::member_kind::row) || P::has(ad::member_kind::scalar) ||
                      (!z.by_outer && P::has(ad::member_kind::column));
  if (!blocks) return z;
  constexpr index_t line = index_t(64 / sizeof(T));
  constexpr index_t max_blocks = 64;
  index_t const units = z.by_outer ? z.n_outer : (z.n_in + line - 1) / line;
  index_t nb = z.n_outer * z.n_in / parallel_min_elements;
  nb = nb < 1 ? 1 : nb;
  nb = nb > max_blocks ? max_blocks : nb;
  nb = nb > units ? units : nb;
  z.nb = nb;
  if (!z.by_outer) {
    z.chunk = ((z.n_in + nb - 1) / nb + line - 1) / line * line;
    z.nb = (z.n_in + z.chunk - 1) / z.chunk;
  }
  index_t const rows = z.by_outer ? index_t(P::count(ad::member_kind::row)) : 0;
  index_t const scalars = index_t(P::count(ad::member_kind::scalar)) +
                          (z.by_outer ? 0 : index_t(P::count(ad::member_kind::column)));
  z.row_len = (z.n_in + line - 1) / line * line;
  z.stride = (rows * z.row_len + scalars + line - 1) / line * line;
  return z;
}
}  // namespace detail

template <int I, class Top, class TMap, class V0, class... U>
constexpr void prepare(ad::multi_use<I, Top, TMap, V0, U...> const& mu) {
  for_each_element(mu.uses_, [](auto const& u) { prepare(u); });
}
/// The per-block partials (detail::multi_layout).
template <int I, class Top, class TMap, class V0, class... U>
std::size_t scratch_bytes(ad::multi_use<I, Top, TMap, V0, U...> const& mu) {
  using P = detail::multi_parts<I, Top, TMap, V0, U...>;
  if constexpr (P::RD == 0) {
    return 0;  // one element (run_serial)
  } else {
    auto const z = detail::layout_of<P>(mu);
    return z.empty ? 0 : std::size_t(z.nb) * std::size_t(z.stride) * sizeof(typename P::T);
  }
}

/// One element at a time over the whole domain (constant evaluation, and a region of
/// scalars).
template <int I, class Top, class TMap, class V0, class... U>
constexpr void run_serial(ad::multi_use<I, Top, TMap, V0, U...> const& mu) {
  using P = detail::multi_parts<I, Top, TMap, V0, U...>;
  using T = typename P::T;
  constexpr std::size_t RD = P::RD;
  constexpr std::size_t NU = P::NU;
  auto const& u0 = get<0>(mu.uses_);
  auto ext = u0.dom_.extents();
  for (std::size_t j = 0; j < RD; ++j)
    if (ext[j] == 0) return;
  typename P::sweep_type const sw(mu.top_);
  ev::evaluator<typename P::v0_expr> const v0ev(P::v0_of(mu));
  coord<RD> d{};
  do {
    auto in = sw.template outer<ev::invariant_axis>(ev::map_value(mu.tmap_, d));
    auto f = in.template fwd<T>(0);
    T out[NU] = {};
    in.bwd(f, T(v0ev(d)), out);
    std::size_t k = 0;
    for_each_element(mu.uses_, [&](auto const& u) {
      if (u.target_) {
        using G = typename std::remove_cvref_t<decltype(u)>::storage_type;
        detail::target_addressing<G> const addr(*u.target_);
        T x = P::negative[k] ? T(-out[k]) : out[k];
        u.target_->data()[addr.offset(ev::map_value(u.map_, d))] += x;
      }
      ++k;
    });
  } while (detail::next_coord(d, ext, ad::all_axes_v<RD>));
}

namespace detail {
/// run(multi_use), and with WV the loss value too (run_carrying): returns false, having
/// done nothing, when WV and the kernel cannot carry it at run time.
template <bool WV, class F, int I, class Top, class TMap, class V0, class... U>
bool run_multi_axes(ad::multi_use<I, Top, TMap, V0, U...> const& mu, [[maybe_unused]] F const* fnode,
               [[maybe_unused]] value_type_t<Top>* vout) {
  using P = detail::multi_parts<I, Top, TMap, V0, U...>;
  using T = typename P::T;
  using ad::member_kind;
  constexpr std::size_t RD = P::RD;
  constexpr std::size_t NU = P::NU;
  constexpr std::uint64_t O = P::outer;
  auto const z = detail::layout_of<P>(mu);
  if constexpr (WV) {
    // the loss value's blocks are the reduction's (eval/reduce.hpp), over one outer
    // coordinate, full members only, unit steps, SIMD builds
#if !defined(GRADIX_HAS_VECTOR_EXT)
    return false;
#endif
    if (z.empty || z.nb != 0 || z.n_outer != 1 || get<0>(mu.tmap_).off_ != 0) return false;
  }
  if (z.empty) return true;
  auto const& u0 = get<0>(mu.uses_);
  auto ext = u0.dom_.extents();
  index_t const n_outer = z.n_outer, n_in = z.n_in;

  // the kernel's state, in locals: the gradient stores cannot alias it
  typename P::sweep_type const sw(mu.top_);
  auto const tmap = mu.tmap_;  // domain -> the region top's coordinates
  constexpr int TI = ad::dom_component<TMap, std::size_t(I)>::value;  // top's loop axis
  static_assert(TI >= 0, "gradix internal: a multi_use whose top does not follow the inner axis");
  index_t const tscale = get<std::size_t(TI)>(tmap).scale_;
  ev::evaluator<typename P::v0_expr> const v0ev(P::v0_of(mu));
  // Per member k: where its adjoints go. sums[k]: the inner range is summed first (column
  // and scalar members); part[k]: into the block partials at offset poff[k] (a row: stride 1).
  constexpr auto sums = [] {
    array<bool, NU> r{};
    for (std::size_t k = 0; k < NU; ++k)
      r[k] = P::kind[k] == member_kind::column || P::kind[k] == member_kind::scalar;
    return r;
  }();
  T* data[NU];
  index_t tst[NU];  // the target's stride along I (full and row members)
  index_t st[NU];
  bool part[NU];
  index_t poff[NU];
  bool unit = tscale == 1;
  {
    std::size_t k = 0;
    index_t row_q = 0, scal_q = 0;
    index_t const rows = z.by_outer ? index_t(P::count(member_kind::row)) : 0;
    for_each_element(mu.uses_, [&](auto const& u) {
      using KU = ad::kernel_traits<std::remove_cvref_t<decltype(u)>>;
      member_kind const kd = P::kind[k];
      data[k] = u.target_ ? u.target_->data() : nullptr;
      part[k] = z.nb > 0 && ((kd == member_kind::row && z.by_outer) || kd == member_kind::scalar ||
                             (kd == member_kind::column && !z.by_outer));
      poff[k] = 0;
      if (part[k]) poff[k] = kd == member_kind::row ? z.row_len * row_q++ : z.row_len * rows + scal_q++;
      tst[k] = 0;
      constexpr int CI = ad::dom_component<typename KU::M, std::size_t(I)>::value;  // reaches I
      if constexpr (CI >= 0) {
        if (u.target_) tst[k] = u.target_->strides()[std::size_t(CI)] * get<std::size_t(CI)>(u.map_).scale_;
      }
      ++k;
    });
  }
  // the strides of the per-element adds, and whether they all allow packs
  auto strides = [&] {
    unit = tscale == 1;
    for (std::size_t k = 0; k < NU; ++k) {
      st[k] = part[k] ? 1 : tst[k];
      if (data[k] && !sums[k]) unit = unit && st[k] == 1;
    }
  };
  strides();
  if constexpr (WV) {
    if (!unit) return false;
  }
  // with WV, the loss's operand F: the region top itself, or evaluated beside it
  constexpr bool top_is_f = std::is_same_v<F, Top>;
  [[maybe_unused]] auto const fev = [&] {
    if constexpr (WV && !top_is_f) return ev::evaluator<F>(*fnode);
    else return 0;
  }();
  // elements [i0, i1) of the inner axis at outer coordinate o; blk: the block's partials;
  // with WV, [i0, i1) is a block of the loss value's scheme and *vblk gets its sum
  auto body = [&](coord<RD> const& o, index_t i0, index_t i1, T* blk,
                  [[maybe_unused]] T* vblk = nullptr) {
    T* dst[NU];
    {
      std::size_t k = 0;
      for_each_element(mu.uses_, [&](auto const& u) {
        using G = typename std::remove_cvref_t<decltype(u)>::storage_type;
        dst[k] = !data[k] ? nullptr
                 : part[k] ? blk + poff[k]
                           : data[k] + detail::target_addressing<G>(*u.target_).offset(ev::map_value(u.map_, o));
        ++k;
      });
    }
    // next_same[k]: member k+1 adds to the same elements (the same parameter read at another
    // level): k's adjoint is carried to it in registers, and the target is read and written
    // once for the run (a chain of read-modify-writes of one address serialises the loop)
    bool next_same[NU] = {};
    for (std::size_t k = 0; k + 1 < NU; ++k)
      next_same[k] = dst[k] && dst[k + 1] == dst[k] && !sums[k] && !sums[k + 1] && st[k] == st[k + 1];
    auto in = sw.template outer<TI>(ev::map_value(tmap, o));
    auto vin = v0ev.template outer<I>(o);
    [[maybe_unused]] auto const fin = [&] {
      if constexpr (WV && !top_is_f) return fev.template outer<0>(coord<1>{});
      else return 0;
    }();
    T sum[NU] = {};  // the summed members' totals over [i0, i1)
    index_t i = i0;
    // element j: the adjoints added; returns the top's value there
    auto scalar_step = [&](index_t j) {
      index_t const ti = index_t(std::size_t(j) * std::size_t(tscale));
      auto f = in.template fwd<T>(ti);
      T a = T(vin.elem(j));
      T out[NU] = {};
      in.bwd(f, a, out);
      T carry{};
      for (std::size_t k = 0; k < NU; ++k) {
        if (!dst[k]) continue;
        T x = P::negative[k] ? T(-out[k]) : out[k];
        if (sums[k]) sum[k] += x;
        else if (next_same[k]) carry = k > 0 && next_same[k - 1] ? T(carry + x) : x;
        else if (k > 0 && next_same[k - 1]) dst[k][j * st[k]] += T(carry + x);
        else dst[k][j * st[k]] += x;
      }
      if constexpr (WV && !top_is_f) return T(fin.elem(j));
      else return T(f.y);
    };
#if defined(GRADIX_HAS_VECTOR_EXT)
    if (unit) {
      constexpr int W = simd::width<T>;
      using X = simd::pack<T, W>;
      X acc[NU] = {};
      // elements j .. j + W - 1
      auto pack_step = [&](index_t j) {
        auto f = in.template fwd<X>(j);
        X a = ev::pack_as<T, W>(vin, j);
        X out[NU] = {};
        in.bwd(f, a, out);
        X carry{};
        for (std::size_t k = 0; k < NU; ++k) {
          if (!dst[k]) continue;
          X x = P::negative[k] ? X(-out[k]) : out[k];
          if (sums[k]) acc[k] += x;
          else if (next_same[k]) carry = k > 0 && next_same[k - 1] ? X(carry + x) : x;
          else if (k > 0 && next_same[k - 1]) simd::store<T, W>(dst[k] + j, simd::load<T, W>(dst[k] + j) + X(carry + x));
          else simd::store<T, W>(dst[k] + j, simd::load<T, W>(dst[k] + j) + x);
        }
        if constexpr (WV && !top_is_f) return ev::pack_as<T, W>(fin, j);
        else return X(f.y);
      };
      if constexpr (WV) {
        *vblk = detail::loss_block<T, ev::cheap_body_v<Top> && (top_is_f || ev::cheap_body_v<F>)>(
            i0, i1, pack_step, scalar_step);
        i = i1;
      } else {
        for (; i + W <= i1; i += W) pack_step(i);
      }
      for (std::size_t k = 0; k < NU; ++k)
        if (sums[k])
          for (int w = 0; w < W; ++w) sum[k] += acc[k][w];  // lanes in order
    }
#endif
    for (; i < i1; ++i) scalar_step(i);
    for (std::size_t k = 0; k < NU; ++k)
      if (sums[k] && dst[k]) *dst[k] += sum[k];
  };
  bool const parallel = n_outer * n_in >= 2 * parallel_min_elements && pool().size() > 1;
  if constexpr (WV) {
    // the blocks of the loss value's scheme; each block's sum into vout[b]
    index_t const bsize = ev::block_size<T>(n_in), nbv = (n_in + bsize - 1) / bsize;
    coord<RD> const o{};
    auto vblock = [&](index_t b) {
      index_t const a = b * bsize, e = a + bsize < n_in ? a + bsize : n_in;
      body(o, a, e, nullptr, vout + b);
    };
    pool().run(nbv, vblock, !(parallel && nbv >= 2));  // serial: in order, here
    return true;
  }
  T* const base = z.nb > 0 ? scratch().try_get<T>(std::size_t(z.nb) * std::size_t(z.stride)) : nullptr;
  if (z.nb == 0 || !base) {
    // No partials (full and column members only; or, should backward's pre-pass not have
    // reserved them, which it always does, serially and without partials)
    if (z.nb > 0) {
      for (std::size_t k = 0; k < NU; ++k) part[k] = false;
      strides();
      coord<RD> o{};
      do body(o, 0, n_in, nullptr);
      while (detail::next_coord(o, ext, O));
      return true;
    }
    if (parallel && n_outer == 1) {
      // one outer coordinate (a vector domain): split the inner axis, at whole cache lines
      coord<RD> const o{};
      parallel_ranges(n_in, [&](index_t a, index_t b) { body(o, a, b, nullptr); });
      return true;
    }
    if (!parallel || n_outer < 2) {
      coord<RD> o{};
      do body(o, 0, n_in, nullptr);
      while (detail::next_coord(o, ext, O));
      return true;
    }
    parallel_ranges(
        n_outer,
        [&](index_t a, index_t b) {
          coord<RD> o = detail::nth_coord(ext, O, a);
          for (index_t k = a; k < b; ++k) {
            body(o, 0, n_in, nullptr);
            detail::next_coord(o, ext, O);
          }
        },
        std::max<index_t>(1, parallel_min_elements / std::max<index_t>(1, n_in)));
    return true;
  }
  // Blocks with partials: each block zeroes and fills its own; any thread, any order.
  index_t const nb = z.nb, stride = z.stride;
  auto block = [&](index_t b) {
    T* blk = base + b * stride;
    for (index_t q = 0; q < stride; ++q) blk[q] = T(0);
    if (z.by_outer) {
      index_t const a = n_outer * b / nb, e = n_outer * (b + 1) / nb;
      coord<RD> o = detail::nth_coord(ext, O, a);
      for (index_t k = a; k < e; ++k) {
        body(o, 0, n_in, blk);
        detail::next_coord(o, ext, O);
      }
    } else {
      index_t const a = b * z.chunk, e = a + z.chunk < n_in ? a + z.chunk : n_in;
      body(coord<RD>{}, a, e, blk);
    }
  };
  pool().run(nb, block, !(parallel && nb >= 2));  // serial: in order, here
  // the partials, in block order, added once to each target
  std::size_t k = 0;
  for_each_element(mu.uses_, [&](auto const& u) {
    if (part[k] && data[k]) {
      using G = typename std::remove_cvref_t<decltype(u)>::storage_type;
      T* const t = data[k] + detail::target_addressing<G>(*u.target_).offset(ev::map_value(u.map_, coord<RD>{}));
      index_t const len = P::kind[k] == member_kind::row ? n_in : 1;
      index_t const ts = tst[k];
      for (index_t i = 0; i < len; ++i) {
        T acc = base[poff[k] + i];
        for (index_t b = 1; b < nb; ++b) acc += base[b * stride + poff[k] + i];
        t[i * ts] += acc;
      }
    }
    ++k;
  });
  return true;
}
/// run_multi_axes, or for a region of scalars (a rank-0 domain) its one element by one
/// sweep (no loss value to carry).
template <bool WV, class F, int I, class Top, class TMap, class V0, class... U>
bool run_multi(ad::multi_use<I, Top, TMap, V0, U...> const& mu, F const* fnode, value_type_t<Top>* vout) {
  if constexpr (multi_parts<I, Top, TMap, V0, U...>::RD == 0) {
    if constexpr (WV) {
      return false;
    } else {
      run_serial(mu);
      return true;
    }
  } else {
    return run_multi_axes<WV>(mu, fnode, vout);
  }
}
}  // namespace detail

template <int I, class Top, class TMap, class V0, class... U>
void run(ad::multi_use<I, Top, TMap, V0, U...> const& mu) {
  detail::run_multi<false>(mu, static_cast<Top const*>(nullptr), nullptr);
}

// ---------------------------------------------------------------------------------------
// The loss value carried by a gradient kernel (docs/ad.md, "The loss value in the first
// kernel"). backward(e) for e = sum(F) or mean(F), F a vector-shaped elementwise region,
// needs F's values twice: once for the value of e, and once inside the kernel that sends
// the adjoint down F (path_ev and the reverse sweep compute F's value on the way). A kernel
// that walks F's domain in order can add those values into the blocks of gradix's summation
// scheme instead, so the value pass costs nothing: run_carrying(u, parts) runs the kernel
// and leaves the reduction's block sums in parts (at most ev::max_blocks); the caller
// combines them as the reduction does. The bits of the value are those of value(e), and the
// gradients are those of run(u).

namespace detail {
/// Root is sum(F) or mean(F) over every axis of F (rank >= 1). The carriers above a
/// rank-1 F (plain uses, multi_use, arg-max) walk F as one run; a fused pair
/// (backend/host/fused.hpp) walks a rank-R F run by run in the scheme's order.
template <class Root>
struct loss_root : std::false_type {};
template <class Op, class F, axis_mask Mask, bool Keep>
struct loss_root<reduce_node<Op, F, Mask, Keep>>
    : std::bool_constant<(std::is_same_v<Op, op::sum_of> || std::is_same_v<Op, op::mean_of>) &&
                         shape_of_t<F>::rank >= 1 && shape_of_t<F>::rank < 64 &&
                         Mask == (axis_mask(1) << shape_of_t<F>::rank) - 1 && !Keep &&
                         std::is_floating_point_v<value_type_t<F>>> {
  using arg = F;
  using op = Op;
  static constexpr std::size_t rank = shape_of_t<F>::rank;
};
/// Whether fused pair U (ad::fused_use) carries the value of Root (backend/host/fused.hpp).
template <class Root, class U>
struct fused_carries;
template <class F, class MU>
struct multi_carries : std::false_type {};
template <class F, int I, class Top, class TMap, class V0, class... U>
struct multi_carries<F, ad::multi_use<I, Top, TMap, V0, U...>> {
  using P = multi_parts<I, Top, TMap, V0, U...>;
  static constexpr bool value = std::is_same_v<typename P::T, value_type_t<F>> && P::RD == 1 &&
                                I == 0 && P::count(ad::member_kind::full) == P::NU;
};
}  // namespace detail

namespace detail {
/// How often a node of type Top occurs in N's elementwise tree (through unary and binary
/// nodes only).
template <class N, class Top>
struct top_count : std::integral_constant<int, std::is_same_v<N, Top> ? 1 : 0> {};
template <class Op, class A, class Top>
struct top_count<unary_node<Op, A>, Top>
    : std::integral_constant<int, std::is_same_v<unary_node<Op, A>, Top> ? 1 : top_count<A, Top>::value> {};
template <class Op, class L, class R, class Top>
struct top_count<binary_node<Op, L, R>, Top>
    : std::integral_constant<int, std::is_same_v<binary_node<Op, L, R>, Top>
                                      ? 1
                                      : top_count<L, Top>::value + top_count<R, Top>::value> {};

/// F's value from the value of the one node of type Top inside it (top_count 1): the nodes
/// between them are evaluated as F's evaluator does, their other operands by their
/// evaluators, Top's value taken as given. `outer<A>(c)` gives an inner with
/// `pack<W>(i, top)` and `elem(i, top)`.
template <class N, class Top, bool IsTop = std::is_same_v<N, Top>>
struct above_ev;
template <class N, class Top>
struct above_ev<N, Top, true> {
  explicit above_ev(N const&) {}
  struct inner {
#if defined(GRADIX_HAS_VECTOR_EXT)
    template <int W, class X>
    GRADIX_ALWAYS_INLINE X pack(index_t, X top) const { return top; }
#endif
    template <class X>
    GRADIX_ALWAYS_INLINE X elem(index_t, X top) const { return top; }
  };
  template <int A, std::size_t R>
  inner outer(coord<R> const&) const { return {}; }
};
template <class Op, class A, class Top>
struct above_ev<unary_node<Op, A>, Top, false> {
  above_ev<A, Top> a_;
  explicit above_ev(unary_node<Op, A> const& n) : a_(n.arg_) {}
  template <class AI>
  struct inner {
    AI a_;
#if defined(GRADIX_HAS_VECTOR_EXT)
    template <int W, class X>
    GRADIX_ALWAYS_INLINE X pack(index_t i, X top) const { return X(Op::value(a_.template pack<W>(i, top))); }
#endif
    template <class X>
    GRADIX_ALWAYS_INLINE X elem(index_t i, X top) const { return X(Op::value(a_.elem(i, top))); }
  };
  template <int Ax, std::size_t R>
  auto outer(coord<R> const& c) const {
    auto ai = a_.template outer<Ax>(c);
    return inner<decltype(ai)>{ai};
  }
};
template <class Op, class L, class R, class Top>
struct above_ev<binary_node<Op, L, R>, Top, false> {
  using N = binary_node<Op, L, R>;
  using T = value_type_t<N>;
  static constexpr std::size_t S = top_count<L, Top>::value == 1 ? 0 : 1;  // Top's side
  using C = std::conditional_t<S == 0, L, R>;
  using O = std::conditional_t<S == 0, R, L>;
  static constexpr std::size_t rank = shape_of_t<N>::rank;
  above_ev<C, Top> c_;
  ev::evaluator<O> o_;
  template <std::size_t Side>
  static auto const& operand_of(N const& n) {
    if constexpr (Side == 0) return n.lhs_;
    else return n.rhs_;
  }
  explicit above_ev(N const& n) : c_(operand_of<S>(n)), o_(operand_of<1 - S>(n)) {}
  template <class CI, class OI>
  struct inner {
    CI c_;
    OI o_;
#if defined(GRADIX_HAS_VECTOR_EXT)
    template <int W, class X>
    GRADIX_ALWAYS_INLINE X pack(index_t i, X top) const {
      X a = c_.template pack<W>(i, top);
      X b = ev::pack_as<T, W>(o_, i);
      if constexpr (S == 0) return X(Op::value(a, b));
      else return X(Op::value(b, a));
    }
#endif
    template <class X>
    GRADIX_ALWAYS_INLINE X elem(index_t i, X top) const {
      X a = c_.elem(i, top);
      X b = T(o_.elem(i));
      if constexpr (S == 0) return X(Op::value(a, b));
      else return X(Op::value(b, a));
    }
  };
  template <int Ax>
  auto outer(coord<rank> const& c) const {
    using SC = shape_of_t<C>;
    using SO = shape_of_t<O>;
    auto ci = c_.template outer<ev::operand_axis_v<SC, rank, Ax>>(ev::operand_coord<SC>(c));
    auto oi = o_.template outer<ev::operand_axis_v<SO, rank, Ax>>(ev::operand_coord<SO>(c));
    return inner<decltype(ci), decltype(oi)>{ci, oi};
  }
};

/// A plain use whose value is (v0 times) the path derivative of a region whose top occurs
/// once in F, rank 1 and reached through d[0] itself: F's value comes from the top's, which
/// the path derivative computes anyway.
template <class F, class U>
inline constexpr bool top_in_f_v = [] {
  using RV = ad::region_value<typename U::value_expr>;
  if constexpr (!RV::value) {
    return false;
  } else {
    using Top = typename RV::top;
    using AM = std::remove_cvref_t<decltype(ad::region_at_map(std::declval<typename U::value_expr const&>()))>;
    using M0 = std::remove_cvref_t<decltype(get<0>(std::declval<AM const&>().map_))>;
    return top_count<F, Top>::value == 1 && shape_of_t<Top>::rank == 1 &&
           std::is_same_v<M0, ad::ax_dom<0>> &&
           ad::region_uniform<F, value_type_t<F>>::value;
  }
}();

/// A map component of a use that writes the first arg-max of the rank-1 max reduction F at
/// each domain element d (the max's own coordinate d): 1 for d itself, 2 for a coordinate of
/// the arg-max, 0 for anything else.
template <class F, class C>
struct argmax_comp : std::integral_constant<int, 0> {};
template <class F>
struct argmax_comp<F, ad::ax_dom<0>> : std::integral_constant<int, 1> {};
template <class F, std::size_t K>
struct argmax_comp<F, ad::ax_argmax<F, tuple<ad::ax_dom<0>>, K>> : std::integral_constant<int, 2> {
  static constexpr std::size_t axis = K;
};
template <class F, class M>
struct argmax_map : std::false_type {};
template <class F, class... C>
struct argmax_map<F, tuple<C...>>
    : std::bool_constant<((argmax_comp<F, C>::value != 0) && ...) &&
                         ((argmax_comp<F, C>::value == 2) || ...)> {};
/// A plain use that scatters into F's operand at F's arg-maxes, one per element of F's
/// domain (the backward of sum(max<...>(A)) or mean(...)): its arg-max search also finds
/// F's value there, so the kernel carries the loss (run_carrying_argmax).
template <class F, class U>
inline constexpr bool argmax_carrier_v = [] {
  if constexpr (ad::is_multi<U>::value || ad::is_fused<U>::value || ad::materialises_v<U>) {
    return false;
  } else {
    return U::domain_type::rank == 1 && argmax_map<F, typename U::map_type>::value &&
           !U::storage_type::sparse &&
           std::is_same_v<typename U::storage_type::value_type, value_type_t<F>>;
  }
}();
}  // namespace detail

/// Whether plan element U can carry the value of Root (types only; run_carrying may still
/// decline at run time: a strided target, a shifted map).
template <class Root, class U>
inline constexpr bool carries_loss_v = [] {
  if constexpr (!detail::loss_root<Root>::value) {
    return false;
  } else {
    using F = typename detail::loss_root<Root>::arg;
    using T = value_type_t<F>;
    if constexpr (ad::is_fused<U>::value) {
      return detail::fused_carries<Root, U>::value;
    } else if constexpr (detail::loss_root<Root>::rank != 1) {
      return false;
    } else if constexpr (detail::argmax_carrier_v<F, U>) {
      return true;
    } else if constexpr (ad::is_multi<U>::value) {
      return detail::multi_carries<F, U>::value;
    } else if constexpr (ad::materialises_v<U>) {
      return false;
    } else {
      using K = ad::kernel_traits<U>;
      return K::domain_rank == 1 && K::injective && K::inner_axis == 0 &&
             K::projected_mask == 0 && !U::storage_type::sparse &&
             std::is_same_v<typename U::storage_type::value_type, T> &&
             std::is_same_v<value_type_t<typename U::value_expr>, T>;
    }
  }
}();

/// Whether U is an arg-max carrier of Root (detail::argmax_carrier_v): the value it leaves
/// sums the operand's elements at the first arg-maxes, which equal the reduction's maxima up
/// to the sign of a zero (that no sum shows: a sum starts at +0) and a NaN's payload (the
/// caller computes value(root) instead when the carried value is a NaN).
template <class Root, class U>
inline constexpr bool carries_row_maxima_v = [] {
  if constexpr (!detail::loss_root<Root>::value) return false;
  else if constexpr (detail::loss_root<Root>::rank != 1) return false;
  else return detail::argmax_carrier_v<typename detail::loss_root<Root>::arg, U>;
}();

/// Scratch bytes run_carrying(u, root, parts) needs beyond scratch_bytes(u): an arg-max
/// carrier keeps F's elements (its row maxima) to sum them in the reduction's order.
template <class Root, class U>
std::size_t carry_scratch_bytes([[maybe_unused]] U const& u, [[maybe_unused]] Root const& root) {
  if constexpr (carries_row_maxima_v<Root, U>) {
    return std::size_t(root.arg_.shape().extents()[0]) * sizeof(value_type_t<Root>);
  } else {
    return 0;
  }
}

namespace detail {
/// run_carrying for an arg-max carrier (argmax_carrier_v): per element j of F's domain,
/// one arg-max search gives the target position and F's element j (kept in scratch); the
/// rows split over the pool; then F's blocks are summed in the reduction's scheme.
template <class Root, class Use>
bool run_carrying_argmax(Use const& u, Root const& root, value_type_t<Root>* parts) {
#if !defined(GRADIX_HAS_VECTOR_EXT)
  return false;
#else
  using G = typename Use::storage_type;
  using T = typename G::value_type;
  using V = typename Use::value_expr;
  using F = typename loss_root<Root>::arg;
  using M = typename Use::map_type;
  constexpr std::size_t NM = M::size;
  index_t const n = u.dom_.extents()[0];
  if (n != root.arg_.shape().extents()[0]) return false;
  bool at_d = true;  // every arg-max component reads F's element d itself
  [&]<std::size_t... K>(std::index_sequence<K...>) {
    ([&] {
       using C = std::remove_cvref_t<decltype(get<K>(u.map_))>;
       if constexpr (argmax_comp<F, C>::value == 2) {
         auto const& m0 = get<0>(get<K>(u.map_).map_);
         at_d = at_d && m0.off_ == 0 && m0.scale_ == 1;
       }
     }(), ...);
  }(std::make_index_sequence<NM>{});
  if (!at_d) return false;
  if (n == 0) return true;
  T* const rows = scratch().try_get<T>(std::size_t(n));
  if (!rows) return false;
  ev::evaluator<F> const fev(root.arg_);
  ev::evaluator<V> const vev(u.v_);
  auto const map = u.map_;
  target_addressing<G> const addr(*u.target_);
  T* const data = u.target_->data();
  index_t const len = fev.count();  // elements per arg-max search
  auto range = [&](index_t a, index_t b) {
    for (index_t j = a; j < b; ++j) {
      coord<1> const d{j};
      T m{};
      auto const c = ev::argmax_coord(fev, d, &m);
      coord<NM> t{};
      [&]<std::size_t... K>(std::index_sequence<K...>) {
        ([&] {
           auto const& a = get<K>(map);
           using C = std::remove_cvref_t<decltype(a)>;
           if constexpr (argmax_comp<F, C>::value == 2) t[K] = a.off_ + a.scale_ * c[argmax_comp<F, C>::axis];
           else t[K] = ev::ax_value(a, d);
         }(), ...);
      }(std::make_index_sequence<NM>{});
      data[addr.offset(t)] += T(vev(d));
      rows[j] = m;
    }
  };
  parallel_ranges(n, range, std::max<index_t>(1, parallel_min_elements / std::max<index_t>(1, len)));
  index_t const bsize = ev::block_size<T>(n), nb = (n + bsize - 1) / bsize;
  constexpr int W = simd::width<T>;
  T const* const rv = rows;
  for (index_t b = 0; b < nb; ++b) {
    index_t const a = b * bsize, e = a + bsize < n ? a + bsize : n;
    parts[b] = loss_block<T, true>(
        a, e, [&](index_t j) { return simd::load<T, W>(rv + j); }, [&](index_t j) { return rv[j]; });
  }
  return true;
#endif
}
#if defined(GRADIX_HAS_VECTOR_EXT)
/// run_carrying for a carrier that is not an arg-max one: u's value and the root's operand F
/// are evaluated side by side, element j of u's domain being F's element j.
template <class Root, class Use>
bool run_carrying_plain(Use const& u, Root const& root, value_type_t<Root>* parts) {
  using K = ad::kernel_traits<Use>;
  using G = typename Use::storage_type;
  using T = typename G::value_type;
  using V = typename Use::value_expr;
  using F = typename detail::loss_root<Root>::arg;
  constexpr std::size_t TU = std::size_t(K::target_unit_axis);
  index_t const n = u.dom_.extents()[0];
  if (n != root.arg_.shape().extents()[0]) return false;
  if (u.target_->strides()[TU] * get<TU>(u.map_).scale_ != 1) return false;
  if (n == 0) return true;
  detail::target_addressing<G> const addr(*u.target_);
  T* const base = u.target_->data() + addr.offset(ev::map_value(u.map_, coord<1>{}));
  if constexpr (detail::top_in_f_v<F, Use>) {
    auto const& tm = get<0>(ad::region_at_map(u.v_).map_);
    if (tm.off_ != 0 || tm.scale_ != 1) return false;
  }
  constexpr int W = simd::width<T>;
  using X = simd::pack<T, W>;
  index_t const bsize = ev::block_size<T>(n), nb = (n + bsize - 1) / bsize;
  auto block = [&](index_t b) {
    index_t const a = b * bsize, e = a + bsize < n ? a + bsize : n;
    T* const tp = base;  // a local: the stores cannot alias it
    if constexpr (detail::top_in_f_v<F, Use>) {
      // the region's values and derivatives in one pass (its top's value included), the
      // adjoint as run(u) computes it, [-](v0 * d top / d x), and F's value from the top's
      using RV = ad::region_value<V>;
      auto const& am = ad::region_at_map(u.v_);
      ev::path_ev<typename RV::top, typename RV::path_type, 0, true> const pe(am.sub_.top_);
      detail::above_ev<F, typename RV::top> const fa(root.arg_);
      auto const pin = pe.template outer<0>(coord<1>{});
      auto const fin = fa.template outer<0>(coord<1>{});
      auto const v0ev = [&] {
        if constexpr (RV::has_v0) return ev::evaluator<typename RV::v0>(ad::region_v0(u.v_));
        else return 0;
      }();
      auto const vin = [&] {
        if constexpr (RV::has_v0) return v0ev.template outer<0>(coord<1>{});
        else return 0;
      }();
      auto pack_step = [&](index_t j) {
        auto r = pin.template pack<W>(j);
        X x = r.d;
        if constexpr (RV::has_v0) x = X(ev::pack_as<T, W>(vin, j) * x);
        if constexpr (RV::negative) x = X(-x);
        simd::store<T, W>(tp + j, simd::load<T, W>(tp + j) + x);
        return fin.template pack<W>(j, X(r.v));
      };
      auto scalar_step = [&](index_t j) {
        auto r = pin.elem(j);
        T x = T(r.d);
        if constexpr (RV::has_v0) x = T(T(vin.elem(j)) * x);
        if constexpr (RV::negative) x = T(-x);
        tp[j] += x;
        return fin.elem(j, T(r.v));
      };
      parts[b] = detail::loss_block<T, ev::cheap_body_v<V>>(a, e, pack_step, scalar_step);
    } else {
      // the kernel's value expression as run(u) evaluates it, and F beside it (the two
      // share their common sub-expressions: one pass)
      ev::evaluator<V> const vev(u.v_);
      ev::evaluator<F> const fev(root.arg_);
      auto const vin = vev.template outer<0>(coord<1>{});
      auto const fin = fev.template outer<0>(coord<1>{});
      auto pack_step = [&](index_t j) {
        auto x = ev::pack_as<T, W>(vin, j);
        auto y = ev::pack_as<T, W>(fin, j);
        simd::store<T, W>(tp + j, simd::load<T, W>(tp + j) + x);
        return y;
      };
      auto scalar_step = [&](index_t j) {
        T x = T(vin.elem(j));
        T y = T(fin.elem(j));
        tp[j] += x;
        return y;
      };
      parts[b] = detail::loss_block<T, ev::cheap_body_v<V> && ev::cheap_body_v<F>>(a, e, pack_step,
                                                                                scalar_step);
    }
  };
  pool().run(nb, block, !(pool().size() > 1 && n >= 2 * parallel_min_elements && nb >= 2));
  return true;
}
#endif
}  // namespace detail

/// Runs use u (a carrier of root: carries_loss_v) and leaves the block sums of the root's
/// operand F in parts[0 .. nblocks) (eval/reduce.hpp's blocks for F's extent); returns
/// false, having done nothing, when u cannot carry them at run time. u's domain is F's: its
/// element j is F's element j.
template <class Root, class Use>
bool run_carrying([[maybe_unused]] Use const& u, [[maybe_unused]] Root const& root,
                  [[maybe_unused]] value_type_t<Root>* parts) {
#if !defined(GRADIX_HAS_VECTOR_EXT)
  return false;
#else
  if (!u.target_) return false;
  if constexpr (carries_row_maxima_v<Root, Use>)
    return detail::run_carrying_argmax(u, root, parts);
  else
    return detail::run_carrying_plain(u, root, parts);
#endif
}
template <class Root, int I, class Top, class TMap, class V0, class... U>
bool run_carrying(ad::multi_use<I, Top, TMap, V0, U...> const& mu, Root const& root,
                  value_type_t<Top>* parts) {
  if (get<0>(mu.uses_).dom_.extents()[0] != root.arg_.shape().extents()[0]) return false;
  return detail::run_multi<true>(mu, &root.arg_, parts);
}

}  // namespace gradix::host

// The fused pair's kernel and its loss-carrying form (they use the helpers above).
#include "gradix/backend/host/fused.hpp"
