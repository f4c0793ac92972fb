#pragma once
/// \file
/// Recurrent cells as plain functions (docs/ad.md, "Loops: scan"): each takes the step's
/// input x ([batch, D]) and the carry ([batch, H], or [batch, 2H] for the LSTM: h and c side
/// by side) and returns the new carry, so that `gx::scan(c0, xs, [&](auto c, auto x) {
/// return gx::cells::gru(x, c, Wg, bg, Wn, bn); })` is a GRU layer. One matrix product of the
/// concatenated input and carry per gate group, weights [D + H, k H] (the input's rows
/// first); a gate group's product is read through a let, so it is computed and
/// differentiated once whatever the number of gates that read it.
///
///   elman(x, h, W, b)          tanh([x, h] W + b)                      W: [D + H, H]
///   gru(x, h, Wg, bg, Wn, bn)  z, r = sigmoid([x, h] Wg + bg)          Wg: [D + H, 2H]
///                              n = tanh([x, r * h] Wn + bn)            Wn: [D + H, H]
///                              h' = (1 - z) * n + z * h
///   lstm(x, hc, W, b)          i, f, g, o = [x, h] W + b               W: [D + H, 4H]
///                              c' = sigmoid(f) c + sigmoid(i) tanh(g)
///                              h' = sigmoid(o) tanh(c'),  returns [h', c']
///
/// (The GRU is the variant of Cho et al. 2014 with the reset gate applied before the
/// product, PyTorch's `nn.GRU` applies it after; the LSTM has no peepholes and one bias,
/// PyTorch's two biases add up to it. Cho's GRU has two dependent products a step, so on
/// the device more launches a step than gru_projected, PyTorch's form, which a body may
/// also apply to the raw input: gru_projected(matmul(x, Wx) + bx, h, Wh, bh).)
///
/// On the device (on the host with gx::split_products) gx::scan takes each product of the
/// concatenation apart when it is built (api/scan_hoist.hpp): [x, h] W = x W_x + h W_h,
/// x W_x of every step one product before the loop, so a step keeps one product of the
/// carry per gate group (elman and lstm: two launches per step forward and two in the
/// reverse sweep; docs/ad.md, "Loops: scan"). The projected cells take an input's product the caller computed (xw =
/// x Wx + b for every step at once, as cuDNN and PyTorch do):
///
///   lstm_projected(xw, hc, Wh)      i, f, g, o = xw + h Wh                  Wh: [H, 4H]
///                                   (then as lstm)
///   gru_projected(xw, h, Wh, bh)    a = h Wh + bh;  r, z, n as PyTorch's    Wh: [H, 3H]
///                                   r = sigmoid(xw_r + a_r), z likewise     bh: [3H]
///                                   n = tanh(xw_n + r * a_n)
///                                   h' = (1 - z) * n + z * h
///
/// gru_projected is PyTorch's `nn.GRU` cell (reset gate after the product; gates in its
/// order r, z, n; Wx = W_ih^T, Wh = W_hh^T, xw's bias b_ih, bh = b_hh).

#include "gradix/api/let.hpp"
#include "gradix/api/softmax.hpp"
#include "gradix/config.hpp"
#include "gradix/expr/concat.hpp"
#include "gradix/expr/elementwise.hpp"
#include "gradix/expr/index.hpp"
#include "gradix/expr/matmul.hpp"

