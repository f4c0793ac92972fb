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
  if (z.step_adjoints) z.template add<T>(std::size_t(n.shape().size()));  // (take_step_adjoint)
  else z.template add_adjoint<T>(std::size_t(n.shape().size()));
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
    r.extra_.gc = adjoint_buffer<T, S>(s.template take_step_adjoint<T>(std::size_t(n.shape().size())), n.shape());
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
    if constexpr (ad::reaches_param_v<Z>) {
      if (z.argmax) {
        if (z.step_adjoints) z.template add<T>(std::size_t(n.z_.shape().size()));  // (take_step_adjoint)
        else z.template add_adjoint<T>(std::size_t(n.z_.shape().size()));
      }
    }
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
constexpr auto keep_value_assigned(N const& n, saved_space<Ex>& s, value_type_t<N>* into = nullptr, bool assign = true);
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
constexpr auto keep_value_assigned(N const& n, saved_space<Ex>& s, value_type_t<N>* into, bool assign) {
  using T = value_type_t<N>;
  using L = saved_layout_t<N>;
  using S = shape_of_t<N>;
  using Sp = typename Ex::space;
  T* p = into ? into : s.template take<T>(std::size_t(n.shape().size()));
  tensor_view<T, S, L, Sp> buf(p, n.shape());
  if (assign) s.ex().assign(buf, n);  // (!assign: into was written already, exec/save_scan.hpp)
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

template <bool Inline, class N, class Ex>
constexpr auto with_saved_into(N const& n, saved_space<Ex>& s, value_type_t<N>* dst, bool& wrote);

/// keep_let's work once its operand is transformed (z2): the operand's value in a buffer
/// (its root's, when the root keeps one, else one of the call's), the body bound to that
/// buffer and transformed (Into: through with_saved_into<Inline>, its root's value into
/// dst), and in a backward call the buffer of the operand's adjoint.
template <bool Under, bool Into, bool Inline, class Nm, class Z, class B, class Ex, class Z2>
constexpr auto keep_let_rest(let_node<Nm, Z, B> const& n, saved_space<Ex>& s, Z2 const& z2, value_type_t<B>* dst,
                             bool* wrote) {
  using T = value_type_t<Z>;
  using S = shape_of_t<Z>;
  var_node<Nm> const v{n.z_.shape()};
  // in a backward call, the buffer of the operand's adjoint: every read of the placeholder
  // adds into it (its saved node holds it as the target of those kernels)
  T* gz = nullptr;
  if constexpr (Nm::reaches_param)
    if (s.argmax()) gz = s.template take_step_adjoint<T>(std::size_t(n.z_.shape().size()));
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
    if constexpr (Into) return with_saved_into<Inline>(bind_var<Nm>(n.body_, rep), s, dst, *wrote);
    else return with_saved<Under>(bind_var<Nm>(n.body_, rep), s);
  }();
  return bound_let_node<Nm, Z2, decltype(b2)>{z2, b2, gz};
}
/// A let transformed: its operand with its own kept values, then keep_let_rest. Inline (a
/// step whose values are not kept, exec below): an operand that keeps nothing once
/// transformed (elementwise and index nodes over kept values, views and parameters) is not
/// computed into a buffer: the body reads the expression where it read the placeholder,
/// recomputing it there (an LSTM cell's gates and c2 in its concat's kernel).
template <bool Under, bool Into = false, bool Inline = false, class Nm, class Z, class B, class Ex>
constexpr auto keep_let(let_node<Nm, Z, B> const& n, saved_space<Ex>& s, value_type_t<B>* dst = nullptr,
                        bool* wrote = nullptr) {
  auto z2 = with_saved<true>(n.z_, s);
  using Z2 = decltype(z2);
  if constexpr (Inline && ad::buffer_count<Z2, false>::value == 0)
    return with_saved_into<true>(bind_var<Nm>(n.body_, z2), s, dst, *wrote);
  else
    return keep_let_rest<Under, Into, Inline>(n, s, z2, dst, wrote);
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
template <bool Inline, class N, class Ex>
constexpr auto with_saved_into(N const& n, saved_space<Ex>& s, value_type_t<N>* dst, bool& wrote) {
  if constexpr (is_let_node<N>::value) {
    return keep_let<true, true, Inline>(n, s, dst, &wrote);
  } else if constexpr (!is_scan_node<N>::value && ad::buffer_count<N, true>::value != 0 && ad::keeps_value_v<N, true>) {
    auto r = rebuild<ad::operands_under_v<N>>(n, saving<Ex>{s});
    using R = decltype(r);
    if constexpr (!is_matmul_node<R>::value && !is_kept_reshape<R>::value && !is_segment_sum_node<R>::value &&
                  !is_row_node<R>::value && std::is_same_v<saved_layout_t<R>, row_major>) {
      wrote = dst != nullptr;
      return keep_value_assigned(r, s, dst);
    } else {
      return keep_value(r, s);
    }
  } else {
    return with_saved<true>(n, s);
  }
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

#include "gradix/exec/save_scan.hpp"  // keep_scan and the steps' helpers (declared above)
