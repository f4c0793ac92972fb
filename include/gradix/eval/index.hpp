#pragma once
/// \file
/// Evaluators of index and view nodes: each maps an output coordinate to an operand
/// coordinate. `outer` hoists the mapping (and index lookups) out of the inner loop; along
/// the indexed axis itself it falls back to per-element lookups.

#include "gradix/config.hpp"
#include "gradix/core/reshape.hpp"
#include "gradix/eval/elementwise.hpp"
#include "gradix/eval/evaluator.hpp"
#include "gradix/eval/inner.hpp"
#include "gradix/expr/index.hpp"
#include "gradix/expr/view.hpp"

#include <type_traits>

namespace gradix::ev {

template <class Arg, std::size_t Axis, class Idx>
struct evaluator<index_node<Arg, Axis, Idx>> {
  using node_type = index_node<Arg, Axis, Idx>;
  using value_type = typename node_type::value_type;
  static constexpr bool drop = std::is_same_v<Idx, index_select>;
  static constexpr std::size_t rank = node_type::shape_type::rank;
  static constexpr std::size_t in_rank = shape_of_t<Arg>::rank;
  evaluator<Arg> arg_;
  Idx idx_;
  GRADIX_HOST_DEVICE constexpr explicit evaluator(node_type const& n) : arg_(n.arg_), idx_(n.idx_) {}

