#pragma once
/// \file
/// Reverse sweep of an elementwise region, per element: the adjoints of several nodes of one
/// region at once (the update kernel of an ad::multi_use). `sweep<Top, PL>` is built over the
/// region's top node and a list of paths (ad::path_list), one per target: per element it
/// computes the values of the region's nodes bottom-up, once, then pushes an adjoint from the
/// top down the union of the paths (a trie), multiplying the local partials, and delivers at
/// the end of path k the adjoint d Top / d node_k (times the top's adjoint). A region of depth
/// k read by P parameters costs O(k) per element for all of them, not O(k) for each.
///
/// Inner level only: `outer<Axis>(c)` gives an inner sweep with `fwd<X>(i)` (values at
/// element i, X a scalar or a host SIMD pack) and `bwd(frame, adjoint, out)`. The same code
/// runs on scalars (loop tails, constant evaluation, via the invariant axis) and packs.

#include "gradix/ad/value.hpp"
#include "gradix/config.hpp"
#include "gradix/core/simd.hpp"
#include "gradix/eval/ad.hpp"
#include "gradix/eval/elementwise.hpp"
#include "gradix/eval/evaluator.hpp"
#include "gradix/eval/inner.hpp"

#include <cstddef>
#include <type_traits>
#include <utility>

namespace gradix::ev {

namespace sweep_detail {

/// Step Dep of path P: 0 or 1, -1 if P ends at depth Dep, -2 if it ended before.
template <class P, std::size_t Dep>
struct step;
template <std::size_t... S, std::size_t Dep>
struct step<ad::path<S...>, Dep> {
  static constexpr int steps[sizeof...(S) + 1] = {int(S)..., -1};
  static constexpr int value = Dep < sizeof...(S) ? steps[Dep] : (Dep == sizeof...(S) ? -1 : -2);
};
template <class PL, std::size_t K>
struct path_at;
template <class P0, class... P>
struct path_at<ad::path_list<P0, P...>, 0> {
  using type = P0;
};
template <class P0, class... P, std::size_t K>
struct path_at<ad::path_list<P0, P...>, K> : path_at<ad::path_list<P...>, K - 1> {};

/// The members of Ix whose path takes step Want at depth Dep.
template <class PL, std::size_t Dep, int Want, class Ix>
struct select;
template <class PL, std::size_t Dep, int Want, std::size_t... Ix>
struct select<PL, Dep, Want, std::index_sequence<Ix...>> {
  static constexpr std::size_t n =
      ((step<typename path_at<PL, Ix>::type, Dep>::value == Want ? 1 : 0) + ... + 0);
  struct holder {
    static constexpr auto idx = [] {
      std::size_t all[sizeof...(Ix) + 1] = {Ix..., 0};
      int st[sizeof...(Ix) + 1] = {step<typename path_at<PL, Ix>::type, Dep>::value..., 0};
      array<std::size_t, (n > 0 ? n : 1)> r{};
      std::size_t q = 0;
      for (std::size_t j = 0; j < sizeof...(Ix); ++j)
        if (st[j] == Want) r[q++] = all[j];
      return r;
    }();
  };
  template <std::size_t... J>
  static std::index_sequence<holder::idx[J]...> make(std::index_sequence<J...>);
  using type = decltype(make(std::make_index_sequence<n>{}));
};
template <class PL, std::size_t Dep, int Want, class Ix>
using select_t = typename select<PL, Dep, Want, Ix>::type;

template <class Ix>
inline constexpr bool empty_v = Ix::size() == 0;

/// X elements of an inner evaluator from i on (X a scalar or a host SIMD pack).
template <class X, class In>
GRADIX_ALWAYS_INLINE constexpr X load(In const& in, index_t i) {
#if defined(GRADIX_HAS_VECTOR_EXT)
  if constexpr (simd::vector_ext<X>) {
    using E = std::remove_cvref_t<decltype(X{}[0])>;
    return pack_as<E, int(sizeof(X) / sizeof(E))>(in, i);
  } else
#endif
  {
    return X(in.elem(i));
  }
}

/// d y / d x of a unary op, lane by lane for ops without pack derivatives.
template <class Op, class X>
GRADIX_ALWAYS_INLINE constexpr X unary_partial(X x, X y) {
  if constexpr (simd::vector_ext<X> && !pack_derivative_v<Op>) {
    X p{};
    constexpr int W = int(sizeof(X) / sizeof(p[0]));
    for (int w = 0; w < W; ++w) p[w] = Op::d_arg(x[w], y[w]);
    return p;
  } else {
    return X(Op::d_arg(x, y));
  }
}
template <class Op, std::size_t Side, class X>
GRADIX_ALWAYS_INLINE constexpr X binary_partial(X l, X r, X y) {
  if constexpr (simd::vector_ext<X>) {
    X p{};
    constexpr int W = int(sizeof(X) / sizeof(p[0]));
    for (int w = 0; w < W; ++w) {
      if constexpr (Side == 0) p[w] = Op::d_lhs(l[w], r[w], y[w]);
      else p[w] = Op::d_rhs(l[w], r[w], y[w]);
    }
    return p;
  } else {
    if constexpr (Side == 0) return X(Op::d_lhs(l, r, y));
    else return X(Op::d_rhs(l, r, y));
  }
}

}  // namespace sweep_detail

template <class N, std::size_t Dep, class PL, class Ix>
struct sweep_node;

/// An operand no path enters: its value only.
template <class N>
struct sweep_plain {
  using T = value_type_t<N>;
  static constexpr std::size_t rank = shape_of_t<N>::rank;
  evaluator<N> e_;
  GRADIX_HOST_DEVICE constexpr explicit sweep_plain(N const& n) : e_(n) {}
  template <class In>
  struct inner {
    In in_;
    template <class X>
    struct frame {
      X y;
    };
    template <class X>
    GRADIX_ALWAYS_INLINE constexpr frame<X> fwd(index_t i) const {
      return {sweep_detail::load<X>(in_, i)};
    }
    template <class X, class Out>
    GRADIX_ALWAYS_INLINE constexpr void bwd(frame<X> const&, X, Out&) const {}
  };
  template <int Ax>
  GRADIX_HOST_DEVICE constexpr auto outer(coord<rank> const& c) const {
    auto in = e_.template outer<Ax>(c);
    return inner<decltype(in)>{in};
  }
};

template <class N, std::size_t Dep, class PL, class Ix>
using sweep_child_t =
    std::conditional_t<sweep_detail::empty_v<Ix>, sweep_plain<N>, sweep_node<N, Dep, PL, Ix>>;

/// Delivers the adjoint to the members whose path ends at this node.
template <class Ends, class X, class Out>
GRADIX_ALWAYS_INLINE constexpr void deliver(X a, Out& out) {
  [&]<std::size_t... E>(std::index_sequence<E...>) { ((out[E] = a), ...); }(Ends{});
}

/// A path ends at a node that is not elementwise (a parameter, a kept value, a reduction,
/// an index or view node): its value, and the adjoint delivered.
template <class N, std::size_t Dep, class PL, class Ix>
struct sweep_node : sweep_plain<N> {
  static_assert(sweep_detail::empty_v<sweep_detail::select_t<PL, Dep, 0, Ix>> &&
                    sweep_detail::empty_v<sweep_detail::select_t<PL, Dep, 1, Ix>>,
                "gradix internal: a path continues below a node that is not elementwise");
  using base = sweep_plain<N>;
  using base::base;
  template <class In>
  struct inner : base::template inner<In> {
    template <class X, class Out>
    GRADIX_ALWAYS_INLINE constexpr void bwd(typename base::template inner<In>::template frame<X> const&,
                                            X a, Out& out) const {
      deliver<Ix>(a, out);
    }
  };
  template <int Ax>
  GRADIX_HOST_DEVICE constexpr auto outer(coord<base::rank> const& c) const {
    auto in = this->e_.template outer<Ax>(c);
    return inner<decltype(in)>{{in}};
  }
};

template <class Op, class A, std::size_t Dep, class PL, class Ix>
struct sweep_node<unary_node<Op, A>, Dep, PL, Ix> {
  using N = unary_node<Op, A>;
  using T = value_type_t<N>;
  static constexpr std::size_t rank = shape_of_t<N>::rank;
  static constexpr ad::partial_kind K = ad::partial_of_v<N, 0>;
  using Ends = sweep_detail::select_t<PL, Dep, -1, Ix>;
  using C0 = sweep_detail::select_t<PL, Dep, 0, Ix>;
  using child = sweep_child_t<A, Dep + 1, PL, C0>;
  child a_;
  GRADIX_HOST_DEVICE constexpr explicit sweep_node(N const& n) : a_(n.arg_) {}
  template <class CI>
  struct inner {
    CI c_;
    template <class X>
    struct frame {
      typename CI::template frame<X> c;
      X y;
    };
    template <class X>
    GRADIX_ALWAYS_INLINE constexpr frame<X> fwd(index_t i) const {
      auto c = c_.template fwd<X>(i);
      X y = X(Op::value(c.y));
      return {c, y};
    }
    template <class X, class Out>
    GRADIX_ALWAYS_INLINE constexpr void bwd(frame<X> const& f, X a, Out& out) const {
      deliver<Ends>(a, out);
      if constexpr (!sweep_detail::empty_v<C0>) {
        if constexpr (K == ad::partial_kind::minus_one) c_.bwd(f.c, X(-a), out);
        else if constexpr (K == ad::partial_kind::plus_one) c_.bwd(f.c, a, out);
        else c_.bwd(f.c, X(a * sweep_detail::unary_partial<Op>(f.c.y, f.y)), out);
      }
    }
  };
  template <int Ax>
  GRADIX_HOST_DEVICE constexpr auto outer(coord<rank> const& c) const {
    auto ci = a_.template outer<Ax>(c);
    return inner<decltype(ci)>{ci};
  }
};

template <class Op, class L, class R, std::size_t Dep, class PL, class Ix>
struct sweep_node<binary_node<Op, L, R>, Dep, PL, Ix> {
  using N = binary_node<Op, L, R>;
  using T = value_type_t<N>;
  using SL = shape_of_t<L>;
  using SR = shape_of_t<R>;
  static constexpr std::size_t rank = shape_of_t<N>::rank;
  using Ends = sweep_detail::select_t<PL, Dep, -1, Ix>;
  using C0 = sweep_detail::select_t<PL, Dep, 0, Ix>;
  using C1 = sweep_detail::select_t<PL, Dep, 1, Ix>;
  using left = sweep_child_t<L, Dep + 1, PL, C0>;
  using right = sweep_child_t<R, Dep + 1, PL, C1>;
  left l_;
  right r_;
  GRADIX_HOST_DEVICE constexpr explicit sweep_node(N const& n) : l_(n.lhs_), r_(n.rhs_) {}
  template <std::size_t Side, class X>
  GRADIX_ALWAYS_INLINE static constexpr X partial(X a, X l, X r, X y) {
    constexpr ad::partial_kind K = ad::partial_of_v<N, Side>;
    if constexpr (K == ad::partial_kind::plus_one) return a;
    else if constexpr (K == ad::partial_kind::minus_one) return X(-a);
    else if constexpr (std::is_same_v<Op, op::mul>) return X(a * (Side == 0 ? r : l));
    else return X(a * sweep_detail::binary_partial<Op, Side>(l, r, y));
  }
  template <class LI, class RI>
  struct inner {
    LI l_;
    RI r_;
    template <class X>
    struct frame {
      typename LI::template frame<X> l;
      typename RI::template frame<X> r;
      X y;
    };
    template <class X>
    GRADIX_ALWAYS_INLINE constexpr frame<X> fwd(index_t i) const {
      auto l = l_.template fwd<X>(i);
      auto r = r_.template fwd<X>(i);
      X y = X(Op::value(l.y, r.y));
      return {l, r, y};
    }
    template <class X, class Out>
    GRADIX_ALWAYS_INLINE constexpr void bwd(frame<X> const& f, X a, Out& out) const {
      deliver<Ends>(a, out);
      if constexpr (!sweep_detail::empty_v<C0>) l_.bwd(f.l, partial<0>(a, f.l.y, f.r.y, f.y), out);
      if constexpr (!sweep_detail::empty_v<C1>) r_.bwd(f.r, partial<1>(a, f.l.y, f.r.y, f.y), out);
    }
  };
  template <int Ax>
  GRADIX_HOST_DEVICE constexpr auto outer(coord<rank> const& c) const {
    auto li = l_.template outer<operand_axis_v<SL, rank, Ax>>(operand_coord<SL>(c));
    auto ri = r_.template outer<operand_axis_v<SR, rank, Ax>>(operand_coord<SR>(c));
    return inner<decltype(li), decltype(ri)>{li, ri};
  }
};

/// The sweep of region Top for the paths of PL (member k: path k).
template <class Top, class PL>
using sweep = sweep_node<Top, 0, PL, std::make_index_sequence<PL::size>>;

}  // namespace gradix::ev
