#pragma once
/// \file
/// Running a product_use (ad/product.hpp) on the host: the adjoint of the product into its
/// workspace buffer, the two products, then the operands' plans.

#include "gradix/ad/product.hpp"
#include "gradix/backend/host/gemm.hpp"
#include "gradix/backend/host/update.hpp"
#include "gradix/config.hpp"
#include "gradix/core/tuple.hpp"

#include <algorithm>
#include <cstring>
#include <type_traits>

namespace gradix::host {

template <class P0, class PA, class PB, class SN>
constexpr void prepare(ad::product_use<P0, PA, PB, SN> const& u);
template <class P0, class PA, class PB, class SN>
std::size_t scratch_bytes(ad::product_use<P0, PA, PB, SN> const& u);
template <class P0, class PA, class PB, class SN>
void run(ad::product_use<P0, PA, PB, SN> const& u);
template <class P0, class PA, class PB, class SN>
constexpr void run_serial(ad::product_use<P0, PA, PB, SN> const& u);

namespace detail {
/// Calls f(p0) with p0 a copy of u's first kernel whose target is the product's adjoint
/// buffer.
template <class P0, class PA, class PB, class SN, class F>
constexpr void with_adjoint_target(ad::product_use<P0, PA, PB, SN> const& u, F&& f) {
  auto const& gc = u.node_.extra_.gc;
  std::remove_cvref_t<decltype(gc)> g = gc;
  P0 p0 = u.p0_;
  p0.target_ = &g;
  f(p0);
}
}  // namespace detail

template <class P0, class PA, class PB, class SN>
constexpr void prepare(ad::product_use<P0, PA, PB, SN> const& u) {
  // (p0 writes a workspace buffer: nothing to reserve or mark)
  for_each_element(u.pa_, [](auto const& e) { prepare(e); });
  for_each_element(u.pb_, [](auto const& e) { prepare(e); });
}
template <class P0, class PA, class PB, class SN>
std::size_t scratch_bytes(ad::product_use<P0, PA, PB, SN> const& u) {
  std::size_t r = 0;
  detail::with_adjoint_target(u, [&](auto const& p0) { r = scratch_bytes(p0); });
  for_each_element(u.pa_, [&](auto const& e) { r = std::max(r, scratch_bytes(e)); });
  for_each_element(u.pb_, [&](auto const& e) { r = std::max(r, scratch_bytes(e)); });
  return r;
}

namespace detail {
template <bool Serial, class P0, class PA, class PB, class SN>
constexpr void run_product(ad::product_use<P0, PA, PB, SN> const& u) {
  auto const& sn = u.node_;
  auto const& mm = sn.node_;
  auto const& st = sn.extra_;
  using T = value_type_t<decltype(mm)>;
  using A = std::remove_cvref_t<decltype(mm.lhs_)>;
  using B = std::remove_cvref_t<decltype(mm.rhs_)>;
  constexpr bool batched = std::remove_cvref_t<decltype(mm)>::rank == 3;
  index_t const nb = mm.batch(), m = mm.rows(), n = mm.cols(), k = mm.inner();
  T* const gc = st.gc.data();
  index_t const size = mm.shape().size();
  // d C: cleared, then the adjoint added into it
  if (std::is_constant_evaluated() || Serial) {
    for (index_t q = 0; q < size; ++q) gc[q] = T(0);
  } else if (size > 0) {
    std::memset(static_cast<void*>(gc), 0, std::size_t(size) * sizeof(T));
  }
  with_adjoint_target(u, [](auto const& p0) {
    if constexpr (Serial) run_serial(p0);
    else run(p0);
  });
  mat_ref<T> const g{gc, n, 1, batched ? m * n : 0};
  auto run_all = [](auto const& plan) {
    for_each_element(plan, [](auto const& e) {
      if constexpr (Serial) run_serial(e);
      else run(e);
    });
  };
  if constexpr (!std::is_same_v<PA, tuple<>>) {
    // d A (m x k) = d C (m x n) op(B)^T (n x k); a shared A sums over the batch
    constexpr bool own = shape_of_t<A>::rank == 3;
    mat_ref<T> const bt{st.b.p, st.b.cs, st.b.rs, st.b.bs};
    gemm(nb, m, k, n, g, bt, st.ga, k, own ? m * k : 0, false);
    run_all(u.pa_);
  }
  if constexpr (!std::is_same_v<PB, tuple<>>) {
    // d B (k x n) = op(A)^T (k x m) d C (m x n)
    constexpr bool own = shape_of_t<B>::rank == 3;
    mat_ref<T> const at{st.a.p, st.a.cs, st.a.rs, st.a.bs};
    gemm(nb, k, n, m, at, g, st.gb, n, own ? k * n : 0, false);
    run_all(u.pb_);
  }
}
}  // namespace detail

template <class P0, class PA, class PB, class SN>
void run(ad::product_use<P0, PA, PB, SN> const& u) {
  detail::run_product<false>(u);
}
template <class P0, class PA, class PB, class SN>
constexpr void run_serial(ad::product_use<P0, PA, PB, SN> const& u) {
  detail::run_product<true>(u);
}

}  // namespace gradix::host
