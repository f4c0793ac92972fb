#pragma once
/// \file
/// Running a product_use and a staged_use (ad/product.hpp) on the host: the adjoint of the
/// node into its workspace buffer, then (a product) the two products, then the operands'
/// plans.

#include "gradix/ad/product.hpp"
#include "gradix/backend/host/assign.hpp"
#include "gradix/backend/host/gemm.hpp"
#include "gradix/backend/host/update.hpp"
#include "gradix/config.hpp"
#include "gradix/eval/evaluator.hpp"
#include "gradix/op/math.hpp"
#include "gradix/core/tuple.hpp"
#include "gradix/grad/storage.hpp"

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
template <class G, class PX, class SN>
constexpr void prepare(ad::row_use<G, PX, SN> const& u);
template <class G, class PX, class SN>
std::size_t scratch_bytes(ad::row_use<G, PX, SN> const& u);
template <class G, class PX, class SN>
void run(ad::row_use<G, PX, SN> const& u);
template <class G, class PX, class SN>
constexpr void run_serial(ad::row_use<G, PX, SN> const& u);
template <class... P>
constexpr void prepare(ad::let_use<P...> const& u);
template <class... P>
std::size_t scratch_bytes(ad::let_use<P...> const& u);
template <class... P>
void run(ad::let_use<P...> const& u);
template <class... P>
constexpr void run_serial(ad::let_use<P...> const& u);

namespace detail {
/// Runs plan element e (Serial: the serial path, as in constant evaluation), and every
/// element of a plan.
template <bool Serial, class E>
constexpr void run_element(E const& e) {
  if constexpr (Serial) run_serial(e);
  else run(e);
}
template <bool Serial, class Plan>
constexpr void run_elements(Plan const& plan) {
  for_each_element(plan, [](auto const& e) { run_element<Serial>(e); });
}
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
  with_target(u.p0_, u.node_->extra_.gc, f);
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
/// The adjoint of a kept node written into its (row-major) buffer buf by u0, the node's one
/// incoming kernel: assigned in one pass when u0 covers buf exactly (its map the identity,
/// no axis summed), else buf cleared and u0 added into it.
template <bool Serial, class P0, class G>
constexpr void adjoint_into(P0 const& u0, G const& buf) {
  using K = ad::kernel_traits<P0>;
  using D = typename P0::domain_type;
  using S = typename G::shape_type;
  using T = typename G::value_type;
  constexpr std::size_t R = S::rank;
  if constexpr (D::rank == R && K::projected_mask == 0 &&
                std::is_same_v<typename P0::map_type, decltype(ad::identity_map<R>())>) {
    bool const exact = [&]<std::size_t... J>(std::index_sequence<J...>) {
      return ((get<J>(u0.map_).off_ == 0 && get<J>(u0.map_).scale_ == 1 &&
               u0.dom_.extent(J) == buf.shape().extent(J)) && ...);
    }(std::make_index_sequence<R>{});
    if (exact) {
      tensor_view<T, S, row_major, host_space> out(buf.data(), buf.shape());
      host::assign(out, u0.v_);
      return;
    }
  }
  clear<Serial>(buf.data(), buf.shape().size());
  with_target(u0, buf, [](auto const& p0) { run_element<Serial>(p0); });
}
}  // namespace detail

template <class P0, class PA, class PB, class SN>
constexpr void prepare(ad::product_use<P0, PA, PB, SN> const& u) {
  // (p0 writes a workspace buffer: nothing to reserve or mark)
  for_each_element(u.pa(), [](auto const& e) { prepare(e); });
  for_each_element(u.pb(), [](auto const& e) { prepare(e); });
}
template <class P0, class PA, class PB, class SN>
std::size_t scratch_bytes(ad::product_use<P0, PA, PB, SN> const& u) {
  std::size_t r = 0;
  detail::with_adjoint_target(u, [&](auto const& p0) { r = scratch_bytes(p0); });
  for_each_element(u.pa(), [&](auto const& e) { r = std::max(r, scratch_bytes(e)); });
  for_each_element(u.pb(), [&](auto const& e) { r = std::max(r, scratch_bytes(e)); });
  return r;
}

