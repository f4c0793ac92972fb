#pragma once
/// \file
/// Elementwise regions in the backward push (ad/push.hpp): inside a region of unary and binary
/// nodes the adjoint is held *pending* (v0, the region's top node, the path taken from it, the
/// top's map) while the push descends, and `settle` turns it into v0 * d top / d node (one
/// path_deriv_node, O(depth) per element; trailing constant partials become a sign) where the
/// region ends. `group_region` joins the uses a region's push produced that are path
/// derivatives of its top (and multi_uses of it made further down) into one ad::multi_use
/// kernel. `light` is what a kernel's value expression keeps of a region: saved nodes as
/// buffer reads only, bound lets as their bound body, so plans hold O(1) nodes per region.
/// Types and plain data only: nothing here computes a value.

#include "gradix/ad/kernel.hpp"
#include "gradix/ad/map.hpp"
#include "gradix/ad/value.hpp"
#include "gradix/config.hpp"
#include "gradix/core/array.hpp"
#include "gradix/core/tuple.hpp"
#include "gradix/expr/let.hpp"
#include "gradix/expr/rebuild.hpp"
#include "gradix/expr/saved.hpp"
#include "gradix/expr/visit.hpp"

#include <cstdint>
#include <tuple>
#include <type_traits>
#include <utility>

