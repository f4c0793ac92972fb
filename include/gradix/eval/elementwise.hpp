#pragma once
/// \file
/// Evaluators of unary and binary nodes: they compose their operands' evaluators, so a whole
/// elementwise/broadcast expression is computed per element in registers (no temporaries).

#include "gradix/config.hpp"
#include "gradix/eval/evaluator.hpp"
#include "gradix/eval/inner.hpp"
#include "gradix/expr/elementwise.hpp"

#include <type_traits>

namespace gradix::ev {

/// Nodes an inner evaluator computes inline per element (leaves count 1; an inner type may
/// say its own, `static constexpr std::size_t cost`).
template <class I, class = void>
struct inner_cost : std::integral_constant<std::size_t, 1> {};
template <class I>
struct inner_cost<I, std::void_t<decltype(I::cost)>> : std::integral_constant<std::size_t, I::cost> {};

/// Deep element expressions are cut into out-of-line pieces of about this many nodes: a node
/// whose cost enters a new multiple of it (its operands' did not) evaluates in a function of
/// its own (host code only; the same operations, so the same bits). A depth-64 tanh chain was
/// one function of 64 inlined levels per loop, and g++'s time for it grew faster than its
/// size (value of the chain at -O2: 5.2 s at depth 32, 11.4 s at depth 64).
inline constexpr std::size_t outline_nodes = 48;
template <std::size_t Self, std::size_t Child>
inline constexpr bool outline_v = Self >= outline_nodes && Self / outline_nodes != Child / outline_nodes;

template <class Op, class T, class A>
struct unary_inner {
  using value_type = T;
  A a_;
  static constexpr std::size_t cost = 1 + inner_cost<A>::value;
  static constexpr bool outlined = outline_v<cost, inner_cost<A>::value>;
  // (the body is written out in elem and elem_out, not shared through a third function: a
  // call per node and element more made clang's constant evaluation of a gradcheck exceed
  // its step limit)
#if !defined(__CUDA_ARCH__)
  [[gnu::noinline]] constexpr T elem_out(index_t i) const { return Op::value(a_.elem(i)); }
#endif
  GRADIX_HOST_DEVICE constexpr T elem(index_t i) const {
#if !defined(__CUDA_ARCH__)
    if constexpr (outlined) {
      if (!std::is_constant_evaluated()) return elem_out(i);
    }
#endif
    return Op::value(a_.elem(i));
  }
#if defined(GRADIX_HAS_VECTOR_EXT)
  template <int W>
  GRADIX_ALWAYS_INLINE simd::pack<T, W> pack_here(index_t i) const {
    if constexpr (requires { typename Op::result_type; }) return pack_as<T, W>(a_, i);  // op::cast
    else return Op::value(a_.template pack<W>(i));
  }
  template <int W>
  [[gnu::noinline]] simd::pack<T, W> pack_out(index_t i) const { return pack_here<W>(i); }
  template <int W>
  GRADIX_ALWAYS_INLINE simd::pack<T, W> pack(index_t i) const {
    if constexpr (outlined) return pack_out<W>(i);
    else return pack_here<W>(i);
  }
#endif
};

template <class Op, class T, class A, class B>
struct binary_inner {
  using value_type = T;
  A a_;
  B b_;
  static constexpr std::size_t cost = 1 + inner_cost<A>::value + inner_cost<B>::value;
  static constexpr bool outlined =
      outline_v<cost, (inner_cost<A>::value > inner_cost<B>::value ? inner_cost<A>::value : inner_cost<B>::value)>;
#if !defined(__CUDA_ARCH__)
  [[gnu::noinline]] constexpr T elem_out(index_t i) const {
    return Op::value(T(a_.elem(i)), T(b_.elem(i)));
  }
#endif
  GRADIX_HOST_DEVICE constexpr T elem(index_t i) const {
#if !defined(__CUDA_ARCH__)
    if constexpr (outlined) {
      if (!std::is_constant_evaluated()) return elem_out(i);
    }
#endif
    return Op::value(T(a_.elem(i)), T(b_.elem(i)));
  }
#if defined(GRADIX_HAS_VECTOR_EXT)
  template <int W>
  GRADIX_ALWAYS_INLINE simd::pack<T, W> pack_here(index_t i) const {
    return Op::value(pack_as<T, W>(a_, i), pack_as<T, W>(b_, i));
  }
  template <int W>
  [[gnu::noinline]] simd::pack<T, W> pack_out(index_t i) const { return pack_here<W>(i); }
  template <int W>
  GRADIX_ALWAYS_INLINE simd::pack<T, W> pack(index_t i) const {
    if constexpr (outlined) return pack_out<W>(i);
    else return pack_here<W>(i);
  }
#endif
};

template <class Op, class Arg>
struct evaluator<unary_node<Op, Arg>> {
  using value_type = typename unary_node<Op, Arg>::value_type;
  static constexpr std::size_t rank = shape_of_t<Arg>::rank;
  evaluator<Arg> arg_;
  GRADIX_HOST_DEVICE constexpr explicit evaluator(unary_node<Op, Arg> const& n) : arg_(n.arg_) {}
  GRADIX_HOST_DEVICE constexpr value_type operator()(coord<rank> const& c) const {
    return Op::value(arg_(c));
  }
  template <int Axis>
  GRADIX_HOST_DEVICE constexpr auto outer(coord<rank> const& c) const {
    using A = decltype(arg_.template outer<Axis>(c));
    return unary_inner<Op, value_type, A>{arg_.template outer<Axis>(c)};
  }
};

/// Maps a result coordinate to an operand coordinate: drop the leading axes the operand
/// lacks, read coordinate 0 on its axes of static extent 1.
template <class S, std::size_t R>
GRADIX_HOST_DEVICE constexpr coord<S::rank> operand_coord(coord<R> const& c) {
  constexpr std::size_t off = R - S::rank;
  coord<S::rank> a{};
  [&]<std::size_t... J>(std::index_sequence<J...>) {
    ((a[J] = extent_v<S, J> == 1 ? 0 : c[J + off]), ...);
  }(std::make_index_sequence<S::rank>{});
  return a;
}
/// The operand axis the loop axis Axis reaches, or invariant_axis.
template <class S, std::size_t R, int Axis>
inline constexpr int operand_axis_v =
    (Axis == invariant_axis || std::size_t(Axis) < R - S::rank ||
     S::static_extents[std::size_t(Axis) - (R - S::rank)] == 1)
        ? invariant_axis
        : int(std::size_t(Axis) - (R - S::rank));

template <class Op, class Lhs, class Rhs>
struct evaluator<binary_node<Op, Lhs, Rhs>> {
  using node_type = binary_node<Op, Lhs, Rhs>;
  using value_type = typename node_type::value_type;
  static constexpr std::size_t rank = node_type::shape_type::rank;
  using SL = shape_of_t<Lhs>;
  using SR = shape_of_t<Rhs>;
  evaluator<Lhs> lhs_;
  evaluator<Rhs> rhs_;
  GRADIX_HOST_DEVICE constexpr explicit evaluator(node_type const& n) : lhs_(n.lhs_), rhs_(n.rhs_) {}
  GRADIX_HOST_DEVICE constexpr value_type operator()(coord<rank> const& c) const {
    return Op::value(value_type(lhs_(operand_coord<SL>(c))),
                     value_type(rhs_(operand_coord<SR>(c))));
  }
  template <int Axis>
  GRADIX_HOST_DEVICE constexpr auto outer(coord<rank> const& c) const {
    auto a = lhs_.template outer<operand_axis_v<SL, rank, Axis>>(operand_coord<SL>(c));
    auto b = rhs_.template outer<operand_axis_v<SR, rank, Axis>>(operand_coord<SR>(c));
    return binary_inner<Op, value_type, decltype(a), decltype(b)>{a, b};
  }
};

}  // namespace gradix::ev
