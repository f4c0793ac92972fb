#pragma once
/// \file
/// A scan body's products of the step's input beside the carry, `matmul(concat<1>(x, h), W)`
/// (the cells' form, api/cells.hpp), taken apart by gx::scan when it is built (docs/ad.md,
/// "Loops: scan"):
///
///   [x, h] W  =  x W_x + h W_h        W_x, W_h: W's rows that multiply x, h
///
/// x W_x of every step is one product over the whole sequence, before the loop (the
/// sequence's rows against the input rows of every such weight side by side), and the scan
/// reads it as its input; a step keeps h W_h, one product of the carry. So a cell written
/// with the concatenation costs per step what the projected cells cost (cuDNN's and
/// PyTorch's split, done here on the body's type): on the device always, on the host with
/// gx::split_products (api/scan.hpp says why not by default). The input's gradient
/// and W_x's are then one product each over the sequence, after the sweep. The value is the
/// same up to rounding (the two halves of each dot product are summed apart).
///
/// Taken apart: a product whose left operand is concat<1> of the input placeholder itself
/// and another operand (either side), and whose right operand is a matrix that reads no
/// placeholder (no carry, no input, no let of the body: the same weight at every step); and
/// a product of the input placeholder itself by such a matrix, x Wx (an Elman body
/// `tanh(x Wx + h Wh + b)`), taken out of the loop whole. The rewritten body reads the new
/// input x' (the products' input halves side by side, after x itself where the body still
/// reads x elsewhere).

#include "gradix/config.hpp"
#include "gradix/core/tuple.hpp"
#include "gradix/expr/concat.hpp"
#include "gradix/expr/elementwise.hpp"
#include "gradix/expr/index.hpp"
#include "gradix/expr/matmul.hpp"
#include "gradix/expr/rebuild.hpp"
#include "gradix/expr/scan.hpp"
#include "gradix/expr/view.hpp"
#include "gradix/expr/visit.hpp"

#include <type_traits>

