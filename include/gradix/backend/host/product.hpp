#pragma once
/// \file
/// Running a product_use and a staged_use (ad/product.hpp) on the host: the adjoint of the
/// node into its workspace buffer, then (a product) the two products, then the operands'
/// plans.

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
template <class P0, class PE, class SN>
constexpr void prepare(ad::staged_use<P0, PE, SN> const& u);
template <class P0, class PE, class SN>
std::size_t scratch_bytes(ad::staged_use<P0, PE, SN> const& u);
template <class P0, class PE, class SN>
void run(ad::staged_use<P0, PE, SN> const& u);
template <class P0, class PE, class SN>
constexpr void run_serial(ad::staged_use<P0, PE, SN> const& u);

namespace detail {
/// Calls f(p0) with p0 a copy of u's first kernel whose target is the node's adjoint
/// buffer g (a product's gc, a staged use's gout).
template <class P0, class G, class F>
constexpr void with_target(P0 const& u0, G const& buf, F&& f) {
  G g = buf;
  P0 p0 = u0;
  p0.target_ = &g;
  f(p0);
}
template <class P0, class PA, class PB, class SN, class F>
constexpr void with_adjoint_target(ad::product_use<P0, PA, PB, SN> const& u, F&& f) {
  with_target(u.p0_, u.node_.extra_.gc, f);
}
/// Clears n elements at p.
template <bool Serial, class T>
constexpr void clear(T* p, index_t n) {
  if (std::is_constant_evaluated() || Serial) {
    for (index_t q = 0; q < n; ++q) p[q] = T(0);
  } else if (n > 0) {
    std::memset(static_cast<void*>(p), 0, std::size_t(n) * sizeof(T));
  }
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
  clear<Serial>(gc, mm.shape().size());  // d C: cleared, then the adjoint added into it
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

template <bool Serial, class P0, class PE, class SN>
constexpr void run_staged(ad::staged_use<P0, PE, SN> const& u) {
  auto const& g = u.node_.extra_.gout;
  clear<Serial>(g.data(), g.shape().size());
  with_target(u.p0_, g, [](auto const& p0) {
    if constexpr (Serial) run_serial(p0);
    else run(p0);
  });
  for_each_element(u.pe_, [](auto const& e) {
    if constexpr (Serial) run_serial(e);
    else run(e);
  });
}
}  // namespace detail

template <class P0, class PE, class SN>
constexpr void prepare(ad::staged_use<P0, PE, SN> const& u) {
  for_each_element(u.pe_, [](auto const& e) { prepare(e); });
}
template <class P0, class PE, class SN>
std::size_t scratch_bytes(ad::staged_use<P0, PE, SN> const& u) {
  std::size_t r = 0;
  detail::with_target(u.p0_, u.node_.extra_.gout, [&](auto const& p0) { r = scratch_bytes(p0); });
  for_each_element(u.pe_, [&](auto const& e) { r = std::max(r, scratch_bytes(e)); });
  return r;
}
template <class P0, class PE, class SN>
void run(ad::staged_use<P0, PE, SN> const& u) {
  detail::run_staged<false>(u);
}
template <class P0, class PE, class SN>
constexpr void run_serial(ad::staged_use<P0, PE, SN> const& u) {
  detail::run_staged<true>(u);
}

template <class P0, class PA, class PB, class SN>
void run(ad::product_use<P0, PA, PB, SN> const& u) {
  detail::run_product<false>(u);
}
template <class P0, class PA, class PB, class SN>
constexpr void run_serial(ad::product_use<P0, PA, PB, SN> const& u) {
  detail::run_product<true>(u);
}

}  // namespace gradix::host
