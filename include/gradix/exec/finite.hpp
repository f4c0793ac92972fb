#pragma once
/// \file
/// The non-finite check mode (opt-in): `gradix::set_check_finite(true)`, or the environment
/// variable GRADIX_CHECK_FINITE=1 at start-up. While it is on, eval, assign, value, backward
/// and grad scan what they produce, and the first NaN or infinity throws gradix::error
/// naming it:
///
/// - a forward result: the element's coordinate, and the input leaf that already held a
///   non-finite value, or the node that produced the first one (the first node, children
///   before parents, whose value has one: with GRADIX_CHECK_FINITE_NODES, on by default
///   without NDEBUG; it costs compile time);
/// - a gradient: the parameter (its position among the expression's parameters, counted
///   from 0 in reading order, and its shape) and the element's coordinate.
///
/// The scan runs after the values are written: when it throws, the destination (or the
/// gradient) holds them. Off, it costs one relaxed atomic load per call.

#include "gradix/config.hpp"
#include "gradix/core/coords.hpp"
#include "gradix/core/error.hpp"
#include "gradix/core/math.hpp"
#include "gradix/core/shape.hpp"
#include "gradix/core/tensor.hpp"
#include "gradix/eval/elementwise.hpp"
#include "gradix/eval/evaluator.hpp"
#include "gradix/eval/bag.hpp"
#include "gradix/eval/matmul.hpp"
#include "gradix/eval/row.hpp"
#include "gradix/expr/row.hpp"
#include "gradix/expr/visit.hpp"
#include "gradix/grad/storage.hpp"

#include <atomic>
#include <cstdlib>

#if !defined(NDEBUG) && !defined(GRADIX_CHECK_FINITE_NODES)
#define GRADIX_CHECK_FINITE_NODES 1
#endif
#include <string>
#include <type_traits>

