#pragma once
/// \file
/// Bags: sums (or means) over consecutive segments of axis 0, and embedding_bag built on
/// them, as PyTorch's nn.functional.embedding_bag with offsets.
///
///   segment_sum(x, offsets[, mode]) out[b, ...] = sum of x[j, ...] for offsets[b] <= j <
///                                   offsets[b + 1] (the last bag ends at x's extent);
///                                   bag_mode::mean divides by the bag's size (an empty
///                                   bag gives 0)
///   embedding_bag(E, indices, offsets, mode[, weights])
///                                   segment_sum(gather<0>(E, indices) [* weights], offsets)
///
/// A segment sum is kept like a reduction (api/saved.hpp). Its backward is one scatter
/// kernel over the gathered rows, for every bag at once: d x[j, ...] = d out[bag(j), ...]
/// (/ its size), with bag(j) found once per call (ad/push.hpp; docs/ad.md, "Bags"). Under
/// embedding_bag that is the gather's scatter-add into the table: only the rows read are
/// touched, in dense or sparse gradient storage.

#include "gradix/config.hpp"
#include "gradix/core/error.hpp"
#include "gradix/core/shape.hpp"
#include "gradix/expr/elementwise.hpp"
#include "gradix/expr/index.hpp"
#include "gradix/expr/node.hpp"
#include "gradix/expr/view.hpp"
#include "gradix/grad/adjoint_buffer.hpp"

#include <type_traits>

