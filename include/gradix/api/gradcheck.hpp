#pragma once
/// \file
/// gradcheck: gradix's gradients against central differences in double precision.
///
///   auto r = gx::gradcheck([](auto const& x, auto const& y) { return gx::sum(x * gx::exp(y)); },
///                          x, y);
///   if (!r.ok()) std::cerr << r << "\n";
///
/// f builds a rank-0 expression from the parameters. The analytic gradient is
/// `gx::grad(f(p...), p...)`: the parameters as given, in their own element type (their own
/// gradients stay untouched). The numeric one comes from double copies of the parameters (same
/// shape, layout and gradient kind, values converted exactly) on which f is called again, so
/// the function is re-instantiated in double: (f(x + h e_k) - f(x - h e_k)) / 2h for every
/// element k (mode `elements`), or (f(x + h v) - f(x - h v)) / 2h against <grad f, v> for a few
/// seeded random directions v over all parameters at once (mode `directions`, for large
/// tensors). See docs/gradcheck.md.
///
/// The checking path runs in constant evaluation wherever grad and value do (static shapes):
/// everything is constexpr, with no iostream, std::string, exceptions or type erasure, and the
/// result holds plain values, so `static_assert(gx::gradcheck(f, x).ok())` works
/// (tests/gradcheck/constexpr_test.cpp). Printing (operator<<, to_string) is host-only.

#include "gradix/api/backward.hpp"
#include "gradix/api/eval.hpp"
#include "gradix/api/param.hpp"
#include "gradix/config.hpp"
#include "gradix/core/array.hpp"
#include "gradix/core/math.hpp"
#include "gradix/core/rng.hpp"
#include "gradix/core/tensor.hpp"
#include "gradix/expr/node.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <ostream>
#include <sstream>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

namespace gradix {

/// What gradcheck compares.
enum class gradcheck_mode {
  automatic,   ///< `elements` when all parameters together have at most max_elements elements, else `directions`
  elements,    ///< every element of every parameter: 2 evaluations of f per element
  directions,  ///< `directions` seeded random directions over all parameters: 2 evaluations each
};

/// A relative and an absolute tolerance.
struct gradcheck_tolerance {
  double rtol;
  double atol;
};

/// The default tolerances for element type T: float {rtol 1e-3, atol 1e-5}, double (and wider)
/// {rtol 1e-6, atol 1e-8}. gradcheck uses those of the least precise of the parameters' element
/// types and f's element type (a double parameter whose gradient goes through float arithmetic
/// gets float's). The numeric side is always computed in double, so these bound the error of
/// gradix's own gradient arithmetic.
template <class T>
inline constexpr gradcheck_tolerance gradcheck_default_tolerance =
    sizeof(T) >= sizeof(double) ? gradcheck_tolerance{1e-6, 1e-8} : gradcheck_tolerance{1e-3, 1e-5};

/// Options of gradcheck (designated initializers work: `{.rtol = 1e-2, .mode = ...}`).
struct gradcheck_options {
  /// Tolerances; unset: gradcheck_default_tolerance (see there for the element type). An
  /// element passes when |analytic - numeric| <= atol + rtol * max(|analytic|, |numeric|) + noise,
  /// where noise = 16 eps_double (|f(x+h)| + |f(x-h)|) / 2h is the rounding error of the
  /// difference quotient. A direction v passes when |<g, v> - numeric| <= atol |v|_2 +
  /// rtol * max(|g * v|_2, |<g, v>|, |numeric|) + noise (|.|_2: root of the sum of squares over
  /// all elements of all parameters; g * v elementwise).
  std::optional<double> rtol{};
  std::optional<double> atol{};
  /// Relative step: h = step * max(1, |x|) for element x (directions: the largest |x| of all
  /// parameters).
  double step = 1e-6;
  gradcheck_mode mode = gradcheck_mode::automatic;
  /// automatic mode: the largest total element count checked element by element.
  index_t max_elements = 1024;
  /// directions mode: the number of random directions (at least 1 is checked).
  int directions = 4;
  /// directions mode: the seed. Entry k of direction r (k counts the elements of all
  /// parameters, one parameter after another, each in logical row-major order) is
  /// 2 * rng::uniform01(rng::bits(seed, r), k) - 1, uniform in [-1, 1) (core/rng.hpp).
  std::uint64_t seed = 0;
};

/// The outcome of gradcheck: ok(), and the worst comparison (the largest error relative to
/// its tolerance; on failure a failing one, the first of the worst). Plain values only.
/// R is the largest rank of the checked parameters (at least 1).
template <std::size_t R>
struct gradcheck_result {
  bool passed = true;
  gradcheck_mode mode = gradcheck_mode::elements;  ///< elements or directions (what ran)
  int parameters = 0;                              ///< number of parameters checked
  index_t checked = 0;                             ///< elements (or directions) compared
  index_t failures = 0;                            ///< how many of them failed
  // --- the worst comparison (parameter -1 when nothing was compared)
  int parameter = -1;          ///< elements: its position in the call (0-based); directions: -1
  int rank = 0;                ///< elements: that parameter's rank (entries used in `index`)
  coord<R> index{};            ///< elements: the element's coordinates in that parameter
  index_t element = -1;        ///< elements: its logical row-major linear index
  int direction = -1;          ///< directions: which direction (0-based)
  double analytic = 0;         ///< gradix's gradient element (directions: <grad, v>)
  double numeric = 0;          ///< the central difference
  double error = 0;            ///< |analytic - numeric| (NaN when either is NaN)
  double tolerance = 0;        ///< what error was allowed
  double rtol = 0;             ///< the relative tolerance used (given or default)
  double atol = 0;             ///< the absolute tolerance used