namespace gradix {

namespace detail {
[[gnu::noinline]] inline std::atomic<bool>& check_finite_flag() {  // out of line: see host::scratch()
  static std::atomic<bool> flag{[] {
    char const* s = std::getenv("GRADIX_CHECK_FINITE");
    return s && s[0] != '\0' && s[0] != '0';
  }()};
  return flag;
}
}  // namespace detail

/// Turns the non-finite check mode on or off (for every thread).
inline void set_check_finite(bool on) {
  detail::check_finite_flag().store(on, std::memory_order_relaxed);
}
/// Whether the non-finite check mode is on.
inline bool check_finite() { return detail::check_finite_flag().load(std::memory_order_relaxed); }

namespace detail {

template <class T>
constexpr bool is_finite_value(T v) {
  if constexpr (std::is_floating_point_v<T>) return math::detail::cisfinite(double(v));
  else return true;
}

/// A non-finite value found at a coordinate (what the scans below return).
struct nonfinite_at {
  bool found = false;
  std::size_t rank = 0;
  index_t c[16] = {};
  double value = 0;
  char const* name() const { return value != value ? "NaN" : (value > 0 ? "+inf" : "-inf"); }
  std::string coord() const {
    std::string s = "[";
    for (std::size_t k = 0; k < rank; ++k) {
      if (k) s += ", ";
      s += std::to_string(c[k]);
    }
    return s + "]";
  }
};
/// The first non-finite element, in row-major coordinate order, of elements at
/// p + sum c_k st_k (run-time rank: one instantiation per element type).
template <class T>
nonfinite_at scan_block(T const* p, std::size_t rank, index_t const* ext, index_t const* st) {
  nonfinite_at r;
  r.rank = rank;
  index_t total = 1;
  for (std::size_t k = 0; k < rank; ++k) total *= ext[k];
  for (index_t n = 0; n < total; ++n) {
    index_t off = 0;
    for (std::size_t k = 0; k < rank; ++k) off += r.c[k] * st[k];
    if (!is_finite_value(p[off])) {
      r.found = true;
      r.value = double(p[off]);
      return r;
    }
    for (std::size_t k = rank; k-- > 0;) {
      if (++r.c[k] < ext[k]) break;
      r.c[k] = 0;
    }
  }
  return {};
}
template <class V>
nonfinite_at scan_view(V const& v) {
  if constexpr (!std::is_floating_point_v<std::remove_const_t<typename V::element_type>> || V::rank > 16) {
    return {};
  } else {
    auto ext = v.shape().extents();
    auto const& st = v.strides();
    return scan_block(static_cast<std::remove_const_t<typename V::element_type> const*>(v.data()), V::rank,
                      ext.begin(), st.begin());  // begin(): rank 0 has no element 0
  }
}

/// A short label of a node kind, for messages.
template <class Op>
constexpr char const* op_label() {
  if constexpr (requires { Op::name; }) return Op::name;
  else return "operation";
}
template <class N>
struct node_label_of {
  static constexpr char const* get() {
    if constexpr (is_param_node<N>::value) return "parameter";
    else if constexpr (is_view_v<N>) return "tensor";
    else return "node";
  }
};
template <class Op, class A>
struct node_label_of<unary_node<Op, A>> {
  static constexpr char const* get() { return op_label<Op>(); }
};
template <class Op, class L, class R>
struct node_label_of<binary_node<Op, L, R>> {
  static constexpr char const* get() { return op_label<Op>(); }
};
template <class Op, class A, axis_mask M, bool K>
struct node_label_of<reduce_node<Op, A, M, K>> {
  static constexpr char const* get() { return op_label<Op>(); }
};
template <class A, std::size_t Axis, class Idx>
struct node_label_of<index_node<A, Axis, Idx>> {
  static constexpr char const* get() { return Idx::name; }
};
template <class A, class P, std::size_t Axis>
struct node_label_of<take_along_node<A, P, Axis>> {
  static constexpr char const* get() { return "take_along"; }
};
template <class T, class P, class S>
struct node_label_of<one_hot_node<T, P, S>> {
  static constexpr char const* get() { return "one_hot"; }
};
template <class A, std::size_t Axis, row_kind K>
struct node_label_of<row_node<A, Axis, K>> {
  static constexpr char const* get() { return row_kind_name(K); }
};
template <class L, class R, std::size_t Axis>
struct node_label_of<concat_node<L, R, Axis>> {
  static constexpr char const* get() { return "concat"; }
};
template <class T, class S, class F>
struct node_label_of<pattern_node<T, S, F>> {
  static constexpr char const* get() { return "pattern"; }
};
template <class A, std::size_t Axis>
struct node_label_of<argmax_node<A, Axis>> {
  static constexpr char const* get() { return "argmax"; }
};
template <class A, std::size_t... P>
struct node_label_of<permute_node<A, P...>> {
  static constexpr char const* get() { return "permute"; }
};
template <class A, std::size_t Axis>
struct node_label_of<unsqueeze_node<A, Axis>> {
  static constexpr char const* get() { return "unsqueeze"; }
};
template <class A, class S>
struct node_label_of<reshape_node<A, S>> {
  static constexpr char const* get() { return "reshape"; }
};
template <class A, class S>
struct node_label_of<broadcast_node<A, S>> {
  static constexpr char const* get() { return "broadcast_to"; }
};
template <class A, class I>
struct node_label_of<segment_sum_node<A, I>> {
  static constexpr char const* get() { return "segment_sum"; }
};
template <class A, class B>
struct node_label_of<matmul_node<A, B>> {
  static constexpr char const* get() { return "matmul"; }
};

/// Nodes that only rearrange their operand's elements (index and view nodes, detach): with a
/// finite operand, which the children-first walk has checked before, their values are finite,
/// so they are not evaluated on their own (nor instantiated for it: compile time).
template <class N>
struct rearranges : std::false_type {};
template <class A, std::size_t Axis, class Idx>
struct rearranges<index_node<A, Axis, Idx>> : std::true_type {};
template <class A, std::size_t... P>
struct rearranges<permute_node<A, P...>> : std::true_type {};
template <class A, std::size_t Axis>
struct rearranges<unsqueeze_node<A, Axis>> : std::true_type {};
template <class A, class S>
struct rearranges<reshape_node<A, S>> : std::true_type {};
template <class A, class S>
struct rearranges<broadcast_node<A, S>> : std::true_type {};
template <class A>
struct rearranges<detach_node<A>> : std::true_type {};
template <class A, class P, std::size_t Axis>
struct rearranges<take_along_node<A, P, Axis>> : std::true_type {};
template <class T, class P, class S>
struct rearranges<one_hot_node<T, P, S>> : std::true_type {};  // 0 and 1 only
template <class L, class R, std::size_t Axis>
struct rearranges<concat_node<L, R, Axis>> : std::true_type {};
template <class T, class S, class F>
struct rearranges<pattern_node<T, S, F>> : std::true_type {};  // a mask: 0, 1 or dropout's scale

/// The value of node n at coordinate c, as its evaluator computes it. Elementwise nodes get
/// one function per node type that calls their operands' (never inlined), so naming the node
/// that produced a value costs O(1) code per node; an evaluator per node (whose code holds
/// its whole subtree) made it O(depth^2) for a chain. Other nodes use their evaluator.
template <class N>
[[gnu::noinline, gnu::cold]] value_type_t<N> node_value_at(N const& n, coord<shape_of_t<N>::rank> const& c);
template <class Op, class A>
[[gnu::noinline, gnu::cold]] value_type_t<unary_node<Op, A>> node_value_at(
    unary_node<Op, A> const& n, coord<shape_of_t<A>::rank> const& c);
template <class Op, class L, class R>
[[gnu::noinline, gnu::cold]] value_type_t<binary_node<Op, L, R>> node_value_at(
    binary_node<Op, L, R> const& n, coord<shape_of_t<binary_node<Op, L, R>>::rank> const& c);

template <class N>
value_type_t<N> node_value_at(N const& n, coord<shape_of_t<N>::rank> const& c) {
  return ev::evaluator<N>(n)(c);
}
template <class Op, class A>
value_type_t<unary_node<Op, A>> node_value_at(unary_node<Op, A> const& n, coord<shape_of_t<A>::rank> const& c) {
  return Op::value(node_value_at(n.arg_, c));
}
template <class Op, class L, class R>
value_type_t<binary_node<Op, L, R>> node_value_at(binary_node<Op, L, R> const& n,
                                                  coord<shape_of_t<binary_node<Op, L, R>>::rank> const& c) {
  using V = value_type_t<binary_node<Op, L, R>>;
  return Op::value(V(node_value_at(n.lhs_, ev::operand_coord<shape_of_t<L>>(c))),
                   V(node_value_at(n.rhs_, ev::operand_coord<shape_of_t<R>>(c))));
}

/// The first non-finite element of node n over its whole shape (row-major order), computed
/// element by element (node_value_at).
template <class N>
[[gnu::cold]] nonfinite_at first_nonfinite(N const& n) {
  using T = value_type_t<N>;
  constexpr std::size_t R = shape_of_t<N>::rank;
  if constexpr (!std::is_floating_point_v<T>) {
    return {};
  } else {
    auto ext = n.shape().extents();
    index_t const total = n.shape().size();
    coord<R> c{};
    for (index_t k = 0; k < total; ++k) {
      T v = node_value_at(n, c);
      if (!is_finite_value(v)) {
        nonfinite_at r{true, R, {}, double(v)};
        for (std::size_t j = 0; j < R && j < 16; ++j) r.c[j] = c[j];
        return r;
      }
      coords::next(c, ext);
    }
    return {};
  }
}

/// "the node log (shape [3, 4]) produced NaN at [0, 0]"
inline std::string describe_nonfinite(bool leaf, char const* label, std::string const& shape,
                                      nonfinite_at const& r) {
  return std::string(leaf ? "the input " : "the node ") + label + " (shape " + shape + ") " +
         (leaf ? "holds " : "produced ") + r.name() + " at " + r.coord();
}

/// Whether a let is anywhere in N (types only).
template <class N>
constexpr bool holds_let() {
  return any_node<N, is_let_node>() || any_node<N, is_scan_node>();
}

/// Walks n children first; the first input leaf, or (with GRADIX_CHECK_FINITE_NODES, the
/// default without NDEBUG) the first node, with a non-finite element is described in `msg`
/// (returns true). Naming the node evaluates every node of the expression on its own, which
/// costs compile time in every translation unit; without it the message names the input
/// that holds the value, or says that the expression produced it.
template <class N>
[[gnu::cold]] bool locate_nonfinite(N const& n, std::string& msg);
/// The same over n's operands only.
template <class N>
[[gnu::cold]] bool locate_in_operands(N const& n, std::string& msg) {
  if constexpr (is_let_node<N>::value) {
    return locate_nonfinite(n.z_, msg);  // (the body reads placeholders)
  } else if constexpr (is_scan_node<N>::value) {  // (the same: the body reads the carry and x_t)
    return locate_nonfinite(n.c0_, msg) || locate_nonfinite(n.xs_, msg);
  } else {
    if constexpr (value_operand_count_v<N> >= 1)
      if (locate_nonfinite(operand_at<0>(n), msg)) return true;
    if constexpr (value_operand_count_v<N> >= 2)
      if (locate_nonfinite(operand_at<1>(n), msg)) return true;
    return false;
  }
}
template <class N>
bool locate_nonfinite(N const& n, std::string& msg) {
  if (locate_in_operands(n, msg)) return true;
  constexpr bool leaf = is_view_v<N> || is_param_node<N>::value;
  nonfinite_at r;
  if constexpr (is_param_node<N>::value) {
    r = scan_view(n.view_);
  } else if constexpr (is_view_v<N>) {
    r = scan_view(n);
  } else if constexpr (!std::is_same_v<N, scalar_node<value_type_t<N>>> && !rearranges<N>::value &&
                       !holds_let<N>()) {
    // (a let's value needs the save transform: evaluated on its own, a node over a let would
    // inline the let's operand at every read, a type exponential in the nesting of lets)
#if defined(GRADIX_CHECK_FINITE_NODES)
    r = first_nonfinite(n);
#endif
  }
  if (!r.found) return false;
  msg = describe_nonfinite(leaf, node_label_of<N>::get(), to_string(n.shape()), r);
  return true;
}

[[noreturn]] inline void fail_nonfinite(char const* op, nonfinite_at const& r, std::string const& where) {
  fail(op, ": check_finite: element ", r.coord(), " of the result is ", r.name(), "; ", where);
}

/// Throws when a forward result (already computed: a view of it) has a non-finite element.
template <class V, class E>
void check_finite_forward(char const* op, V const& result, E const& e) {
  nonfinite_at r = scan_view(result);
  if (!r.found) return;
  std::string where;
  bool found = false;
#if defined(GRADIX_CHECK_FINITE_NODES)
  // the root's values are the result: when its operands are finite, the root produced the
  // element found above (it is not evaluated again)
  using N = std::remove_cvref_t<E>;
  if constexpr (!is_view_v<N> && !is_param_node<N>::value && !rearranges<N>::value &&
                !std::is_same_v<N, scalar_node<value_type_t<N>>>) {
    found = locate_in_operands(e, where);
    if (!found) {
      where = describe_nonfinite(false, node_label_of<N>::get(), to_string(e.shape()), r);
      found = true;
    }
  } else {
    found = locate_nonfinite(e, where);
  }
#else
  found = locate_nonfinite(e, where);
#endif
  if (!found) {
#if defined(GRADIX_CHECK_FINITE_NODES)
    where = "no node produced it on its own";
#else
    where = "the inputs are finite: the expression produced it (define GRADIX_CHECK_FINITE_NODES, "
            "or build without NDEBUG, to name the node)";
#endif
  }
  fail_nonfinite(op, r, where);
}
/// The same for a rank-0 value.
template <class T, class E>
void check_finite_value(char const* op, T v, E const& e) {
  if (is_finite_value(v)) return;
  check_finite_forward(op, tensor_view<T const, shape<>>(&v, shape<>{}), e);
}

[[noreturn]] inline void fail_nonfinite_gradient(char const* op, std::size_t param_pos,
                                                 std::string const& shape, nonfinite_at const& r) {
  fail(op, ": check_finite: the gradient of parameter ", param_pos, " (shape ", shape, ") is ",
       r.name(), " at ", r.coord());
}

/// Throws when a gradient storage holds a non-finite element (dense: anywhere; sparse: in a
/// stored slice).
template <class G>
void check_finite_gradient(char const* op, G const& g, std::size_t param_pos) {
  using T = typename G::value_type;
  constexpr std::size_t R = G::rank;
  if constexpr (std::is_floating_point_v<T> && R <= 16) {
    if constexpr (!G::sparse) {
      nonfinite_at r = scan_view(g.dense().view());
      if (r.found) fail_nonfinite_gradient(op, param_pos, to_string(g.shape()), r);
    } else {
      // each stored slice is a block over the other axes at strides(); its position along
      // the sparse axis is its id
      auto ext = g.shape().extents();
      ext[G::axis] = 1;
      auto const& st = g.strides();
      for (index_t k = 0; k < g.size(); ++k) {
        nonfinite_at r = scan_block(g.slice_data(k), R, ext.begin(), st.begin());
        if (!r.found) continue;
        r.c[G::axis] = g.id(k);  // (0 in the block)
        fail_nonfinite_gradient(op, param_pos, to_string(g.shape()), r);
      }
    }
  }
}

}  // namespace detail
}  // namespace gradix