namespace detail {
/// Whether operand plan P is one kernel that adds the operand's adjoint buffer (a row-major
/// view, at the identity) into a dense row-major gradient of the same shape: the operand is
/// a parameter itself, and its product can accumulate into that gradient directly.
template <class P>
struct direct_gradient : std::false_type {};
template <class D, class T, class S, class M, class G>
struct direct_gradient<tuple<ad::use<D, tensor_view<T const, S, row_major, host_space>, M, G>>>
    : std::bool_constant<std::is_same_v<M, decltype(ad::identity_map<S::rank>())> && !G::sparse &&
                         (S::rank < 2 || std::is_same_v<G, dense_grad_storage<T, typename G::shape_type, row_major, G::axis>>) &&
                         std::is_same_v<typename G::value_type, T>> {};
/// An operand's gradient from its product: gemm(dst, accumulate) into the parameter's own
/// gradient when the operand plan is one direct kernel (direct_gradient; nothing at all when
/// grad() does not want it), else into the buffer buf, then the operand plan from it.
template <bool Serial, class P, class T, class F>
constexpr void operand_gradient(P const& plan, T* buf, F&& gemm_into) {
  if constexpr (direct_gradient<P>::value) {
    auto const& k = get<0>(plan);
    if (k.target_) gemm_into(k.target_->data(), true);  // (its slices were marked by prepare)
  } else {
    gemm_into(buf, false);
    run_elements<Serial>(plan);
  }
}

template <bool Serial, class P0, class PA, class PB, class SN>
constexpr void run_product(ad::product_use<P0, PA, PB, SN> const& u) {
  auto const& sn = *u.node_;
  auto const& mm = sn.node();
  auto const& st = sn.extra_;
  using T = value_type_t<decltype(mm)>;
  using A = std::remove_cvref_t<decltype(mm.lhs_)>;
  using B = std::remove_cvref_t<decltype(mm.rhs_)>;
  constexpr bool batched = std::remove_cvref_t<decltype(mm)>::rank == 3;
  index_t const nb = mm.batch(), m = mm.rows(), n = mm.cols(), k = mm.inner();
  T* const gc = st.gc.data();
  adjoint_into<Serial>(u.p0_, st.gc);  // d C
  mat_ref<T> const g{gc, n, 1, batched ? m * n : 0};
  if constexpr (!std::is_same_v<PA, tuple<>>) {
    // d A (m x k) = d C (m x n) op(B)^T (n x k); a shared A sums over the batch
    constexpr bool own = shape_of_t<A>::rank == 3;
    mat_ref<T> const bt{st.b.p, st.b.cs, st.b.rs, st.b.bs};
    operand_gradient<Serial>(u.pa(), st.ga, [&](T* dst, bool add) { gemm(nb, m, k, n, g, bt, dst, k, own ? m * k : 0, add); });
  }
  if constexpr (!std::is_same_v<PB, tuple<>>) {
    // d B (k x n) = op(A)^T (k x m) d C (m x n)
    constexpr bool own = shape_of_t<B>::rank == 3;
    mat_ref<T> const at{st.a.p, st.a.cs, st.a.rs, st.a.bs};
    operand_gradient<Serial>(u.pb(), st.gb, [&](T* dst, bool add) { gemm(nb, k, n, m, at, g, dst, n, own ? k * n : 0, add); });
  }
}

template <bool Serial, class P0, class PE, class SN>
constexpr void run_staged(ad::staged_use<P0, PE, SN> const& u) {
  adjoint_into<Serial>(u.p0_, u.node_->extra_.gout);
  run_elements<Serial>(u.pe());
}

/// A row node's operand adjoint into its buffer gin, row by row from the adjoint g and the
/// kept value (expr/row.hpp has the formulas); along a contiguous last axis in SIMD packs
/// (the lanes of a row's sums combined in a fixed order).
template <bool Serial, class G, class PX, class SN>
constexpr void run_row(ad::row_use<G, PX, SN> const& u) {
  auto const& sn = *u.node_;
  using N = typename SN::node_type;
  using T = value_type_t<N>;
  using S = shape_of_t<N>;
  constexpr std::size_t R = S::rank, Ax = N::axis;
  T* const gin = sn.extra_.gin;
  ev::evaluator<G> const ge(u.g_);
  ev::evaluator<typename SN::buffer_type> const se(sn.buf_);
  auto const ext = sn.shape().extents();
  index_t const len = ext[Ax];
  index_t stride = 1;
  for (std::size_t j = Ax + 1; j < R; ++j) stride *= ext[j];
  index_t const count = len > 0 ? sn.shape().size() / len : 0;
  auto rows = [&](index_t r0, index_t r1) {
    for (index_t r = r0; r < r1; ++r) {
      coord<R> o{};
      index_t q = r;
      for (std::size_t j = R; j-- > 0;) {
        if (j == Ax) continue;
        o[j] = q % ext[j];
        q /= ext[j];
      }
      index_t base = 0;
      for (std::size_t j = 0; j < R; ++j) base = base * ext[j] + o[j];
      T* const out = gin + base;
      auto const gi = ge.template outer<int(Ax)>(o);
      auto const si = se.template outer<int(Ax)>(o);
      constexpr row_kind K = N::kind;
      constexpr bool need_g = K == row_kind::log_softmax || K == row_kind::layer_norm;  // sum(g)
      constexpr bool need_gs = K != row_kind::log_softmax;                              // sum(g s)
      T sg = 0, sgs = 0;
      index_t i = 0;
#if defined(GRADIX_HAS_VECTOR_EXT)
      constexpr int W = simd::width<T>;
      bool packs = !std::is_constant_evaluated() && !Serial && stride == 1;
      using X = simd::pack<T, W>;
      if (packs) {
        X ag{}, ags{};
        for (; i + W <= len; i += W) {
          X const g = ev::pack_as<T, W>(gi, i);
          if constexpr (need_g) ag += g;
          if constexpr (need_gs) ags += g * X(ev::pack_as<T, W>(si, i));
        }
        for (int w = 0; w < W; ++w) {
          sg += ag[w];
          sgs += ags[w];
        }
      }
#endif
      for (; i < len; ++i) {
        T const g = T(gi.elem(i));
        if constexpr (need_g) sg += g;
        if constexpr (need_gs) sgs += g * T(si.elem(i));
      }
      T const rs = N::norm ? sn.extra_.rstd[r] : T(1);
      T const mg = N::norm ? T(sg / T(len)) : sg, mgs = N::norm ? T(sgs / T(len)) : sgs;
      // the operand's adjoint at one element (a T or a pack): g the adjoint, s the kept value
      auto dx = [&](auto g, auto s) {
        using Y = decltype(g);
        if constexpr (K == row_kind::softmax) return Y(s * (g - sgs));
        else if constexpr (K == row_kind::log_softmax) return Y(g - op::exp::value(s) * sg);
        else if constexpr (K == row_kind::layer_norm) return Y(rs * (g - mg - s * mgs));
        else return Y(rs * (g - s * mgs));
      };
      i = 0;
#if defined(GRADIX_HAS_VECTOR_EXT)
      if (packs)
        for (; i + W <= len; i += W)
          simd::store<T, W>(out + i, dx(X(ev::pack_as<T, W>(gi, i)), X(ev::pack_as<T, W>(si, i))));
#endif
      for (; i < len; ++i) out[i * stride] = dx(T(gi.elem(i)), T(si.elem(i)));
    }
  };
  if (std::is_constant_evaluated() || Serial) {
    rows(0, count);
  } else {
    parallel_ranges(count, rows, std::max<index_t>(1, parallel_min_elements / std::max<index_t>(1, 4 * len)));
  }
  run_elements<Serial>(u.px());
}
}  // namespace detail

