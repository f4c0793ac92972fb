#pragma once
/// \file
/// Evaluating write maps (ad/map.hpp) at a domain coordinate.

#include "gradix/ad/map.hpp"
#include "gradix/config.hpp"
#include "gradix/core/coords.hpp"
#include "gradix/eval/evaluator.hpp"
#include "gradix/eval/reduce.hpp"

#include <cstdint>
#include <limits>
#include <type_traits>
#include <utility>

namespace gradix::ev {

template <std::size_t J, std::size_t RD>
GRADIX_HOST_DEVICE constexpr index_t ax_value(ad::ax_dom<J> const& a, coord<RD> const& d) {
  return a.off_ + a.scale_ * d[J];
}
template <std::size_t RD>
GRADIX_HOST_DEVICE constexpr index_t ax_value(ad::ax_const const& a, coord<RD> const&) {
  return a.off_;
}
// Declarations first: a lookup's inner expression may be any kind.
template <class In, class Idx, std::size_t RD>
GRADIX_HOST_DEVICE constexpr index_t ax_value(ad::ax_lookup<In, Idx> const& a, coord<RD> const& d);
template <class M, std::size_t K, std::size_t RO, std::size_t RI, std::size_t RD>
GRADIX_HOST_DEVICE constexpr index_t ax_value(ad::ax_reshape<M, K, RO, RI> const& a,
                                              coord<RD> const& d);
template <class Node, class M, std::size_t K, std::size_t RD>
GRADIX_HOST_DEVICE constexpr index_t ax_value(ad::ax_argmax<Node, M, K> const& a, coord<RD> const& d);
template <class M, std::size_t K, std::size_t RO, std::size_t RD>
GRADIX_HOST_DEVICE constexpr index_t ax_value(ad::ax_kept_argmax<M, K, RO> const& a,
                                              coord<RD> const& d);
template <class M, class P, std::size_t RD>
GRADIX_HOST_DEVICE constexpr index_t ax_value(ad::ax_take<M, P> const& a, coord<RD> const& d);

template <class In, class Idx, std::size_t RD>
GRADIX_HOST_DEVICE constexpr index_t ax_value(ad::ax_lookup<In, Idx> const& a, coord<RD> const& d) {
  return a.off_ + a.scale_ * a.idx_(ax_value(a.inner_, d));
}
template <class... Ax, std::size_t RD>
GRADIX_HOST_DEVICE constexpr coord<sizeof...(Ax)> map_value(tuple<Ax...> const& m,
                                                           coord<RD> const& d);
template <class M, std::size_t K, std::size_t RO, std::size_t RI, std::size_t RD>
GRADIX_HOST_DEVICE constexpr index_t ax_value(ad::ax_reshape<M, K, RO, RI> const& a,
                                              coord<RD> const& d) {
  return a.off_ + a.scale_ * a.plan_(map_value(a.map_, d))[K];
}
namespace detail {
/// The components of one reshape (made together by compose_reshape: one inner map, one
/// plan) share a key; map_value computes their operand coordinate once, at the first.
template <class A>
struct reshape_key {
  using type = void;
  static constexpr std::size_t k = 0, ri = 0;
};
template <class M, std::size_t K, std::size_t RO, std::size_t RI>
struct reshape_key<ad::ax_reshape<M, K, RO, RI>> {
  using type = ad::ax_reshape<M, 0, RO, RI>;
  static constexpr std::size_t k = K, ri = RI;
};
/// The first component of tuple<Ax...> with component K's key (K itself when none).
template <std::size_t K, class... Ax>
constexpr std::size_t reshape_leader() {
  using key = typename reshape_key<std::remove_cvref_t<decltype(get<K>(std::declval<tuple<Ax...> const&>()))>>::type;
  if constexpr (std::is_void_v<key>) {
    return K;
  } else {
    std::size_t r = K, j = 0;
    ((r = (j < r && std::is_same_v<typename reshape_key<Ax>::type, key>) ? j : r, ++j), ...);
    return r;
  }
}
template <class... Ax>
inline constexpr std::size_t max_reshape_rank_v = [] {
  std::size_t r = 1;
  ((r = reshape_key<Ax>::ri > r ? reshape_key<Ax>::ri : r), ...);
  return r;
}();
template <class... Ax>
inline constexpr bool has_reshape_v = (!std::is_void_v<typename reshape_key<Ax>::type> || ...);
}  // namespace detail
#if defined(GRADIX_HAS_VECTOR_EXT)
namespace detail {
/// argmax_coord on host SIMD packs: the reduced domain in row-major order as runs along its
/// last reduced axis J; lane w of the packs tracks the first maximum (or first NaN) of the
/// elements it sees, the run tails one more tracker, and the result is the smallest flat
/// index among the trackers holding the overall maximum (a NaN if any): the first one, as
/// in the scalar loop. False when the flat index does not fit the index lanes. With val,
/// *val is the element there.
template <class E, std::size_t RO>
GRADIX_ALWAYS_INLINE bool argmax_packs(E const& ev, coord<RO> const& o, coord<E::in_rank>& out,
                                       typename E::value_type* val) {
  using T = typename E::value_type;
  constexpr std::size_t RA = E::in_rank;
  constexpr std::size_t J = [] {
    for (std::size_t j = RA; j-- > 0;)
      if (E::reduced(j)) return j;
    return RA;
  }();
  if constexpr (J == RA || !std::is_floating_point_v<T> || (sizeof(T) != 4 && sizeof(T) != 8)) {
    return false;
  } else {
    using I = std::conditional_t<sizeof(T) == 4, std::int32_t, std::int64_t>;
    constexpr int W = simd::width<T>;
    using X = simd::pack<T, W>;
    using XI = simd::pack<I, W>;
    index_t const n = ev.count();
    if (n <= 0 || n > index_t(std::numeric_limits<I>::max()) - W) return false;
    index_t const nj = ev.ext_[J];
    T const lowest = op::max_of::template identity<T>();
    X best = simd::splat<T, W>(lowest);
    XI at = simd::splat<I, W>(I(-1));
    XI pos{};
    for (int w = 0; w < W; ++w) pos[w] = I(w);
    T tbest = lowest;  // the tails' tracker
    index_t tat = -1;
    auto c = ev.base(o);
    for (index_t e0 = 0; e0 < n; e0 += nj) {
      c[J] = 0;
      auto in = ev.arg_.template outer<int(J)>(c);
      index_t i = 0;
      for (; i + W <= nj; i += W) {
        X v = pack_as<T, W>(in, i);
        XI m = XI((v > best) | ((v != v) & (best == best)));
        best = X((XI(v) & m) | (XI(best) & ~m));
        at = (pos & m) | (at & ~m);
        pos += I(W);
      }
      for (; i < nj; ++i) {
        T v = T(in.elem(i));
        if (v > tbest || (v != v && tbest == tbest)) {
          tbest = v;
          tat = e0 + i;
        }
      }
      pos += I(nj - (nj / W) * W);  // the tail's elements
      coords::next(c, ev.ext_, E::reduced_axes & ~(std::uint64_t(1) << J));  // the next run
    }
    // the overall maximum (a NaN if any), then the first index that holds it
    T m = tbest;
    for (int w = 0; w < W; ++w) m = op::max_of::combine(m, T(best[w]));
    bool const nan = m != m;
    index_t first = -1;
    T fv = m;
    auto take = [&](T v, index_t a) {
      if (a >= 0 && (nan ? v != v : v == m) && (first < 0 || a < first)) {
        first = a;
        fv = v;
      }
    };
    take(tbest, tat);
    for (int w = 0; w < W; ++w) take(T(best[w]), index_t(at[w]));
    if (first < 0) first = 0;  // every element is the lowest value: the first
    if (val) *val = fv;
    out = ev.base(o);
    coords::unravel_axes(out, ev.ext_, E::reduced_axes, first);
    return true;
  }
}
}  // namespace detail
#endif

/// The operand coordinate of the first arg-max of a max reduction at its output coordinate
/// o (row-major order over the reduced axes; a NaN wins). With val, *val is the operand's
/// element there (the maximum, up to the sign of a zero and a NaN's payload).
template <class E, std::size_t RO>
GRADIX_HOST_DEVICE constexpr coord<E::in_rank> argmax_coord(E const& ev, coord<RO> const& o,
                                                            typename E::value_type* val = nullptr) {
#if defined(GRADIX_HAS_VECTOR_EXT)
  if (!std::is_constant_evaluated()) {
    coord<E::in_rank> r{};
    if (detail::argmax_packs(ev, o, r, val)) return r;
  }
#endif
  auto c = ev.base(o);
  auto best_c = c;
  typename E::value_type best{};
  bool first = true;
  index_t n = ev.count();
  for (index_t e = 0; e < n; ++e) {
    auto v = ev.arg_(c);
    if (first || v > best || (v != v && best == best)) {
      best = v;
      best_c = c;
      first = false;
    }
    coords::next(c, ev.ext_, E::reduced_axes);
  }
  if (val) *val = best;
  return best_c;
}
/// Coordinate K of the first arg-max (recomputed: a max reduction that the call did not keep).
template <class Node, class M, std::size_t K, std::size_t RD>
GRADIX_HOST_DEVICE constexpr index_t ax_value(ad::ax_argmax<Node, M, K> const& a, coord<RD> const& d) {
  evaluator<Node> ev(a.node_);
  return a.off_ + a.scale_ * argmax_coord(ev, map_value(a.map_, d))[K];
}
/// Coordinate K of the first arg-max of a kept max reduction: read from its buffer.
template <class M, std::size_t K, std::size_t RO, std::size_t RD>
GRADIX_HOST_DEVICE constexpr index_t ax_value(ad::ax_kept_argmax<M, K, RO> const& a,
                                              coord<RD> const& d) {
  auto o = map_value(a.map_, d);
  index_t e = 0;
  for (std::size_t k = 0; k < RO; ++k) e += o[k] * a.strides_[k];
  return a.off_ + a.scale_ * a.arg_[e];
}
template <class... Ax, std::size_t RD>
GRADIX_HOST_DEVICE constexpr coord<sizeof...(Ax)> map_value(tuple<Ax...> const& m,
                                                           coord<RD> const& d) {
  coord<sizeof...(Ax)> t{};
  if constexpr (!detail::has_reshape_v<Ax...>) {
    [&]<std::size_t... K>(std::index_sequence<K...>) {
      ((t[K] = ax_value(get<K>(m), d)), ...);
    }(std::index_sequence_for<Ax...>{});
  } else {
    // a reshape's components: its inner map and plan evaluated once, at its first component
    constexpr std::size_t RG = detail::max_reshape_rank_v<Ax...>;
    array<array<index_t, RG>, sizeof...(Ax)> g{};
    auto one = [&]<std::size_t K>(std::integral_constant<std::size_t, K>) {
      auto const& a = get<K>(m);
      using A = std::remove_cvref_t<decltype(a)>;
      using RK = detail::reshape_key<A>;
      if constexpr (std::is_void_v<typename RK::type>) {
        t[K] = ax_value(a, d);
      } else {
        constexpr std::size_t L = detail::reshape_leader<K, Ax...>();
        if constexpr (L == K) {
          auto const r = a.plan_(map_value(a.map_, d));
          for (std::size_t j = 0; j != RK::ri; ++j) g[K][j] = r[j];
        }
        t[K] = a.off_ + a.scale_ * g[L][RK::k];
      }
    };
    [&]<std::size_t... K>(std::index_sequence<K...>) {
      (one(std::integral_constant<std::size_t, K>{}), ...);
    }(std::index_sequence_for<Ax...>{});
  }
  return t;
}

/// The position a take_along reads: its integer operand at the node's output coordinate.
template <class M, class P, std::size_t RD>
GRADIX_HOST_DEVICE constexpr index_t ax_value(ad::ax_take<M, P> const& a, coord<RD> const& d) {
  evaluator<P> const pe(a.pos_);
  return a.off_ + a.scale_ * index_t(pe(map_value(a.map_, d)));
}

/// argmax<Axis>(x): the max reduction's first arg-max (argmax_coord), its coordinate Axis.
template <class Arg, std::size_t Axis>
struct evaluator<argmax_node<Arg, Axis>> {
  using node_type = argmax_node<Arg, Axis>;
  using value_type = index_t;
  static constexpr std::size_t rank = node_type::shape_type::rank;
  evaluator<typename node_type::max_type> max_;
  GRADIX_HOST_DEVICE constexpr explicit evaluator(node_type const& n) : max_(n.max_node()) {}
  GRADIX_HOST_DEVICE constexpr value_type operator()(coord<rank> const& c) const {
    return argmax_coord(max_, c)[Axis];
  }
  template <int A>
  GRADIX_HOST_DEVICE constexpr auto outer(coord<rank> const& c) const {
    if constexpr (A == invariant_axis) return const_inner<value_type>{(*this)(c)};
    else return generic_inner<evaluator, rank, A>{this, c};
  }
};

}  // namespace gradix::ev