namespace gradix::detail {

/// Whether N is a product scan_hoist takes apart (types only), and how: 0 no; 1 the input
/// placeholder var_node<XP> is the concatenation's left operand (W's first rows multiply
/// it); 2 its right operand (W's last rows); 3 the product's left operand is the input
/// itself, x W (all of it out of the loop).
template <class N, class XP>
constexpr int hoist_form() {
  if constexpr (!is_matmul_node<N>::value) {
    return 0;
  } else {
    using A = std::remove_cvref_t<decltype(std::declval<N const&>().lhs_)>;
    using W = std::remove_cvref_t<decltype(std::declval<N const&>().rhs_)>;
    if constexpr (std::is_same_v<A, var_node<XP>>) {
      return shape_of_t<A>::rank == 2 && shape_of_t<W>::rank == 2 && !any_node<W, is_var_node>() ? 3 : 0;
    } else if constexpr (!is_concat_node<A>::value) {
      return 0;
    } else if constexpr (A::axis != 1 || shape_of_t<A>::rank != 2 || shape_of_t<W>::rank != 2 ||
                         any_node<W, is_var_node>()) {
      return 0;
    } else {
      using L = std::remove_cvref_t<decltype(std::declval<A const&>().lhs_)>;
      using R = std::remove_cvref_t<decltype(std::declval<A const&>().rhs_)>;
      if constexpr (std::is_same_v<L, var_node<XP>>) return 1;
      else if constexpr (std::is_same_v<R, var_node<XP>>) return 2;
      else return 0;
    }
  }
}

/// The input halves W_x of the products of n that scan_hoist takes apart, in the order
/// hoist_body meets them (operands in order; a let's operand before its body; a product's
/// own before those in its other operand). A scan inside n is left as it is.
template <class XP, class N>
constexpr auto hoisted_weights(N const& n) {
  constexpr int form = hoist_form<N, XP>();
  if constexpr (!mentions_var<N, XP>() || is_scan_node<N>::value) {
    return tuple<>{};
  } else if constexpr (form == 3) {
    return ::gradix::make_tuple(n.rhs_);
  } else if constexpr (form != 0) {
    index_t const d = n.lhs_.shape().extent(1), split = n.lhs_.split();
    index_t const x0 = form == 1 ? 0 : split, x1 = form == 1 ? split : d;
    auto const own = ::gradix::make_tuple(::gradix::slice<0>(n.rhs_, x0, x1));
    if constexpr (form == 1) return ::gradix::tuple_cat(own, hoisted_weights<XP>(n.lhs_.rhs_));
    else return ::gradix::tuple_cat(own, hoisted_weights<XP>(n.lhs_.lhs_));
  } else if constexpr (is_let_node<N>::value) {
    return ::gradix::tuple_cat(hoisted_weights<XP>(n.z_), hoisted_weights<XP>(n.body_));
  } else if constexpr (value_operand_count_v<N> == 1) {
    return hoisted_weights<XP>(operand_at<0>(n));
  } else if constexpr (value_operand_count_v<N> == 2) {
    return ::gradix::tuple_cat(hoisted_weights<XP>(operand_at<0>(n)), hoisted_weights<XP>(operand_at<1>(n)));
  } else if constexpr (value_operand_count_v<N> == 3) {
    return ::gradix::tuple_cat(::gradix::tuple_cat(hoisted_weights<XP>(operand_at<0>(n)), hoisted_weights<XP>(operand_at<1>(n))),
                               hoisted_weights<XP>(operand_at<2>(n)));
  } else {
    return tuple<>{};
  }
}

/// Whether the input placeholder is still read once the products are taken apart (a read
/// outside them, or inside their other operand): then x' starts with x itself.
template <class N, class XP>
constexpr bool reads_input_after_hoist() {
  constexpr int form = hoist_form<N, XP>();
  if constexpr (!mentions_var<N, XP>() || is_scan_node<N>::value || is_var_node<N>::value) {
    return mentions_var<N, XP>();
  } else if constexpr (form == 3) {
    return false;
  } else if constexpr (form != 0) {
    using A = std::remove_cvref_t<decltype(std::declval<N const&>().lhs_)>;
    using L = std::remove_cvref_t<decltype(std::declval<A const&>().lhs_)>;
    using R = std::remove_cvref_t<decltype(std::declval<A const&>().rhs_)>;
    return reads_input_after_hoist<std::conditional_t<form == 1, R, L>, XP>();
  } else if constexpr (is_let_node<N>::value) {
    return reads_input_after_hoist<std::remove_cvref_t<decltype(std::declval<N const&>().z_)>, XP>() ||
           reads_input_after_hoist<std::remove_cvref_t<decltype(std::declval<N const&>().body_)>, XP>();
  } else if constexpr (value_operand_count_v<N> == 1) {
    return reads_input_after_hoist<value_operand_t<0, N>, XP>();
  } else if constexpr (value_operand_count_v<N> == 2) {
    return reads_input_after_hoist<value_operand_t<0, N>, XP>() || reads_input_after_hoist<value_operand_t<1, N>, XP>();
  } else if constexpr (value_operand_count_v<N> == 3) {
    return reads_input_after_hoist<value_operand_t<0, N>, XP>() || reads_input_after_hoist<value_operand_t<1, N>, XP>() ||
           reads_input_after_hoist<value_operand_t<2, N>, XP>();
  } else {
    return false;
  }
}

template <class XP, bool Whole, class XV, class N>
constexpr auto hoist_body(N const& n, XV const& xv, index_t& off);
/// hoist_body as rebuild's f.
template <class XP, bool Whole, class XV>
struct hoisting {
  static constexpr bool drops_marks = false;
  XV const& xv;
  index_t* off;
  template <bool U, class C>
  constexpr auto apply(C const& c) const {
    return hoist_body<XP, Whole>(c, xv, *off);
  }
};
/// n with each product that scan_hoist takes apart, [x, h] W, replaced by x'[:, off + cols)
/// + h W_h (off: where its input half starts in x', advanced past it; Whole: x' is that one
/// half, read whole).
template <class XP, bool Whole, class XV, class N>
constexpr auto hoist_body(N const& n, XV const& xv, index_t& off) {
  constexpr int form = hoist_form<N, XP>();
  if constexpr (!mentions_var<N, XP>() || is_scan_node<N>::value || is_var_node<N>::value) {
    return n;  // (x itself, read outside a product: bound to x' after)
  } else if constexpr (form != 0) {
    index_t const cols = n.shape().extent(1);
    auto const part = [&] {
      if constexpr (Whole) return xv;
      else return ::gradix::slice<1>(xv, off, off + cols);
    }();
    off += cols;
    if constexpr (form == 3) {
      return part;
    } else if constexpr (form == 1) {
      index_t const d = n.lhs_.shape().extent(1), split = n.lhs_.split();
      auto const h = hoist_body<XP, Whole>(n.lhs_.rhs_, xv, off);
      return part + ::gradix::matmul(h, ::gradix::slice<0>(n.rhs_, split, d));
    } else {
      index_t const split = n.lhs_.split();
      auto const h = hoist_body<XP, Whole>(n.lhs_.lhs_, xv, off);
      return part + ::gradix::matmul(h, ::gradix::slice<0>(n.rhs_, 0, split));
    }
  } else if constexpr (is_let_node<N>::value) {
    auto z = hoist_body<XP, Whole>(n.z_, xv, off);
    auto b = hoist_body<XP, Whole>(n.body_, xv, off);
    return let_node<typename N::name_type, decltype(z), decltype(b)>{z, b};
  } else {
    return rebuild<true>(n, hoisting<XP, Whole, XV>{xv, &off});
  }
}

/// How many products of body B scan_hoist takes apart.
template <class XP, class B>
inline constexpr std::size_t hoist_count_v =
    std::remove_cvref_t<decltype(hoisted_weights<XP>(std::declval<B const&>()))>::size;

/// The input halves side by side, [D, sum of cols] (one operand: itself).
template <class Ws, std::size_t... I>
constexpr auto hoisted_side_by_side(Ws const& ws, std::index_sequence<I...>) {
  if constexpr (sizeof...(I) == 1) return get<0>(ws);
  else return ::gradix::concat<1>(get<I>(ws)...);
}

}  // namespace gradix::detail
