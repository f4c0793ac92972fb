#pragma once
/// \file
/// Global-norm gradient clipping (gx::optim::clip_grad_norm). Part of `<gradix/optim.hpp>`
/// (docs/optim.md), which includes this header.

#include "gradix/core/error.hpp"
#include "gradix/training/optimizers.hpp"  // (detail::num)
#include "gradix/training/slices.hpp"

#include <cmath>
#include <cstddef>
#include <type_traits>

namespace gradix {

namespace optim {

/// Global-norm gradient clipping, as PyTorch's clip_grad_norm_: the L2 norm of the
/// gradients of all the parameters taken together (what backward wrote: the touched slices;
/// computed in double, in parameter order), and when it exceeds max_norm every gradient is
/// scaled by max_norm / (norm + 1e-6). Returns the norm before clipping. A non-finite norm
/// (an infinite or NaN gradient) throws gradix::error naming the first parameter (0-based)
/// that holds one, before anything is scaled; a negative or NaN max_norm throws too.
template <class... P>
  requires(sizeof...(P) > 0)
double clip_grad_norm(double max_norm, P&... params) {
  constexpr char const* op = "gradix::optim::clip_grad_norm";
  if (!(max_norm >= 0.0)) gradix::detail::fail(op, ": max_norm = ", detail::num(max_norm), " must be a non-negative number");
  // every run of gradient elements of p: f(pointer, count), the pointer writable (p is)
  auto runs = [](auto& p, auto&& f) {
    for_each_grad_slice(p, [&](index_t id) {
      gradix::detail::slice_runs(p, id, [&](index_t, auto const* g, index_t n) {
        using T = std::remove_cvref_t<decltype(*g)>;
        if (g) f(const_cast<T*>(g), n);  // (the storage of p, held by non-const reference)
      });
    });
  };
  double total = 0;
  std::size_t bad = sizeof...(P);
  std::size_t k = 0;
  auto accumulate = [&](auto& p) {
    double s = 0;
    bool finite = true;
    runs(p, [&](auto const* g, index_t n) {
      for (index_t e = 0; e < n; ++e) {
        s += double(g[e]) * double(g[e]);
        finite = finite && std::isfinite(double(g[e]));
      }
    });
    if (!finite && bad == sizeof...(P)) bad = k;
    total += s;
    ++k;
  };
  (accumulate(params), ...);
  double const norm = std::sqrt(total);
  if (bad < sizeof...(P))
    gradix::detail::fail(op, ": the gradients' norm is ", detail::num(norm), " (parameter ", bad,
                         " holds a non-finite gradient); nothing was scaled");
  if (norm > max_norm) {
    double const c = max_norm / (norm + 1e-6);
    auto scale = [&](auto& p) {
      runs(p, [&](auto* g, index_t n) {
        using T = std::remove_cvref_t<decltype(*g)>;
        for (index_t e = 0; e < n; ++e) g[e] = T(double(g[e]) * c);
      });
    };
    (scale(params), ...);
  }
  return norm;
}

}  // namespace optim

}  // namespace gradix
