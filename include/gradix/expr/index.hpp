#pragma once
/// \file
/// Index operations along one axis: gather with a vector of indices, a range (slice with a
/// step), one position that keeps its axis (`at(j)`: extent 1, broadcastable) or drops it
/// (select, a plain integer). `E(all, idx)` on tensors, views, parameters, and `index(e, ...)`
/// on any expression, apply one index argument per axis.
///
/// Every index is validated when the expression is built: an out-of-range or negative index
/// throws gradix::error naming the operation, the axis, the value and the extent. Indices
/// compare in a common wide type (a uint16 index against an extent of 65,535 is checked
/// correctly). The index data is viewed, not copied: changing it after building the
/// expression is undefined.

#include "gradix/config.hpp"
#include "gradix/core/error.hpp"
#include "gradix/core/shape.hpp"
#include "gradix/core/tensor.hpp"
#include "gradix/core/view.hpp"
#include "gradix/expr/node.hpp"

#include <cstdint>
#include <span>
#include <tuple>
#include <type_traits>
#include <vector>

namespace gradix {

/// Index argument: the whole axis.
struct all_t {
  explicit constexpr all_t() = default;
};
inline constexpr all_t all{};

/// A vector of indices (a lookup: several outputs may read the same position).
template <class I>
struct index_vec {
  using index_type = I;
  static constexpr char const* name = "gather";
  I const* data_;
  index_t size_;
  index_t stride_;
#if defined(GRADIX_CHECK_LIFETIMES)
  std::uint64_t gen_ = 0;  // generation of the index tensor's buffer (core/lifetime.hpp)
#endif
  GRADIX_HOST_DEVICE constexpr index_t operator()(index_t k) const {
    return index_t(data_[k * stride_]);
  }
};
/// A vector of indices validated to hold no duplicate: its scatter is injective.
template <class I>
struct unique_vec : index_vec<I> {
  static constexpr char const* name = "gather(unique)";
};
/// A vector of indices in device memory (`indices(view)` of a cuda_space view): a lookup as
/// index_vec, validated when a device backend runs the expression (a validation kernel
/// before anything is written, backend/grid/validate.hpp), not when it is built.
///
/// When the host knows bounds of the values (`grid::device_indices` keeps them, updated with
/// every upload; bounds_ points at them, read when the expression runs), validation is a
/// comparison on the host: no kernel, no wait for the device.
struct index_bounds {
  long long lo = 0;  // every value lies in [lo, hi] (an empty vector: 0 and -1)
  long long hi = -1;
  /// Whether every value is a valid position along an axis of this extent.
  constexpr bool within(index_t extent) const { return hi < lo || (lo >= 0 && hi < static_cast<long long>(extent)); }
};
}  // namespace gradix
namespace gradix::grid {
class index_order;  // backend/grid/memory.hpp
}  // namespace gradix::grid
namespace gradix {
/// `order_` (host memory, never read on the device): where a grid::device_indices keeps its
/// values' sorted order for the deterministic backward, made once per upload (memory.hpp).
template <class I>
struct device_index_vec : index_vec<I> {
  index_bounds const* bounds_ = nullptr;
  grid::index_order* order_ = nullptr;
};
/// start, start + step, ... (`size_` values); an affine map.
struct index_range {
  static constexpr char const* name = "slice";
  index_t start_;
  index_t step_;
  index_t size_;
  GRADIX_HOST_DEVICE constexpr index_t operator()(index_t k) const { return start_ + step_ * k; }
};
/// One position, keeping the axis with static extent 1.
struct index_at {
  static constexpr char const* name = "at";
  index_t pos_;
  GRADIX_HOST_DEVICE constexpr index_t operator()(index_t) const { return pos_; }
};
/// One position, dropping the axis.
struct index_select {
  static constexpr char const* name = "select";
  index_t pos_;
  GRADIX_HOST_DEVICE constexpr index_t operator()(index_t) const { return pos_; }
};

template <class X>
struct is_index_vec : std::false_type {};
template <class I>
struct is_index_vec<index_vec<I>> : std::true_type {};
template <class I>
struct is_index_vec<unique_vec<I>> : std::true_type {};
template <class I>
struct is_index_vec<device_index_vec<I>> : std::true_type {};
/// Whether an index kind reads device memory (its values are checked when a device backend
/// runs the expression: backend/grid/validate.hpp).
template <class Idx>
struct is_device_index : std::false_type {};
template <class I>
struct is_device_index<device_index_vec<I>> : std::true_type {};

namespace detail {
template <class I>
inline constexpr bool integer_index_v = std::is_integral_v<I> && !std::is_same_v<I, bool>;
/// The index type of indices(...) over I: I itself, or int after a failed check (so that a
/// wrong element type gives one message, not a cascade).
template <class I>
using index_elem_t = std::conditional_t<integer_index_v<std::remove_const_t<I>>, std::remove_const_t<I>, int>;

template <class I, class P>
constexpr index_vec<index_elem_t<I>> make_index_vec(P const* p, index_t n, index_t stride) {
  static_assert(integer_index_v<std::remove_const_t<I>>, "gradix::indices: index values must be integers");
  if constexpr (integer_index_v<std::remove_const_t<I>>) return {p, n, stride};
  else return {nullptr, 0, 1};
}
}  // namespace detail

// The return types are spelled out so that checking whether something is an index argument
// never instantiates a body (and its checks) early.

/// Indices from a std::vector, a span, a rank-1 gradix tensor (lvalue) or view.
template <class I>
constexpr index_vec<detail::index_elem_t<I>> indices(std::vector<I> const& v) {
  return detail::make_index_vec<I>(v.data(), index_t(v.size()), 1);
}
template <class I>
constexpr index_vec<detail::index_elem_t<I>> indices(std::vector<I>&&) {
  static_assert(sizeof(I) == 0,
                "gradix::indices: a temporary std::vector cannot be used (the expression would "
                "view it after it is destroyed); store the indices in a variable first");
  return {nullptr, 0, 1};
}
template <class I>
constexpr index_vec<detail::index_elem_t<I>> indices(std::span<I> s) {
  return detail::make_index_vec<I>(s.data(), index_t(s.size()), 1);
}
template <class I, class S, class L>
constexpr index_vec<detail::index_elem_t<I>> indices(tensor<I, S, L> const& t) {
  static_assert(S::rank == 1, "gradix::indices: an index tensor must have rank 1");
  auto v = detail::make_index_vec<I>(t.data(), t.size(), 1);
#if defined(GRADIX_CHECK_LIFETIMES)
  v.gen_ = t.generation();
#endif
  return v;
}
template <class I, class S, class L>
constexpr index_vec<detail::index_elem_t<I>> indices(tensor<I, S, L>&&) {
  static_assert(sizeof(I) == 0,
                "gradix::indices: a temporary tensor cannot be used (the expression would view "
                "it after it is destroyed); store the indices in a variable first");
  return {nullptr, 0, 1};
}
template <class I, class S, class L>
constexpr index_vec<detail::index_elem_t<I>> indices(tensor_view<I, S, L, host_space> const& v) {
  static_assert(S::rank == 1, "gradix::indices: an index view must have rank 1");
  auto r = detail::make_index_vec<I>(v.data(), v.size(), v.stride(0));
#if defined(GRADIX_CHECK_LIFETIMES)
  r.gen_ = v.gen_;
#endif
  return r;
}
/// Indices in device memory: a rank-1 cuda_space view (`grid::indices(device_tensor)` makes
/// one). Their values are checked when a device backend runs the expression.
template <class I, class S, class L>
constexpr device_index_vec<detail::index_elem_t<I>> indices(tensor_view<I, S, L, cuda_space> const& v) {
  static_assert(S::rank == 1, "gradix::indices: an index view must have rank 1");
  device_index_vec<detail::index_elem_t<I>> r{};
  static_cast<index_vec<detail::index_elem_t<I>>&>(r) = detail::make_index_vec<I>(v.data(), v.size(), v.stride(0));
  return r;
}
/// Marks indices as free of duplicates (checked when applied: gradix::error otherwise), so
/// the backward scatter needs no synchronisation.
template <class I>
constexpr unique_vec<I> unique(index_vec<I> const& v) {
  return {v};
}
/// The range start, start + step, ... up to stop (exclusive), like Python's range.
/// Throws gradix::error for step 0.
/// Any start, stop and step are accepted (the count is computed without overflow); whether
/// the values fit an axis is checked when the range is applied.
constexpr index_range range(index_t start, index_t stop, index_t step = 1) {
  if (step == 0) detail::fail("gradix::range: step is 0");
  // in unsigned arithmetic: stop - start and -step may not fit index_t
  using u64 = std::uint64_t;
  u64 n = 0;
  if (step > 0 && stop > start) n = (u64(stop) - u64(start) - 1) / u64(step) + 1;
  if (step < 0 && stop < start) n = (u64(start) - u64(stop) - 1) / (u64(0) - u64(step)) + 1;
  if (n > u64(PTRDIFF_MAX))
    detail::fail("gradix::range: from ", start, " to ", stop, " with step ", step, " has ", n,
                 " values, more than the largest extent ", PTRDIFF_MAX);
  return {start, step, index_t(n)};
}
namespace detail {
/// An integer position as index_t; gradix::error naming `op` when it does not fit.
template <class J>
constexpr index_t checked_position(J j, char const* op) {
  static_assert(std::is_integral_v<J> && !std::is_same_v<J, bool>, "gradix: a position must be an integer");
  if constexpr (std::is_unsigned_v<J> && sizeof(J) >= sizeof(index_t)) {
    if (j > J(PTRDIFF_MAX))
      fail(op, ": index ", j, " exceeds the largest index ", PTRDIFF_MAX);
  }
  return index_t(j);
}
}  // namespace detail
/// One position j that keeps its axis, with static extent 1 (so it broadcasts).
template <class J>
  requires std::is_integral_v<J>
constexpr index_at at(J j) {
  index_at r{};
  r.pos_ = detail::checked_position(j, "gradix::at");
  return r;
}

namespace detail {

/// The index kind an index argument becomes (a type computation only: checking whether
/// something is an index argument never instantiates a function body, so a wrong element
/// type is reported once, where the indices are used).
template <class X>
struct index_arg_type {
  using type = X;
};
template <class X>
  requires(std::is_integral_v<X> && !std::is_same_v<X, bool>)
struct index_arg_type<X> {
  using type = index_select;
};
template <class I, class A>
struct index_arg_type<std::vector<I, A>> {
  using type = index_vec<index_elem_t<I>>;
};
template <class I, std::size_t E>
struct index_arg_type<std::span<I, E>> {
  using type = index_vec<index_elem_t<I>>;
};
template <class I, class S, class L>
struct index_arg_type<tensor<I, S, L>> {
  using type = index_vec<index_elem_t<I>>;
};
template <class I, class S, class L>
struct index_arg_type<tensor_view<I, S, L, host_space>> {
  using type = index_vec<index_elem_t<I>>;
};
template <class I, class S, class L>
struct index_arg_type<tensor_view<I, S, L, cuda_space>> {
  using type = device_index_vec<index_elem_t<I>>;
};
template <class X>
using index_arg_t = typename index_arg_type<std::remove_cvref_t<X>>::type;

/// Normalizes an index argument to an index kind (or all_t).
template <class X>
constexpr index_arg_t<X> index_arg(X const& x) {
  using D = std::remove_cvref_t<X>;
  if constexpr (std::is_same_v<index_arg_t<X>, index_select> && !std::is_same_v<D, index_select>)
    return index_select{index_t(checked_position(x, "gradix::select"))};
  else if constexpr (std::is_same_v<index_arg_t<X>, D>)
    return x;
  else
    return indices(x);
}

template <class X>
inline constexpr bool is_index_kind_v =
    is_index_vec<X>::value || std::is_same_v<X, index_range> || std::is_same_v<X, index_at> ||
    std::is_same_v<X, index_select> || std::is_same_v<X, all_t>;

template <class X>
concept index_argument = is_index_kind_v<index_arg_t<X>>;

template <class S, std::size_t Axis, class Idx>
struct indexed_shape {
  static constexpr bool drop = std::is_same_v<Idx, index_select>;
  static constexpr std::size_t out_rank = drop ? S::rank - 1 : S::rank;
  struct holder {
    static constexpr array<index_t, out_rank> value = [] {
      array<index_t, out_rank> r{};
      std::size_t k = 0;
      for (std::size_t j = 0; j < S::rank; ++j) {
        if (j == Axis) {
          if constexpr (drop) continue;
          else r[k++] = std::is_same_v<Idx, index_at> ? 1 : dyn;
        } else {
          r[k++] = S::static_extents[j];
        }
      }
      return r;
    }();
  };
  using type = shape_from_array_t<holder>;
};

/// Layout of an index node: the operand's contiguous axis, renumbered when an axis drops.
template <class L, std::size_t R, std::size_t Axis, bool Drop>
using indexed_layout_t = std::conditional_t<
    !Drop, L,
    axis_layout<(L::template unit_axis<R> < Axis ? L::template unit_axis<R>
                 : L::template unit_axis<R> == Axis ? (R >= 2 ? R - 2 : 0)
                                                     : L::template unit_axis<R> - 1)>>;

}  // namespace detail

/// out[..., k, ...] = arg[..., idx(k), ...]   (along axis Axis; select drops the axis)
/// shape:    arg's shape with extent Axis replaced by the number of indices (dyn), 1 (at),
///           or removed (select)
/// backward: d_arg[..., idx(k), ...] += d_out[..., k, ...] (a scatter-add; repeated indices sum)
template <class Arg, std::size_t Axis, class Idx>
struct index_node {
  using is_gradix_expression = void;
  using value_type = value_type_t<Arg>;
  using shape_type = typename detail::indexed_shape<shape_of_t<Arg>, Axis, Idx>::type;
  using layout_type = detail::indexed_layout_t<layout_of_t<Arg>, shape_of_t<Arg>::rank, Axis,
                                               std::is_same_v<Idx, index_select>>;
  using space_type = space_of_t<Arg>;
  static constexpr std::size_t axis = Axis;
  Arg arg_;
  Idx idx_;
  shape_type shape_;
  GRADIX_HOST_DEVICE constexpr shape_type const& shape() const { return shape_; }
};

namespace detail {

template <int Axis, std::size_t Rank>
struct index_axis_out_of_range {
  static constexpr bool value = normalize_axis_v<Axis, Rank> < Rank;
  static_assert(value,
                "gradix: an index or view axis is out of range for the operand's rank (axes "
                "count from 0, or from -1 for the last); see index_axis_out_of_range<axis, rank>");
};

/// Checks one index value against the extent in a common wide type.
template <class I>
constexpr bool index_in_range(I v, index_t n) {
  if constexpr (std::is_signed_v<I>) return v >= 0 && static_cast<long long>(v) < static_cast<long long>(n);
  else return static_cast<unsigned long long>(v) < static_cast<unsigned long long>(n);
}

template <class Idx>
constexpr void validate_index(Idx const& idx, std::size_t axis, index_t n) {
  if constexpr (is_device_index<Idx>::value) {
    // device memory: checked by the device backend when the expression runs
  } else if constexpr (is_index_vec<Idx>::value) {
    using I = typename Idx::index_type;
    // a branch-free min/max pass first (it vectorises); the search for the first bad index,
    // for the message, only runs when something is out of range
    bool ok = true;
    if (idx.size_ > 0) {
      I lo = idx.data_[0], hi = idx.data_[0];
      if (idx.stride_ == 1) {
        for (index_t k = 1; k < idx.size_; ++k) {
          I v = idx.data_[k];
          lo = v < lo ? v : lo;
          hi = v > hi ? v : hi;
        }
      } else {
        for (index_t k = 1; k < idx.size_; ++k) {
          I v = idx.data_[k * idx.stride_];
          lo = v < lo ? v : lo;
          hi = v > hi ? v : hi;
        }
      }
      ok = index_in_range(lo, n) && index_in_range(hi, n);
    }
    for (index_t k = 0; !ok && k < idx.size_; ++k) {
      auto v = idx.data_[k * idx.stride_];
      if (!index_in_range(v, n))
        fail("gradix::", Idx::name, ": index ", v, " (position ", k, ") is out of range for axis ",
             axis, " of extent ", n);
    }
    if constexpr (!std::is_same_v<Idx, index_vec<typename Idx::index_type>>) {
      std::vector<bool> seen(std::size_t(n), false);
      for (index_t k = 0; k < idx.size_; ++k) {
        auto v = std::size_t(idx.data_[k * idx.stride_]);
        if (seen[v])
          fail("gradix::unique: index ", v, " appears twice (axis ", axis, " of extent ", n, ")");
        seen[v] = true;
      }
    }
  } else if constexpr (std::is_same_v<Idx, index_range>) {
    if (idx.size_ > 0) {
      // the last value lies between start and stop, so it fits index_t; the product may not
      // (unsigned arithmetic wraps, and the wrapped sum is the exact result)
      index_t last = index_t(std::uint64_t(idx.start_) +
                             std::uint64_t(idx.step_) * std::uint64_t(idx.size_ - 1));
      if (idx.start_ < 0 || idx.start_ >= n || last < 0 || last >= n)
        fail("gradix::slice: range from ", idx.start_, " with step ", idx.step_, " (", idx.size_,
             " values, last ", last, ") is out of range for axis ", axis, " of extent ", n);
    }
  } else {
    if (idx.pos_ < 0 || idx.pos_ >= n)
      fail("gradix::", Idx::name, ": index ", idx.pos_, " is out of range for axis ", axis,
           " of extent ", n);
  }
}

template <std::size_t Axis, class A, class Idx>
constexpr auto make_index(A a, Idx idx) {
  using node = index_node<A, Axis, Idx>;
  auto sa = a.shape();
  validate_index(idx, Axis, sa.extent(Axis));
  typename node::shape_type s{};
  std::size_t k = 0;
  for (std::size_t j = 0; j < shape_of_t<A>::rank; ++j) {
    if (j == Axis) {
      if constexpr (std::is_same_v<Idx, index_select>) continue;
      else if constexpr (std::is_same_v<Idx, index_at>) s.set_extent(k++, 1);
      else s.set_extent(k++, idx.size_);
    } else {
      s.set_extent(k++, sa.extent(j));
    }
  }
  return node{a, idx, s};
}

/// Applies index arguments to axes I, I-1, ..., 0 (last first, so that a dropped axis does
/// not renumber the axes still to be indexed).
template <std::size_t I, class A, class Tuple>
constexpr auto apply_index_args(A a, Tuple const& args) {
  auto const& x = std::get<I>(args);
  using K = index_arg_t<std::remove_cvref_t<decltype(x)>>;
  auto next = [&] {
    if constexpr (std::is_same_v<K, all_t>) return a;
    else return make_index<I>(a, index_arg(x));
  }();
  if constexpr (I == 0) return next;
  else return apply_index_args<I - 1>(next, args);
}

}  // namespace detail

/// Gathers along axis Axis with a vector of indices (vector, span, rank-1 tensor or view),
/// a range, `at(j)`, or an integer (select: drops the axis).
template <int Axis, operand X, detail::index_argument Idx>
constexpr auto gather(X&& x, Idx const& idx) {
  auto a = detail::as_node(static_cast<X&&>(x));
  constexpr std::size_t R = shape_of_t<decltype(a)>::rank;
  if constexpr (!detail::index_axis_out_of_range<Axis, R>::value) {
    return a;
  } else {
    using K = detail::index_arg_t<Idx>;
    static_assert(!std::is_same_v<K, all_t>, "gradix::gather: `all` selects nothing to gather");
    return detail::make_index<normalize_axis_v<Axis, R>>(a, detail::index_arg(idx));
  }
}
/// Slices axis Axis: start, start + step, ... before stop (step may be negative; 0 throws).
template <int Axis, operand X>
constexpr auto slice(X&& x, index_t start, index_t stop, index_t step = 1) {
  return gather<Axis>(static_cast<X&&>(x), range(start, stop, step));
}
/// Selects position j of axis Axis, dropping the axis.
template <int Axis, operand X, class J>
  requires std::is_integral_v<J>
constexpr auto select(X&& x, J j) {
  index_select s{};
  s.pos_ = detail::checked_position(j, "gradix::select");
  return gather<Axis>(static_cast<X&&>(x), s);
}

/// One index argument per axis: `index(e, all, indices(i))`, `index(e, 2, range(0, 8, 2))`.
/// `all` keeps an axis, an integer selects (drops) it, `at(j)` keeps it with extent 1,
/// `range(...)` slices it, `indices(...)` (or a std::vector / span lvalue) gathers it.
template <operand X, detail::index_argument... A>
constexpr auto index(X&& x, A const&... args) {
  auto a = detail::as_node(static_cast<X&&>(x));
  constexpr std::size_t R = shape_of_t<decltype(a)>::rank;
  static_assert(sizeof...(A) == R,
                "gradix::index: give exactly one index argument per axis (gradix::all keeps an axis)");
  if constexpr (sizeof...(A) != R || R == 0) {
    return a;
  } else {
    return detail::apply_index_args<R - 1>(a, std::tuple<A const&...>(args...));
  }
}

}  // namespace gradix
