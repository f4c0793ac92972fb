#pragma once
/// \file
/// The non-finite check mode (opt-in): `gradix::set_check_finite(true)`, or the environment
/// variable GRADIX_CHECK_FINITE=1 at start-up. While it is on, eval, assign, value, backward
/// and grad scan what they produce, and the first NaN or infinity throws gradix::error
/// naming it:
///
/// - a forward result: the element's coordinate, and the node that produced the first
///   non-finite value (the first node, children before parents, whose value has one; or
///   the input leaf that already held it);
/// - a gradient: the parameter (its position among the expression's parameters, counted
///   from 0 in reading order, and its shape) and the element's coordinate.
///
/// The scan runs after the values are written: when it throws, the destination (or the
/// gradient) holds them. Off, it costs one relaxed atomic load per call.

#include "gradix/config.hpp"
#include "gradix/core/error.hpp"
#include "gradix/core/math.hpp"
#include "gradix/core/shape.hpp"
#include "gradix/core/tensor.hpp"
#include "gradix/eval/evaluator.hpp"
#include "gradix/expr/visit.hpp"
#include "gradix/grad/storage.hpp"

#include <atomic>
#include <cstdlib>
#include <string>
#include <type_traits>

namespace gradix {

namespace detail {
inline std::atomic<bool>& check_finite_flag() {
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
template <class T>
char const* nonfinite_name(T v) {
  return v != v ? "NaN" : (v > 0 ? "+inf" : "-inf");
}

template <std::size_t R>
std::string coord_string(coord<R> const& c) {
  std::string s = "[";
  for (std::size_t k = 0; k < R; ++k) {
    if (k) s += ", ";
    s += std::to_string(c[k]);
  }
  return s + "]";
}

/// A short label of a node kind, for messages.
template <class Op>
std::string op_label() {
  if constexpr (requires { Op::name; }) return Op::name;
  else return "operation";
}
template <class N>
struct node_label_of {
  static std::string get() {
    if constexpr (is_param_node<N>::value) return "parameter";
    else if constexpr (is_view_v<N>) return "tensor";
    else return "node";
  }
};
template <class Op, class A>
struct node_label_of<unary_node<Op, A>> {
  static std::string get() { return op_label<Op>(); }
};
template <class Op, class L, class R>
struct node_label_of<binary_node<Op, L, R>> {
  static std::string get() { return op_label<Op>(); }
};
template <class Op, class A, axis_mask M, bool K>
struct node_label_of<reduce_node<Op, A, M, K>> {
  static std::string get() { return op_label<Op>(); }
};
template <class A, std::size_t Axis, class Idx>
struct node_label_of<index_node<A, Axis, Idx>> {
  static std::string get() { return Idx::name; }
};
template <class A, std::size_t... P>
struct node_label_of<permute_node<A, P...>> {
  static std::string get() { return "permute"; }
};
template <class A, std::size_t Axis>
struct node_label_of<unsqueeze_node<A, Axis>> {
  static std::string get() { return "unsqueeze"; }
};
template <class A, class S>
struct node_label_of<reshape_node<A, S>> {
  static std::string get() { return "reshape"; }
};
template <class A, class S>
struct node_label_of<broadcast_node<A, S>> {
  static std::string get() { return "broadcast_to"; }
};

/// Finds the first non-finite element of node n over its whole shape (in row-major order):
/// calls found(coord, value) and returns true, or returns false. Serial, element by element.
template <class N, class F>
bool first_nonfinite(N const& n, F&& found) {
  using T = value_type_t<N>;
  if constexpr (!std::is_floating_point_v<T>) {
    return false;
  } else {
    constexpr std::size_t R = shape_of_t<N>::rank;
    ev::evaluator<N> ev(n);
    auto ext = n.shape().extents();
    index_t const total = n.shape().size();
    coord<R> c{};
    for (index_t k = 0; k < total; ++k) {
      T v = ev(c);
      if (!is_finite_value(v)) {
        found(c, v);
        return true;
      }
      for (std::size_t j = R; j-- > 0;) {
        if (++c[j] < ext[j]) break;
        c[j] = 0;
      }
    }
    return false;
  }
}

/// Walks n children first; the first node with a non-finite element is reported through
/// `msg` (returns true).
template <class N>
bool locate_nonfinite(N const& n, std::string& msg) {
  if constexpr (requires { n.lhs_; n.rhs_; }) {
    if (locate_nonfinite(n.lhs_, msg) || locate_nonfinite(n.rhs_, msg)) return true;
  } else if constexpr (requires { n.arg_; }) {
    if (locate_nonfinite(n.arg_, msg)) return true;
  }
  if constexpr (std::is_same_v<N, scalar_node<value_type_t<N>>>) {
    return false;
  }
  bool leaf = is_view_v<N> || is_param_node<N>::value;
  return first_nonfinite(n, [&](auto const& c, auto v) {
    msg = std::string(leaf ? "the input " : "the node ") + node_label_of<N>::get() + " (shape " +
          to_string(n.shape()) + ") " + (leaf ? "holds " : "produced ") + nonfinite_name(v) +
          " at " + coord_string(c);
  });
}

/// Throws when the forward result (already computed) has a non-finite element: `result` is
/// the evaluated node (a view of the destination or the value as a scalar node).
template <class Result, class E>
void check_finite_forward(char const* op, Result const& result, E const& e) {
  first_nonfinite(result, [&](auto const& c, auto v) {
    std::string where;
    if (!locate_nonfinite(e, where)) where = "no node produced it on its own";
    fail(op, ": check_finite: element ", coord_string(c), " of the result is ", nonfinite_name(v),
         "; ", where);
  });
}

/// Throws when a gradient storage holds a non-finite element (dense: anywhere; sparse: in
/// a stored slice).
template <class G>
void check_finite_gradient(char const* op, G const& g, std::size_t param_pos) {
  using T = typename G::value_type;
  constexpr std::size_t R = G::rank;
  auto report = [&](auto const& c, T v) {
    fail(op, ": check_finite: the gradient of parameter ", param_pos, " (shape ",
         to_string(g.shape()), ") is ", nonfinite_name(v), " at ", coord_string(c));
  };
  if constexpr (!std::is_floating_point_v<T>) {
    return;
  } else if constexpr (!G::sparse) {
    first_nonfinite(g.dense().view(), report);
  } else {
    // a stored slice's elements lie at strides() over the other axes (layout order)
    auto const& st = g.strides();
    for (index_t k = 0; k < g.size(); ++k) {
      T const* p = g.slice_data(k);
      for (index_t e = 0; e < g.slice_elements(); ++e) {
        if (is_finite_value(p[e])) continue;
        coord<R> c{};
        c[G::axis] = g.id(k);
        // the other axes, largest stride first
        array<std::size_t, R> order{};
        for (std::size_t a = 0; a < R; ++a) order[a] = a;
        for (std::size_t a = 0; a < R; ++a)
          for (std::size_t b = a + 1; b < R; ++b)
            if (st[order[b]] > st[order[a]]) {
              std::size_t t = order[a];
              order[a] = order[b];
              order[b] = t;
            }
        index_t rest = e;
        for (std::size_t a = 0; a < R; ++a) {
          std::size_t ax = order[a];
          if (ax == G::axis) continue;
          c[ax] = rest / st[ax];
          rest %= st[ax];
        }
        report(c, p[e]);
      }
    }
  }
}

}  // namespace detail
}  // namespace gradix