  constexpr bool ok() const { return passed; }

  // For static_assert (GRADIX_STATIC_GRADCHECK): -1, -1, 0, 0 when the check passed, so that
  // a failing comparison makes the compiler print the worst comparison's values.
  /// The parameter (position) whose gradient is wrong, or -1.
  constexpr int failed_parameter() const { return passed ? -1 : parameter; }
  /// Its element (logical row-major index; directions: the direction), or -1.
  constexpr index_t failed_element() const {
    return passed ? -1 : mode == gradcheck_mode::directions ? index_t(direction) : element;
  }
  /// gradix's gradient there (directions: <grad f, v>), or 0.
  constexpr double failed_analytic() const { return passed ? 0.0 : analytic; }
  /// The central difference there, or 0.
  constexpr double failed_numeric() const { return passed ? 0.0 : numeric; }
};

/// Asserts at compile time that a gradcheck result passed; on failure the compiler prints
/// gradix's gradient and the central difference at the worst element ("the comparison reduces
/// to (3.0e+0 == 6.0e+0)"); the result's `parameter` and `index` say which element it is.
/// r must be a constant expression, best a constexpr variable:
///
///   constexpr auto r = gx::gradcheck(f, x);   // x: a static-shape tensor or parameter
///   GRADIX_STATIC_GRADCHECK(r);
#define GRADIX_STATIC_GRADCHECK(r)                                                          \
  static_assert((r).failed_analytic() == (r).failed_numeric(),                              \
                "gradix::gradcheck failed: gradix's gradient (left) differs from the central " \
                "difference (right) at the worst element (the result's parameter and index)")

namespace detail {

constexpr double gc_abs(double x) { return x < 0 ? -x : x; }

template <class P>
constexpr std::size_t gc_rank() {
  if constexpr (requires { P::rank; }) return std::size_t(P::rank);
  else return 0;  // not a parameter: that overload is not viable (clang substitutes first)
}
template <class... P>
inline constexpr std::size_t gc_max_rank = std::max({std::size_t(1), gc_rank<P>()...});

/// A gradient storage element at a coordinate, as double (sparse: 0 where no slice is stored).
template <class G>
constexpr double gc_grad_at(G const& g, coord<G::rank> const& c) {
  if constexpr (G::sparse) return double(g.at(c));
  else return double(g.dense()[c]);
}

/// A parameter of element type double with p's shape, layout and gradient kind, holding p's
/// values (converted exactly).
template <class P>
constexpr auto gc_double_param(P const& p) {
  using S = typename P::shape_type;
  using L = typename P::layout_type;
  auto const& v = p.value();
  tensor<double, S, L> t(v.shape());
  for (index_t k = 0; k < v.size(); ++k) {
    auto c = unravel(v.shape(), k);
    t[c] = double(v[c]);
  }
  return param(std::move(t), typename P::grad_spec{});
}

/// The least precise floating-point type among T... (double when there is none).
template <class... T>
struct gc_least_precise {
  using type = double;
};
template <class T, class... Rest>
struct gc_least_precise<T, Rest...> {
  using rest = typename gc_least_precise<Rest...>::type;
  using type = std::conditional_t<std::is_floating_point_v<T> &&
                                      std::numeric_limits<T>::digits < std::numeric_limits<rest>::digits,
                                  T, rest>;
};

/// The tolerance of element type T under the options.
template <class T>
constexpr gradcheck_tolerance gc_tolerance(gradcheck_options const& o) {
  return {o.rtol.value_or(gradcheck_default_tolerance<T>.rtol),
          o.atol.value_or(gradcheck_default_tolerance<T>.atol)};
}

/// err / tol, with a NaN error (or a non-zero error against a zero tolerance) as +infinity.
constexpr double gc_ratio(double err, double tol) {
  if (math::detail::cisnan(err)) return std::numeric_limits<double>::infinity();
  if (tol > 0) return err / tol;
  return err > 0 ? std::numeric_limits<double>::infinity() : 0.0;
}

/// Rounding noise of (fp - fm) / span.
constexpr double gc_noise(double fp, double fm, double span) {
  return 16 * std::numeric_limits<double>::epsilon() * (gc_abs(fp) + gc_abs(fm)) / span;
}

/// The gradients of f(p...) with respect to p..., always as a tuple.
template <class F, class... P>
constexpr auto gc_analytic(F const& f, P const&... p) {
  auto e = f(p...);
  if constexpr (sizeof...(P) == 1) return std::tuple<typename P::storage_type...>(grad(e, p...));
  else return grad(e, p...);
}

/// The direction's entry for element `counter` (parameters one after another, each in
/// logical row-major order): uniform in [-1, 1) from gradix's counter-based generator.
constexpr double gc_direction(std::uint64_t seed, int direction, std::uint64_t counter) {
  return 2.0 * rng::uniform01(rng::bits(seed, std::uint64_t(direction)), counter) - 1.0;
}

/// Counts one comparison (a NaN error fails it) and, when its error over tolerance is the
/// worst so far, records its values in res and returns true (the caller records where).
template <std::size_t R>
constexpr bool gc_tally(gradcheck_result<R>& res, double& worst, double analytic, double numeric,
                        double err, double tol) {
  ++res.checked;
  if (!(err <= tol)) {
    ++res.failures;
    res.passed = false;
  }
  double const q = gc_ratio(err, tol);
  if (!(q > worst)) return false;
  worst = q;
  res.analytic = analytic;
  res.numeric = numeric;
  res.error = err;
  res.tolerance = tol;
  return true;
}

template <std::size_t R, class... P, class... D, class E, std::size_t... I>
constexpr void gc_elements(gradcheck_result<R>& res, gradcheck_options const& o,
                           gradcheck_tolerance tol, E const& ed,
                           std::tuple<P const&...> /*ps*/, std::tuple<D&...> ds,
                           std::tuple<typename P::storage_type...> const& gs, std::index_sequence<I...>) {
  double worst = -1;
  auto one = [&]<std::size_t J>(std::integral_constant<std::size_t, J>) {
    auto& x = std::get<J>(ds).value();  // the double copy, perturbed in place
    auto const& g = std::get<J>(gs);
    auto const s = x.shape();
    for (index_t k = 0; k < s.size(); ++k) {
      auto const c = unravel(s, k);
      double const x0 = x[c];
      double const h = o.step * std::max(1.0, gc_abs(x0));
      x[c] = x0 + h;
      double const xp = x[c];
      double const fp = double(value(ed));
      x[c] = x0 - h;
      double const xm = x[c];
      double const fm = double(value(ed));
      x[c] = x0;
      double const num = (fp - fm) / (xp - xm);
      double const an = gc_grad_at(g, c);
      double const err = gc_abs(an - num);
      double const t = tol.atol + tol.rtol * std::max(gc_abs(an), gc_abs(num)) + gc_noise(fp, fm, xp - xm);
      if (gc_tally(res, worst, an, num, err, t)) {
        res.parameter = int(J);
        res.rank = int(s.rank);
        res.index = coord<R>{};
        for (std::size_t a = 0; a < s.rank; ++a) res.index[a] = c[a];
        res.element = k;
      }
    }
  };
  (one(std::integral_constant<std::size_t, I>{}), ...);
}

template <std::size_t R, class... P, class... D, class E, std::size_t... I>
constexpr void gc_directions(gradcheck_result<R>& res, gradcheck_options const& o,
                             gradcheck_tolerance tol, E const& ed,
                             std::tuple<P const&...> ps, std::tuple<D&...> ds,
                             std::tuple<typename P::storage_type...> const& gs,
                             std::index_sequence<I...>) {
  // first element counter of each parameter
  index_t offset[sizeof...(P) + 1] = {};
  {
    index_t sizes[] = {std::get<I>(ps).value().size()...};
    for (std::size_t j = 0; j < sizeof...(P); ++j) offset[j + 1] = offset[j] + sizes[j];
  }
  double xmax = 0;
  (
      [&] {
        auto const& v = std::get<I>(ps).value();
        for (index_t k = 0; k < v.size(); ++k)
          xmax = std::max(xmax, gc_abs(double(v[unravel(v.shape(), k)])));
      }(),
      ...);
  double const h = o.step * std::max(1.0, xmax);
  double worst = -1;
  int const n_dirs = std::max(1, o.directions);
  for (int r = 0; r < n_dirs; ++r) {
    // <grad, v>, |v|^2 and sum_k (g_k v_k)^2
    double dot = 0, vv = 0, gvgv = 0;
    (
        [&] {
          auto const& p = std::get<I>(ps);
          auto const& g = std::get<I>(gs);
          auto const s = p.value().shape();
          for (index_t k = 0; k < s.size(); ++k) {
            double const v = gc_direction(o.seed, r, std::uint64_t(offset[I] + k));
            double const gv = gc_grad_at(g, unravel(s, k)) * v;
            dot += gv;
            vv += v * v;
            gvgv += gv * gv;
          }
        }(),
        ...);
    auto move_to = [&](double sign) {
      (
          [&] {
            auto const& x0 = std::get<I>(ps).value();
            auto& x = std::get<I>(ds).value();
            auto const s = x.shape();
            for (index_t k = 0; k < s.size(); ++k) {
              auto const c = unravel(s, k);
              x[c] = sign == 0 ? double(x0[c])  // restore exactly
                               : double(x0[c]) + sign * h * gc_direction(o.seed, r, std::uint64_t(offset[I] + k));
            }
          }(),
          ...);
    };
    move_to(1.0);
    double const fp = double(value(ed));
    move_to(-1.0);
    double const fm = double(value(ed));
    move_to(0.0);
    double const num = (fp - fm) / (2 * h);
    double const err = gc_abs(dot - num);
    // the elements' tolerances combined as independent errors (root of the sum of squares):
    // summing them (the worst case) would let a wrong gradient of a large tensor pass
    double const t = tol.atol * math::detail::csqrt(vv) +
                     tol.rtol * std::max({math::detail::csqrt(gvgv), gc_abs(dot), gc_abs(num)}) +
                     gc_noise(fp, fm, 2 * h);
    if (gc_tally(res, worst, dot, num, err, t)) res.direction = r;
  }
}

template <std::size_t R, class F, class... P, class... D>
constexpr gradcheck_result<R> gc_run(F const& f, gradcheck_options const& o, std::tuple<P const&...> ps,
                                     D&... dps) {
  gradcheck_result<R> res{};
  res.parameters = int(sizeof...(P));
  using EF = node_t<decltype(f(std::declval<P const&>()...))>;
  static_assert(shape_of_t<EF>::rank == 0,
                "gradix::gradcheck: f must build a rank-0 expression (e.g. wrap it in gx::sum)");
  gradcheck_tolerance const tol =
      gc_tolerance<typename gc_least_precise<value_type_t<EF>, typename P::value_type...>::type>(o);
  res.rtol = tol.rtol;
  res.atol = tol.atol;
  auto gs = std::apply([&](auto const&... p) { return gc_analytic(f, p...); }, ps);
  auto ed = f(std::as_const(dps)...);  // the double re-instantiation; reads dps' values when run
  index_t total = 0;
  std::apply([&](auto const&... p) { ((total += p.value().size()), ...); }, ps);
  gradcheck_mode m = o.mode;
  if (m == gradcheck_mode::automatic)
    m = total <= o.max_elements ? gradcheck_mode::elements : gradcheck_mode::directions;
  res.mode = m;
  auto seq = std::index_sequence_for<P...>{};
  if (m == gradcheck_mode::elements)
    gc_elements<R>(res, o, tol, ed, ps, std::tuple<D&...>(dps...), gs, seq);
  else
    gc_directions<R>(res, o, tol, ed, ps, std::tuple<D&...>(dps...), gs, seq);
  return res;
}

}  // namespace detail

/// Checks gradix's gradient of the rank-0 expression f(p...) with respect to every parameter
/// p against central differences in double precision (see the file comment and
/// docs/gradcheck.md). f is called with the parameters (`parameter const&`) and with double
/// copies of them, so it must be generic (`[](auto const& x, auto const& y) { ... }`).
/// The parameters' values and gradients are left unchanged. Throws gradix::error where grad
/// does (a parameter given twice).
template <class F, parameter_object... P>
  requires(sizeof...(P) >= 1)
constexpr gradcheck_result<detail::gc_max_rank<P...>> gradcheck(F const& f, gradcheck_options const& o,
                                                               P const&... p) {
  static_assert((std::is_floating_point_v<typename P::value_type> && ...),
                "gradix::gradcheck: parameters must have a floating-point element type");
  // the double copies live as this lambda's arguments (parameters are not copyable)
  return [&](auto&&... dps) {
    return detail::gc_run<detail::gc_max_rank<P...>>(f, o, std::tuple<P const&...>(p...), dps...);
  }(detail::gc_double_param(p)...);
}

/// gradcheck with the default options.
template <class F, parameter_object... P>
  requires(sizeof...(P) >= 1)
constexpr gradcheck_result<detail::gc_max_rank<P...>> gradcheck(F const& f, P const&... p) {
  return gradcheck(f, gradcheck_options{}, p...);
}

/// gradcheck of tensors: each becomes a parameter with dense gradient storage for the check,
/// so a static-shape constexpr tensor can be checked in a static_assert directly:
/// `static_assert(gx::gradcheck(f, x).ok())`.
template <class F, class... T>
  requires(sizeof...(T) >= 1 && (is_tensor_v<T> && ...))
constexpr gradcheck_result<detail::gc_max_rank<parameter<typename T::value_type,
                                                         typename T::shape_type,
                                                         typename T::layout_type>...>>
gradcheck(F const& f, gradcheck_options const& o, T const&... t) {
  return [&](auto const&... p) { return gradcheck(f, o, p...); }(param(T(t))...);
}
template <class F, class... T>
  requires(sizeof...(T) >= 1 && (is_tensor_v<T> && ...))
constexpr auto gradcheck(F const& f, T const&... t) {
  return gradcheck(f, gradcheck_options{}, t...);
}

// --- printing (host only)

inline char const* to_string(gradcheck_mode m) {
  switch (m) {
    case gradcheck_mode::automatic: return "automatic";
    case gradcheck_mode::elements: return "elements";
    case gradcheck_mode::directions: return "directions";
  }
  return "?";
}

/// One line, e.g.
/// `gradcheck FAILED: 3 of 12 elements of 2 parameters; worst: parameter 1 at [0, 2]:
/// analytic 2.5 vs numeric 1.25 (error 1.25, tolerance 0.00125)`.
template <std::size_t R>
std::ostream& operator<<(std::ostream& os, gradcheck_result<R> const& r) {
  auto const prec = os.precision(9);
  bool const dirs = r.mode == gradcheck_mode::directions;
  os << "gradcheck " << (r.passed ? "passed" : "FAILED") << ": ";
  if (!r.passed) os << r.failures << " of ";
  os << r.checked << (dirs ? " random directions" : " elements") << " of " << r.parameters
     << (r.parameters == 1 ? " parameter" : " parameters");
  if (dirs ? r.direction >= 0 : r.parameter >= 0) {
    os << "; worst: ";
    if (dirs) {
      os << "direction " << r.direction << ": <grad, v> " << r.analytic;
    } else {
      os << "parameter " << r.parameter << " at [";
      for (int a = 0; a < r.rank; ++a) os << (a ? ", " : "") << r.index[std::size_t(a)];
      os << "]: analytic " << r.analytic;
    }
    os << " vs numeric " << r.numeric << " (error " << r.error << ", tolerance " << r.tolerance << ")";
  }
  os.precision(prec);
  return os;
}

template <std::size_t R>
std::string to_string(gradcheck_result<R> const& r) {
  std::ostringstream os;
  os << r;
  return os.str();
}

}  // namespace gradix
