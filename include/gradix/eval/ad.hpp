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

/// Per-lane fallback shared by derivative inners (derivatives use scalar comparisons).
template <class Self, class T>
struct lanewise_pack {
#if defined(GRADIX_HAS_VECTOR_EXT)
  template <int W>
  GRADIX_ALWAYS_INLINE simd::pack<T, W> pack(index_t i) const {
    simd::pack<T, W> r{};
    for (int w = 0; w < W; ++w) r[w] = static_cast<Self const*>(this)->elem(i + w);
    return r;
  }
#endif
};

template <class Op>
inline constexpr bool pack_derivative_v = [] {
  if constexpr (requires { Op::pack_derivative; }) return bool(Op::pack_derivative);
  else return false;
}();

template <class Op, class T, class A>
struct unary_deriv_inner : lanewise_pack<unary_deriv_inner<Op, T, A>, T> {
  using value_type = T;
  A a_;
  GRADIX_HOST_DEVICE constexpr T elem(index_t i) const {
    T x = a_.elem(i);
    return Op::d_arg(x, Op::value(x));
  }
#if defined(GRADIX_HAS_VECTOR_EXT)
  template <int W>
  GRADIX_ALWAYS_INLINE simd::pack<T, W> pack(index_t i) const {
    if constexpr (pack_derivative_v<Op>) {
      auto x = pack_as<T, W>(a_, i);
      return Op::d_arg(x, Op::value(x));
    } else {
      return lanewise_pack<unary_deriv_inner, T>::template pack<W>(i);
    }
  }
#endif
};

template <class Op, class Arg>
struct evaluator<ad::unary_deriv_node<Op, Arg>> {
  using node_type = ad::unary_deriv_node<Op, Arg>;
  using value_type = typename node_type::value_type;
  static constexpr std::size_t rank = shape_of_t<Arg>::rank;
  evaluator<Arg> arg_;
  GRADIX_HOST_DEVICE constexpr explicit evaluator(node_type const& n) : arg_(n.arg_) {}
  GRADIX_HOST_DEVICE constexpr value_type operator()(coord<rank> const& c) const {
    value_type x = arg_(c);
    return Op::d_arg(x, Op::value(x));
  }
  template <int A>
  GRADIX_HOST_DEVICE constexpr auto outer(coord<rank> const& c) const {
    auto in = arg_.template outer<A>(c);
    return unary_deriv_inner<Op, value_type, decltype(in)>{{}, in};
  }
};

template <class Op, class T, int Side, class A, class B>
struct binary_deriv_inner : lanewise_pack<binary_deriv_inner<Op, T, Side, A, B>, T> {
  using value_type = T;
  A a_;
  B b_;
  GRADIX_HOST_DEVICE constexpr T elem(index_t i) const {
    T x = T(a_.elem(i)), y = T(b_.elem(i));
    T z = Op::value(x, y);
    if constexpr (Side == 0) return Op::d_lhs(x, y, z);
    else return Op::d_rhs(x, y, z);
  }
};

template <class Op, class Lhs, class Rhs, int Side>
struct evaluator<ad::binary_deriv_node<Op, Lhs, Rhs, Side>> {
  using node_type = ad::binary_deriv_node<Op, Lhs, Rhs, Side>;
  using value_type = typename node_type::value_type;
  using inner_eval = evaluator<binary_node<Op, Lhs, Rhs>>;
  static constexpr std::size_t rank = inner_eval::rank;
  inner_eval e_;
  GRADIX_HOST_DEVICE constexpr explicit evaluator(node_type const& n) : e_(n.node_) {}
  GRADIX_HOST_DEVICE constexpr value_type operator()(coord<rank> const& c) const {
    value_type x = value_type(e_.lhs_(operand_coord<typename inner_eval::SL>(c)));
    value_type y = value_type(e_.rhs_(operand_coord<typename inner_eval::SR>(c)));
    value_type z = Op::value(x, y);
    if constexpr (Side == 0) return Op::d_lhs(x, y, z);
    else return Op::d_rhs(x, y, z);
  }
  template <int A>
  GRADIX_HOST_DEVICE constexpr auto outer(coord<rank> const& c) const {
    using SL = typename inner_eval::SL;
    using SR = typename inner_eval::SR;
    auto a = e_.lhs_.template outer<operand_axis_v<SL, rank, A>>(operand_coord<SL>(c));
    auto b = e_.rhs_.template outer<operand_axis_v<SR, rank, A>>(operand_coord<SR>(c));
    return binary_deriv_inner<Op, value_type, Side, decltype(a), decltype(b)>{{}, a, b};
  }
};

}  // namespace gradix::ev
