#pragma once
/// \file
/// Evaluators of take_along and one_hot (expr/take.hpp).

#include "gradix/config.hpp"
#include "gradix/eval/evaluator.hpp"
#include "gradix/eval/inner.hpp"
#include "gradix/expr/take.hpp"

namespace gradix::ev {

template <class Arg, class Pos, std::size_t Axis>
struct evaluator<take_along_node<Arg, Pos, Axis>> {
  using node_type = take_along_node<Arg, Pos, Axis>;
  using value_type = typename node_type::value_type;
  static constexpr std::size_t rank = node_type::shape_type::rank;
  evaluator<Arg> arg_;
  evaluator<Pos> pos_;
  GRADIX_HOST_DEVICE constexpr explicit evaluator(node_type const& n) : arg_(n.arg_), pos_(n.pos_) {}
  GRADIX_HOST_DEVICE constexpr value_type operator()(coord<rank> const& c) const {
    coord<rank> a = c;
    a[Axis] = index_t(pos_(c));
    return arg_(a);
  }
  template <int A>
  GRADIX_HOST_DEVICE constexpr auto outer(coord<rank> const& c) const {
    if constexpr (A == invariant_axis) return const_inner<value_type>{(*this)(c)};
    else return generic_inner<evaluator, rank, A>{this, c};
  }
};

template <class T, class Pos, class S>
struct evaluator<one_hot_node<T, Pos, S>> {
  using node_type = one_hot_node<T, Pos, S>;
  using value_type = T;
  static constexpr std::size_t rank = S::rank;
  evaluator<Pos> pos_;
  GRADIX_HOST_DEVICE constexpr explicit evaluator(node_type const& n) : pos_(n.pos_) {}
  GRADIX_HOST_DEVICE constexpr value_type operator()(coord<rank> const& c) const {
    coord<rank - 1> p{};
    for (std::size_t j = 0; j + 1 < rank; ++j) p[j] = c[j];
    auto const v = pos_(p);
    if constexpr (std::is_signed_v<decltype(v)>) return index_t(v) == c[rank - 1] ? T(1) : T(0);
    else return v == std::make_unsigned_t<index_t>(c[rank - 1]) ? T(1) : T(0);
  }
  template <int A>
  GRADIX_HOST_DEVICE constexpr auto outer(coord<rank> const& c) const {
    if constexpr (A == invariant_axis) return const_inner<value_type>{(*this)(c)};
    else return generic_inner<evaluator, rank, A>{this, c};
  }
};

}  // namespace gradix::ev
