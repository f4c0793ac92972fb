#pragma once
/// \file
/// The plan runner, written once over an executor (exec/executor.hpp): how a backward plan
/// (ad/plan.hpp) runs, whatever runs its kernels. In two phases (strong guarantee): with
/// every target storage marked busy (storage_guard: a concurrent call on the same parameter
/// throws) and its tracking state recorded, a serial pre-pass reserves slots, marks touched
/// slices and reserves the kernels' scratch; if that fails (out of memory), the storages are
/// restored and the error is a gradix::error naming the call. Then the plan's elements run
/// in plan order (the order of the parameter uses in the expression, left to right); they
/// cannot fail and never allocate. In check mode the gradients written are scanned after.
///
/// Also here, because they are the same for every executor: the loss value that rides in a
/// gradient kernel (loss_carrier, run_plan_carrying: the executor says which of its plan
/// elements can carry it), the value of a sum of broadcast terms by the broadcast rule
/// (split_sum), and grad()'s redirection of parameter targets (redirect_params).
///
/// Executor members used here (beyond exec/executor.hpp's and exec/elements.hpp's):
/// guard<N> (storage_guard on the host, busy_lock on a device), prepare(u), scratch_bytes(u), reserve_scratch(bytes), run(u), run_serial(u) (constant
/// evaluation), value(e), and for the carried loss carries_loss<Root, U>,
/// carries_row_maxima<Root, U>, carry_scratch_bytes(u, e), run_carrying(u, e, parts).

#include "gradix/ad/plan.hpp"
#include "gradix/ad/push.hpp"
#include "gradix/config.hpp"
#include "gradix/core/layout.hpp"
#include "gradix/core/tuple.hpp"
#include "gradix/eval/reduce.hpp"
#include "gradix/exec/checks.hpp"
#include "gradix/exec/elements.hpp"
#include "gradix/exec/executor.hpp"
#include "gradix/exec/finite.hpp"
#include "gradix/exec/fused_sink.hpp"
#include "gradix/expr/elementwise.hpp"
#include "gradix/expr/let.hpp"
#include "gradix/expr/param.hpp"
#include "gradix/expr/rebuild.hpp"
#include "gradix/expr/visit.hpp"
#include "gradix/expr/reduce.hpp"

#include <algorithm>
#include <cstddef>
#include <new>
#include <tuple>
#include <type_traits>
#include <utility>

