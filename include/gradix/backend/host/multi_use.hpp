#pragma once
/// \file
/// The host kernel of several uses of one elementwise region (ad::multi_use, ad/kernel.hpp),
/// with the loss value it can carry (run_multi<true>, used by run_carrying in carrying.hpp).
///
/// Several uses of one region (ad::multi_use): one loop nest over the shared domain (axis I
/// innermost), one reverse sweep of the region per element (eval/sweep.hpp) giving every
/// use's adjoint, each added to its target in use order. Members with projected axes
/// (ad::member_kind) sum first: a column member sums the inner range in registers and adds
/// once per outer coordinate; row and scalar members (and column members of a domain with one
/// outer coordinate) sum into per-block partials, and the partials are added to the target in
/// block order at the end. The blocks are fixed by the domain's extents alone, so the result
/// has the same bits with any number of threads.

#include "gradix/backend/host/update_plain.hpp"
#include "gradix/ad/kernel.hpp"
#include "gradix/backend/host/loss_block.hpp"
#include "gradix/backend/host/scratch.hpp"
#include "gradix/backend/host/thread_pool.hpp"
#include "gradix/config.hpp"
#include "gradix/core/coords.hpp"
#include "gradix/core/simd.hpp"
#include "gradix/eval/cost.hpp"
#include "gradix/eval/map.hpp"
#include "gradix/eval/reduce.hpp"
#include "gradix/eval/sweep.hpp"
#include "gradix/grad/storage.hpp"

#include <cstdint>
#include <tuple>
#include <type_traits>

namespace gradix::host {

namespace detail {
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
        auto const addr = target_address_of(*u.target_);
        T x = P::negative[k] ? T(-out[k]) : out[k];
        u.target_->data()[addr.offset(ev::map_value(u.map_, d))] += x;
      }
      ++k;
    });
  } while (coords::next(d, ext, ad::all_axes_v<RD>));
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
        dst[k] = !data[k] ? nullptr
                 : part[k] ? blk + poff[k]
                           : data[k] + target_address_of(*u.target_).offset(ev::map_value(u.map_, o));
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
      while (coords::next(o, ext, O));
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
      while (coords::next(o, ext, O));
      return true;
    }
    parallel_ranges(
        n_outer,
        [&](index_t a, index_t b) {
          coord<RD> o = coords::unravel(ext, O, a);
          for (index_t k = a; k < b; ++k) {
            body(o, 0, n_in, nullptr);
            coords::next(o, ext, O);
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
      coord<RD> o = coords::unravel(ext, O, a);
      for (index_t k = a; k < e; ++k) {
        body(o, 0, n_in, blk);
        coords::next(o, ext, O);
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
      T* const t = data[k] + target_address_of(*u.target_).offset(ev::map_value(u.map_, coord<RD>{}));
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

}  // namespace gradix::host