namespace gradix::cells {

/// tanh([x, h] W + b): an Elman (vanilla RNN) cell.
template <operand X, operand H, operand W, operand B>
constexpr auto elman(X&& x, H&& h, W&& w, B&& b) {
  auto const xn = detail::as_node(static_cast<X&&>(x));
  auto const hn = detail::as_node(static_cast<H&&>(h));
  auto const wn = detail::as_node(static_cast<W&&>(w));
  auto const bn = detail::as_node(static_cast<B&&>(b));
  return tanh(matmul(concat<1>(xn, hn), wn) + bn);
}

/// A GRU cell (see the file comment): wg [D + H, 2H] and bg [2H] the update and reset gates,
/// wn [D + H, H] and bn [H] the candidate.
template <operand X, operand H, operand WG, operand BG, operand WN, operand BN>
constexpr auto gru(X&& x0, H&& h0, WG&& wg0, BG&& bg0, WN&& wn0, BN&& bn0) {
  auto const x = detail::as_node(static_cast<X&&>(x0));
  auto const h = detail::as_node(static_cast<H&&>(h0));
  auto const wg = detail::as_node(static_cast<WG&&>(wg0));
  auto const bg = detail::as_node(static_cast<BG&&>(bg0));
  auto const wn = detail::as_node(static_cast<WN&&>(wn0));
  auto const bn = detail::as_node(static_cast<BN&&>(bn0));
  return let(sigmoid(matmul(concat<1>(x, h), wg) + bg), [&](auto const& zr) {
    index_t const n = h.shape().extent(1);
    auto z = slice<1>(zr, 0, n);
    auto r = slice<1>(zr, n, 2 * n);
    auto cand = tanh(matmul(concat<1>(x, r * h), wn) + bn);
    return (value_type_t<decltype(zr)>(1) - z) * cand + z * h;
  });
}

/// An LSTM cell (see the file comment) over the packed carry hc = [h, c] ([batch, 2H]): w
/// [D + H, 4H] and b [4H] the input, forget, cell and output gates, in that order.
template <operand X, operand HC, operand W, operand B>
constexpr auto lstm(X&& x0, HC&& hc0, W&& w0, B&& b0) {
  auto const x = detail::as_node(static_cast<X&&>(x0));
  auto const hc = detail::as_node(static_cast<HC&&>(hc0));
  auto const w = detail::as_node(static_cast<W&&>(w0));
  auto const b = detail::as_node(static_cast<B&&>(b0));
  index_t const n = hc.shape().extent(1) / 2;
  auto h = slice<1>(hc, 0, n);
  auto c = slice<1>(hc, n, 2 * n);
  return let(matmul(concat<1>(x, h), w) + b, [&](auto const& gates) {
    auto i = sigmoid(slice<1>(gates, 0, n));
    auto f = sigmoid(slice<1>(gates, n, 2 * n));
    auto g = tanh(slice<1>(gates, 2 * n, 3 * n));
    auto o = sigmoid(slice<1>(gates, 3 * n, 4 * n));
    return let(f * c + i * g, [&](auto const& c2) { return concat<1>(o * tanh(c2), c2); });
  });
}

/// The LSTM cell with the input's product taken out of the recurrence: xw = x Wx + b for
/// every step at once (one product over all steps, before the scan, as cuDNN and PyTorch's
/// nn.LSTM do), then per step the gates are xw_t + h Wh. wh [H, 4H]; gates in lstm's order.
template <operand XW, operand HC, operand WH>
constexpr auto lstm_projected(XW&& xw0, HC&& hc0, WH&& wh0) {
  auto const xw = detail::as_node(static_cast<XW&&>(xw0));
  auto const hc = detail::as_node(static_cast<HC&&>(hc0));
  auto const wh = detail::as_node(static_cast<WH&&>(wh0));
  index_t const n = hc.shape().extent(1) / 2;
  auto h = slice<1>(hc, 0, n);
  auto c = slice<1>(hc, n, 2 * n);
  return let(xw + matmul(h, wh), [&](auto const& gates) {
    auto i = sigmoid(slice<1>(gates, 0, n));
    auto f = sigmoid(slice<1>(gates, n, 2 * n));
    auto g = tanh(slice<1>(gates, 2 * n, 3 * n));
    auto o = sigmoid(slice<1>(gates, 3 * n, 4 * n));
    return let(f * c + i * g, [&](auto const& c2) { return concat<1>(o * tanh(c2), c2); });
  });
}

/// A GRU cell with the input's product taken out of the recurrence, PyTorch's `nn.GRU`
/// formulation (see the file comment): xw_t = x_t Wx + b_x ([batch, 3H], gates r, z, n) for
/// every step at once before the scan, then per step one product a = h Wh + bh (wh [H, 3H],
/// bh [3H]), the reset gate applied to its candidate's third after the product.
template <operand XW, operand H, operand WH, operand BH>
constexpr auto gru_projected(XW&& xw0, H&& h0, WH&& wh0, BH&& bh0) {
  auto const xw = detail::as_node(static_cast<XW&&>(xw0));
  auto const h = detail::as_node(static_cast<H&&>(h0));
  auto const wh = detail::as_node(static_cast<WH&&>(wh0));
  auto const bh = detail::as_node(static_cast<BH&&>(bh0));
  index_t const n = h.shape().extent(1);
  return let(matmul(h, wh) + bh, [&](auto const& a) {
    auto r = sigmoid(slice<1>(xw, 0, n) + slice<1>(a, 0, n));
    auto z = sigmoid(slice<1>(xw, n, 2 * n) + slice<1>(a, n, 2 * n));
    auto cand = tanh(slice<1>(xw, 2 * n, 3 * n) + r * slice<1>(a, 2 * n, 3 * n));
    return (value_type_t<decltype(a)>(1) - z) * cand + z * h;
  });
}

}  // namespace gradix::cells