namespace gradix::ad {

namespace detail {
/// The local partial kinds along a path from Top.
template <class Node, class P>
struct path_kinds_impl {
  template <std::size_t N>
  static constexpr void fill(array<partial_kind, N>&, std::size_t) {}
};
template <class Node, std::size_t S, std::size_t... R>
struct path_kinds_impl<Node, path<S, R...>> {
  template <std::size_t N>
  static constexpr void fill(array<partial_kind, N>& a, std::size_t i) {
    a[i] = partial_of_v<Node, S>;
    path_kinds_impl<typename path_child<Node, S>::type, path<R...>>::fill(a, i + 1);
  }
};
template <class Top, std::size_t... S>
constexpr array<partial_kind, sizeof...(S)> path_kinds(path<S...>) {
  array<partial_kind, sizeof...(S)> a{};
  path_kinds_impl<Top, path<S...>>::fill(a, 0);
  return a;
}

/// The first K steps of a path.
template <class P, std::size_t K>
struct take_path;
template <std::size_t... S, std::size_t K>
struct take_path<path<S...>, K> {
  static constexpr std::size_t steps[sizeof...(S) + 1] = {S..., 0};
  template <std::size_t... I>
  static path<steps[I]...> make(std::index_sequence<I...>);
  using type = decltype(make(std::make_index_sequence<K>{}));
};
}  // namespace detail

/// A mapped adjoint inside an elementwise region, not yet multiplied out: the adjoint of
/// the current node is v0(d) * (d Top / d node)(mtop(d)), where Path leads from Top to the
/// node. The push extends Path through unary and binary nodes and settles it (`settle`)
/// where the region ends (a parameter, a reduction, an index or view node).
template <class V0, class Top, class Path, class MTop>
struct pending {
  V0 v0_;
  Top const* top_;  // the region's top node, in the expression being planned (copied at settle)
  MTop mtop_;
};
template <class V>
struct is_pending : std::false_type {};
template <class V0, class Top, class Path, class MTop>
struct is_pending<pending<V0, Top, Path, MTop>> : std::true_type {};
template <class V>
struct pending_traits;
template <class V0, class Top, class Path, class MTop>
struct pending_traits<pending<V0, Top, Path, MTop>> {
  using top = Top;
  using mtop = MTop;
};

/// The path one step further (operand Side of the current node).
template <std::size_t Side, class V0, class Top, std::size_t... S, class MTop>
constexpr auto extend_path(pending<V0, Top, path<S...>, MTop> const& p) {
  return pending<V0, Top, path<S..., Side>, MTop>{p.v0_, p.top_, p.mtop_};
}

template <class U>
struct is_plain_use : std::false_type {};
template <class D, class V, class M, class G>
struct is_plain_use<use<D, V, M, G>> : std::true_type {};

namespace detail {
constexpr tuple<> cat_all() { return {}; }
template <class A, class... R>
constexpr auto cat_all(A const& a, R const&... r) {
  return tuple_cat(a, cat_all(r...));
}
}  // namespace detail

namespace detail {
/// The inner axes with which plan element E can join region Top's multi_use (entered with map
/// type M), as a mask (0: it cannot): a plain use whose value is a path derivative of Top
/// (ad::member_axes_v), or a multi_use of that region already (its own inner axis).
template <class E, class Top, class M>
constexpr std::uint64_t join_axes() {
  if constexpr (is_plain_use<E>::value) {
    return member_axes_v<E, Top, M>;
  } else if constexpr (is_multi<E>::value) {
    if constexpr (std::is_same_v<typename E::top_type, Top> && std::is_same_v<typename E::tmap_type, M>)
      return std::uint64_t(1) << E::inner_axis;
    else
      return 0;
  } else {
    return 0;
  }
}

/// Which elements of a plan tuple tuple<E...> join region Top's multi_use, and its inner axis:
/// the axis with which the most uses can join (a multi_use counts its members); ties go to
/// the axis along which the top's layout is contiguous, then to the last axis. Elements that
/// cannot join with it (targets of another layout, whose contiguous axis is another domain
/// axis) keep kernels of their own.
template <class E>
inline constexpr std::size_t uses_of_v = 1;
template <int I, class Top, class TMap, class V0, class... U>
inline constexpr std::size_t uses_of_v<multi_use<I, Top, TMap, V0, U...>> = sizeof...(U);
template <class Top, class M, class... E>
struct region_members {
  static constexpr std::size_t n = sizeof...(E);
  static constexpr std::uint64_t axes[n + 1] = {join_axes<E, Top, M>()..., 0};
  static constexpr std::size_t weight[n + 1] = {uses_of_v<E>..., 0};
  static constexpr int top_axis = dom_component_of<M, layout_of_t<Top>::template unit_axis<shape_of_t<Top>::rank>>::value;
  static constexpr int axis = [] {
    int best = -1;
    std::size_t best_score = 0;
    for (int j = 0; j < 64; ++j) {
      std::size_t c = 0;
      for (std::size_t k = 0; k < n; ++k) c += ((axes[k] >> j) & 1) ? weight[k] : 0;
      if (c == 0) continue;
      std::size_t score = c * 2 + (j == top_axis ? 1 : 0);
      if (score >= best_score) {
        best = j;
        best_score = score;
      }
    }
    return best;
  }();
  static constexpr bool mem[n + 1] = {(axis >= 0 && ((join_axes<E, Top, M>() >> (axis < 0 ? 0 : axis)) & 1))..., false};
  static constexpr std::size_t count = [] {
    std::size_t c = 0;
    for (std::size_t j = 0; j < n; ++j) c += mem[j] ? 1 : 0;
    return c;
  }();
  static constexpr bool plain_flags[n + 1] = {is_plain_use<E>::value..., false};
  static constexpr std::size_t plain = [] {
    std::size_t c = 0;
    for (std::size_t j = 0; j < n; ++j) c += mem[j] && plain_flags[j] ? 1 : 0;
    return c;
  }();
  static constexpr std::size_t first = [] {
    for (std::size_t j = 0; j < n; ++j)
      if (mem[j]) return j;
    return n;
  }();
  static constexpr auto idx = [] {
    array<std::size_t, (count > 0 ? count : 1)> a{};
    std::size_t q = 0;
    for (std::size_t j = 0; j < n; ++j)
      if (mem[j]) a[q++] = j;
    return a;
  }();
};

/// A joining element as a multi_use (a plain use becomes a one-member multi_use).
template <int I, class Top, class M, class E>
constexpr auto as_multi(E const& e) {
  if constexpr (is_multi<E>::value) {
    return e;
  } else {
    using RV = region_value<typename E::value_expr>;
    using V0 = std::conditional_t<RV::has_v0, typename RV::v0, no_v0>;
    auto const& am = region_at_map(e.v_);
    V0 v0 = [&] {
      if constexpr (RV::has_v0) return region_v0(e.v_);
      else return no_v0{};
    }();
    using MU = member_use<typename E::domain_type, typename E::value_expr, typename E::map_type,
                          typename E::storage_type>;
    return multi_use<I, Top, M, V0, MU>{am.sub_.top_, am.map_, v0, make_tuple(MU{e.dom_, e.map_, e.target_})};
  }
}
/// Two multi_uses of one region as one (members in order).
template <int I, class Top, class M, class V0, class... A, class... B>
constexpr auto merge_multi(multi_use<I, Top, M, V0, A...> const& a, multi_use<I, Top, M, V0, B...> const& b) {
  return multi_use<I, Top, M, V0, A..., B...>{a.top_, a.tmap_, a.v0_, tuple_cat(a.uses_, b.uses_)};
}
template <class A>
constexpr A const& merge_all(A const& a) {
  return a;
}
template <class A, class B, class... R>
constexpr auto merge_all(A const& a, B const& b, R const&... r) {
  return merge_all(merge_multi(a, b), r...);
}
template <class Top, class M, class... E>
inline constexpr bool same_v0_v = [] {
  using RM = region_members<Top, M, E...>;
  return []<std::size_t... Q>(std::index_sequence<Q...>) {
    using F = decltype(as_multi<RM::axis, Top, M>(std::declval<std::tuple_element_t<RM::idx[0], std::tuple<E...>>>()));
    return (std::is_same_v<typename decltype(as_multi<RM::axis, Top, M>(std::declval<std::tuple_element_t<RM::idx[Q], std::tuple<E...>>>()))::v0_type,
                           typename F::v0_type> && ...);
  }(std::make_index_sequence<RM::count>{});
}();
}  // namespace detail

/// Where a region starts (at node Top, entered with map type M), and at each binary node
/// inside it: the uses its push produced that are plain path derivatives of Top
/// (ad::member_axes_v), and multi_uses of Top made further down, become one
/// multi_use kernel, at the place of the first of them (when there are two or more, or when
/// one multi_use is among them). The other plan elements keep their order.
template <class Top, class M, class... E>
constexpr auto group_region(tuple<E...> const& r) {
  using RM = detail::region_members<Top, M, E...>;
  if constexpr (RM::count == 0 || (RM::count == 1 && RM::plain == 1)) {
    return r;
  } else if constexpr (!detail::same_v0_v<Top, M, E...>) {
    return r;
  } else {
    auto group = [&]<std::size_t... Q>(std::index_sequence<Q...>) {
      return detail::merge_all(detail::as_multi<RM::axis, Top, M>(get<RM::idx[Q]>(r))...);
    }(std::make_index_sequence<RM::count>{});
    return [&]<std::size_t... J>(std::index_sequence<J...>) {
      auto piece = [&]<std::size_t K>(std::integral_constant<std::size_t, K>) {
        if constexpr (K == RM::first) return make_tuple(group);
        else if constexpr (RM::mem[K]) return tuple<>{};
        else return make_tuple(get<K>(r));
      };
      return detail::cat_all(piece(std::integral_constant<std::size_t, J>{})...);
    }(std::make_index_sequence<RM::n>{});
  }
}

// ---------------------------------------------------------------------------------------
// Light copies: what a kernel's value expression keeps of a region

/// Whether N holds a saved node with its subtree, or a bound let with its operand (types
/// only): what ad::light strips.
template <class N>
constexpr bool heavy() {
  if constexpr (is_saved_node<N>::value) {
    return !is_node_ref<typename N::node_type>::value;
  } else if constexpr (is_bound_let_node<N>::value) {
    return true;
  } else if constexpr (is_scan_node<N>::value) {
    return true;
  } else if constexpr (gradix::detail::value_operand_count_v<N> == 2) {
    return heavy<gradix::detail::value_operand_t<0, N>>() || heavy<gradix::detail::value_operand_t<1, N>>();
  } else if constexpr (gradix::detail::value_operand_count_v<N> == 1) {
    return heavy<gradix::detail::value_operand_t<0, N>>();
  } else {
    return false;
  }
}

template <class N>
constexpr auto light(N const& n);
/// ad::light as rebuild's f.
struct lightening {
  static constexpr bool drops_marks = false;
  template <bool U, class C>
  constexpr auto apply(C const& c) const {
    return light(c);
  }
};

/// n as a backward kernel evaluates it: every saved node a buffer read only (its node a
/// node_ref: the node and its subtree stay in the expression the plan was built from, and
/// the push reaches them there), every bound let its bound body and a light operand. The
/// value is n's, element for element; the size is that of n's nodes down to the first saved
/// node on each path, so a plan's kernels hold O(1) nodes per region, not the subtrees below
/// it (a chain of n products made plans of size O(n^2), and the push's frames O(n^3) stack).
template <class N>
constexpr auto light(N const& n) {
  if constexpr (!heavy<N>()) {
    return n;
  } else if constexpr (is_saved_node<N>::value) {
    using K = typename N::node_type;
    using R = saved_node<node_ref<K>, typename N::layout_type>;
    R r{nullptr, n.buf_, n.argmax_};
    return r;
  } else if constexpr (is_bound_let_node<N>::value) {
    using Z = typename N::name_type;
    auto z = light(n.z_);
    auto a = light(n.arg_);
    return bound_let_node<Z, decltype(z), decltype(a)>{z, a, n.gz_};
  } else {
    return gradix::detail::rebuild<true>(n, lightening{});
  }
}
template <class N>
using light_t = decltype(light(std::declval<N const&>()));

/// The plain value expression of a (possibly pending) adjoint over domain dom. Trailing steps
/// with constant partials (+, -, casts) are dropped from the path and become a sign, so the
/// operands of one `+` get the same value expression (and may share a loop: fused_use).
template <class V, class D>
constexpr auto settle(V const& v, D const& dom) {
  if constexpr (!is_pending<V>::value) {
    return v;
  } else {
    return [&]<class V0, class Top, class P, class MTop>(pending<V0, Top, P, MTop> const& p) {
      constexpr auto kinds = detail::path_kinds<Top>(P{});
      constexpr std::size_t keep = [&] {
        std::size_t k = 0;
        for (std::size_t i = 0; i < kinds.size(); ++i)
          if (kinds[i] == partial_kind::general || kinds[i] == partial_kind::sibling) k = i + 1;
        return k;
      }();
      constexpr bool negative = [&] {
        bool n = false;
        for (std::size_t i = keep; i < kinds.size(); ++i)
          if (kinds[i] == partial_kind::minus_one) n = !n;
        return n;
      }();
      static_assert(keep > 0, "gradix internal: a pending region starts at a non-constant partial");
      using P2 = typename detail::take_path<P, keep>::type;
      auto f = mul_v(p.v0_, at_map_node<path_deriv_node<light_t<Top>, P2>, MTop, D>{{light(*p.top_)}, p.mtop_, dom});
      if constexpr (negative) return neg_v(f);
      else return f;
    }(v);
  }
}

}  // namespace gradix::ad
