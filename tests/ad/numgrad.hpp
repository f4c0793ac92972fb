#pragma once
// Gradient checks against central differences (double precision), for the AD tests.
//
//   CHECK_NUMGRAD(f, p)              f(p) is rank 0: gx::grad(f(p), p) vs central differences
//   CHECK_NUMGRAD_SEEDED(f, p, seed) f(p) of seed's shape: backward(f(p), seed) (into a zeroed
//                                    p.grad()) vs central differences of <seed, f(p)>
//
// f is a callable `f(param&) -> expression`; the expression is built once and re-evaluated
// after each element of p.value() is perturbed in place (and restored bit-exactly), since
// expressions read parameter values when run. On failure the message names the worst element
// (logical coordinate), the analytic and numeric values, and the tolerance used.
#include "testing.hpp"

#include <gradix/gradix.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

namespace gradix::testing {

struct numgrad_options {
  double rtol = 1e-6;
  double atol = 1e-8;
  double h_rel = 1e-6;  // step: h_rel * max(1, |x|)
};

/// Central-difference gradient of the scalar function `eval_scalar()` with respect to every
/// element of p.value(), in logical row-major order.
template <class P, class G>
std::vector<double> central_differences(P& p, G&& eval_scalar, numgrad_options const& o,
                                        std::vector<double>* noise = nullptr) {
  auto& t = p.value();
  auto s = t.shape();
  std::vector<double> out(std::size_t(s.size()));
  if (noise) noise->assign(std::size_t(s.size()), 0.0);
  for (index_t k = 0; k < s.size(); ++k) {
    auto c = detail::unravel(s, k);
    auto& x = t[c];
    auto const x0 = x;
    using T = std::remove_reference_t<decltype(x)>;
    double h = o.h_rel * std::max(1.0, std::abs(double(x0)));
    x = static_cast<T>(double(x0) + h);
    double xp = double(x);  // the values actually stored (a float parameter rounds them)
    double fp = double(eval_scalar());
    x = static_cast<T>(double(x0) - h);
    double xm = double(x);
    double fm = double(eval_scalar());
    x = x0;
    double span = xp - xm;
    out[std::size_t(k)] = (fp - fm) / span;
    // rounding noise of the quotient: a few ulps of |f| over the step
    if (noise)
      (*noise)[std::size_t(k)] =
          16 * std::numeric_limits<double>::epsilon() * (std::abs(fp) + std::abs(fm)) / span;
  }
  return out;
}

/// Compares an analytic gradient (any tensor of p's shape) with numeric values in logical
/// row-major order; returns "" or a message about the worst element.
template <class Tensor>
std::string compare_gradient(Tensor const& analytic, std::vector<double> const& numeric,
                             std::vector<double> const& noise, numgrad_options const& o) {
  auto s = analytic.shape();
  double worst = 0;
  index_t worst_k = -1;
  for (index_t k = 0; k < s.size(); ++k) {
    double a = double(analytic[detail::unravel(s, k)]);
    double n = numeric[std::size_t(k)];
    double tol = o.atol + noise[std::size_t(k)] + o.rtol * std::max(std::abs(a), std::abs(n));
    double r = std::abs(a - n) / tol;
    if (!(r <= 1.0) && (worst_k < 0 || !(r <= worst))) {  // NaN counts as worst
      worst = r;
      worst_k = k;
      if (std::isnan(r)) break;
    }
  }
  if (worst_k < 0) return "";
  auto c = detail::unravel(s, worst_k);
  double a = double(analytic[c]);
  double n = numeric[std::size_t(worst_k)];
  std::ostringstream os;
  os.precision(17);
  os << "gradient mismatch; worst element [";
  for (std::size_t i = 0; i < c.size(); ++i) os << (i ? ", " : "") << c[i];
  os << "] of " << to_string(s) << ": analytic " << a << " vs numeric " << n << " (|diff| "
     << std::abs(a - n) << ", tol "
     << o.atol + noise[std::size_t(worst_k)] + o.rtol * std::max(std::abs(a), std::abs(n)) << ")";
  return os.str();
}

/// gx::grad(f(p), p) against central differences of value(f(p)).
template <class F, class P>
std::string numgrad_check(F&& f, P& p, numgrad_options const& o = {}) {
  auto e = f(p);
  auto analytic = grad(e, p).to_dense();
  std::vector<double> noise;
  auto numeric = central_differences(
      p, [&] { return value(e); }, o, &noise);
  return compare_gradient(analytic, numeric, noise, o);
}

/// backward(f(p), seed) (into p.grad(), zeroed first) against central differences of
/// sum(f(p) * seed).
template <class F, class P, class S>
std::string numgrad_check_seeded(F&& f, P& p, S const& seed, numgrad_options const& o = {}) {
  auto e = f(p);
  zero_grad(p);
  backward(e, seed);
  auto analytic = p.grad().to_dense();
  zero_grad(p);
  auto numeric_fn = [&] {
    auto ev = eval(e);  // a tensor of seed's shape
    double acc = 0;
    auto s = ev.shape();
    for (index_t k = 0; k < s.size(); ++k) {
      auto c = detail::unravel(s, k);
      acc += double(ev[c]) * double(seed[c]);
    }
    return acc;
  };
  std::vector<double> noise;
  auto numeric = central_differences(p, numeric_fn, o, &noise);
  return compare_gradient(analytic, numeric, noise, o);
}

/// The fast mode for large parameters: for `n_dirs` random directions v, compares the
/// directional difference (f(x + h v) - f(x - h v)) / 2h with <grad f, v>, where grad f is
/// gx::grad(f(p), p). Tolerance: rtol * sum |g_i v_i| + rounding noise + atol.
template <class F, class P>
std::string numgrad_directional(F&& f, P& p, int n_dirs = 3, numgrad_options const& o = {}) {
  auto e = f(p);
  auto g = grad(e, p).to_dense();
  auto& t = p.value();
  auto const saved = t;
  auto s = t.shape();
  for (int r = 0; r < n_dirs; ++r) {
    auto v = uniform<double>(s, std::uint64_t(9000 + r), -1.0, 1.0);
    double dot = 0, mag = 0, xmax = 0;
    for (index_t k = 0; k < s.size(); ++k) {
      auto c = detail::unravel(s, k);
      dot += double(g[c]) * v[c];
      mag += std::abs(double(g[c]) * v[c]);
      xmax = std::max(xmax, std::abs(double(saved[c])));
    }
    double h = o.h_rel * std::max(1.0, xmax);
    using T = std::remove_cvref_t<decltype(*t.data())>;
    auto step = [&](double sign) {
      for (index_t k = 0; k < s.size(); ++k) {
        auto c = detail::unravel(s, k);
        t[c] = T(double(saved[c]) + sign * h * v[c]);
      }
      return double(value(e));
    };
    double fp = step(1.0), fm = step(-1.0);
    t = saved;  // a same-size assignment copies in place: e keeps viewing t's buffer
    double num = (fp - fm) / (2 * h);
    double noise =
        16 * std::numeric_limits<double>::epsilon() * (std::abs(fp) + std::abs(fm)) / (2 * h);
    double tol = o.atol + noise + o.rtol * mag;
    if (!(std::abs(num - dot) <= tol)) {
      std::ostringstream os;
      os.precision(17);
      os << "directional derivative mismatch (direction " << r << "): <grad, v> " << dot
         << " vs numeric " << num << " (|diff| " << std::abs(num - dot) << ", tol " << tol << ")";
      return os.str();
    }
  }
  return "";
}

/// Bit-exact equality of two tensors of the same type (memcmp of the elements).
template <class A>
bool same_bits(A const& a, A const& b) {
  return a.shape() == b.shape() &&
         std::memcmp(a.data(), b.data(), std::size_t(a.size()) * sizeof(*a.data())) == 0;
}

/// A byte snapshot of a parameter's value and gradient storage (dense: the tensor and the
/// touched-slice list; sparse: ids in slot order and the compact slices).
template <class P>
struct param_snapshot {
  std::vector<unsigned char> value, grad;
  std::vector<index_t> ids;
  explicit param_snapshot(P const& p) {
    auto const& v = p.value();
    value.resize(std::size_t(v.size()) * sizeof(*v.data()));
    if (!value.empty()) std::memcpy(value.data(), v.data(), value.size());
    auto const& g = p.grad();
    using G = std::remove_cvref_t<decltype(g)>;
    if constexpr (G::sparse) {
      std::size_t bytes =
          std::size_t(g.size() * g.slice_elements()) * sizeof(typename G::value_type);
      grad.resize(bytes);
      for (index_t k = 0; k < g.size(); ++k) {
        ids.push_back(g.id(k));
        std::memcpy(
            grad.data() + std::size_t(k * g.slice_elements()) * sizeof(typename G::value_type),
            g.slice_data(k), std::size_t(g.slice_elements()) * sizeof(typename G::value_type));
      }
    } else {
      auto const& d = g.dense();
      grad.resize(std::size_t(d.size()) * sizeof(*d.data()));
      if (!grad.empty()) std::memcpy(grad.data(), d.data(), grad.size());
      ids = g.touched();
      if (g.all_touched()) ids.push_back(-1);
    }
  }
  bool operator==(param_snapshot const&) const = default;
};
template <class P>
param_snapshot(P const&) -> param_snapshot<P>;

}  // namespace gradix::testing

#define CHECK_NUMGRAD(...)                                                \
  do {                                                                    \
    std::string gradix_ng_ = gradix::testing::numgrad_check(__VA_ARGS__); \
    CHECK_MESSAGE(gradix_ng_.empty(), gradix_ng_);                        \
  } while (0)

#define CHECK_NUMGRAD_SEEDED(...)                                                \
  do {                                                                           \
    std::string gradix_ng_ = gradix::testing::numgrad_check_seeded(__VA_ARGS__); \
    CHECK_MESSAGE(gradix_ng_.empty(), gradix_ng_);                               \
  } while (0)

#define CHECK_NUMGRAD_DIRECTIONAL(...)                                          \
  do {                                                                          \
    std::string gradix_ng_ = gradix::testing::numgrad_directional(__VA_ARGS__); \
    CHECK_MESSAGE(gradix_ng_.empty(), gradix_ng_);                              \
  } while (0)
