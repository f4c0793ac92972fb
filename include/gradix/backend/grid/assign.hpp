#pragma once
/// \file
/// Forward evaluation on a device grid: one kernel per assign, each thread evaluating the
/// elements of a grid-stride loop over the destination with the same ev::evaluator the host
/// loops use (eval/). Written against the launch abstraction of backend/grid/launch.hpp, so
/// the CUDA launcher and the tests' host grid emulator run the same kernel.

#include "gradix/backend/grid/launch.hpp"
#include "gradix/backend/grid/reduce.hpp"
#include "gradix/core/coords.hpp"
#include "gradix/exec/checks.hpp"
#include "gradix/config.hpp"
#include "gradix/core/layout.hpp"
#include "gradix/core/view.hpp"
#include "gradix/eval/evaluator.hpp"
#include "gradix/expr/node.hpp"
#include "gradix/expr/scan.hpp"
#include "gradix/expr/visit.hpp"

#include <type_traits>

namespace gradix::grid {

/// dst[c] = e(c) for every coordinate c of dst (same shape), one element per loop step.
template <class DV, class E>
struct assign_kernel {
  static constexpr bool uses_barriers = false;
  DV dst_;
  E e_;
  GRADIX_KERNEL_BODY
  template <class Ctx>
  GRADIX_HOST_DEVICE void operator()(Ctx const& c) const {
    using DT = typename DV::storage_type;  // (a half-width element: rounded to nearest, ties to even)
    constexpr std::size_t R = DV::rank;
    ev::evaluator<E> ev(e_);
    auto const ext = dst_.shape().extents();
    index_t const n = dst_.size();
    for (index_t k = grid_first(c); k < n; k += grid_step(c)) {
      coord<R> const co = coords::unravel(ext, k);
      dst_[co] = DT(ev(co));
    }
  }
};

/// A reduction at the root of an assign whose outputs each reduce at least this many
/// elements runs as block-then-grid kernels (backend/grid/reduce.hpp); smaller ones, and
/// reductions inside an expression, are computed per output element by one thread in the
/// evaluator's fixed order. Both orders depend on the shapes alone, never on the launch.
inline constexpr index_t block_reduce_min = 256;

namespace detail {
template <class L, class DT, class DS, class DL, class E>
void assign_direct(L& l, tensor_view<DT, DS, DL, cuda_space> const& dst, E const& e, launch_options o) {
  if constexpr (is_reduce_node<E>::value) {
    index_t const n = e.arg_.shape().size() / dst.size();
    if (n >= block_reduce_min) {
      reduce_into(l, dst, e, o);
      return;
    }
  }
  using K = assign_kernel<tensor_view<DT, DS, DL, cuda_space>, E>;
  static_assert(std::is_trivially_copyable_v<K>, "gradix::grid::assign: a kernel must be trivially copyable");
  l.launch(shape_for(dst.size(), o, l.max_threads()), K{dst, e});
}
}  // namespace detail

/// Evaluates e into dst on the launcher's device, in its order: one fused kernel (a large
/// reduction at the root: block-then-grid kernels, see block_reduce_min). dst must have e's
/// shape (checked: gradix::error naming both, nothing launched). The expression's leaves and
/// dst must be in CUDA memory (a compile error otherwise). When e reads dst's memory other
/// than at the element being written (`x = transpose(x)`, an overlapping view), e is first
/// evaluated into a device temporary, then copied: the result is that of evaluating e before
/// anything is written, as on the host.
template <class L, class DT, class DS, class DL, class E>
void assign(L& l, tensor_view<DT, DS, DL, cuda_space> const& dst, E const& e, launch_options o = {}) {
  static_assert(!std::is_const_v<DT>, "gradix::grid::assign: the destination view is read-only");
  static_assert(detail::device_expression<E>,
                "gradix::grid::assign: the expression reads host memory; every leaf of a device "
                "expression must be a cuda_space view");
  static_assert(shape_of_t<E>::rank == DS::rank,
                "gradix::grid::assign: the destination and the expression have different ranks");
  static_assert(!::gradix::detail::any_node_v<E, is_scan_node>,
                "gradix::grid::assign: the expression holds a gx::scan, whose steps run one after "
                "another: use grid::eval(l, e) or grid::value(l, e), or gx::assign(dst, e)");
  if (!(dst.shape() == e.shape()))
    ::gradix::detail::fail("gradix::grid::assign: destination shape ", to_string(dst.shape()),
                           " differs from expression shape ", to_string(e.shape()));
  if (dst.size() == 0) return;
  if (::gradix::detail::aliases(dst, e)) {
    detail::device_buffer<L> tmp(l, std::size_t(dst.size()) * sizeof(DT));
    tensor_view<DT, DS, row_major, cuda_space> tv(tmp.template as<DT>(), dst.shape());
    detail::assign_direct(l, tv, e, o);
    detail::assign_direct(l, dst, tensor_view<DT const, DS, row_major, cuda_space>(tv), o);
    return;
  }
  detail::assign_direct(l, dst, e, o);
}

namespace detail {
/// The value of the rank-0 device expression e: assigned into a device scalar of the call,
/// read back (waits for the device). grid::value and grid::executor's value use it.
template <class L, class E>
value_type_t<E> read_scalar(L& l, E const& e, launch_options o) {
  using T = value_type_t<E>;
  device_buffer<L> out(l, sizeof(T));
  tensor_view<T, shape<>, row_major, cuda_space> ov(out.template as<T>(), shape<>{});
  assign(l, ov, e, o);
  T v{};
  l.copy_to_host(&v, out.p_, sizeof v);
  return v;
}
}  // namespace detail

}  // namespace gradix::grid
