#pragma once
/// \file
/// Evaluating write maps (ad/map.hpp) at a domain coordinate.

#include "gradix/ad/map.hpp"
#include "gradix/config.hpp"
#include "gradix/eval/evaluator.hpp"
#include "gradix/eval/reduce.hpp"

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
  coord<RO> o = map_value(a.map_, d);
  index_t lin = 0;
  for (std::size_t k = 0; k < RO; ++k) lin = lin * a.out_ext_[k] + o[k];
  index_t v = 0;
  for (std::size_t j = RI; j-- > 0;) {
    index_t q = lin % a.in_ext_[j];
    lin /= a.in_ext_[j];
    if (j == K) v = q;
  }
  return a.off_ + a.scale_ * v;
}
/// The operand coordinate of the first arg-max of a max reduction at its output coordinate
/// o (row-major order over the reduced axes; a NaN wins).
template <class E, std::size_t RO>
GRADIX_HOST_DEVICE constexpr coord<E::in_rank> argmax_coord(E const& ev, coord<RO> const& o) {
  auto c = ev.base(o);
  constexpr std::size_t RA = E::in_rank;
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
    for (std::size_t j = RA; j-- > 0;) {
      if (!E::reduced(j)) continue;
      if (++c[j] < ev.ext_[j]) break;
      c[j] = 0;
    }
  }
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
  [&]<std::size_t... K>(std::index_sequence<K...>) {
    ((t[K] = ax_value(get<K>(m), d)), ...);
  }(std::index_sequence_for<Ax...>{});
  return t;
}

}  // namespace gradix::ev