namespace gradix::detail {

/// Calls f on each plain use of a plan element that writes a parameter's gradient (both
/// parts of a fused pair, every member of a multi_use, the uses of a product's operand
/// plans and of a let's plans; not the kernels that write a product's or a let's adjoint
/// into the call's workspace).
template <class Ex, class U, class F>
constexpr void for_each_use(U& u, F&& f) {
  // every kernel of the element (for_each_kernel, exec/elements.hpp) but a let's placeholder
  // kernels, which write the let's buffer
  for_each_kernel(u, [&](auto& k) {
    if constexpr (!is_let_grad<typename std::remove_cvref_t<decltype(k)>::storage_type>::value) f(k);
  });
}

/// Whether N holds a parameter node (types only).
template <class N>
constexpr bool holds_param() {
  return any_node<N, is_param_node>();
}
/// The number of nodes of N (types only; memoized per type).
template <class N>
constexpr std::size_t count_nodes();
template <class N>
inline constexpr std::size_t node_count_v = count_nodes<std::remove_cvref_t<N>>();
template <class N>
constexpr std::size_t count_nodes() {
  return []<class... C>(tuple<C...> const*) {
    return (std::size_t(1) + ... + node_count_v<C>);
  }(static_cast<operand_types_t<N> const*>(nullptr));
}
/// grad() in constant evaluation rewrites the expression's parameter nodes
/// (redirect_params), a recursion as deep as the expression: instantiated only for
/// expressions of at most this many nodes (deeper ones exhaust the compiler's stack; a
/// larger one is a gradix::error in constant evaluation, and run time is not affected).
inline constexpr std::size_t constexpr_grad_nodes = 256;
template <class N, class F>
constexpr N redirect_params(N const& n, F const& f);
/// redirect_params as rebuild's f.
template <class F>
struct redirecting {
  static constexpr bool drops_marks = false;
  F const& f;
  template <bool U, class C>
  constexpr auto apply(C const& c) const {
    return redirect_params(c, f);
  }
};
/// n (an expression before the save transform) with every parameter node's gradient target
/// replaced by f(target) (grad(): the returned storages, or null); the same type.
template <class N, class F>
constexpr N redirect_params(N const& n, F const& f) {
  if constexpr (!holds_param<N>()) {
    return n;
  } else if constexpr (is_param_node<N>::value) {
    N r = n;
    r.grad_ = f(n.grad_);
    return r;
  } else if constexpr (is_let_node<N>::value) {
    return N{redirect_params(n.z_, f), redirect_params(n.body_, f)};
  } else {
    return rebuild<true>(n, redirecting<F>{f});
  }
}

/// Runs f with ctx as this thread's grad() redirection (restored after, also on an
/// exception). Run time only: out of grad(), which is constexpr (g++ 12 rejects a local
/// with a destructor there even on the branch constant evaluation does not take).
template <class F>
void with_grad_redirect(grad_redirect const& ctx, F&& f) {
  struct scope {
    grad_redirect const* saved;
    ~scope() { current_grad_redirect() = saved; }
  } const restore{current_grad_redirect()};
  current_grad_redirect() = &ctx;
  f();
}

/// Number of plain uses in a plan element, and in a plan (for_each_use's).
template <class Plan>
struct plan_uses;
template <class U>
inline constexpr std::size_t uses_in_v = 1;
template <class P0, class PA, class PB, class SN>
inline constexpr std::size_t uses_in_v<ad::product_use<P0, PA, PB, SN>> = plan_uses<PA>::value + plan_uses<PB>::value;
template <class P0, class PE, class SN>
inline constexpr std::size_t uses_in_v<ad::staged_use<P0, PE, SN>> = plan_uses<PE>::value;
template <class G, class PX, class SN>
inline constexpr std::size_t uses_in_v<ad::row_use<G, PX, SN>> = plan_uses<PX>::value;
template <class PB, class PZ, class... R>
inline constexpr std::size_t uses_in_v<ad::let_use<PB, PZ, R...>> = plan_uses<PB>::value + plan_uses<PZ>::value;
template <class P0, class G, class SN>
inline constexpr std::size_t uses_in_v<ad::scan_use<P0, G, SN>> =
    plan_uses<decltype(std::declval<ad::scan_use<P0, G, SN> const&>().step(
        std::declval<typename SN::node_type::step_type const&>(), nullptr))>::value +
    plan_uses<decltype(std::declval<ad::scan_use<P0, G, SN> const&>().carry(nullptr))>::value +
    plan_uses<decltype(std::declval<ad::scan_use<P0, G, SN> const&>().input())>::value;
template <class U1, class U2>
inline constexpr std::size_t uses_in_v<ad::fused_use<U1, U2>> = 2;
template <int I, class Top, class M, class V0, class... U>
inline constexpr std::size_t uses_in_v<ad::multi_use<I, Top, M, V0, U...>> = sizeof...(U);
template <class... E>
struct plan_uses<tuple<E...>> : std::integral_constant<std::size_t, (uses_in_v<E> + ... + 0)> {};
template <class Plan>
inline constexpr std::size_t plan_uses_v = plan_uses<std::remove_cvref_t<Plan>>::value;

/// Whether a type holds a scan element anywhere in its template arguments (a scan runs its
/// step plan once per step: a sink written there is written many times).
template <class T>
struct holds_scan : std::false_type {};
template <class P0, class G, class SN>
struct holds_scan<ad::scan_use<P0, G, SN>> : std::true_type {};
template <template <class...> class X, class... A>
struct holds_scan<X<A...>> : std::bool_constant<(holds_scan<A>::value || ...)> {};

/// Arms the fused sinks registered on this thread (exec/fused_sink.hpp) that exactly one
/// kernel of plan p writes; the others (none, several, or inside a scan) stay unarmed. Host,
/// run time.
template <class Ex, class Plan>
void arm_sinks(Plan const& p) {
  fused_sinks const* r = current_fused_sinks();
  if (!r) return;
  for (std::size_t k = 0; k < r->n; ++k) {
    r->sinks[k].writers = 0;
    r->sinks[k].armed = false;
  }
  if constexpr (!std::is_same_v<typename Ex::space, host_space> || holds_scan<Plan>::value) {
    return;
  } else {
    for_each_element(p, [&](auto const& pu) {
      for_each_use<Ex>(pu, [&](auto const& u) {
        if (fused_sink* s = sink_of(u.target_)) ++s->writers;
      });
    });
    for (std::size_t k = 0; k < r->n; ++k) r->sinks[k].armed = r->sinks[k].writers == 1;
  }
}

/// Check mode: scans each distinct target storage of a plan once, in plan order.
template <class Ex, class Plan>
void check_finite_gradients(Plan const& p, char const* op) {
  void const* seen[plan_uses_v<Plan> > 0 ? plan_uses_v<Plan> : 1] = {};
  std::size_t n = 0;
  for_each_element(p, [&](auto const& pu) {
    for_each_use<Ex>(pu, [&](auto const& u) {
      if (!u.target_) return;
      for (std::size_t k = 0; k < n; ++k)
        if (seen[k] == u.target_) return;
      seen[n] = u.target_;
      check_finite_gradient(op, *u.target_, n++);
    });
  });
}

/// Marks every target storage of a plan busy in guard (a concurrent call on the same
/// parameter throws) and records its tracking state.
template <class Ex, class Guard, class Plan>
constexpr void guard_targets(Guard& guard, Plan const& p) {
  for_each_element(p, [&](auto const& pu) {
    for_each_use<Ex>(pu, [&](auto const& u) { guard.take(u.target_); });
  });
}

/// The serial pre-pass of a plan (its targets taken by guard): reserves slots,
/// marks touched slices and reserves the kernels' scratch (and `extra` bytes); if that fails (out of memory), the
/// storages are restored and the error is a gradix::error naming `op`.
template <class Ex, class Guard, class Plan>
void prepare_plan(Ex& ex, Guard& guard, Plan const& p, char const* op, std::size_t extra = 0) {
  try {
    for_each_element(p, [&](auto const& u) { prepare_element(ex, u); });
    std::size_t need = extra;
    for_each_element(p, [&](auto const& u) { need = std::max(need, element_scratch(ex, u)); });
    ex.reserve_scratch(need);
  } catch (std::bad_alloc const&) {
    guard.rollback();
    fail(op, ": out of memory in the pre-pass (gradients unchanged)");
  } catch (...) {
    guard.rollback();
    throw;
  }
}

/// Runs a plan in two phases (strong guarantee). First, with every target storage marked
/// busy (a concurrent call on the same parameter throws) and its tracking state recorded,
/// the serial pre-pass reserves slots, marks touched slices and reserves the kernels'
/// scratch; if that fails (out of memory), the storages are restored and the error is a
/// gradix::error naming `op`. Then the kernels run: they cannot fail and never allocate.
template <class Ex, class Plan>
constexpr void run_plan_on(Ex& ex, Plan const& p, char const* op) {
  if constexpr (requires { Ex::template runs_whole<Plan>; }) {
    if constexpr (Ex::template runs_whole<Plan>) {  // the executor runs it at once (the grid's fused launches)
      ex.run_whole(p, op);
      return;
    }
  }
  typename Ex::template guard<plan_uses_v<Plan>> guard(op);
  guard_targets<Ex>(guard, p);
  if (std::is_constant_evaluated()) {
    for_each_element(p, [&](auto const& u) { prepare_element(ex, u); });
    run_elements<true>(ex, p);
    return;
  }
  arm_sinks<Ex>(p);
  prepare_plan<Ex>(ex, guard, p, op);
  run_elements<false>(ex, p);
  // (check mode reads the gradients in place: host storages only)
  if constexpr (std::is_same_v<typename Ex::space, host_space>)
    if (check_finite()) check_finite_gradients<Ex>(p, op);
}

/// Whether Root is a mean (its carried value is divided by the count).
template <class Root>
struct is_mean_root : std::false_type {};
template <class F, axis_mask Mask, bool Keep>
struct is_mean_root<reduce_node<op::mean_of, F, Mask, Keep>> : std::true_type {};

/// Number of elements of a plan.
template <class Plan>
inline constexpr std::size_t plan_elements_v = 0;
template <class... E>
inline constexpr std::size_t plan_elements_v<tuple<E...>> = sizeof...(E);

/// The index of the first plan element that can carry the value of Root (the executor's
/// carries_loss), or -1.
template <class Ex, class Root, class Plan>
struct loss_carrier;
template <class Ex, class Root, class... E>
struct loss_carrier<Ex, Root, tuple<E...>> {
  static constexpr int value = [] {
    constexpr bool c[] = {Ex::template carries_loss<Root, E>..., false};
    for (int i = 0; i < int(sizeof...(E)); ++i)
      if (c[i]) return i;
    return -1;
  }();
};

/// backward(e) for a root whose value a kernel of the plan carries (loss_carrier): runs the
/// plan as run_plan_on does, element C through the executor's run_carrying, and returns e's
/// value (the bits of the executor's value(e)). Not in check mode (the value is checked
/// before any gradient is written) nor in constant evaluation: run_plan_on and value there.
template <class Ex, int C, class Root, class Plan>
value_type_t<Root> run_plan_carrying(Ex& ex, Root const& e, Plan const& p, char const* op) {
  using T = value_type_t<Root>;
  T parts[ev::max_blocks];
  bool carried = false;
  typename Ex::template guard<plan_uses_v<Plan>> guard(op);
  guard_targets<Ex>(guard, p);
  // (the carrying element runs its own kernel, which writes the buffer in place)
  arm_sinks<Ex>(p);
  for_each_use<Ex>(get<std::size_t(C)>(p), [&](auto const& u) {
    if (fused_sink* s = sink_of(u.target_)) s->armed = false;
  });
  prepare_plan<Ex>(ex, guard, p, op, ex.carry_scratch_bytes(get<std::size_t(C)>(p), e));
  [&]<std::size_t... K>(std::index_sequence<K...>) {
    ([&] {
       if constexpr (int(K) == C) {
         carried = ex.run_carrying(get<K>(p), e, parts);
         if (!carried) run_element<false>(ex, get<K>(p));
       } else {
         run_element<false>(ex, get<K>(p));
       }
     }(), ...);
  }(std::make_index_sequence<plan_elements_v<Plan>>{});
  if (!carried) return ex.value(e);
  // the reduction's combination of its blocks (eval/reduce.hpp)
  index_t const n = e.arg_.shape().size();
  if (n == 0) return T(0);
  index_t const bsize = ev::block_size<T>(n), nb = (n + bsize - 1) / bsize;
  T r = parts[0];
  for (index_t k = 1; k < nb; ++k) r = r + parts[k];
  using CE = std::remove_cvref_t<decltype(get<std::size_t(C)>(p))>;
  if constexpr (Ex::template carries_row_maxima<Root, CE>) {
    // the carried row maxima differ from the reduction's only in a zero's sign (which no
    // sum shows: it starts at +0) and a NaN's payload: a NaN is computed by value(), for
    // its bits
    if (r != r) return ex.value(e);
  }
  if constexpr (is_mean_root<Root>::value) r = r / T(n);
  return r;
}

/// Root is sum(L + R) or sum(L - R) (or mean) over every axis of a floating-point F, where L
/// or R is broadcast along some axis (its static extent 1 where F's is not): the founding
/// benchmark's batched loss. backward(e) computes such a value as the backward kernels treat
/// their adjoints (DESIGN.md, "Write maps are an algebra"): a term that does not depend on a
/// broadcast axis sums over it to extent x its own sum, so the value is
/// (|F| / |L|) sum(L) +- (|F| / |R|) sum(R), two reductions over the operands' own elements
/// instead of one over F's (for the batched loss, 64 x 5000 + 64 x 100 elements instead of
/// 64 x 5000 x 100), accumulated in double and rounded once (a mean: sum(L) / |L| +-
/// sum(R) / |R|). Equal to value(e) up to rounding, not bit for bit (docs/ad.md).
template <class Root>
struct split_sum : std::false_type {};
template <class Op, class B, class L, class R, axis_mask Mask>
struct split_sum<reduce_node<Op, binary_node<B, L, R>, Mask, false>> {
  using F = binary_node<B, L, R>;
  using SF = shape_of_t<F>;
  using SL = shape_of_t<L>;
  using SR = shape_of_t<R>;
  static constexpr std::size_t rank = SF::rank;
  static constexpr bool minus = std::is_same_v<B, op::sub>;
  static constexpr bool mean = std::is_same_v<Op, op::mean_of>;
  static constexpr bool broadcasts(auto s) {
    using S = typename decltype(s)::type;
    for (std::size_t j = 0; j < rank; ++j)
      if (S::static_extents[j] == 1 && SF::static_extents[j] != 1) return true;
    return false;
  }
  static constexpr bool value = [] {
    if constexpr (!(std::is_same_v<Op, op::sum_of> || std::is_same_v<Op, op::mean_of>) ||
                  !(std::is_same_v<B, op::add> || std::is_same_v<B, op::sub>) ||
                  !std::is_floating_point_v<value_type_t<F>> || rank == 0 || rank >= 64 ||
                  SL::rank != rank || SR::rank != rank) {
      return false;
    } else {
      return Mask == (axis_mask(1) << rank) - 1 &&
             std::is_same_v<value_type_t<L>, value_type_t<F>> &&
             std::is_same_v<value_type_t<R>, value_type_t<F>> &&
             (broadcasts(std::type_identity<SL>{}) || broadcasts(std::type_identity<SR>{}));
    }
  }();
};
template <class Root>
inline constexpr bool split_sum_v = split_sum<Root>::value;

/// Whether split_sum_value(e) reads at most half as many elements as e's own reduction
/// (otherwise backward computes value(e), for its bits: the per-term founding loss, whose
/// broadcast column adds 64 elements to the 64 x 5000 it reads anyway).
template <class Root>
bool split_sum_pays(Root const& e) {
  return 2 * (e.arg_.lhs_.shape().size() + e.arg_.rhs_.shape().size()) <= e.arg_.shape().size();
}

/// The value of a split_sum root, as described there.
template <class Ex, class Root>
value_type_t<Root> split_sum_value(Ex& ex, Root const& e) {
  using T = value_type_t<Root>;
  auto const& f = e.arg_;
  index_t const n = f.shape().size();
  if (n == 0) return T(0);
  // in double: the two parts can be large and of opposite signs (terms near -x and x),
  // where float parts would cancel to a few significant digits
  auto part = [&](auto const& x) {
    double const s = double(ex.value(gradix::sum(gradix::cast<double>(x))));
    if constexpr (split_sum<Root>::mean) return s / double(x.shape().size());
    else return s * double(n / x.shape().size());
  };
  double const l = part(f.lhs_), r = part(f.rhs_);
  return T(split_sum<Root>::minus ? l - r : l + r);
}

}  // namespace gradix::detail
