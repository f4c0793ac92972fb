#pragma once
/// \file
/// The save transform, written once over an executor (exec/executor.hpp): before a call
/// (eval, assign, value, backward, grad) runs an expression, every value the cost rule keeps
/// (ad/save.hpp) is computed once, innermost first, into a buffer of the call, and the
/// expression the call runs reads those buffers (saved_node). Backward kernels read them
/// too, so a reduction inside an expression costs its own size once, not once per element
/// that reads it. The executor does the work (assign, gemm, rows, segments, bags, arg-max)
/// and owns the memory; this file decides what is kept, in which order, and what the
/// transformed expression reads.
///
/// Buffers come from the executor's workspace of the calling thread (exec/workspace.hpp):
/// it only grows, so a warm call allocates nothing; `workspace_bytes(e)` tells what a call
/// on e needs. A call takes its buffers from the top of its thread's workspace and gives
/// them back when it returns (a call made while another is running on the same thread,
/// which gradix itself never does, gets buffers of its own). In constant evaluation every
/// kind of buffer is a separate value-initialized array (new[]), freed when the call
/// returns.

#include "gradix/ad/plan.hpp"
#include "gradix/ad/product.hpp"
#include "gradix/ad/save.hpp"
#include "gradix/config.hpp"
#include "gradix/core/error.hpp"
#include "gradix/eval/bag.hpp"
#include "gradix/eval/let.hpp"
#include "gradix/eval/map.hpp"
#include "gradix/eval/row.hpp"
#include "gradix/eval/saved.hpp"
#include "gradix/exec/executor.hpp"
#include "gradix/exec/workspace.hpp"
#include "gradix/expr/bag.hpp"
#include "gradix/expr/elementwise.hpp"
#include "gradix/expr/index.hpp"
#include "gradix/expr/let.hpp"
#include "gradix/expr/matmul.hpp"
#include "gradix/expr/param.hpp"
#include "gradix/expr/rebuild.hpp"
#include "gradix/expr/reduce.hpp"
#include "gradix/expr/saved.hpp"
#include "gradix/expr/scan.hpp"
#include "gradix/expr/take.hpp"
#include "gradix/expr/view.hpp"
#include "gradix/expr/visit.hpp"

#include <cstddef>
#include <new>
#include <type_traits>

