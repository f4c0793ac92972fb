#pragma once
/// \file
/// Initializers (gx::init): fill a parameter's value in place, from a seed.
///
/// `uniform(p, seed, lo, hi)` and `normal(p, seed, mean, stddev)` write the values
/// gx::uniform / gx::randn give for the same seed into the parameter's own buffer
/// (expressions that view it stay valid); `xavier_uniform`, `xavier_normal`,
/// `kaiming_uniform` and `kaiming_normal` scale them by the parameter's fan-in and fan-out
/// (extents 0 and 1, each times the product of the further extents; both extent 0 for rank
/// 1). A parameter of rank 2 or more with a fan-in of 0 throws gradix::error; a rank-0 one
/// does not compile.
///
/// Part of `<gradix/optim.hpp>` (docs/optim.md), which includes this header.

#include "gradix/api/fill.hpp"
#include "gradix/api/param.hpp"
#include "gradix/core/error.hpp"
#include "gradix/core/shape.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <utility>

namespace gradix {

namespace init {
/// Fills p's value with uniform values in [-a, a), a = gain * sqrt(6 / (fan_in + fan_out))
/// (Glorot / Xavier). fan_in and fan_out of a rank-2 parameter used as x * W with W (in,
/// out): fan_in = extent 0, fan_out = extent 1.
template <class P>
void xavier_uniform(P& p, std::uint64_t seed, double gain = 1.0);
template <class P>
void xavier_normal(P& p, std::uint64_t seed, double gain = 1.0);
/// He / Kaiming: uniform in [-a, a), a = gain * sqrt(3 / fan_in), gain sqrt(2) for relu.
template <class P>
void kaiming_uniform(P& p, std::uint64_t seed, double gain = 1.4142135623730951);
template <class P>
void kaiming_normal(P& p, std::uint64_t seed, double gain = 1.4142135623730951);
/// Uniform in [lo, hi) and normal(mean, stddev): the values gx::uniform / gx::randn give
/// for the same seed.
/// (Written into the parameter's own buffer: expressions that view it stay valid.)
template <class P>
void uniform(P& p, std::uint64_t seed, double lo, double hi) {
  using T = typename P::value_type;
  auto const t = gradix::uniform<T, typename P::layout_type>(p.value().shape(), seed, T(lo), T(hi));
  std::copy(t.data(), t.data() + t.size(), p.value().data());
}
template <class P>
void normal(P& p, std::uint64_t seed, double mean, double stddev) {
  using T = typename P::value_type;
  auto const t = gradix::randn<T, typename P::layout_type>(p.value().shape(), seed, T(mean), T(stddev));
  std::copy(t.data(), t.data() + t.size(), p.value().data());
}

namespace detail {
template <class P>
std::pair<double, double> fans(P const& p, char const* op) {
  static_assert(P::rank >= 1, "gradix::init: a rank-0 parameter has no fan-in");
  auto const s = p.value().shape();
  if constexpr (P::rank == 1) {
    return {double(s.extent(0)), double(s.extent(0))};
  } else {
    // (in, out, receptive field...): fan_in = in x field, fan_out = out x field
    double field = 1;
    for (std::size_t k = 2; k < P::rank; ++k) field *= double(s.extent(k));
    double const fi = double(s.extent(0)) * field, fo = double(s.extent(1)) * field;
    if (fi == 0) gradix::detail::fail(op, ": the parameter ", to_string(s), " has no fan-in");
    return {fi, fo};
  }
}
}  // namespace detail

template <class P>
void xavier_uniform(P& p, std::uint64_t seed, double gain) {
  auto [fi, fo] = detail::fans(p, "gradix::init::xavier_uniform");
  double const a = gain * std::sqrt(6.0 / (fi + fo));
  uniform(p, seed, -a, a);
}
template <class P>
void xavier_normal(P& p, std::uint64_t seed, double gain) {
  auto [fi, fo] = detail::fans(p, "gradix::init::xavier_normal");
  normal(p, seed, 0.0, gain * std::sqrt(2.0 / (fi + fo)));
}
template <class P>
void kaiming_uniform(P& p, std::uint64_t seed, double gain) {
  auto [fi, fo] = detail::fans(p, "gradix::init::kaiming_uniform");
  (void)fo;
  double const a = gain * std::sqrt(3.0 / fi);
  uniform(p, seed, -a, a);
}
template <class P>
void kaiming_normal(P& p, std::uint64_t seed, double gain) {
  auto [fi, fo] = detail::fans(p, "gradix::init::kaiming_normal");
  (void)fo;
  normal(p, seed, 0.0, gain / std::sqrt(fi));
}
}  // namespace init

}  // namespace gradix