  GRADIX_HOST_DEVICE constexpr coord<in_rank> map(coord<rank> const& c) const {
    coord<in_rank> a{};
    for (std::size_t j = 0, k = 0; j < in_rank; ++j) {
      if (j == Axis) {
        a[j] = idx_(drop ? 0 : c[k]);
        if (!drop) ++k;
      } else {
        a[j] = c[k++];
      }
    }
    return a;
  }
  /// Operand axis that output axis A reads.
  static constexpr int arg_axis(int A) {
    if (A == invariant_axis) return invariant_axis;
    if (drop && std::size_t(A) >= Axis) return A + 1;
    return A;
  }
  GRADIX_HOST_DEVICE constexpr value_type operator()(coord<rank> const& c) const { return arg_(map(c)); }
  template <int A>
  GRADIX_HOST_DEVICE constexpr auto outer(coord<rank> const& c) const {
    if constexpr (!drop && A != invariant_axis && std::size_t(A) == Axis) {
      if constexpr (std::is_same_v<Idx, index_at>) return arg_.template outer<invariant_axis>(map(c));
      else return generic_inner<evaluator, rank, A>{this, c};
    } else {
      return arg_.template outer<arg_axis(A)>(map(c));
    }
  }
};

template <class Arg, std::size_t... P>
struct evaluator<permute_node<Arg, P...>> {
  using node_type = permute_node<Arg, P...>;
  using value_type = typename node_type::value_type;
  static constexpr std::size_t rank = sizeof...(P);
  static constexpr array<std::size_t, rank> perm{{P...}};
  evaluator<Arg> arg_;
  GRADIX_HOST_DEVICE constexpr explicit evaluator(node_type const& n) : arg_(n.arg_) {}
  GRADIX_HOST_DEVICE constexpr coord<rank> map(coord<rank> const& c) const {
    coord<rank> a{};
    [&]<std::size_t... K>(std::index_sequence<K...>) { ((a[P] = c[K]), ...); }(
        std::make_index_sequence<rank>{});
    return a;
  }
  GRADIX_HOST_DEVICE constexpr value_type operator()(coord<rank> const& c) const { return arg_(map(c)); }
  template <int A>
  GRADIX_HOST_DEVICE constexpr auto outer(coord<rank> const& c) const {
    if constexpr (A == invariant_axis) return arg_.template outer<invariant_axis>(map(c));
    else return arg_.template outer<int(perm[std::size_t(A)])>(map(c));
  }
};

template <class Arg, std::size_t Axis>
struct evaluator<unsqueeze_node<Arg, Axis>> {
  using node_type = unsqueeze_node<Arg, Axis>;
  using value_type = typename node_type::value_type;
  static constexpr std::size_t rank = shape_of_t<Arg>::rank + 1;
  evaluator<Arg> arg_;
  GRADIX_HOST_DEVICE constexpr explicit evaluator(node_type const& n) : arg_(n.arg_) {}
  GRADIX_HOST_DEVICE constexpr coord<rank - 1> map(coord<rank> const& c) const {
    coord<rank - 1> a{};
    for (std::size_t j = 0, k = 0; j < rank; ++j)
      if (j != Axis) a[k++] = c[j];
    return a;
  }
  GRADIX_HOST_DEVICE constexpr value_type operator()(coord<rank> const& c) const { return arg_(map(c)); }
  template <int A>
  GRADIX_HOST_DEVICE constexpr auto outer(coord<rank> const& c) const {
    if constexpr (A == invariant_axis || std::size_t(A) == Axis)
      return arg_.template outer<invariant_axis>(map(c));
    else
      return arg_.template outer<(std::size_t(A) > Axis ? A - 1 : A)>(map(c));
  }
};

template <class Arg, class Shape>
struct evaluator<reshape_node<Arg, Shape>> {
  using node_type = reshape_node<Arg, Shape>;
  using value_type = typename node_type::value_type;
  static constexpr std::size_t rank = Shape::rank;
  static constexpr std::size_t in_rank = shape_of_t<Arg>::rank;
  evaluator<Arg> arg_;
  reshape_plan<rank, in_rank> plan_;
  bool last_contiguous_;
  GRADIX_HOST_DEVICE constexpr explicit evaluator(node_type const& n)
      : arg_(n.arg_), plan_(n.shape_.extents(), n.arg_.shape().extents()),
        last_contiguous_(plan_.last_axis_contiguous()) {}
  GRADIX_HOST_DEVICE constexpr coord<in_rank> map(coord<rank> const& c) const { return plan_(c); }
  GRADIX_HOST_DEVICE constexpr value_type operator()(coord<rank> const& c) const { return arg_(map(c)); }
  template <int A>
  GRADIX_HOST_DEVICE constexpr auto outer(coord<rank> const& c) const {
    if constexpr (A == invariant_axis) {
      return const_inner<value_type>{(*this)(c)};
    } else if constexpr (std::size_t(A) + 1 == rank && in_rank > 0) {
      // along the last axis, a row of the output is a piece of one row of the operand when
      // the extents allow (a split or merge that keeps the last axis whole): the operand's
      // own inner evaluator there, else one remap per element
      using IA = decltype(arg_.template outer<int(in_rank) - 1>(map(c)));
      using IG = generic_inner<evaluator, rank, A>;
      if (last_contiguous_) return either_inner<IA, IG>{arg_.template outer<int(in_rank) - 1>(map(c)), IG{}, true};
      return either_inner<IA, IG>{IA{}, IG{this, c}, false};
    } else {
      return generic_inner<evaluator, rank, A>{this, c};
    }
  }
};

template <class Arg, class Shape>
struct evaluator<broadcast_node<Arg, Shape>> {
  using node_type = broadcast_node<Arg, Shape>;
  using value_type = typename node_type::value_type;
  using SA = shape_of_t<Arg>;
  static constexpr std::size_t rank = Shape::rank;
  evaluator<Arg> arg_;
  GRADIX_HOST_DEVICE constexpr explicit evaluator(node_type const& n) : arg_(n.arg_) {}
  GRADIX_HOST_DEVICE constexpr value_type operator()(coord<rank> const& c) const {
    return arg_(operand_coord<SA>(c));
  }
  template <int A>
  GRADIX_HOST_DEVICE constexpr auto outer(coord<rank> const& c) const {
    return arg_.template outer<operand_axis_v<SA, rank, A>>(operand_coord<SA>(c));
  }
};

}  // namespace gradix::ev
