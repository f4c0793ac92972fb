#pragma once
/// \file
/// Evaluators of AD value expressions (ad/value.hpp) and of parameter and detach leaves.

#include "gradix/ad/value.hpp"
#include "gradix/config.hpp"
#include "gradix/core/simd.hpp"
#include "gradix/eval/elementwise.hpp"
#include "gradix/eval/evaluator.hpp"
#include "gradix/eval/inner.hpp"
#include "gradix/eval/map.hpp"
#include "gradix/expr/param.hpp"

#include <type_traits>

namespace gradix::ev {

template <class View, class G>
struct evaluator<param_node<View, G>> : evaluator<View> {
  GRADIX_HOST_DEVICE constexpr explicit evaluator(param_node<View, G> const& n)
      : evaluator<View>(n.view_) {}
};
template <class Arg>
struct evaluator<detach_node<Arg>> : evaluator<Arg> {
  GRADIX_HOST_DEVICE constexpr explicit evaluator(detach_node<Arg> const& n)
      : evaluator<Arg>(n.arg_) {}
};

template <class T, class D>
struct evaluator<ad::one_node<T, D>> {
  using value_type = T;
  GRADIX_HOST_DEVICE constexpr explicit evaluator(ad::one_node<T, D> const&) {}
  GRADIX_HOST_DEVICE constexpr T operator()(coord<D::rank> const&) const { return T(1); }
  template <int A>
  GRADIX_HOST_DEVICE constexpr const_inner<T> outer(coord<D::rank> const&) const {
    return {T(1)};
  }
};

/// Inner evaluator walking an operand axis with a run-time step.
template <class Inner>
struct scaled_inner {
  using value_type = typename Inner::value_type;
  Inner in_;
  index_t scale_;
  // (the product in unsigned arithmetic: it cannot overflow for a valid i, and g++ then
  // does not warn that a scalar loop over i might reach an overflowing iteration)
  GRADIX_HOST_DEVICE constexpr value_type elem(index_t i) const {
    return in_.elem(index_t(std::size_t(i) * std::size_t(scale_)));
  }
#if defined(GRADIX_HAS_VECTOR_EXT)
  template <int W>
  GRADIX_ALWAYS_INLINE simd::pack<value_type, W> pack(index_t i) const {
    if (scale_ == 1) return in_.template pack<W>(i);
    simd::pack<value_type, W> r{};
    for (int w = 0; w < W; ++w) r[w] = elem(i + w);
    return r;
  }
#endif
};

template <class Sub, class Map, class D>
struct evaluator<ad::at_map_node<Sub, Map, D>> {
  using node_type = ad::at_map_node<Sub, Map, D>;
  using value_type = typename node_type::value_type;
  static constexpr std::size_t rank = D::rank;
  evaluator<Sub> sub_;
  Map map_;
  GRADIX_HOST_DEVICE constexpr explicit evaluator(node_type const& n) : sub_(n.sub_), map_(n.map_) {}
  GRADIX_HOST_DEVICE constexpr value_type operator()(coord<rank> const& d) const {
    return sub_(map_value(map_, d));
  }
  template <int A>
  GRADIX_HOST_DEVICE constexpr auto outer(coord<rank> const& d) const {
    if constexpr (A == invariant_axis || ad::count_deps<Map, std::size_t(A < 0 ? 0 : A)>::value == 0) {
      return const_inner<value_type>{sub_(map_value(map_, d))};
    } else if constexpr (ad::count_deps<Map, std::size_t(A)>::value == 1 &&
                         ad::dom_component<Map, std::size_t(A)>::value >= 0) {
      constexpr int K = ad::dom_component<Map, std::size_t(A)>::value;
      auto in = sub_.template outer<K>(map_value(map_, d));
      return scaled_inner<decltype(in)>{in, get<std::size_t(K)>(map_).scale_};
    } else {
      return generic_inner<evaluator, rank, A>{this, d};
    }
  }
};

template <class V, class D>
struct evaluator<ad::extend_node<V, D>> {
  using node_type = ad::extend_node<V, D>;
  using value_type = typename node_type::value_type;
  static constexpr std::size_t rank = D::rank;
  static constexpr std::size_t in_rank = shape_of_t<V>::rank;
  evaluator<V> v_;
  GRADIX_HOST_DEVICE constexpr explicit evaluator(node_type const& n) : v_(n.v_) {}
  GRADIX_HOST_DEVICE constexpr coord<in_rank> head(coord<rank> const& d) const {
    coord<in_rank> c{};
    for (std::size_t j = 0; j < in_rank; ++j) c[j] = d[j];
    return c;
  }
  GRADIX_HOST_DEVICE constexpr value_type operator()(coord<rank> const& d) const { return v_(head(d)); }
  template <int A>
  GRADIX_HOST_DEVICE constexpr auto outer(coord<rank> const& d) const {
    if constexpr (A == invariant_axis || std::size_t(A) >= in_rank)
      return v_.template outer<invariant_axis>(head(d));
    else
      return v_.template outer<A>(head(d));
  }
};

// ---------------------------------------------------------------------------------------
// Path derivatives: d Top / d X along a path through unary and binary nodes (ad/value.hpp).
// path_ev<N, Path, NV> evaluates node N's value (when NV: a parent needs it) and its
// derivative with respect to the node at the end of Path, bottom-up, in one pass. The same
// step functions run on scalars and on host SIMD packs.

/// A value and a derivative (scalars or packs).
template <class X>
struct vd {
  X v;
  X d;
};

namespace path_detail {
/// Length of a path, and its step at depth D.
template <class P>
struct path_info;
template <std::size_t... S>
struct path_info<ad::path<S...>> {
  static constexpr std::size_t size = sizeof...(S);
  static constexpr std::size_t steps[sizeof...(S) + 1] = {S..., 0};
};
}  // namespace path_detail

// path_ev<N, P, D, NV>: node N at depth D of path P (from the region's top). Every level
// names the whole path and its depth, not the rest of the path: the rest is a new type at
// every level, and a depth-k chain had O(k) levels whose symbol names each spelled out
// O(k) steps (names of 80 KB at depth 64, and compile time growing with their total).
template <class N, class P, std::size_t D, bool NV,
          bool End = (D == path_detail::path_info<P>::size)>
struct path_ev;

/// End of the path: the node's own value (if needed); its derivative with respect to itself
/// is 1.
template <class N, class P, std::size_t D, bool NV>
struct path_ev<N, P, D, NV, true> {
  using T = value_type_t<N>;
  static constexpr std::size_t rank = shape_of_t<N>::rank;
  evaluator<N> e_;
  GRADIX_HOST_DEVICE constexpr explicit path_ev(N const& n) : e_(n) {}
  GRADIX_HOST_DEVICE constexpr vd<T> at(coord<rank> const& c) const {
    if constexpr (NV) return {T(e_(c)), T(1)};
    else return {T(0), T(1)};
  }
  template <class In>
  struct inner {
    using value_type = T;
    In in_;
    GRADIX_HOST_DEVICE constexpr vd<T> elem(index_t i) const {
      if constexpr (NV) return {T(in_.elem(i)), T(1)};
      else return {T(0), T(1)};
    }
#if defined(GRADIX_HAS_VECTOR_EXT)
    template <int W>
    GRADIX_ALWAYS_INLINE vd<simd::pack<T, W>> pack(index_t i) const {
      using PT = simd::pack<T, W>;
      if constexpr (NV) return {pack_as<T, W>(in_, i), simd::constant<PT>(1)};
      else return {PT{}, simd::constant<PT>(1)};
    }
#endif
  };
  template <int A>
  GRADIX_HOST_DEVICE constexpr auto outer(coord<rank> const& c) const {
    if constexpr (NV) {
      auto in = e_.template outer<A>(c);
      return inner<decltype(in)>{in};
    } else {
      return inner<const_inner<T>>{{T(0)}};
    }
  }
};

template <class Op>
inline constexpr bool pack_derivative_v = [] {
  if constexpr (requires { Op::pack_derivative; }) return bool(Op::pack_derivative);
  else return false;
}();

namespace path_detail {
#if defined(GRADIX_HAS_VECTOR_EXT)
/// A pack of (value, derivative) built lane by lane from an inner's elem() (operands of
/// another element type).
template <class T, int W, class Inner>
GRADIX_ALWAYS_INLINE vd<simd::pack<T, W>> lanes_of(Inner const& in, index_t i) {
  vd<simd::pack<T, W>> r{};
  for (int w = 0; w < W; ++w) {
    auto e = in.elem(i + w);
    r.v[w] = e.v;
    r.d[w] = e.d;
  }
  return r;
}
#endif
/// One step of a path at a unary node: (x, dx) of the operand -> (y, dy).
template <class Op, ad::partial_kind K, bool NV, class X>
GRADIX_HOST_DEVICE GRADIX_ALWAYS_INLINE constexpr vd<X> unary_step(vd<X> x) {
  if constexpr (K == ad::partial_kind::minus_one) {
    return {NV ? X(-x.v) : X{}, X(-x.d)};
  } else if constexpr (K == ad::partial_kind::plus_one) {  // a cast to a floating type
    return {NV ? X(x.v) : X{}, x.d};
  } else {
    X y = Op::value(x.v);
    if constexpr (simd::vector_ext<X> && !pack_derivative_v<Op>) {
      X p{};
      constexpr int W = int(sizeof(X) / sizeof(p[0]));
      for (int w = 0; w < W; ++w) p[w] = Op::d_arg(x.v[w], y[w]);
      return {y, p * x.d};
    } else {
      return {y, X(Op::d_arg(x.v, y) * x.d)};
    }
  }
}
/// One step at a binary node, the path taking operand Side: (a, da) of that operand, b the
/// other operand's value -> (y, dy).
template <class Op, ad::partial_kind K, std::size_t Side, bool NV, class X>
GRADIX_HOST_DEVICE GRADIX_ALWAYS_INLINE constexpr vd<X> binary_step(vd<X> a, X b) {
  X const& l = Side == 0 ? a.v : b;
  X const& r = Side == 0 ? b : a.v;
  X y = (NV || K == ad::partial_kind::general) ? X(Op::value(l, r)) : X{};
  if constexpr (K == ad::partial_kind::plus_one) {
    return {y, a.d};
  } else if constexpr (K == ad::partial_kind::minus_one) {
    return {y, X(-a.d)};
  } else if constexpr (std::is_same_v<Op, op::mul>) {
    return {y, X(b * a.d)};
  } else if constexpr (simd::vector_ext<X>) {
    X p{};
    constexpr int W = int(sizeof(X) / sizeof(p[0]));
    for (int w = 0; w < W; ++w) {
      if constexpr (Side == 0) p[w] = Op::d_lhs(l[w], r[w], y[w]);
      else p[w] = Op::d_rhs(l[w], r[w], y[w]);
    }
    return {y, p * a.d};
  } else {
    if constexpr (Side == 0) return {y, X(Op::d_lhs(l, r, y) * a.d)};
    else return {y, X(Op::d_rhs(l, r, y) * a.d)};
  }
}
}  // namespace path_detail

template <class Op, class A, class Path, std::size_t D, bool NV>
struct path_ev<unary_node<Op, A>, Path, D, NV, false> {
  using N = unary_node<Op, A>;
  using T = value_type_t<N>;
  using TA = value_type_t<A>;
  static constexpr std::size_t rank = shape_of_t<N>::rank;
  static_assert(path_detail::path_info<Path>::steps[D] == 0,
                "gradix internal: a path takes operand 1 of a unary node");
  static constexpr ad::partial_kind K = ad::partial_of_v<N, 0>;
  using child = path_ev<A, Path, D + 1, NV || K == ad::partial_kind::general>;
  child a_;
  GRADIX_HOST_DEVICE constexpr explicit path_ev(N const& n) : a_(n.arg_) {}
  GRADIX_HOST_DEVICE constexpr vd<T> at(coord<rank> const& c) const {
    auto x = a_.at(c);
    return path_detail::unary_step<Op, K, NV, T>({T(x.v), T(x.d)});
  }
  template <class CI>
  struct inner {
    using value_type = T;
    CI c_;
    static constexpr std::size_t cost = 1 + inner_cost<CI>::value;
    static constexpr bool outlined = outline_v<cost, inner_cost<CI>::value>;  // elementwise.hpp
    // (the body written out twice, as in elementwise.hpp: no extra call per element in
    // constant evaluation)
#if !defined(__CUDA_ARCH__)
    [[gnu::noinline]] constexpr vd<T> elem_out(index_t i) const {
      auto x = c_.elem(i);
      return path_detail::unary_step<Op, K, NV, T>({T(x.v), T(x.d)});
    }
#endif
    GRADIX_HOST_DEVICE constexpr vd<T> elem(index_t i) const {
#if !defined(__CUDA_ARCH__)
      if constexpr (outlined) {
        if (!std::is_constant_evaluated()) return elem_out(i);
      }
#endif
      auto x = c_.elem(i);
      return path_detail::unary_step<Op, K, NV, T>({T(x.v), T(x.d)});
    }
#if defined(GRADIX_HAS_VECTOR_EXT)
    template <int W>
    GRADIX_ALWAYS_INLINE vd<simd::pack<T, W>> pack_here(index_t i) const {
      if constexpr (std::is_same_v<T, TA>) {
        return path_detail::unary_step<Op, K, NV>(c_.template pack<W>(i));
      } else {  // a cast between element types: lane by lane
        return path_detail::lanes_of<T, W>(*this, i);
      }
    }
    template <int W>
    [[gnu::noinline]] vd<simd::pack<T, W>> pack_out(index_t i) const { return pack_here<W>(i); }
    template <int W>
    GRADIX_ALWAYS_INLINE vd<simd::pack<T, W>> pack(index_t i) const {
      if constexpr (outlined) return pack_out<W>(i);
      else return pack_here<W>(i);
    }
#endif
  };
  template <int Ax>
  GRADIX_HOST_DEVICE constexpr auto outer(coord<rank> const& c) const {
    auto ci = a_.template outer<Ax>(c);
    return inner<decltype(ci)>{ci};
  }
};

template <class Op, class L, class R, class Path, std::size_t D, bool NV>
struct path_ev<binary_node<Op, L, R>, Path, D, NV, false> {
  static constexpr std::size_t S = path_detail::path_info<Path>::steps[D];
  using N = binary_node<Op, L, R>;
  using T = value_type_t<N>;
  using C = std::conditional_t<S == 0, L, R>;  // on the path
  using O = std::conditional_t<S == 0, R, L>;  // the other operand
  using SC = shape_of_t<C>;
  using SO = shape_of_t<O>;
  static constexpr std::size_t rank = shape_of_t<N>::rank;
  static constexpr ad::partial_kind K = ad::partial_of_v<N, S>;
  static constexpr bool other_needed = NV || K == ad::partial_kind::sibling ||
                                       K == ad::partial_kind::general;
  using child = path_ev<C, Path, D + 1, NV || K == ad::partial_kind::general>;
  child c_;
  evaluator<O> o_;
  GRADIX_HOST_DEVICE constexpr explicit path_ev(N const& n)
      : c_(operand_of<S>(n)), o_(operand_of<1 - S>(n)) {}
  template <std::size_t Side>
  GRADIX_HOST_DEVICE static constexpr auto const& operand_of(N const& n) {
    if constexpr (Side == 0) return n.lhs_;
    else return n.rhs_;
  }
  GRADIX_HOST_DEVICE constexpr vd<T> at(coord<rank> const& c) const {
    auto x = c_.at(operand_coord<SC>(c));
    T b = other_needed ? T(o_(operand_coord<SO>(c))) : T(0);
    return path_detail::binary_step<Op, K, S, NV, T>({T(x.v), T(x.d)}, b);
  }
  template <class CI, class OI>
  struct inner {
    using value_type = T;
    CI c_;
    OI o_;
    static constexpr std::size_t cost = 1 + inner_cost<CI>::value + inner_cost<OI>::value;
    static constexpr bool outlined =
        outline_v<cost, (inner_cost<CI>::value > inner_cost<OI>::value ? inner_cost<CI>::value
                                                                       : inner_cost<OI>::value)>;
#if !defined(__CUDA_ARCH__)
    [[gnu::noinline]] constexpr vd<T> elem_out(index_t i) const {
      auto x = c_.elem(i);
      return path_detail::binary_step<Op, K, S, NV, T>({T(x.v), T(x.d)}, T(o_.elem(i)));
    }
#endif
    GRADIX_HOST_DEVICE constexpr vd<T> elem(index_t i) const {
#if !defined(__CUDA_ARCH__)
      if constexpr (outlined) {
        if (!std::is_constant_evaluated()) return elem_out(i);
      }
#endif
      auto x = c_.elem(i);
      return path_detail::binary_step<Op, K, S, NV, T>({T(x.v), T(x.d)}, T(o_.elem(i)));
    }
#if defined(GRADIX_HAS_VECTOR_EXT)
    template <int W>
    GRADIX_ALWAYS_INLINE vd<simd::pack<T, W>> pack_here(index_t i) const {
      if constexpr (std::is_same_v<T, value_type_t<C>>) {
        return path_detail::binary_step<Op, K, S, NV>(c_.template pack<W>(i), pack_as<T, W>(o_, i));
      } else {  // the operand on the path has another element type: lane by lane
        return path_detail::lanes_of<T, W>(*this, i);
      }
    }
    template <int W>
    [[gnu::noinline]] vd<simd::pack<T, W>> pack_out(index_t i) const { return pack_here<W>(i); }
    template <int W>
    GRADIX_ALWAYS_INLINE vd<simd::pack<T, W>> pack(index_t i) const {
      if constexpr (outlined) return pack_out<W>(i);
      else return pack_here<W>(i);
    }
#endif
  };
  template <int Ax>
  GRADIX_HOST_DEVICE constexpr auto outer(coord<rank> const& c) const {
    auto ci = c_.template outer<operand_axis_v<SC, rank, Ax>>(operand_coord<SC>(c));
    if constexpr (other_needed) {
      auto oi = o_.template outer<operand_axis_v<SO, rank, Ax>>(operand_coord<SO>(c));
      return inner<decltype(ci), decltype(oi)>{ci, oi};
    } else {
      return inner<decltype(ci), const_inner<T>>{ci, {T(0)}};
    }
  }
};

template <class Top, class Path>
struct evaluator<ad::path_deriv_node<Top, Path>> {
  using node_type = ad::path_deriv_node<Top, Path>;
  using value_type = typename node_type::value_type;
  static constexpr std::size_t rank = shape_of_t<Top>::rank;
  path_ev<Top, Path, 0, false> p_;
  GRADIX_HOST_DEVICE constexpr explicit evaluator(node_type const& n) : p_(n.top_) {}
  GRADIX_HOST_DEVICE constexpr value_type operator()(coord<rank> const& c) const {
    return p_.at(c).d;
  }
  template <class PI>
  struct inner {
    using value_type = typename node_type::value_type;
    PI p_;
    GRADIX_HOST_DEVICE constexpr value_type elem(index_t i) const { return p_.elem(i).d; }
#if defined(GRADIX_HAS_VECTOR_EXT)
    template <int W>
    GRADIX_ALWAYS_INLINE simd::pack<value_type, W> pack(index_t i) const {
      return p_.template pack<W>(i).d;
    }
#endif
  };
  template <int A>
  GRADIX_HOST_DEVICE constexpr auto outer(coord<rank> const& c) const {
    auto pi = p_.template outer<A>(c);
    return inner<decltype(pi)>{pi};
  }
};

}  // namespace gradix::ev
