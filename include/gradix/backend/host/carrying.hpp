#pragma once
/// \file
/// The loss value carried by a host gradient kernel (docs/ad.md, "The loss value in the first
/// kernel"). backward(e) for e = sum(F) or mean(F), F a vector-shaped elementwise region,
/// needs F's values twice: once for the value of e, and once inside the kernel that sends
/// the adjoint down F (path_ev and the reverse sweep compute F's value on the way). A kernel
/// that walks F's domain in order can add those values into the blocks of gradix's summation
/// scheme instead, so the value pass costs nothing: run_carrying(u, root, parts) runs the
/// kernel and leaves the reduction's block sums in parts (at most ev::max_blocks); the caller
/// combines them as the reduction does. The bits of the value are those of value(e), and the
/// gradients are those of run(u). Here: plain uses (an arg-max carrier, or u's value and F
/// side by side, or F computed from the value of a region top inside it: detail::above_ev)
/// and multi_uses; which elements carry it is plan_facts.hpp; a fused pair's form is
/// fused.hpp.

#include "gradix/backend/host/update_plain.hpp"
#include "gradix/ad/kernel.hpp"
#include "gradix/ad/map.hpp"
#include "gradix/backend/host/loss_block.hpp"
#include "gradix/backend/host/multi_use.hpp"
#include "gradix/backend/host/plan_facts.hpp"
#include "gradix/backend/host/scratch.hpp"
#include "gradix/backend/host/thread_pool.hpp"
#include "gradix/config.hpp"
#include "gradix/core/simd.hpp"
#include "gradix/eval/ad.hpp"
#include "gradix/eval/evaluator.hpp"
#include "gradix/eval/map.hpp"
#include "gradix/eval/reduce.hpp"
#include "gradix/grad/storage.hpp"

#include <algorithm>
#include <cstddef>
#include <type_traits>
#include <utility>