namespace gradix::detail {

// ---------------------------------------------------------------------------------------
// The transform, and the sizes it needs (the same recursion: counting first, so that the
// buffers are taken from one reservation and never move while they are filled).

/// The node a kept N stands for: N itself, or the operand of a save mark.
template <class N>
struct kept_node {
  using type = N;
};
template <class A>
struct kept_node<save_mark_node<A>> {
  using type = A;
};

// ---------------------------------------------------------------------------------------
// Matrix products (expr/matmul.hpp): the operands as a gemm reads them, in place or copied.

template <class X>
struct is_unsqueeze : std::false_type {};
template <class A, std::size_t Axis>
struct is_unsqueeze<unsqueeze_node<A, Axis>> : std::true_type {
  static constexpr std::size_t axis = Axis;
};
/// Whether X is a slice (index_range) or an at (index_at) along one axis: a view of its
/// operand with the same rank.
template <class X>
struct is_range_index : std::false_type {};
template <class A, std::size_t Axis>
struct is_range_index<index_node<A, Axis, index_range>> : std::true_type {
  static constexpr bool range = true;
};
template <class A, std::size_t Axis>
struct is_range_index<index_node<A, Axis, index_at>> : std::true_type {
  static constexpr bool range = false;
};
/// The data and strides of operand x when a product can read it in place: a view, a
/// parameter, a kept value's buffer, and permutes, unsqueezes, slices and ats of those.
/// false otherwise.
template <class Ex, class T, class X, std::size_t R>
constexpr bool strided_of(X const& x, T const*& p, array<index_t, R>& st) {
  if constexpr (is_view_v<X>) {
    if constexpr (std::is_same_v<typename X::storage_type, T> &&
                  std::is_same_v<typename X::space_type, typename Ex::space>) {
      p = x.data_;
      st = x.strides_;
      return true;
    } else {
      return false;
    }
  } else if constexpr (is_param_node<X>::value) {
    return strided_of<Ex, T>(x.view_, p, st);
  } else if constexpr (is_saved_node<X>::value) {
    return strided_of<Ex, T>(x.buf_, p, st);
  } else if constexpr (requires { X::perm; x.arg_; }) {
    array<index_t, R> sa{};
    if (!strided_of<Ex, T>(x.arg_, p, sa)) return false;
    for (std::size_t k = 0; k < R; ++k) st[k] = sa[X::perm[k]];
    return true;
  } else if constexpr (is_unsqueeze<X>::value) {
    array<index_t, R - 1> sa{};
    if (!strided_of<Ex, T>(x.arg_, p, sa)) return false;
    for (std::size_t j = 0, k = 0; j < R; ++j) st[j] = j == is_unsqueeze<X>::axis ? 1 : sa[k++];
    return true;
  } else if constexpr (is_range_index<X>::value) {
    // a slice (or an at) of something read in place: its first element, and along its axis
    // the stride times the step (an LSTM cell's h = slice(hc, 0, H) read with lda = 2H)
    if (!strided_of<Ex, T>(x.arg_, p, st)) return false;
    if (x.shape().extent(X::axis) == 0) return false;  // (nothing to point at)
    p += st[X::axis] * x.idx_(0);
    if constexpr (is_range_index<X>::range) st[X::axis] *= x.idx_.step_;
    return true;
  } else {
    return false;
  }
}
/// Operand x of rank 2 or 3 as a product reads it in place; ok false when it must be copied
/// first (not a view of memory, or, for a BLAS, no unit stride along a matrix axis).
template <class Ex, class T, class X>
constexpr bool in_place_operand(X const& x, mat_ref<T>& r) {
  constexpr std::size_t R = shape_of_t<X>::rank;
  array<index_t, R> st{};
  T const* p = nullptr;
  if (!strided_of<Ex, T>(x, p, st)) return false;
  r = R == 3 ? mat_ref<T>{p, st[R - 2], st[R - 1], st[0]} : mat_ref<T>{p, st[R - 2], st[R - 1], 0};
  auto const sh = x.shape();
  return Ex::template in_place<T>(sh.extent(R - 2), sh.extent(R - 1), r.rs, r.cs);
}
/// Whether the save transform copies operand x (of the expression before the transform) of
/// a product: a product or a save mark becomes a kept buffer, read in place.
template <class Ex, class T, class X>
constexpr bool copies_operand(X const& x) {
  if constexpr (is_matmul_node<X>::value || is_save_mark_node_v<X>) {
    return false;
  } else {
    mat_ref<T> r;
    return !in_place_operand<Ex, T>(x, r);
  }
}
/// The workspace a product N needs beyond its value: copies of its operands, and in a
/// backward call its adjoint and its operands' adjoints.
template <class Ex, class N>
constexpr void count_product(N const& n, saved_sizes& z) {
  using T = value_type_t<N>;
  if (copies_operand<Ex, T>(n.lhs_)) z.template add<T>(std::size_t(n.lhs_.shape().size()));
  if (copies_operand<Ex, T>(n.rhs_)) z.template add<T>(std::size_t(n.rhs_.shape().size()));
  if (!z.argmax) return;
  z.template add_adjoint<T>(std::size_t(n.shape().size()));
  if constexpr (ad::reaches_param_v<decltype(n.lhs_)>) z.template add_adjoint<T>(std::size_t(n.lhs_.shape().size()));
  if constexpr (ad::reaches_param_v<decltype(n.rhs_)>) z.template add_adjoint<T>(std::size_t(n.rhs_.shape().size()));
}
/// Computes product n (its operands transformed already) into c (row-major, n's shape): its
/// operands read in place or copied into buffers of s first, then one gemm (per batch
/// element, or one for all when they stack). Returns the operands as the gemm read them.
template <class N, class Ex>
constexpr auto compute_product(N const& n, saved_space<Ex>& s, value_type_t<N>* c) {
  using T = value_type_t<N>;
  auto operand = [&](auto const& x) {
    mat_ref<T> r;
    if (in_place_operand<Ex, T>(x, r)) return r;
    using X = std::remove_cvref_t<decltype(x)>;
    constexpr std::size_t R = shape_of_t<X>::rank;
    T* q = s.template take<T>(std::size_t(x.shape().size()));
    tensor_view<T, shape_of_t<X>, row_major, typename Ex::space> v(q, x.shape());
    s.ex().assign(v, x);
    index_t const rows = x.shape().extent(R - 2), cols = x.shape().extent(R - 1);
    return mat_ref<T>{q, cols, 1, R == 3 ? rows * cols : 0};
  };
  struct operands {
    mat_ref<T> a, b;
  };
  operands const o{operand(n.lhs_), operand(n.rhs_)};
  s.ex().gemm(n.batch(), n.rows(), n.cols(), n.inner(), o.a, o.b, c, n.cols(), N::rank == 3 ? n.rows() * n.cols() : 0,
             false);
  return o;
}
/// A product kept: computed into a buffer of the call (compute_product); in a backward call
/// its adjoint buffers are taken too.
template <class N, class Ex>
constexpr auto keep_product(N const& n, saved_space<Ex>& s) {
  using T = value_type_t<N>;
  using S = shape_of_t<N>;
  using L = saved_layout_t<N>;
  T* c = s.template take<T>(std::size_t(n.shape().size()));
  auto const o = compute_product(n, s, c);
  using R = saved_node<N, L>;
  R r{s.keep_node(n), typename R::buffer_type(tensor_view<T, S, L, typename Ex::space>(c, n.shape()))};
  r.extra_.a = o.a;
  r.extra_.b = o.b;
  if (s.argmax()) {
    r.extra_.gc = adjoint_buffer<T, S>(s.template take_adjoint<T>(std::size_t(n.shape().size())), n.shape());
    if constexpr (ad::reaches_param_v<decltype(n.lhs_)>)
      r.extra_.ga = s.template take_adjoint<T>(std::size_t(n.lhs_.shape().size()));
    if constexpr (ad::reaches_param_v<decltype(n.rhs_)>)
      r.extra_.gb = s.template take_adjoint<T>(std::size_t(n.rhs_.shape().size()));
  }
  return r;
}

template <class Ex, class N>
constexpr saved_sizes scan_step_sizes(N const& n, bool backward);
/// Whether a call keeps every step's own kept values (a backward call, unless the scan
/// recomputes them: gx::recompute_steps).
template <class N>
constexpr bool scan_keeps_steps(bool backward) {
  return backward && !N::recompute;
}

template <class Ex, bool Under, class N>
constexpr void count_saved(N const& n, saved_sizes& z) {
  if constexpr (is_scan_node<N>::value) {
    // its operands' kept values; the carries, carry -1, the inputs; in a backward call the
    // value's adjoint, the initial carry's adjoint and the inputs' adjoint; one step's own values
    using T = value_type_t<N>;
    count_saved<Ex, true>(n.c0_, z);
    count_saved<Ex, true>(n.xs_, z);
    std::size_t const steps = std::size_t(n.steps()), c = std::size_t(n.c0_.shape().size());
    std::size_t const x = steps ? std::size_t(n.xs_.shape().size()) / steps : 0;
    z.template add<T>(steps * c + c + steps * x);
    if (z.argmax) {
      z.template add_adjoint<T>(steps * c + c);
      if constexpr (N::input_name::reaches_param) z.template add_adjoint<T>(steps * x);
    }
    if constexpr (N::options::has_lengths || N::options::has_stop)
      z.template add<index_t>(std::size_t(n.c0_.shape().extent(0)));  // each row's steps
    saved_sizes const zs = scan_step_sizes<Ex>(n, z.argmax);
    std::size_t const copies = scan_keeps_steps<N>(z.argmax) ? steps : 1;
    z.nf += copies * zs.nf;
    z.nd += copies * zs.nd;
    z.nl += copies * zs.nl;
    z.ni += copies * zs.ni;
    z.af += zs.af;
    z.ad += zs.ad;
    z.al += zs.al;
    return;
  } else if constexpr (is_let_node<N>::value) {
    // the operand's kept values, its value (unless its root keeps it), in a backward call
    // its adjoint, then the body's
    using Z = std::remove_cvref_t<decltype(n.z_)>;
    using T = value_type_t<Z>;
    count_saved<Ex, true>(n.z_, z);
    if constexpr (!ad::keeps_value_v<Z, true>) z.template add<T>(std::size_t(n.z_.shape().size()));
    if constexpr (ad::reaches_param_v<Z>)
      if (z.argmax) z.template add_adjoint<T>(std::size_t(n.z_.shape().size()));
    count_saved<Ex, Under>(n.body_, z);
    return;
  } else if constexpr (is_bound_let_node<N>::value) {
    count_saved<Ex, Under>(n.arg_, z);
    return;
  }
  if constexpr (ad::keeps_value_v<N, Under>) {
    z.template add<value_type_t<N>>(std::size_t(n.shape().size()));
    // the node kept: N, or the operand of a save mark (a gx::saved(max<...>(x)) keeps the
    // max, and its arg-max too, as keep_value does)
    using K = typename kept_node<N>::type;
    if constexpr (ad::needs_argmax<K>::value)
      if (z.argmax) z.template add<index_t>(std::size_t(n.shape().size()) * std::size_t(__builtin_popcountll(K::mask)));
  }
  if constexpr (ad::keeps_value_v<N, Under>) {
    // a kept sum or mean: its adjoint buffer, in a backward call
    using K = typename kept_node<N>::type;
    if constexpr (stages_reduction_v<K> && ad::reaches_param_v<K>)
      if (z.argmax) z.template add_adjoint<value_type_t<N>>(std::size_t(n.shape().size()));
  }
  if constexpr (is_matmul_node<N>::value) count_product<Ex>(n, z);
  if constexpr (is_row_node<N>::value) {
    if constexpr (N::norm) {  // r per row
      index_t const len = n.shape().extent(N::axis);
      z.template add<value_type_t<N>>(std::size_t(len > 0 ? n.shape().size() / len : 0));
    }
    if constexpr (ad::reaches_param_v<N>)
      if (z.argmax) z.template add_adjoint<value_type_t<N>>(2 * std::size_t(n.shape().size()));  // gout, gin
  }
  if constexpr (is_segment_sum_node<N>::value) {
    if (z.argmax) {  // bag_of and scale per position, the adjoint of the result
      z.template add<index_t>(std::size_t(n.arg_.shape().extent(0)));
      z.template add<value_type_t<N>>(std::size_t(n.arg_.shape().extent(0)));
      z.template add_adjoint<value_type_t<N>>(std::size_t(n.shape().size()));
    }
  }
  constexpr bool U = ad::operands_under_v<N>;
  // the value operands (expr/visit.hpp), called directly: one instantiation per level
  if constexpr (value_operand_count_v<N> >= 1) count_saved<Ex, U>(operand_at<0>(n), z);
  if constexpr (value_operand_count_v<N> >= 2) count_saved<Ex, U>(operand_at<1>(n), z);
}

/// A node kept: its value computed into a buffer of the call (or into, when given: row-major,
/// n's shape, not read by n), read from there.
template <class N, class Ex>
constexpr auto keep_value_assigned(N const& n, saved_space<Ex>& s, value_type_t<N>* into = nullptr);
/// A segment sum kept: its value, and in a backward call the bag and scale of each position
/// and a buffer for its adjoint.
template <class N, class Ex>
constexpr auto keep_segments(N const& n, saved_space<Ex>& s) {
  using T = value_type_t<N>;
  using L = saved_layout_t<N>;
  using S = shape_of_t<N>;
  static_assert(S::rank <= 2, "gradix::segment_sum: operands of rank 1 or 2");
  T* c = s.template take<T>(std::size_t(n.shape().size()));
  s.ex().segments(n, c);
  using R = saved_node<N, L>;
  R r{s.keep_node(n), typename R::buffer_type(tensor_view<T, S, L, typename Ex::space>(c, n.shape()))};
  if (!s.argmax()) return r;
  index_t const len = n.arg_.shape().extent(0);
  index_t* bag = s.template take<index_t>(std::size_t(len));
  T* sc = s.template take<T>(std::size_t(len));
  s.ex().bags(n, bag, sc);
  r.extra_.bag_of = bag;
  r.extra_.scale = sc;
  r.extra_.gout = adjoint_buffer<T, shape_of_t<N>>(s.template take_adjoint<T>(std::size_t(n.shape().size())), n.shape());
  return r;
}
/// A row node kept: its rows (row_values; the norms' factor per row too), and in a backward
/// call the buffers of its adjoint and of its operand's.
template <class N, class Ex>
constexpr auto keep_row(N const& n, saved_space<Ex>& s) {
  using T = value_type_t<N>;
  using S = shape_of_t<N>;
  using L = saved_layout_t<N>;
  T* c = s.template take<T>(std::size_t(n.shape().size()));
  T* rstd = nullptr;
  if constexpr (N::norm) {
    index_t const len = n.shape().extent(N::axis);
    rstd = s.template take<T>(std::size_t(len > 0 ? n.shape().size() / len : 0));
  }
  s.ex().rows(n, c, rstd);
  using R = saved_node<N, L>;
  R r{s.keep_node(n), typename R::buffer_type(tensor_view<T, S, L, typename Ex::space>(c, n.shape()))};
  r.extra_.rstd = rstd;
  if constexpr (ad::reaches_param_v<N>) {
    if (s.argmax()) {
      r.extra_.gout = adjoint_buffer<T, S>(s.template take_adjoint<T>(std::size_t(n.shape().size())), n.shape());
      r.extra_.gin = s.template take_adjoint<T>(std::size_t(n.shape().size()));
    }
  }
  return r;
}
/// A reshape kept (expr/view.hpp, is_kept_reshape): its buffer holds the operand's elements
/// in logical row-major order, which is what a reshape is. So the operand is assigned into
/// the buffer seen with the operand's own shape (walking the operand's axes, its last one
/// innermost: no coordinate remap at all), or, when the operand is a kept row-major buffer
/// already, that buffer is the reshape's (nothing copied). In a backward call, the buffer of
/// its adjoint.
template <class N, class Ex>
constexpr auto keep_reshape(N const& n, saved_space<Ex>& s) {
  using T = value_type_t<N>;
  using S = shape_of_t<N>;
  using L = saved_layout_t<N>;
  using A = std::remove_cvref_t<decltype(n.arg_)>;
  T const* data = nullptr;
  if constexpr (is_saved_node<A>::value && std::is_same_v<typename A::layout_type, row_major>) {
    data = n.arg_.buf_.data();
  } else {
    T* p = s.template take<T>(std::size_t(n.shape().size()));
    tensor_view<T, shape_of_t<A>, row_major, typename Ex::space> dst(p, n.arg_.shape());
    s.ex().assign(dst, n.arg_);
    data = p;
  }
  using R = saved_node<N, L>;
  R r{s.keep_node(n), typename R::buffer_type(data, n.shape())};
  if constexpr (ad::reaches_param_v<N>) {
    if (s.argmax()) r.extra_.gout = adjoint_buffer<T, S>(s.template take_adjoint<T>(std::size_t(n.shape().size())), n.shape());
  }
  return r;
}
template <class N, class Ex>
constexpr auto keep_value(N const& n, saved_space<Ex>& s) {
  if constexpr (is_matmul_node<N>::value) return keep_product(n, s);
  else if constexpr (is_kept_reshape<N>::value) return keep_reshape(n, s);
  else if constexpr (is_segment_sum_node<N>::value) return keep_segments(n, s);
  else if constexpr (is_row_node<N>::value) return keep_row(n, s);
  else return keep_value_assigned(n, s);
}
template <class N, class Ex>
constexpr auto keep_value_assigned(N const& n, saved_space<Ex>& s, value_type_t<N>* into) {
  using T = value_type_t<N>;
  using L = saved_layout_t<N>;
  using S = shape_of_t<N>;
  using Sp = typename Ex::space;
  T* p = into ? into : s.template take<T>(std::size_t(n.shape().size()));
  tensor_view<T, S, L, Sp> buf(p, n.shape());
  s.ex().assign(buf, n);
  using R = saved_node<N, L>;
  R r{s.keep_node(n), typename R::buffer_type(buf)};
  if constexpr (stages_reduction_v<N> && ad::reaches_param_v<N>) {
    if (s.argmax())
      r.extra_.gout = adjoint_buffer<T, S>(s.template take_adjoint<T>(std::size_t(n.shape().size())), n.shape());
  }
  if constexpr (ad::needs_argmax<N>::value) {
    if (!s.argmax()) return r;
    // the arg-max of each output element, for the backward
    constexpr std::size_t nred = std::size_t(__builtin_popcountll(N::mask));
    index_t* arg = s.template take<index_t>(std::size_t(n.shape().size()) * nred);
    s.ex().argmax(n, arg);
    r.argmax_ = arg;
  }
  return r;
}

template <bool Under, class N, class Ex>
constexpr auto with_saved(N const& n, saved_space<Ex>& s);

/// The save transform as rebuild's f.
template <class Ex>
struct saving {
  static constexpr bool drops_marks = true;  // a save mark becomes its saved_node
  saved_space<Ex>& s;
  template <bool U, class C>
  constexpr auto apply(C const& c) const {
    return with_saved<U>(c, s);
  }
};

/// A let transformed: its operand with its own kept values, its value in a buffer (its
/// root's, when the root keeps one, else one of the call's), the body bound to that buffer
/// and transformed, and in a backward call the buffer of the operand's adjoint.
template <class N, class Ex>
constexpr auto with_saved_into(N const& n, saved_space<Ex>& s, value_type_t<N>* dst, bool& wrote);
/// (Into: the body through with_saved_into, its root's value into dst.)
template <bool Under, bool Into = false, class Nm, class Z, class B, class Ex>
constexpr auto keep_let(let_node<Nm, Z, B> const& n, saved_space<Ex>& s, value_type_t<B>* dst = nullptr,
                        bool* wrote = nullptr) {
  using T = value_type_t<Z>;
  using S = shape_of_t<Z>;
  auto z2 = with_saved<true>(n.z_, s);
  using Z2 = decltype(z2);
  var_node<Nm> const v{n.z_.shape()};
  // in a backward call, the buffer of the operand's adjoint: every read of the placeholder
  // adds into it (its saved node holds it as the target of those kernels)
  T* gz = nullptr;
  if constexpr (Nm::reaches_param)
    if (s.argmax()) gz = s.template take_adjoint<T>(std::size_t(n.z_.shape().size()));
  auto rep = [&] {
    if constexpr (is_saved_node<Z2>::value) {
      using R = saved_node<var_node<Nm>, typename Z2::layout_type>;
      R r{s.keep_node(v), typename R::buffer_type(z2.buf_)};
      if (gz) r.extra_.g = let_grad<T, S, Nm>(gz, n.z_.shape());
      return r;
    } else {
      using L = saved_layout_t<Z>;
      using R = saved_node<var_node<Nm>, L>;
      using Sp = typename Ex::space;
      tensor_view<T, S, L, Sp> buf(s.template take<T>(std::size_t(n.z_.shape().size())), n.z_.shape());
      s.ex().assign(buf, z2);
      R r{s.keep_node(v), typename R::buffer_type(buf)};
      if (gz) r.extra_.g = let_grad<T, S, Nm>(gz, n.z_.shape());
      return r;
    }
  }();
  auto b2 = [&] {
    if constexpr (Into) return with_saved_into(bind_var<Nm>(n.body_, rep), s, dst, *wrote);
    else return with_saved<Under>(bind_var<Nm>(n.body_, rep), s);
  }();
  return bound_let_node<Nm, Z2, decltype(b2)>{z2, b2, gz};
}

template <class N, class Ex>
auto keep_scan(N const& n, saved_space<Ex>& s);

/// n with every value the rule keeps replaced by a saved_node over a filled buffer.
template <bool Under, class N, class Ex>
constexpr auto with_saved(N const& n, saved_space<Ex>& s) {
  if constexpr (is_scan_node<N>::value) {
    if (std::is_constant_evaluated()) fail("gradix::scan: not available in constant evaluation");
    return keep_scan(n, s);
  } else if constexpr (is_let_node<N>::value) {
    return keep_let<Under>(n, s);
  } else if constexpr (ad::buffer_count<N, Under>::value == 0) {
    return n;  // nothing kept below: the node as it is (leaves, saved nodes, plain subtrees)
  } else {
    auto r = rebuild<ad::operands_under_v<N>>(n, saving<Ex>{s});
    if constexpr (ad::keeps_value_v<N, Under>) return keep_value(r, s);
    else return r;
  }
}

/// with_saved<true>(n, s) (the same type), except that when the transform keeps n's root
/// value, under any lets, in a buffer an assign fills (a concat, say: an LSTM cell's
/// concat(h, c) under its two lets), that value is computed straight into dst (row-major,
/// n's shape, not read by n) instead; wrote tells whether it was. A scan step's body writes
/// its carry so: one kernel, not a buffer and a copy.
template <class N, class Ex>
constexpr auto with_saved_into(N const& n, saved_space<Ex>& s, value_type_t<N>* dst, bool& wrote) {
  if constexpr (is_let_node<N>::value) {
    return keep_let<true, true>(n, s, dst, &wrote);
  } else if constexpr (!is_scan_node<N>::value && ad::buffer_count<N, true>::value != 0 && ad::keeps_value_v<N, true>) {
    auto r = rebuild<ad::operands_under_v<N>>(n, saving<Ex>{s});
    using R = decltype(r);
    if constexpr (!is_matmul_node<R>::value && !is_kept_reshape<R>::value && !is_segment_sum_node<R>::value &&
                  !is_row_node<R>::value && std::is_same_v<saved_layout_t<R>, row_major>) {
      wrote = true;
      return keep_value_assigned(r, s, dst);
    } else {
      return keep_value(r, s);
    }
  } else {
    return with_saved<true>(n, s);
  }
}

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
  T* h = s.template take<T>(std::size_t(steps) * c);
  T* cinit = s.template take<T>(c);
  s.ex().assign(tensor_view<T, CS, row_major, Sp>(cinit, cs), c02);
  T* xb = s.template take<T>(std::size_t(steps) * x);
  using XsS = shape_of_t<decltype(xs2)>;
  s.ex().assign(tensor_view<T, XsS, row_major, Sp>(xb, xs2.shape()), xs2);
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
  constexpr std::size_t RC = CS::rank;
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
    bool wrote = false;  // the body's root value computed into ht already
    auto const e2 = [&] {
      if constexpr (rows_stop) return with_saved<true>(body_at(t), sp);
      else return with_saved_into(body_at(t), sp, ht.data_, wrote);
    }();
    static_assert(std::is_same_v<std::remove_cvref_t<decltype(e2)>, Step>,
                  "gradix internal: a scan step's body written into its carry has the kept step's type");
    if constexpr (rows_stop) {  // a finished row keeps its carry
      tensor_view<T const, CS, row_major, Sp> const prev(t == 0 ? cinit : h + std::size_t(t - 1) * c, cs);
      s.ex().assign(ht, ::gradix::where(scan_active<T, RC, Sp>(len, cs.extent(0), t), e2, prev));
    } else if (!wrote) {
      s.ex().assign(ht, e2);
    }
    if (keep) {
      last = s.keep_node(e2);
      if (all) all[t] = last;
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

/// Sizes of the buffers a call on the (prepared) expression e keeps.
template <class Ex, class E>
constexpr saved_sizes saved_sizes_of(E const& e, bool argmax) {
  saved_sizes z;
  z.argmax = argmax;
  count_saved<Ex, true>(e, z);
  return z;
}

/// The buffers of a call of these sizes; out of memory is a gradix::error naming op, raised
/// before anything is written.
template <class Ex>
constexpr saved_space<Ex> make_saved_space(saved_sizes const& z, char const* op, Ex& ex) {
  try {
    return saved_space<Ex>(z, ex);
  } catch (std::bad_alloc const&) {
    fail(op, ": out of memory for the ", z.bytes(), " bytes of saved values (nothing written)");
  }
}

/// Calls f(e2), where e2 is the prepared expression e with the values it keeps computed
/// into buffers of this call (e itself when it keeps none); Backward: the call runs backward
/// kernels (kept max reductions keep their arg-max too). Out of memory for the buffers is a
/// gradix::error naming op, raised before anything is written.
template <class Ex, bool Backward, class E, class F>
constexpr decltype(auto) run_with_saved_on(Ex& ex, E const& e, char const* op, F&& f) {
  if constexpr (ad::buffer_count_v<E> == 0) {
    return f(e);
  } else {
    saved_sizes const z = saved_sizes_of<Ex>(e, Backward);
    saved_space<Ex> s = make_saved_space<Ex>(z, op, ex);
    auto const e2 = with_saved<true>(e, s);
    return f(e2);
  }
}

/// eval / assign of a product at the root (a forward call), straight into dst (row-major,
/// contiguous, e's shape, not read by e): the operands' kept values and copies in the call's
/// buffers, the gemm writing dst.
template <class Ex, class N>
constexpr void product_into_on(Ex& ex, N const& n, value_type_t<N>* dst, char const* op) {
  saved_sizes z;
  count_saved<Ex, true>(n.lhs_, z);
  count_saved<Ex, true>(n.rhs_, z);
  count_product<Ex>(n, z);
  saved_space<Ex> s = make_saved_space<Ex>(z, op, ex);
  auto a = with_saved<true>(n.lhs_, s);
  auto b = with_saved<true>(n.rhs_, s);
  compute_product(matmul_node<decltype(a), decltype(b)>{a, b, n.shape_}, s, dst);
}

}  // namespace gradix::detail
