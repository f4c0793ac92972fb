#pragma once
/// \file
/// Where a product's gemm can add its operand's gradient in place (exec/elements.hpp,
/// operand_gradient; a scan's sweep, exec/sweep.hpp): the operand plan is one kernel adding
/// into a dense row-major block of a gradient or adjoint buffer (the whole of it, a block of
/// its columns, a block of its rows), so the gemm accumulates there with the block's row
/// stride, and no buffer and kernel are needed.

#include "gradix/ad/kernel.hpp"
#include "gradix/ad/map.hpp"
#include "gradix/config.hpp"
#include "gradix/core/tuple.hpp"
#include "gradix/core/view.hpp"
#include "gradix/expr/index.hpp"

#include <cstddef>
#include <type_traits>
#include <utility>

namespace gradix::detail {

/// Whether use u's map is the identity at run time and its domain has shape s: a map of the
/// identity's type may still carry offsets or steps (a slice, a selection), so the type
/// alone does not say that u covers s exactly.
template <class U, class S>
constexpr bool maps_exactly(U const& u, S const& s) {
  constexpr std::size_t R = S::rank;
  return [&]<std::size_t... J>(std::index_sequence<J...>) {
    return ((get<J>(u.map_).off_ == 0 && get<J>(u.map_).scale_ == 1 && u.dom_.extent(J) == s.extent(J)) && ...);
  }(std::make_index_sequence<R>{});
}

/// Whether gradient storage G is dense and row-major: a parameter's dense storage on either
/// backend, or an adjoint buffer of the call (a scan's carry adjoint, a kept node's), whose
/// memory is one contiguous row-major block a gemm can accumulate into.
template <class G>
struct row_major_dense : std::bool_constant<!G::sparse && (G::rank == 0 || G::unit_axis == int(G::rank) - 1)> {};

/// Whether operand plan P is one kernel that adds the operand's adjoint buffer (a row-major
/// view of memory space Sp, at the identity) into a dense row-major gradient of the same
/// shape: the operand is a parameter itself, and its product can accumulate into that
/// gradient directly.
template <class P, class Sp>
struct direct_gradient : std::false_type {};
template <class D, class T, class S, class M, class G, class Sp>
struct direct_gradient<tuple<ad::use<D, tensor_view<T const, S, row_major, Sp>, M, G>>, Sp>
    : std::bool_constant<std::is_same_v<M, decltype(ad::identity_map<S::rank>())> && !G::sparse &&
                         (S::rank < 2 || row_major_dense<G>::value) && std::is_same_v<typename G::value_type, T>> {};

/// Whether operand plan P is one kernel that adds the operand's adjoint buffer (a row-major
/// matrix of memory space Sp) into a column slice of a dense row-major gradient or adjoint
/// buffer (rows at the identity, columns through a slice): the operand is a slice of a
/// buffer's columns (an LSTM carry's h, a slice of [h, c]), whose product can accumulate into
/// that buffer directly with its row stride.
template <class P, class Sp>
struct slice_gradient : std::false_type {};
template <class D, class T, class S, class G, class Sp>
struct slice_gradient<
    tuple<ad::use<D, tensor_view<T const, S, row_major, Sp>, tuple<ad::ax_dom<0>, ad::ax_lookup<ad::ax_dom<1>, index_range>>, G>>,
    Sp> : std::bool_constant<S::rank == 2 && !G::sparse && G::rank == 2 && row_major_dense<G>::value &&
                             std::is_same_v<typename G::value_type, T>> {};

/// Whether operand plan P is one kernel that adds the operand's adjoint buffer (a row-major
/// matrix of memory space Sp) into a row slice of a dense row-major gradient (rows through a
/// slice, columns at the identity): the operand is a block of a weight's rows (the carry's
/// half W_h of a scan body's [x, h] W, api/scan_hoist.hpp), whose product can accumulate
/// into that block directly.
template <class P, class Sp>
struct row_slice_gradient : std::false_type {};
template <class D, class T, class S, class G, class Sp>
struct row_slice_gradient<
    tuple<ad::use<D, tensor_view<T const, S, row_major, Sp>, tuple<ad::ax_lookup<ad::ax_dom<0>, index_range>, ad::ax_dom<1>>, G>>,
    Sp> : std::bool_constant<S::rank == 2 && !G::sparse && G::rank == 2 && row_major_dense<G>::value &&
                             std::is_same_v<typename G::value_type, T>> {};

/// Whether a product can add its operand's gradient straight into where plan P adds it
/// (gemm_target).
template <class P, class Sp>
inline constexpr bool gemm_target_v =
    direct_gradient<P, Sp>::value || slice_gradient<P, Sp>::value || row_slice_gradient<P, Sp>::value;

/// Where a product's gemm can add its operand's gradient for operand plan P (gemm_target_v):
/// the target's memory and its row stride (ld: the operand's row length, for a plan covering
/// the whole gradient). want false: grad() does not want it; p null: not in place here (the
/// plan runs from a buffer).
template <class T>
struct gemm_dst {
  T* p = nullptr;
  index_t ld = 0;
  bool want = true;
};
template <class Sp, class T, class P>
constexpr gemm_dst<T> gemm_target(P const& plan, index_t ld) {
  gemm_dst<T> r;
  if constexpr (gemm_target_v<P, Sp>) {
    auto const& k = get<0>(plan);
    if (!k.target_) {
      r.want = false;
      return r;
    }
    if constexpr (direct_gradient<P, Sp>::value) {
      if (maps_exactly(k, k.target_->shape())) r = {k.target_->data(), ld, true};  // (its slices were marked by prepare)
    } else if constexpr (slice_gradient<P, Sp>::value) {
      auto const& a = get<0>(k.map_);
      auto const& c = get<1>(k.map_);
      auto const st = k.target_->strides();
      if (a.scale_ == 1 && c.scale_ * c.idx_.step_ * c.inner_.scale_ == 1 && st[1] == 1) {
        index_t const c0 = c.off_ + c.scale_ * (c.idx_.start_ + c.idx_.step_ * c.inner_.off_);
        r = {k.target_->data() + a.off_ * st[0] + c0, st[0], true};
      }
    } else {
      auto const& a = get<0>(k.map_);
      auto const& c = get<1>(k.map_);
      auto const st = k.target_->strides();
      if (c.scale_ == 1 && a.scale_ * a.idx_.step_ * a.inner_.scale_ == 1 && st[1] == 1) {
        index_t const r0 = a.off_ + a.scale_ * (a.idx_.start_ + a.idx_.step_ * a.inner_.off_);
        r = {k.target_->data() + r0 * st[0] + c.off_, st[0], true};
      }
    }
  }
  return r;
}

}  // namespace gradix::detail