namespace gradix {

/// out[b, r] = s_b * sum over j in [off[b], end_b) of arg[j, r], end_b = off[b + 1] (the last
/// bag: arg's extent 0), s_b = 1 (sum) or 1 / (end_b - off[b]) (mean_; an empty bag is 0)
/// shape:    (number of bags, arg's other extents)
/// backward: d_arg[j, r] += s_{bag(j)} * d_out[bag(j), r]
template <class Arg, class I>
struct segment_sum_node {
  using is_gradix_expression = void;
  using value_type = value_type_t<Arg>;
  struct holder {
    static constexpr array<index_t, shape_of_t<Arg>::rank> value = [] {
      array<index_t, shape_of_t<Arg>::rank> r{};
      r[0] = dyn;
      for (std::size_t j = 1; j < shape_of_t<Arg>::rank; ++j) r[j] = shape_of_t<Arg>::static_extents[j];
      return r;
    }();
  };
  using shape_type = detail::shape_from_array_t<holder>;
  using layout_type = row_major;  // (a call computes it row by row)
  using space_type = space_of_t<Arg>;
  Arg arg_;
  index_vec<I> idx_;  // the offsets (named idx_: the leaf walks visit it as index data)
  shape_type shape_;
  bool mean_ = false;
  GRADIX_HOST_DEVICE constexpr shape_type const& shape() const { return shape_; }
  /// Bag b's first position and its end.
  GRADIX_HOST_DEVICE constexpr index_t begin(index_t b) const { return idx_(b); }
  GRADIX_HOST_DEVICE constexpr index_t end(index_t b) const {
    return b + 1 < shape_.extent(0) ? idx_(b + 1) : arg_.shape().extent(0);
  }
  /// Bag b's factor: 1, or one over its size with mean_ (an empty bag's sum is 0 anyway).
  GRADIX_HOST_DEVICE constexpr value_type scale(index_t b) const {
    if (!mean_) return value_type(1);
    index_t const n = end(b) - begin(b);
    return n > 0 ? value_type(1) / value_type(n) : value_type(0);
  }
};

template <class N>
struct is_segment_sum_node : std::false_type {};
template <class A, class I>
struct is_segment_sum_node<segment_sum_node<A, I>> : std::true_type {};

/// What a call keeps of a segment sum beside its value, in a backward call: per position j
/// of axis 0 its bag (bag_of) and the bag's scale (scale: 1, or 1 / size for a mean), and a
/// buffer for the adjoint of the result when it must be materialised (gout).
template <class T, class S>
struct segment_state {
  index_t const* bag_of = nullptr;
  T const* scale = nullptr;
  adjoint_buffer<T, S> gout;
};

enum class bag_mode { sum, mean };

namespace detail {
template <class A, class Off>
constexpr auto make_segment_sum(A const& a, Off const& off, bag_mode mode, char const* op) {
  using I = typename Off::index_type;
  using node = segment_sum_node<A, I>;
  // offsets and operand in one memory: a device operand reads device offsets (checked on the
  // device before a call runs: grid::validate_expression), a host one host offsets (now)
  constexpr bool device_off = is_device_index<Off>::value;
  static_assert(device_off == std::is_same_v<space_of_t<A>, cuda_space>,
                "gradix::embedding_bag / segment_sum: the offsets must be in the operand's memory (device "
                "offsets, a cuda_space view, for a device table; host offsets for a host one)");
  index_t const nb = off.size_, len = a.shape().extent(0);
  for (index_t b = 0; b < (device_off ? 0 : nb); ++b) {
    index_t const o = off(b);
    if (b == 0 && o != 0) fail(op, ": offsets[0] is ", o, "; the first bag must start at 0");
    if (o < 0 || o > len)
      fail(op, ": offsets[", b, "] = ", o, " is out of range for ", len, " positions");
    if (b > 0 && o < off(b - 1))
      fail(op, ": offsets[", b, "] = ", o, " is below offsets[", b - 1, "] = ", off(b - 1),
           " (offsets must not decrease)");
  }
  typename node::shape_type s{};
  s.set_extent(0, nb);
  for (std::size_t j = 1; j < shape_of_t<A>::rank; ++j) s.set_extent(j, a.shape().extent(j));
  return node{a, off, s, mode == bag_mode::mean};
}
}  // namespace detail

/// Sums (bag_mode::mean: means) of consecutive segments of x's axis 0; offsets (a vector,
/// span, rank-1 tensor or view of integers, as gather takes) give each bag's first position:
/// 0 first, never decreasing, at most x's extent (gradix::error naming the offset
/// otherwise). The offsets are read in place, like gather's indices.
template <operand X, class Off>
  requires detail::index_argument<Off>
constexpr auto segment_sum(X&& x, Off const& offsets, bag_mode mode = bag_mode::sum) {
  auto a = detail::as_node(static_cast<X&&>(x));
  using A = decltype(a);
  auto off = detail::index_arg(offsets);
  static_assert(shape_of_t<A>::rank == 1 || shape_of_t<A>::rank == 2,
                "gradix::segment_sum: the operand must have rank 1 or 2 (rows of a matrix, or a vector)");
  static_assert(is_index_vec<decltype(off)>::value,
                "gradix::segment_sum: offsets are a vector of integers (a std::vector, span, rank-1 "
                "tensor or view)");
  static_assert(std::is_floating_point_v<value_type_t<A>>, "gradix::segment_sum: a floating-point operand");
  return detail::make_segment_sum(a, off, mode, "gradix::segment_sum");
}

/// The bags of rows of the table E (V, D) that indices (L integers) pick, as PyTorch's
/// embedding_bag with offsets: bag b holds indices[offsets[b] .. offsets[b + 1]) (the last:
/// up to L), and is their sum, or their mean (bag_mode::mean; 0 for an empty bag). Result
/// (number of bags, D). Indices out of [0, V) and bad offsets throw gradix::error when the
/// expression is built. The backward is one scatter-add into the rows read, for all bags at
/// once (sparse_grad<0> storage holds only the rows read).
template <operand Tb, class Idx, class Off>
  requires detail::index_argument<Idx> && detail::index_argument<Off>
constexpr auto embedding_bag(Tb&& table, Idx const& indices, Off const& offsets, bag_mode mode = bag_mode::sum) {
  auto rows = gather<0>(static_cast<Tb&&>(table), indices);
  static_assert(shape_of_t<decltype(rows)>::rank == 2, "gradix::embedding_bag: the table must be (V, D)");
  auto off = detail::index_arg(offsets);
  static_assert(is_index_vec<decltype(off)>::value, "gradix::embedding_bag: offsets are a vector of integers");
  return detail::make_segment_sum(rows, off, mode, "gradix::embedding_bag");
}
/// With per-sample weights w (an operand of L values, mode sum only, as PyTorch): bag b is
/// the sum of w[j] * E[indices[j]]. Gradients flow into E and, where w holds a parameter,
/// into w.
template <operand Tb, class Idx, class Off, operand W>
  requires detail::index_argument<Idx> && detail::index_argument<Off>
constexpr auto embedding_bag(Tb&& table, Idx const& indices, Off const& offsets, bag_mode mode, W&& weights) {
  auto rows = gather<0>(static_cast<Tb&&>(table), indices);
  auto w = detail::as_node(static_cast<W&&>(weights));
  static_assert(shape_of_t<decltype(rows)>::rank == 2, "gradix::embedding_bag: the table must be (V, D)");
  static_assert(shape_of_t<decltype(w)>::rank == 1, "gradix::embedding_bag: per-sample weights are a vector");
  if (mode != bag_mode::sum)
    detail::fail("gradix::embedding_bag: per-sample weights need bag_mode::sum (as PyTorch)");
  if (w.shape().extent(0) != rows.shape().extent(0))
    detail::fail("gradix::embedding_bag: ", w.shape().extent(0), " per-sample weights for ",
                 rows.shape().extent(0), " indices");
  auto off = detail::index_arg(offsets);
  static_assert(is_index_vec<decltype(off)>::value, "gradix::embedding_bag: offsets are a vector of integers");
  return detail::make_segment_sum(rows * unsqueeze<1>(w), off, mode, "gradix::embedding_bag");
}

}  // namespace gradix
