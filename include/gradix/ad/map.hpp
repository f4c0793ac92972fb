#pragma once
/// \file
/// Write maps: how a coordinate d of an adjoint's domain D reaches the coordinates of the
/// node that receives it. A map is a tuple with one *axis expression* per target axis:
///
///   value_k(d) = off + scale * base(d),  base one of
///     ax_dom<J>          d[J]                         (affine: injective in d[J])
///     ax_const           0                            (a constant: at(j), select, broadcast)
///     ax_lookup<In, Idx> idx[In(d)]                   (through an index vector: not injective
///                                                     unless Idx is unique_vec)
///     ax_reshape<M, K>   coordinate K of unravel(ravel(M(d)))   (a reshape)
///     ax_argmax<N, M, K> coordinate K of the first arg-max of the max-reduction N at M(d)
///     ax_take<M, P>      P(M(d)): the integer operand P of a take_along at its output
///                        coordinate M(d) (not injective)
///
/// Composition is closed: pushing an adjoint through an index or view node substitutes the
/// node's own coordinate map into these expressions (a shift of a constant is a constant,
/// a range of a range is a range). A D axis that reaches no target axis is *projected*: the
/// update kernel sums over it. All of this is types plus a few integers: nothing is
/// materialised.

#include "gradix/config.hpp"
#include "gradix/core/array.hpp"
#include "gradix/core/reshape.hpp"
#include "gradix/core/shape.hpp"
#include "gradix/core/tuple.hpp"
#include "gradix/expr/index.hpp"

#include <type_traits>
#include <utility>