namespace gradix::host {

namespace detail {
/// F's value from the value of the one node of type Top inside it (top_count 1): the nodes
/// between them are evaluated as F's evaluator does, their other operands by their
/// evaluators, Top's value taken as given. `outer<A>(c)` gives an inner with
/// `pack<W>(i, top)` and `elem(i, top)`.
template <class N, class Top, bool IsTop = std::is_same_v<N, Top>>
struct above_ev;
template <class N, class Top>
struct above_ev<N, Top, true> {
  explicit above_ev(N const&) {}
  struct inner {
#if defined(GRADIX_HAS_VECTOR_EXT)
    template <int W, class X>
    GRADIX_ALWAYS_INLINE X pack(index_t, X top) const { return top; }
#endif
    template <class X>
    GRADIX_ALWAYS_INLINE X elem(index_t, X top) const { return top; }
  };
  template <int A, std::size_t R>
  inner outer(coord<R> const&) const { return {}; }
};
template <class Op, class A, class Top>
struct above_ev<unary_node<Op, A>, Top, false> {
  above_ev<A, Top> a_;
  explicit above_ev(unary_node<Op, A> const& n) : a_(n.arg_) {}
  template <class AI>
  struct inner {
    AI a_;
#if defined(GRADIX_HAS_VECTOR_EXT)
    template <int W, class X>
    GRADIX_ALWAYS_INLINE X pack(index_t i, X top) const { return X(Op::value(a_.template pack<W>(i, top))); }
#endif
    template <class X>
    GRADIX_ALWAYS_INLINE X elem(index_t i, X top) const { return X(Op::value(a_.elem(i, top))); }
  };
  template <int Ax, std::size_t R>
  auto outer(coord<R> const& c) const {
    auto ai = a_.template outer<Ax>(c);
    return inner<decltype(ai)>{ai};
  }
};
template <class Op, class L, class R, class Top>
struct above_ev<binary_node<Op, L, R>, Top, false> {
  using N = binary_node<Op, L, R>;
  using T = value_type_t<N>;
  static constexpr std::size_t S = top_count<L, Top>::value == 1 ? 0 : 1;  // Top's side
  using C = std::conditional_t<S == 0, L, R>;
  using O = std::conditional_t<S == 0, R, L>;
  static constexpr std::size_t rank = shape_of_t<N>::rank;
  above_ev<C, Top> c_;
  ev::evaluator<O> o_;
  template <std::size_t Side>
  static auto const& operand_of(N const& n) {
    if constexpr (Side == 0) return n.lhs_;
    else return n.rhs_;
  }
  explicit above_ev(N const& n) : c_(operand_of<S>(n)), o_(operand_of<1 - S>(n)) {}
  template <class CI, class OI>
  struct inner {
    CI c_;
    OI o_;
#if defined(GRADIX_HAS_VECTOR_EXT)
    template <int W, class X>
    GRADIX_ALWAYS_INLINE X pack(index_t i, X top) const {
      X a = c_.template pack<W>(i, top);
      X b = ev::pack_as<T, W>(o_, i);
      if constexpr (S == 0) return X(Op::value(a, b));
      else return X(Op::value(b, a));
    }
#endif
    template <class X>
    GRADIX_ALWAYS_INLINE X elem(index_t i, X top) const {
      X a = c_.elem(i, top);
      X b = T(o_.elem(i));
      if constexpr (S == 0) return X(Op::value(a, b));
      else return X(Op::value(b, a));
    }
  };
  template <int Ax>
  auto outer(coord<rank> const& c) const {
    using SC = shape_of_t<C>;
    using SO = shape_of_t<O>;
    auto ci = c_.template outer<ev::operand_axis_v<SC, rank, Ax>>(ev::operand_coord<SC>(c));
    auto oi = o_.template outer<ev::operand_axis_v<SO, rank, Ax>>(ev::operand_coord<SO>(c));
    return inner<decltype(ci), decltype(oi)>{ci, oi};
  }
};

/// run_carrying for an arg-max carrier (argmax_carrier_v): per element j of F's domain,
/// one arg-max search gives the target position and F's element j (kept in scratch); the
/// rows split over the pool; then F's blocks are summed in the reduction's scheme.
template <class Root, class Use>
bool run_carrying_argmax(Use const& u, Root const& root, value_type_t<Root>* parts) {
#if !defined(GRADIX_HAS_VECTOR_EXT)
  return false;
#else
  using G = typename Use::storage_type;
  using T = typename G::value_type;
  using V = typename Use::value_expr;
  using F = typename loss_root<Root>::arg;
  using M = typename Use::map_type;
  constexpr std::size_t NM = M::size;
  index_t const n = u.dom_.extents()[0];
  if (n != root.arg_.shape().extents()[0]) return false;
  bool at_d = true;  // every arg-max component reads F's element d itself
  [&]<std::size_t... K>(std::index_sequence<K...>) {
    ([&] {
       using C = std::remove_cvref_t<decltype(get<K>(u.map_))>;
       if constexpr (argmax_comp<F, C>::value == 2) {
         auto const& m0 = get<0>(get<K>(u.map_).map_);
         at_d = at_d && m0.off_ == 0 && m0.scale_ == 1;
       }
     }(), ...);
  }(std::make_index_sequence<NM>{});
  if (!at_d) return false;
  if (n == 0) return true;
  T* const rows = scratch().try_get<T>(std::size_t(n));
  if (!rows) return false;
  ev::evaluator<F> const fev(root.arg_);
  ev::evaluator<V> const vev(u.v_);
  auto const map = u.map_;
  auto const addr = target_address_of(*u.target_);
  T* const data = u.target_->data();
  index_t const len = fev.count();  // elements per arg-max search
  auto range = [&](index_t a, index_t b) {
    for (index_t j = a; j < b; ++j) {
      coord<1> const d{j};
      T m{};
      auto const c = ev::argmax_coord(fev, d, &m);
      coord<NM> t{};
      [&]<std::size_t... K>(std::index_sequence<K...>) {
        ([&] {
           auto const& a = get<K>(map);
           using C = std::remove_cvref_t<decltype(a)>;
           if constexpr (argmax_comp<F, C>::value == 2) t[K] = a.off_ + a.scale_ * c[argmax_comp<F, C>::axis];
           else t[K] = ev::ax_value(a, d);
         }(), ...);
      }(std::make_index_sequence<NM>{});
      data[addr.offset(t)] += T(vev(d));
      rows[j] = m;
    }
  };
  parallel_ranges(n, range, std::max<index_t>(1, parallel_min_elements / std::max<index_t>(1, len)));
  index_t const bsize = ev::block_size<T>(n), nb = (n + bsize - 1) / bsize;
  constexpr int W = simd::width<T>;
  T const* const rv = rows;
  for (index_t b = 0; b < nb; ++b) {
    index_t const a = b * bsize, e = a + bsize < n ? a + bsize : n;
    parts[b] = loss_block<T, true>(
        a, e, [&](index_t j) { return simd::load<T, W>(rv + j); }, [&](index_t j) { return rv[j]; });
  }
  return true;
#endif
}
#if defined(GRADIX_HAS_VECTOR_EXT)
/// run_carrying for a carrier that is not an arg-max one: u's value and the root's operand F
/// are evaluated side by side, element j of u's domain being F's element j.
template <class Root, class Use>
bool run_carrying_plain(Use const& u, Root const& root, value_type_t<Root>* parts) {
  using K = ad::kernel_traits<Use>;
  using G = typename Use::storage_type;
  using T = typename G::value_type;
  using V = typename Use::value_expr;
  using F = typename detail::loss_root<Root>::arg;
  constexpr std::size_t TU = std::size_t(K::target_unit_axis);
  index_t const n = u.dom_.extents()[0];
  if (n != root.arg_.shape().extents()[0]) return false;
  if (u.target_->strides()[TU] * get<TU>(u.map_).scale_ != 1) return false;
  if (n == 0) return true;
  auto const addr = target_address_of(*u.target_);
  T* const base = u.target_->data() + addr.offset(ev::map_value(u.map_, coord<1>{}));
  if constexpr (detail::top_in_f_v<F, Use>)
    if (!detail::top_map_identity(u)) return false;
  constexpr int W = simd::width<T>;
  using X = simd::pack<T, W>;
  index_t const bsize = ev::block_size<T>(n), nb = (n + bsize - 1) / bsize;
  auto block = [&](index_t b) {
    index_t const a = b * bsize, e = a + bsize < n ? a + bsize : n;
    T* const tp = base;  // a local: the stores cannot alias it
    if constexpr (detail::top_in_f_v<F, Use>) {
      // the region's values and derivatives in one pass (its top's value included), the
      // adjoint as run(u) computes it, [-](v0 * d top / d x), and F's value from the top's
      using RV = ad::region_value<V>;
      auto const& am = ad::region_at_map(u.v_);
      ev::path_ev<typename RV::top, typename RV::path_type, 0, true> const pe(am.sub_.top_);
      detail::above_ev<F, typename RV::top> const fa(root.arg_);
      auto const pin = pe.template outer<0>(coord<1>{});
      auto const fin = fa.template outer<0>(coord<1>{});
      auto const v0ev = [&] {
        if constexpr (RV::has_v0) return ev::evaluator<typename RV::v0>(ad::region_v0(u.v_));
        else return 0;
      }();
      auto const vin = [&] {
        if constexpr (RV::has_v0) return v0ev.template outer<0>(coord<1>{});
        else return 0;
      }();
      auto pack_step = [&](index_t j) {
        auto r = pin.template pack<W>(j);
        X x = r.d;
        if constexpr (RV::has_v0) x = X(ev::pack_as<T, W>(vin, j) * x);
        if constexpr (RV::negative) x = X(-x);
        simd::store<T, W>(tp + j, simd::load<T, W>(tp + j) + x);
        return fin.template pack<W>(j, X(r.v));
      };
      auto scalar_step = [&](index_t j) {
        auto r = pin.elem(j);
        T x = T(r.d);
        if constexpr (RV::has_v0) x = T(T(vin.elem(j)) * x);
        if constexpr (RV::negative) x = T(-x);
        tp[j] += x;
        return fin.elem(j, T(r.v));
      };
      parts[b] = detail::loss_block<T, ev::cheap_body_v<V>>(a, e, pack_step, scalar_step);
    } else {
      // the kernel's value expression as run(u) evaluates it, and F beside it (the two
      // share their common sub-expressions: one pass)
      ev::evaluator<V> const vev(u.v_);
      ev::evaluator<F> const fev(root.arg_);
      auto const vin = vev.template outer<0>(coord<1>{});
      auto const fin = fev.template outer<0>(coord<1>{});
      auto pack_step = [&](index_t j) {
        auto x = ev::pack_as<T, W>(vin, j);
        auto y = ev::pack_as<T, W>(fin, j);
        simd::store<T, W>(tp + j, simd::load<T, W>(tp + j) + x);
        return y;
      };
      auto scalar_step = [&](index_t j) {
        T x = T(vin.elem(j));
        T y = T(fin.elem(j));
        tp[j] += x;
        return y;
      };
      parts[b] = detail::loss_block<T, ev::cheap_body_v<V> && ev::cheap_body_v<F>>(a, e, pack_step,
                                                                                scalar_step);
    }
  };
  pool().run(nb, block, !(pool().size() > 1 && n >= 2 * parallel_min_elements && nb >= 2));
  return true;
}
#endif
}  // namespace detail

/// Runs use u (a carrier of root: carries_loss_v) and leaves the block sums of the root's
/// operand F in parts[0 .. nblocks) (eval/reduce.hpp's blocks for F's extent); returns
/// false, having done nothing, when u cannot carry them at run time. u's domain is F's: its
/// element j is F's element j.
template <class Root, class Use>
bool run_carrying([[maybe_unused]] Use const& u, [[maybe_unused]] Root const& root,
                  [[maybe_unused]] value_type_t<Root>* parts) {
#if !defined(GRADIX_HAS_VECTOR_EXT)
  return false;
#else
  if (!u.target_) return false;
  if constexpr (carries_row_maxima_v<Root, Use>)
    return detail::run_carrying_argmax(u, root, parts);
  else
    return detail::run_carrying_plain(u, root, parts);
#endif
}
template <class Root, int I, class Top, class TMap, class V0, class... U>
bool run_carrying(ad::multi_use<I, Top, TMap, V0, U...> const& mu, Root const& root,
                  value_type_t<Top>* parts) {
  if (get<0>(mu.uses_).dom_.extents()[0] != root.arg_.shape().extents()[0]) return false;
  return detail::run_multi<true>(mu, &root.arg_, parts);
}

}  // namespace gradix::host
