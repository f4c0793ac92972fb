#pragma once
/// \file
/// Run-time checks of a device expression before a device backend runs it: every gather by
/// indices in device memory (`device_index_vec`, from `grid::indices` or `indices(view)` of a
/// cuda_space view) is checked by a validation kernel against the extent it indexes
/// (grid::validate_indices: the first bad position through an atomic min, one host read).
/// The error is the host's (expr/index.hpp): `gradix::gather: index 7 (position 2) is out of
/// range for axis 1 of extent 5`. The positions of a take_along (cross_entropy's targets)
/// in device memory are checked the same way (validate_positions), with api/take.hpp's
/// message. It comes before anything is written: grid::backward
/// validates first, so parameters and gradients stay as they were.

#include "gradix/backend/grid/scatter.hpp"
#include "gradix/config.hpp"
#include "gradix/core/coords.hpp"
#include "gradix/eval/evaluator.hpp"
#include "gradix/eval/take.hpp"
#include "gradix/expr/bag.hpp"
#include "gradix/expr/index.hpp"
#include "gradix/expr/take.hpp"
#include "gradix/expr/node.hpp"
#include "gradix/expr/visit.hpp"

#include <string>
#include <type_traits>

namespace gradix::grid {

namespace detail {
template <class N>
struct index_node_parts {
  static constexpr bool value = false;
};
template <class A, std::size_t Axis, class Idx>
struct index_node_parts<index_node<A, Axis, Idx>> {
  static constexpr bool value = true;
  static constexpr std::size_t axis = Axis;
  using index_kind = Idx;
};

/// *first_bad_ = the smallest bag b whose offset breaks the rules of expr/bag.hpp (offsets[0]
/// is 0, every offset in [0, len_], none below the one before).
template <class I>
struct offsets_check_kernel {
  static constexpr bool uses_barriers = false;
  index_vec<I> off_;
  index_t len_;
  long long* first_bad_;
  GRADIX_KERNEL_BODY
  template <class Ctx>
  GRADIX_HOST_DEVICE void operator()(Ctx const& c) const {
    for (index_t b = grid_first(c); b < off_.size_; b += grid_step(c)) {
      index_t const o = off_(b);
      bool const bad = (b == 0 && o != 0) || o < 0 || o > len_ || (b > 0 && o < off_(b - 1));
      if (bad) c.atomic_min(first_bad_, static_cast<long long>(b));
    }
  }
};

/// *first_bad_ = the smallest flat (row-major) coordinate k of positions p_ whose value is
/// outside [0, n_) (left as it is when there is none).
template <class P>
struct positions_check_kernel {
  static constexpr bool uses_barriers = false;
  P p_;
  index_t n_;
  long long* first_bad_;
  GRADIX_KERNEL_BODY
  template <class Ctx>
  GRADIX_HOST_DEVICE void operator()(Ctx const& c) const {
    using I = value_type_t<P>;
    ev::evaluator<P> const pe(p_);
    auto const ext = p_.shape().extents();
    index_t const size = p_.shape().size();
    for (index_t k = grid_first(c); k < size; k += grid_step(c)) {
      I const v = pe(coords::unravel(ext, k));
      bool ok;
      if constexpr (std::is_signed_v<I>) ok = v >= 0 && static_cast<long long>(v) < static_cast<long long>(n_);
      else ok = static_cast<unsigned long long>(v) < static_cast<unsigned long long>(n_);
      if (!ok) c.atomic_min(first_bad_, static_cast<long long>(k));
    }
  }
};
/// *out_ = positions p_ at flat coordinate k_ (one thread).
template <class P>
struct position_at_kernel {
  static constexpr bool uses_barriers = false;
  P p_;
  index_t k_;
  long long* out_;
  GRADIX_KERNEL_BODY
  template <class Ctx>
  GRADIX_HOST_DEVICE void operator()(Ctx const& c) const {
    if (grid_first(c) == 0) *out_ = static_cast<long long>(ev::evaluator<P>(p_)(coords::unravel(p_.shape().extents(), k_)));
  }
};
}  // namespace detail

/// Checks the positions of take_along node n (in device memory) against the extent of its
/// axis, as the host checks host positions when the node is built (api/take.hpp): throws
/// gradix::error with the host's message for the first bad position. Waits for the device.
template <class L, class N>
void validate_positions(L& l, N const& n, launch_options o = {}) {
  using P = std::remove_cvref_t<decltype(n.pos_)>;
  constexpr std::size_t R = shape_of_t<P>::rank;
  index_t const size = n.pos_.shape().size();
  if (size == 0) return;
  index_t const extent = n.arg_.shape().extent(N::axis);
  detail::device_buffer<L> flag(l, 2 * sizeof(long long));
  long long const none = static_cast<long long>(PTRDIFF_MAX);
  l.copy_to_device(flag.p_, &none, sizeof none);
  long long* const fb = flag.template as<long long>();
  l.launch(shape_for(size, o, l.max_threads()), detail::positions_check_kernel<P>{n.pos_, extent, fb});
  long long first = none;
  l.copy_to_host(&first, fb, sizeof first);
  if (first == none) return;
  l.launch(launch_shape{1, 1, 0}, detail::position_at_kernel<P>{n.pos_, index_t(first), fb + 1});
  long long v = 0;
  l.copy_to_host(&v, fb + 1, sizeof v);
  coord<R> const c = coords::unravel(n.pos_.shape().extents(), index_t(first));
  ::gradix::detail::fail("gradix::take_along: position ", v, " at ", ::gradix::detail::extents_to_string(c.begin(), R),
                         " is out of range for axis ", N::axis, " of extent ", extent);
}

/// Checks the offsets (device memory) of segment sum n as expr/bag.hpp checks host offsets
/// when the node is built: gradix::error with that message for the first bad one (naming
/// op, gradix::embedding_bag: the same rules hold for segment_sum). Waits for the device.
template <class L, class N>
void validate_offsets(L& l, N const& n, launch_options o = {}) {
  using I = typename std::remove_cvref_t<decltype(n.idx_)>::index_type;
  index_t const nb = n.idx_.size_, len = n.arg_.shape().extent(0);
  if (nb == 0) return;
  detail::device_buffer<L> flag(l, sizeof(long long));
  long long const none = static_cast<long long>(PTRDIFF_MAX);
  l.copy_to_device(flag.p_, &none, sizeof none);
  l.launch(shape_for(nb, o, l.max_threads()), detail::offsets_check_kernel<I>{n.idx_, len, flag.template as<long long>()});
  long long first = none;
  l.copy_to_host(&first, flag.p_, sizeof first);
  if (first == none) return;
  index_t const b = index_t(first);
  auto read = [&](index_t k) {
    I v{};
    l.copy_to_host(&v, n.idx_.data_ + k * n.idx_.stride_, sizeof v);
    return index_t(v);
  };
  index_t const ob = read(b);
  char const* op = "gradix::embedding_bag";
  if (b == 0 && ob != 0) ::gradix::detail::fail(op, ": offsets[0] is ", ob, "; the first bag must start at 0");
  if (ob < 0 || ob > len) ::gradix::detail::fail(op, ": offsets[", b, "] = ", ob, " is out of range for ", len, " positions");
  ::gradix::detail::fail(op, ": offsets[", b, "] = ", ob, " is below offsets[", b - 1, "] = ", read(b - 1),
                         " (offsets must not decrease)");
}

namespace detail {
/// validate_expression's walk: operands first (the order in which the host checks host
/// operands: when each node is built), then n's own device indices, positions or offsets.
template <class L, class N>
void validate_node(L& l, N const& n, launch_options o) {
  ::gradix::detail::for_each_operand(n, [&](auto const& c) { validate_node(l, c, o); });
  using D = std::remove_cvref_t<N>;
  if constexpr (index_node_parts<D>::value) {
    using P = index_node_parts<D>;
    using Idx = typename P::index_kind;
    if constexpr (is_device_index<Idx>::value) {
      index_t const extent = n.arg_.shape().extent(P::axis);
      auto const& iv = n.idx_;
      // bounds the host knows (grid::device_indices, as of its last upload): no kernel when
      // they are in range
      if (!(iv.bounds_ && iv.bounds_->within(extent))) {
        std::string const op = std::string("gradix::") + Idx::name;
        validate_indices(l, iv.data_, iv.size_, iv.stride_, extent, op.c_str(), P::axis, o);
      }
    }
  } else if constexpr (requires { n.arg_; n.pos_; D::axis; }) {
    if constexpr (std::is_same_v<space_of_t<decltype(n.pos_)>, cuda_space>) validate_positions(l, n, o);
  } else if constexpr (is_segment_sum_node<D>::value) {
    validate_offsets(l, n, o);
  }
}
}  // namespace detail

/// Validates every device index vector, take_along position and bag offset of expression e
/// on l's device (see the file comment), operands before the nodes that read them.
template <class L, class E>
void validate_expression(L& l, E const& e, launch_options o = {}) {
  detail::validate_node(l, e, o);
}

}  // namespace gradix::grid