namespace gradix::ad {

template <std::size_t J>
struct ax_dom {
  index_t off_ = 0;
  index_t scale_ = 1;
};
struct ax_const {
  index_t off_ = 0;
  index_t scale_ = 1;  // unused; present so that every axis expression composes alike
};
template <class Inner, class Idx>
struct ax_lookup {
  index_t off_ = 0;
  index_t scale_ = 1;
  Idx idx_;
  Inner inner_;
};
template <class Map, std::size_t K, std::size_t RO, std::size_t RI>
struct ax_reshape {
  index_t off_ = 0;
  index_t scale_ = 1;
  Map map_;  // to the reshape node's output coordinates
  reshape_plan<RO, RI> plan_;
};
template <class Node, class Map, std::size_t K>
struct ax_argmax {
  index_t off_ = 0;
  index_t scale_ = 1;
  Node node_;  // the max reduce_node
  Map map_;    // to its output coordinates
};

/// Coordinate K (a reduced axis) of the first arg-max of a *kept* max reduction
/// (api/saved.hpp) at M(d), read from the arg-max buffer the call filled: entry
/// sum_k M(d)_k * strides_[k] of arg_ (arg_ already points at this axis' slot).
template <class Map, std::size_t K, std::size_t RO>
struct ax_kept_argmax {
  index_t off_ = 0;
  index_t scale_ = 1;
  index_t const* arg_;
  array<index_t, RO> strides_;
  Map map_;  // to the max node's output coordinates
};

/// The position a take_along node reads along its axis, at its output coordinate M(d): the
/// value of its integer operand P (an expression node, evaluated where the map is).
template <class Map, class Pos>
struct ax_take {
  index_t off_ = 0;
  index_t scale_ = 1;
  Pos pos_;
  Map map_;  // to the take_along node's output coordinates
};

// ---------------------------------------------------------------------------------------
// Dependence on domain axes (types only)

template <class Ax, std::size_t J>
struct depends : std::false_type {};
template <std::size_t I, std::size_t J>
struct depends<ax_dom<I>, J> : std::bool_constant<I == J> {};
template <class In, class Idx, std::size_t J>
struct depends<ax_lookup<In, Idx>, J> : depends<In, J> {};
template <class... Ax, std::size_t J>
struct depends<tuple<Ax...>, J> : std::bool_constant<(depends<Ax, J>::value || ...)> {};
template <class M, std::size_t K, std::size_t RO, std::size_t RI, std::size_t J>
struct depends<ax_reshape<M, K, RO, RI>, J> : depends<M, J> {};
template <class N, class M, std::size_t K, std::size_t J>
struct depends<ax_argmax<N, M, K>, J> : depends<M, J> {};
template <class M, std::size_t K, std::size_t RO, std::size_t J>
struct depends<ax_kept_argmax<M, K, RO>, J> : depends<M, J> {};
template <class M, class P, std::size_t J>
struct depends<ax_take<M, P>, J> : depends<M, J> {};
template <class Ax, std::size_t J>
inline constexpr bool depends_v = depends<Ax, J>::value;

/// Number of components of map M that depend on domain axis J.
template <class M, std::size_t J>
struct count_deps;
template <class... Ax, std::size_t J>
struct count_deps<tuple<Ax...>, J>
    : std::integral_constant<int, (int(depends_v<Ax, J>) + ... + 0)> {};

/// The component index of M that is exactly ax_dom<J>, or -1.
template <class M, std::size_t J>
struct dom_component;
template <class... Ax, std::size_t J>
struct dom_component<tuple<Ax...>, J> {
  static constexpr int value = [] {
    int k = 0, r = -1;
    ((std::is_same_v<Ax, ax_dom<J>> ? (r = (r < 0 ? k : r), ++k) : ++k), ...);
    return r;
  }();
};

/// The domain axis J whose ax_dom<J> is component K of M, or -1.
template <class M, std::size_t K>
struct dom_component_of {
  static constexpr int value = -1;
};
template <class... Ax, std::size_t K>
  requires(K < sizeof...(Ax))
struct dom_component_of<tuple<Ax...>, K> {
  template <class A>
  struct axis_of : std::integral_constant<int, -1> {};
  template <std::size_t J>
  struct axis_of<ax_dom<J>> : std::integral_constant<int, int(J)> {};
  static constexpr int value = axis_of<std::tuple_element_t<K, std::tuple<Ax...>>>::value;
};

/// Is axis expression Ax injective in the domain axes it depends on (as far as types show)?
template <class Ax>
struct injective_ax : std::false_type {};
template <std::size_t J>
struct injective_ax<ax_dom<J>> : std::true_type {};
template <>
struct injective_ax<ax_const> : std::true_type {};
template <class In, class I>
struct injective_ax<ax_lookup<In, unique_vec<I>>> : injective_ax<In> {};
template <class In>
struct injective_ax<ax_lookup<In, index_range>> : injective_ax<In> {};  // (a slice's step is never 0)

/// A map is injective (in the domain axes it depends on; the others are projected, summed)
/// when every component is and each domain axis reaches at most one component, or when each
/// axis it depends on is some component exactly (ax_dom<J>): those components alone tell
/// the coordinates apart, whatever the others are (a kept arg-max beside its row index).
/// (Two uses fused in one kernel would not be injective together.)
template <class M, std::size_t RD>
struct injective_map;
namespace detail {
/// The components of one reshape (compose_reshape makes all RI of them from one inner map)
/// share a key.
template <class A>
struct reshape_group_of {
  using key = void;
  static constexpr std::size_t ri = 0;
};
template <class M, std::size_t K, std::size_t RO, std::size_t RI>
struct reshape_group_of<ax_reshape<M, K, RO, RI>> {
  using key = ax_reshape<M, 0, RO, RI>;
  using inner = M;
  static constexpr std::size_t ri = RI;
};
/// Injective by parts: a part is one component, or all RI components of one reshape (a
/// bijection of its inner map's value: injective when that map is); every part injective,
/// and each domain axis reaching at most one part. (The multi-head split and merge
/// (B, T, D) -> (B, T, H, D/H) -> (B H, T, D/H) composes such maps.)
template <class M, std::size_t RD>
struct injective_by_parts : std::false_type {};
}  // namespace detail
template <class... Ax, std::size_t RD>
struct injective_map<tuple<Ax...>, RD> {
  static constexpr bool value = [] {
    return [&]<std::size_t... J>(std::index_sequence<J...>) {
      bool const separate = (injective_ax<Ax>::value && ...) &&
                            ((count_deps<tuple<Ax...>, J>::value <= 1) && ...);
      bool const covered = ((count_deps<tuple<Ax...>, J>::value == 0 ||
                             dom_component<tuple<Ax...>, J>::value >= 0) && ...);
      return separate || covered || detail::injective_by_parts<tuple<Ax...>, RD>::value;
    }(std::make_index_sequence<RD>{});
  }();
};
namespace detail {
template <class... Ax, std::size_t RD>
struct injective_by_parts<tuple<Ax...>, RD> {
  static constexpr std::size_t N = sizeof...(Ax);
  template <std::size_t K>
  using comp = std::tuple_element_t<K, std::tuple<Ax...>>;
  /// The part of component K: the first component with its reshape key, or K.
  template <std::size_t K>
  static constexpr std::size_t part() {
    using key = typename reshape_group_of<comp<K>>::key;
    if constexpr (std::is_void_v<key>) {
      return K;
    } else {
      std::size_t r = K, j = 0;
      ((r = (j < r && std::is_same_v<typename reshape_group_of<Ax>::key, key>) ? j : r, ++j), ...);
      return r;
    }
  }
  template <std::size_t K>
  static constexpr bool part_ok() {
    using G = reshape_group_of<comp<K>>;
    if constexpr (std::is_void_v<typename G::key>) {
      return injective_ax<comp<K>>::value;
    } else {
      // the whole reshape is there (each of its components once), over an injective map
      std::size_t n = 0;
      ((n += std::is_same_v<typename reshape_group_of<Ax>::key, typename G::key> ? 1 : 0), ...);
      return n == G::ri && injective_map<typename G::inner, RD>::value;
    }
  }
  /// Which domain axes component K depends on.
  template <std::size_t K>
  static constexpr array<bool, RD> dep_row() {
    array<bool, RD> r{};
    [&]<std::size_t... J>(std::index_sequence<J...>) { ((r[J] = depends_v<comp<K>, J>), ...); }(
        std::make_index_sequence<RD>{});
    return r;
  }
  static constexpr bool value = [] {
    if constexpr (!(!std::is_void_v<typename reshape_group_of<Ax>::key> || ...)) {
      return false;  // no reshape: the rules above decide
    } else {
      return [&]<std::size_t... K>(std::index_sequence<K...>) {
        if (!(part_ok<K>() && ...)) return false;
        array<std::size_t, N> const parts{{part<K>()...}};
        array<array<bool, RD>, N> const deps{{dep_row<K>()...}};
        for (std::size_t j = 0; j != RD; ++j) {  // (!=: RD may be 0)
          std::size_t first = N;
          for (std::size_t k = 0; k != N; ++k) {
            if (!deps[k][j]) continue;
            if (first == N) first = parts[k];
            else if (parts[k] != first) return false;
          }
        }
        return true;
      }(std::make_index_sequence<N>{});
    }
  }();
};
}  // namespace detail

// ---------------------------------------------------------------------------------------
// Composition

/// off + scale * (expression): substitutes an affine function into an axis expression.
template <class Ax>
constexpr Ax affine_of(Ax a, index_t off, index_t scale) {
  if constexpr (std::is_same_v<Ax, ax_const>) {
    a.off_ = off + scale * a.off_;
  } else {
    a.off_ = off + scale * a.off_;
    a.scale_ = scale * a.scale_;
  }
  return a;
}

/// The identity map of a rank-R domain.
template <std::size_t R>
constexpr auto identity_map() {
  return [&]<std::size_t... J>(std::index_sequence<J...>) {
    return make_tuple(ax_dom<J>{}...);
  }(std::make_index_sequence<R>{});
}

/// Through index_node<_, Axis, Idx>: the operand's map from the node's map m. A slice
/// (index_range) composes affinely into the component (its type kept), unless RangeLookup:
/// then the component becomes a lookup through the range (ad/push.hpp: a slice of an
/// adjoint that is a buffer read at the identity, which must not look like the identity to
/// the nodes below, since it covers only part of them).
template <std::size_t Axis, class Idx, std::size_t RA, bool RangeLookup = false, class... Ax>
constexpr auto compose_index(tuple<Ax...> const& m, Idx const& idx) {
  constexpr bool drop = std::is_same_v<Idx, index_select>;
  return [&]<std::size_t... J>(std::index_sequence<J...>) {
    [[maybe_unused]] auto comp = [&]<std::size_t K>(std::integral_constant<std::size_t, K>) {
      if constexpr (K == Axis) {
        if constexpr (drop || std::is_same_v<Idx, index_at>) {
          return ax_const{idx.pos_};
        } else if constexpr (std::is_same_v<Idx, index_range> && !RangeLookup) {
          return affine_of(get<Axis>(m), idx.start_, idx.step_);
        } else {
          using In = std::remove_cvref_t<decltype(get<Axis>(m))>;
          return ax_lookup<In, Idx>{0, 1, idx, get<Axis>(m)};
        }
      } else {
        return get<(drop && K > Axis) ? K - 1 : K>(m);
      }
    };
    return make_tuple(comp(std::integral_constant<std::size_t, J>{})...);
  }(std::make_index_sequence<RA>{});
}

/// Through take_along_node<_, Pos, Axis>: component Axis becomes the position read there.
template <std::size_t Axis, class... Ax, class Pos>
constexpr auto compose_take(tuple<Ax...> const& m, Pos const& pos) {
  return [&]<std::size_t... J>(std::index_sequence<J...>) {
    [[maybe_unused]] auto comp = [&]<std::size_t K>(std::integral_constant<std::size_t, K>) {
      if constexpr (K == Axis) return ax_take<tuple<Ax...>, Pos>{0, 1, pos, m};
      else return get<K>(m);
    };
    return make_tuple(comp(std::integral_constant<std::size_t, J>{})...);
  }(std::index_sequence_for<Ax...>{});
}

/// Through permute_node<_, P...>: operand axis P_k gets component k.
template <std::size_t... P, class... Ax>
constexpr auto compose_permute(tuple<Ax...> const& m) {
  constexpr array<std::size_t, sizeof...(P)> perm{{P...}};
  constexpr auto inv = [&] {
    array<std::size_t, sizeof...(P)> r{};
    for (std::size_t k = 0; k < sizeof...(P); ++k) r[perm[k]] = k;
    return r;
  }();
  return [&]<std::size_t... J>(std::index_sequence<J...>) {
    return make_tuple(get<inv[J]>(m)...);
  }(std::make_index_sequence<sizeof...(P)>{});
}

/// Through unsqueeze_node<_, Axis>: drop component Axis.
template <std::size_t Axis, class... Ax>
constexpr auto compose_unsqueeze(tuple<Ax...> const& m) {
  return [&]<std::size_t... J>(std::index_sequence<J...>) {
    return make_tuple(get<(J >= Axis ? J + 1 : J)>(m)...);
  }(std::make_index_sequence<sizeof...(Ax) - 1>{});
}

/// Through a broadcast (binary operand or broadcast_node) of an operand with shape SA into
/// a result of rank sizeof...(Ax): leading axes dropped, static-1 axes constant 0.
template <class SA, class... Ax>
constexpr auto compose_broadcast(tuple<Ax...> const& m) {
  constexpr std::size_t off = sizeof...(Ax) - SA::rank;
  return [&]<std::size_t... J>(std::index_sequence<J...>) {
    [[maybe_unused]] auto comp = [&]<std::size_t K>(std::integral_constant<std::size_t, K>) {
      if constexpr (SA::static_extents[K] == 1) return ax_const{0};
      else return get<K + off>(m);
    };
    return make_tuple(comp(std::integral_constant<std::size_t, J>{})...);
  }(std::make_index_sequence<SA::rank>{});
}

namespace detail {
/// For each operand axis j of a reduction over Mask (rank RA): a kept axis, the node's
/// component it reads (k); a reduced one, 1000 + Base + its number among the reduced axes
/// (Count) or 1000 + Base (not Count). A namespace-scope constant, not a local one, so that
/// nvcc's front end accepts it as a template argument inside the lambdas below.
template <std::uint64_t Mask, bool Keep, std::size_t RA, std::size_t Base, bool Count>
inline constexpr array<std::size_t, RA> reduce_sources_v = [] {
  array<std::size_t, RA> r{};
  std::size_t k = 0, q = 0;
  for (std::size_t j = 0; j < RA; ++j) {
    if ((Mask >> j) & 1) {
      r[j] = 1000 + Base + (Count ? q++ : 0);
      if (Keep) ++k;
    } else {
      r[j] = k++;
    }
  }
  return r;
}();
}  // namespace detail

/// Through a sum/mean reduce_node over Mask of an operand of rank RA: the reduced axes read
/// new domain axes RD, RD + 1, ... (in axis order); the kept ones the node's components.
template <std::uint64_t Mask, bool Keep, std::size_t RA, std::size_t RD, class... Ax>
constexpr auto compose_reduce(tuple<Ax...> const& m) {
  return [&]<std::size_t... J>(std::index_sequence<J...>) {
    [[maybe_unused]] auto comp = [&]<std::size_t K>(std::integral_constant<std::size_t, K>) {
      constexpr std::size_t src = detail::reduce_sources_v<Mask, Keep, RA, RD, true>[K];
      if constexpr (src >= 1000) return ax_dom<src - 1000>{};
      else return get<src>(m);
    };
    return make_tuple(comp(std::integral_constant<std::size_t, J>{})...);
  }(std::make_index_sequence<RA>{});
}

/// Through a reshape from operand extents in_ext to output extents out_ext.
template <std::size_t RI, std::size_t RO, class M>
constexpr auto compose_reshape(M const& m, array<index_t, RO> out_ext, array<index_t, RI> in_ext) {
  reshape_plan<RO, RI> const plan(out_ext, in_ext);
  return [&]<std::size_t... K>(std::index_sequence<K...>) {
    return make_tuple(ax_reshape<M, K, RO, RI>{0, 1, m, plan}...);
  }(std::make_index_sequence<RI>{});
}

/// Through a max reduce_node over Mask: reduced axes read the arg-max, the others the
/// node's components.
template <std::uint64_t Mask, bool Keep, std::size_t RA, class Node, class... Ax>
constexpr auto compose_argmax(Node const& node, tuple<Ax...> const& m) {
  return [&]<std::size_t... J>(std::index_sequence<J...>) {
    [[maybe_unused]] auto comp = [&]<std::size_t K>(std::integral_constant<std::size_t, K>) {
      constexpr std::size_t src = detail::reduce_sources_v<Mask, Keep, RA, 0, false>[K];
      if constexpr (src == 1000) return ax_argmax<Node, tuple<Ax...>, K>{0, 1, node, m};
      else return get<src>(m);
    };
    return make_tuple(comp(std::integral_constant<std::size_t, J>{})...);
  }(std::make_index_sequence<RA>{});
}

/// Through a kept max reduction over Mask (its arg-max buffer arg, one entry per reduced axis
/// per output element, row-major over the output's RO axes): reduced axes read the buffer,
/// the others the node's components.
template <std::uint64_t Mask, bool Keep, std::size_t RA, std::size_t RO, class... Ax>
constexpr auto compose_kept_argmax(index_t const* arg, array<index_t, RO> const& out_ext,
                                   tuple<Ax...> const& m) {
  constexpr std::size_t nred = std::size_t(__builtin_popcountll(Mask));
  array<index_t, RO> st{};
  index_t s = index_t(nred);
  for (std::size_t k = RO; k-- > 0;) {
    st[k] = s;
    s *= out_ext[k];
  }
  return [&]<std::size_t... J>(std::index_sequence<J...>) {
    [[maybe_unused]] auto comp = [&]<std::size_t K>(std::integral_constant<std::size_t, K>) {
      constexpr std::size_t src = detail::reduce_sources_v<Mask, Keep, RA, 0, true>[K];
      if constexpr (src >= 1000) return ax_kept_argmax<tuple<Ax...>, K, RO>{0, 1, arg + (src - 1000), st, m};
      else return get<src>(m);
    };
    return make_tuple(comp(std::integral_constant<std::size_t, J>{})...);
  }(std::make_index_sequence<RA>{});
}

}  // namespace gradix::ad
