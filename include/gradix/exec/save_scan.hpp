#pragma once
/// \file
/// The save transform of a scan (expr/scan.hpp; exec/save.hpp is the transform itself, and
/// includes this file at its end): the forward runs the steps here, each step's body
/// transformed over one step's region and its value written into the carries' buffer; the
/// reverse sweep is a plan element (exec/elements.hpp, run_scan), which uses the helpers
/// below to rebuild a step's body.

#include "gradix/config.hpp"
#include "gradix/exec/save.hpp"
#include "gradix/expr/scan.hpp"

#include <cstddef>
#include <type_traits>

namespace gradix::detail {

// ---------------------------------------------------------------------------------------
// Scans (expr/scan.hpp): the steps run here, forward; the reverse sweep is a plan element
// (exec/elements.hpp, run_scan).

/// Step t's body: scan k's body with the carry read from c (carry t - 1) and x_t from the
/// inputs' buffer; in a backward call the carry's reads add their adjoint into gc and x_t's
/// into gxs at step t (gc null: none). K is the scanned node, or a scan_node for the sizes
/// (vc, vx then null: only types and shapes matter there).
template <class K, class CS, class XS, class T>
constexpr auto scan_body_at(K const& k, var_node<typename K::carry_name> const* vc, var_node<typename K::input_name> const* vx,
                            CS const& cs, XS const& xsh, T const* c, T const* x, T* gc, T* gx) {
  using CN = typename K::carry_name;
  using XN = typename K::input_name;
  using RC = saved_node<var_node<CN>, row_major>;
  using RX = saved_node<var_node<XN>, row_major>;
  RC rc{vc, typename RC::buffer_type(c, cs)};
  RX rx{vx, typename RX::buffer_type(x, xsh)};
  if constexpr (CN::reaches_param)
    if (gc) rc.extra_.g = let_grad<T, CS, CN>(gc, cs);
  if constexpr (XN::reaches_param)
    if (gx) rx.extra_.g = let_grad<T, XS, XN>(gx, xsh);
  return bind_var<XN>(bind_var<CN>(k.body_, rc), rx);
}
/// The sizes of one step's own kept values (the body with its placeholders bound).
template <class Ex, class N>
constexpr saved_sizes scan_step_sizes(N const& n, bool backward) {
  using T = value_type_t<N>;
  auto const cs = n.c0_.shape();
  auto const xsh = one_step(n.xs_.shape());
  auto const b = scan_body_at(n, nullptr, nullptr, cs, xsh, static_cast<T const*>(nullptr),
                              static_cast<T const*>(nullptr), static_cast<T*>(nullptr), static_cast<T*>(nullptr));
  saved_sizes z;
  z.argmax = backward;
  z.step_adjoints = scan_keeps_steps<N>(backward);
  count_saved<Ex, true>(b, z);
  return z;
}
/// The lengths as a column of the carry's rank R ([batch, 1, ..., 1]: it broadcasts along
/// the carry's other axes).
template <std::size_t R, class V>
constexpr auto batch_column(V const& v) {
  if constexpr (R <= 1) return v;
  else return ::gradix::unsqueeze<int(R) - 1>(batch_column<R - 1>(v));
}
/// 1 where row b of the carry still changes at step t (t < len[b]), 0 where it is finished.
template <class T, std::size_t R, class Sp>
constexpr auto scan_active(index_t const* len, index_t rows, index_t t) {
  tensor_view<index_t const, shape<dyn>, row_major, Sp> l(len, dims(rows));
  return ::gradix::cast<T>(batch_column<R>(l) > t);
}
/// Where step t of a reverse sweep adds the adjoint of carry t - 1 (its carry placeholder's
/// reads): in place, into the value's adjoint gout at row t - 1 (which already holds the
/// adjoint reaching carry t - 1 from outside the scan), and for t = 0 into ga, the initial
/// carry's adjoint. So no step copies a carry adjoint. (Null in a call without a backward.)
template <class T>
constexpr T* scan_carry_grad(index_t t, std::size_t c, T* ga, T* gout) {
  if (!gout) return nullptr;
  return t == 0 ? ga : gout + std::size_t(t - 1) * c;
}
// ---------------------------------------------------------------------------------------
// A kept step in one launch (an executor with assigns_together): the buffers of its lets
// and its root's value written by one launch, each from the lets' operands recomputed where
// they are read (an LSTM cell's kept step: its product and one launch, not four).

/// One member of such a launch: dst = e (exec/executor.hpp, assign_together).
template <class V, class E>
struct assign_member {
  V dst_;
  E e_;
};

/// The members pend (a tuple of assign_member) run: one launch (none when pend is empty).
template <class Ex, class... M>
constexpr void assign_pending(saved_space<Ex>& s, tuple<M...> const& pend) {
  if constexpr (sizeof...(M) == 1) s.ex().assign(get<0>(pend).dst_, get<0>(pend).e_);
  else if constexpr (sizeof...(M) > 1) s.ex().assign_together(pend);
}

template <bool First, class NK, class NI, class Ex, class P>
constexpr auto keep_together(NK const& nk, NI const& ni, saved_space<Ex>& s, value_type_t<NK>* dst, bool& wrote,
                             P const& pend);

/// A let of the chain (keep_let_rest's work, its buffer's assign pending): nk over the
/// earlier lets' buffers (the kept step's type), ni the same let over the expressions those
/// buffers hold (what the launch computes). First: the chain's first let, whose operand's own
/// kept values (a product) are computed here, before anything is pending; a later let's
/// operand keeps nothing (else what is pending runs first, and the rest as keep_let does).
template <bool First, class Nm, class Z, class B, class NI, class Ex, class P>
constexpr auto keep_together_let(let_node<Nm, Z, B> const& nk, NI const& ni, saved_space<Ex>& s,
                                 value_type_t<B>* dst, bool& wrote, P const& pend) {
  if constexpr (!First && ad::buffer_count<Z, true>::value != 0) {
    assign_pending(s, pend);
    return keep_let<true, true, false>(nk, s, dst, &wrote);
  } else {
    using T = value_type_t<Z>;
    using S = shape_of_t<Z>;
    auto z2 = with_saved<true>(nk.z_, s);  // (a later let's: nk.z_ itself, nothing run)
    using Z2 = decltype(z2);
    auto zi = [&] {
      if constexpr (First) {
        return z2;
      } else {
        static_assert(ad::buffer_count<std::remove_cvref_t<decltype(ni.z_)>, true>::value == 0,
                      "gradix internal: a let's operand over the earlier lets' expressions keeps nothing");
        return ni.z_;
      }
    }();
    var_node<Nm> const v{nk.z_.shape()};
    T* gz = nullptr;
    if constexpr (Nm::reaches_param)
      if (s.argmax()) gz = s.template take_step_adjoint<T>(std::size_t(nk.z_.shape().size()));
    if constexpr (is_saved_node<Z2>::value) {  // its value in its root's buffer, written
      using R = saved_node<var_node<Nm>, typename Z2::layout_type>;
      R r{s.keep_node(v), typename R::buffer_type(z2.buf_)};
      if (gz) r.extra_.g = let_grad<T, S, Nm>(gz, nk.z_.shape());
      auto b2 = keep_together<false>(bind_var<Nm>(nk.body_, r), bind_var<Nm>(ni.body_, r), s, dst, wrote, pend);
      return bound_let_node<Nm, Z2, decltype(b2)>{z2, b2, gz};
    } else {
      using L = saved_layout_t<Z>;
      using R = saved_node<var_node<Nm>, L>;
      tensor_view<T, S, L, typename Ex::space> buf(s.template take<T>(std::size_t(nk.z_.shape().size())), nk.z_.shape());
      R r{s.keep_node(v), typename R::buffer_type(buf)};
      if (gz) r.extra_.g = let_grad<T, S, Nm>(gz, nk.z_.shape());
      auto const more = ::gradix::tuple_cat(pend, ::gradix::make_tuple(assign_member<decltype(buf), decltype(zi)>{buf, zi}));
      auto b2 = keep_together<false>(bind_var<Nm>(nk.body_, r), bind_var<Nm>(ni.body_, zi), s, dst, wrote, more);
      return bound_let_node<Nm, Z2, decltype(b2)>{z2, b2, gz};
    }
  }
}

/// with_saved_into<false>'s result for nk (the same type; ni: nk over the expressions the
/// pending buffers hold), the pending members and the root's value run as one launch when
/// the root keeps nothing below it; else what is pending runs, then the rest as before.
template <bool First, class NK, class NI, class Ex, class P>
constexpr auto keep_together(NK const& nk, NI const& ni, saved_space<Ex>& s, value_type_t<NK>* dst, bool& wrote,
                             P const& pend) {
  using T = value_type_t<NK>;
  using S = shape_of_t<NK>;
  using Sp = typename Ex::space;
  if constexpr (is_let_node<NK>::value) {
    return keep_together_let<First>(nk, ni, s, dst, wrote, pend);
  } else if constexpr (!is_scan_node<NK>::value && ad::buffer_count<NK, true>::value == 1 && ad::keeps_value_v<NK, true> &&
                       !is_matmul_node<NK>::value && !is_kept_reshape<NK>::value && !is_segment_sum_node<NK>::value &&
                       !is_row_node<NK>::value && std::is_same_v<saved_layout_t<NK>, row_major>) {
    // a root keeping its value (a concat) over operands that keep nothing: its value into
    // dst (or a buffer of the step), in the launch
    T* p = dst ? dst : s.template take<T>(std::size_t(nk.shape().size()));
    tensor_view<T, S, row_major, Sp> const out(p, nk.shape());
    assign_pending(s, ::gradix::tuple_cat(pend, ::gradix::make_tuple(assign_member<decltype(out), NI>{out, ni})));
    wrote = dst != nullptr;
    return keep_value_assigned(nk, s, p, false);
  } else if constexpr (ad::buffer_count<NK, true>::value == 0) {
    // a root keeping nothing: its value into dst in the launch (keep_scan assigns it else)
    if (dst) {
      tensor_view<T, S, row_major, Sp> const out(dst, nk.shape());
      assign_pending(s, ::gradix::tuple_cat(pend, ::gradix::make_tuple(assign_member<decltype(out), NI>{out, ni})));
      wrote = true;
    } else {
      assign_pending(s, pend);
    }
    return nk;
  } else {
    assign_pending(s, pend);
    return with_saved_into<false>(nk, s, dst, wrote);
  }
}

/// with_saved_into<false>(n, s, dst, wrote) (the same type and values), on an executor that
/// assigns several buffers in one launch (Ex::assigns_together): a step's body under lets has
/// its lets' buffers and its root's value written by one launch, after its first let's own
/// kept values (a product). Else with_saved_into<false> itself.
template <class N, class Ex>
constexpr auto with_saved_together(N const& n, saved_space<Ex>& s, value_type_t<N>* dst, bool& wrote) {
  if constexpr (is_let_node<N>::value && Ex::assigns_together)
    return keep_together<true>(n, n, s, dst, wrote, tuple<>{});
  else
    return with_saved_into<false>(n, s, dst, wrote);
}

/// A scan kept: its operands transformed, c0 and the inputs computed into buffers of the
/// call, then each step's body transformed over one step's region (its own kept values:
/// products, reductions, lets) and its value assigned into the carries' buffer; the last
/// step's transformed body is kept (the reverse sweep's pre-pass plans it).
template <class N, class Ex>
auto keep_scan(N const& n, saved_space<Ex>& s) {
  using T = value_type_t<N>;
  using CN = typename N::carry_name;
  using XN = typename N::input_name;
  using Sp = typename Ex::space;
  using Opt = typename N::options;
  index_t const steps = n.steps();
  if constexpr (Opt::has_lengths) {  // checked before anything runs
    index_t const rows = n.c0_.shape().extent(0), nl = n.opt_.len_.shape().extent(0);
    if (nl != rows)
      fail("gradix::scan: gx::lengths has ", nl, " lengths but the carry has ", rows, " rows (its extent along axis 0)");
    for (index_t b = 0; b < nl; ++b) {
      index_t const v = index_t(n.opt_.len_(b));
      if (v < 0 || v > steps)
        fail("gradix::scan: lengths[", b, "] = ", v, " is outside the sequence of ", steps, " steps");
    }
  }
  s.hold_arena();  // the steps' nodes are given back with the call's
  auto c02 = with_saved<true>(n.c0_, s);
  auto xs2 = with_saved<true>(n.xs_, s);
  auto const cs = n.c0_.shape();
  auto const xsh = one_step(n.xs_.shape());
  using CS = std::remove_cvref_t<decltype(cs)>;
  std::size_t const c = std::size_t(cs.size()), x = std::size_t(xsh.size());
  // carry -1 then the carries, one buffer: the carry each step reads is row block t of one
  // evenly strided matrix (a product reading it in place over every step: sweep_deferral)
  T* cinit = s.template take<T>(std::size_t(steps) * c + c);
  T* h = cinit + c;
  s.ex().assign(tensor_view<T, CS, row_major, Sp>(cinit, cs), c02);
  // the inputs: read in place where the sequence's transform left them in one row-major
  // buffer of the call (a product over the whole sequence: api/scan_hoist.hpp's x W_x), else
  // computed into a buffer of the call
  using XsS = shape_of_t<decltype(xs2)>;
  using X2 = std::remove_cvref_t<decltype(xs2)>;
  T const* xb = nullptr;
  if constexpr (is_saved_node<X2>::value) {
    if constexpr (std::is_same_v<typename X2::layout_type, row_major> && std::is_same_v<typename X2::buffer_type::space_type, Sp>)
      xb = xs2.buf_.data();
  }
  if (!xb) {
    T* const b = s.template take<T>(std::size_t(steps) * x);
    s.ex().assign(tensor_view<T, XsS, row_major, Sp>(b, xs2.shape()), xs2);
    xb = b;
  }
  T *gout = nullptr, *ga = nullptr, *gxs = nullptr;
  if (s.argmax()) {
    gout = s.template take_adjoint<T>(std::size_t(steps) * c);
    ga = s.template take_adjoint<T>(c);
    if constexpr (XN::reaches_param) gxs = s.template take_adjoint<T>(std::size_t(steps) * x);
  }
  saved_sizes const zs = scan_step_sizes<Ex>(n, s.argmax());
  bool const keep_all = scan_keeps_steps<N>(s.argmax());
  std::size_t const copies = keep_all ? std::size_t(steps) : 1;
  scan_region r;
  r.nf = zs.nf;
  r.nd = zs.nd;
  r.nl = zs.nl;
  r.ni = zs.ni;
  r.af = zs.af;
  r.ad = zs.ad;
  r.al = zs.al;
  r.copies = copies;
  r.f = s.template take<float>(copies * zs.nf);
  r.d = s.template take<double>(copies * zs.nd);
  r.l = s.template take<long double>(copies * zs.nl);
  r.i = s.template take<index_t>(copies * zs.ni);
  r.fa = s.template take_adjoint<float>(zs.af);
  r.da = s.template take_adjoint<double>(zs.ad);
  r.la = s.template take_adjoint<long double>(zs.al);
  auto const* vc = s.keep_node(var_node<CN>{cs});
  auto const* vx = s.keep_node(var_node<XN>{xsh});
  auto body_at = [&](index_t t) {
    return scan_body_at(n, vc, vx, cs, xsh, static_cast<T const*>(t == 0 ? cinit : h + std::size_t(t - 1) * c),
                        static_cast<T const*>(xb + std::size_t(t) * x), scan_carry_grad(t, c, ga, gout),
                        gxs ? gxs + std::size_t(t) * x : nullptr);
  };
  // each row's number of steps (with lengths or a stop condition), and the steps that run:
  // after the last row finished, a step copies the carry
  index_t* len = nullptr;
  index_t ran = steps;
  constexpr bool rows_stop = Opt::has_lengths || Opt::has_stop;
  [[maybe_unused]] constexpr std::size_t RC = CS::rank;
  if constexpr (rows_stop) {
    index_t const rows = cs.extent(0);
    len = s.template take<index_t>(std::size_t(rows));
    ran = 0;
    for (index_t b = 0; b < rows; ++b) {
      if constexpr (Opt::has_lengths) len[b] = index_t(n.opt_.len_(b));
      else len[b] = steps;
      ran = len[b] > ran ? len[b] : ran;
    }
  }
  using Step = decltype(with_saved<true>(body_at(0), s));
  Step const* last = nullptr;
  Step const** all = keep_all ? s.template keep_array<Step const*>(std::size_t(steps)) : nullptr;
  for (index_t t = 0; t < steps; ++t) {
    tensor_view<T, CS, row_major, Sp> const ht(h + std::size_t(t) * c, cs);
    if (t >= ran) {  // every row finished: the carry repeats
      if (all) all[t] = nullptr;
      s.ex().assign(ht, tensor_view<T const, CS, row_major, Sp>(t == 0 ? cinit : h + std::size_t(t - 1) * c, cs));
      continue;
    }
    // each step's values in its own part of the region (or all in one, given back after
    // the step, when they are not kept), the adjoint buffers shared
    bool const keep = keep_all || Opt::has_stop || t == ran - 1;  // (a stop makes any step the last)
    saved_space<Ex> sp(zs, s.ex(), r, keep_all ? std::size_t(t) : 0, keep);
    // the step: its body transformed over sp, its value into ht (straight from the kernel of
    // a kept root, under any lets); Inline: its lets' elementwise operands recomputed where
    // they are read (a step whose values nothing reads later: a forward call's, or with
    // gx::recompute_steps, every step but the last; an LSTM cell's step is then its product
    // and one kernel)
    auto run_step = [&](auto inline_lets) {
      constexpr bool Inline = decltype(inline_lets)::value;
      bool wrote = false;
      auto const e2 = [&] {
        T* const dst = rows_stop ? static_cast<T*>(nullptr) : ht.data_;
        if constexpr (Inline) return with_saved_into<true>(body_at(t), sp, dst, wrote);
        else return with_saved_together(body_at(t), sp, dst, wrote);
      }();
      if constexpr (rows_stop) {  // a finished row keeps its carry
        tensor_view<T const, CS, row_major, Sp> const prev(t == 0 ? cinit : h + std::size_t(t - 1) * c, cs);
        s.ex().assign(ht, ::gradix::where(scan_active<T, RC, Sp>(len, cs.extent(0), t), e2, prev));
      } else if (!wrote) {
        s.ex().assign(ht, e2);
      }
      return e2;
    };
    bool inlined = false;
    if constexpr (!Opt::has_stop && Ex::inlines_step_lets) {
      if (!keep) {
        run_step(std::true_type{});
        inlined = true;
      }
    }
    if (!inlined) {
      auto const e2 = run_step(std::false_type{});
      static_assert(std::is_same_v<std::remove_cvref_t<decltype(e2)>, Step>,
                    "gradix internal: a scan step's body written into its carry has the kept step's type");
      if (keep) {
        last = s.keep_node(e2);
        if (all) all[t] = last;
      }
    }
    if constexpr (Opt::has_stop) {
      if (n.opt_.stop_(tensor_view<T const, CS, row_major, Sp>(ht.data_, cs), t)) {
        for (index_t b = 0; b < cs.extent(0); ++b) len[b] = len[b] < t + 1 ? len[b] : t + 1;
        ran = t + 1;
      }
    }
  }
  using K = scanned<CN, XN, decltype(c02), decltype(xs2), std::remove_cvref_t<decltype(n.body_)>, Step>;
  K k{c02, xs2, n.body_, n.shape_};
  k.h_ = h;
  k.c_init_ = cinit;
  k.x_ = xb;
  k.gout_ = gout;
  k.ga_ = ga;
  k.gxs_ = gxs;
  k.region_ = r;
  k.last_ = last;
  k.steps_ = all;
  k.len_ = len;
  k.ran_ = ran;
  k.vc_ = vc;
  k.vx_ = vx;
  using R = saved_node<K, row_major>;
  return R{s.keep_node(k), typename R::buffer_type(h, n.shape())};
}

}  // namespace gradix::detail