template <class G, class PX, class SN>
constexpr void prepare(ad::row_use<G, PX, SN> const& u) {
  for_each_element(u.px(), [](auto const& e) { prepare(e); });
}
template <class G, class PX, class SN>
std::size_t scratch_bytes(ad::row_use<G, PX, SN> const& u) {
  std::size_t r = 0;
  for_each_element(u.px(), [&](auto const& e) { r = std::max(r, scratch_bytes(e)); });
  return r;
}
template <class G, class PX, class SN>
void run(ad::row_use<G, PX, SN> const& u) {
  detail::run_row<false>(u);
}
template <class G, class PX, class SN>
constexpr void run_serial(ad::row_use<G, PX, SN> const& u) {
  detail::run_row<true>(u);
}

template <class P0, class PE, class SN>
constexpr void prepare(ad::staged_use<P0, PE, SN> const& u) {
  for_each_element(u.pe(), [](auto const& e) { prepare(e); });
}
template <class P0, class PE, class SN>
std::size_t scratch_bytes(ad::staged_use<P0, PE, SN> const& u) {
  std::size_t r = 0;
  detail::with_target(u.p0_, u.node_->extra_.gout, [&](auto const& p0) { r = scratch_bytes(p0); });
  for_each_element(u.pe(), [&](auto const& e) { r = std::max(r, scratch_bytes(e)); });
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

// Lets: the let's buffer cleared, the body's plan (its kernels for the placeholder's reads
// add into that buffer), then the operand's plan from it.

namespace detail {
template <class E>
struct is_plan : std::false_type {};
template <class... E>
struct is_plan<tuple<E...>> : std::true_type {};
/// Calls f(k) for every kernel k (use, member of a multi use) in plan element or plan e,
/// through fused pairs and the operand plans of products, staged uses and lets (those built
/// for the call: f sees copies, and what it changes in them is not kept).
template <class E, class F>
constexpr void for_each_kernel(E& e, F&& f) {
  using U = std::remove_cv_t<E>;
  if constexpr (is_plan<U>::value) {
    for_each_element(e, [&](auto& x) { for_each_kernel(x, f); });
  } else if constexpr (ad::is_product<U>::value) {
    auto pa = e.pa();
    auto pb = e.pb();
    for_each_kernel(pa, f);
    for_each_kernel(pb, f);
  } else if constexpr (ad::is_staged<U>::value) {
    auto pe = e.pe();
    for_each_kernel(pe, f);
  } else if constexpr (ad::is_row_use<U>::value) {
    auto px = e.px();
    for_each_kernel(px, f);
  } else if constexpr (ad::is_let_use<U>::value) {
    auto pb = e.pb();
    auto pz = e.pz();
    for_each_kernel(pb, f);
    for_each_kernel(pz, f);
  } else if constexpr (ad::is_fused<U>::value) {
    f(e.first_);
    f(e.second_);
  } else if constexpr (ad::is_multi<U>::value) {
    for_each_element(e.uses_, f);
  } else {
    f(e);
  }
}
template <bool Serial, class... P>
constexpr void run_let(ad::let_use<P...> const& u) {
  auto const& g = u.gz_;
  clear<Serial>(g.data(), g.shape().size());  // the operand's adjoint: cleared, then added into
  run_elements<Serial>(u.pb());
  run_elements<Serial>(u.pz());
}
}  // namespace detail

template <class... P>
constexpr void prepare(ad::let_use<P...> const& u) {
  // (the placeholder's kernels write the let's buffer: a workspace buffer, nothing to
  // reserve or mark)
  for_each_element(u.pb(), [](auto const& e) { prepare(e); });
  for_each_element(u.pz(), [](auto const& e) { prepare(e); });
}
template <class... P>
std::size_t scratch_bytes(ad::let_use<P...> const& u) {
  std::size_t r = 0;
  for_each_element(u.pb(), [&](auto const& e) { r = std::max(r, scratch_bytes(e)); });
  for_each_element(u.pz(), [&](auto const& e) { r = std::max(r, scratch_bytes(e)); });
  return r;
}
template <class... P>
void run(ad::let_use<P...> const& u) {
  detail::run_let<false>(u);
}
template <class... P>
constexpr void run_serial(ad::let_use<P...> const& u) {
  detail::run_let<true>(u);
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
