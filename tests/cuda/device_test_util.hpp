// Helpers of the device tests (backward_test.cpp, dispatch_test.cpp): host <-> device
// copies on the emulator, index tensors, Zipf-like ids, closeness and bit comparisons, and
// the launch configurations every device computation is checked under.
#pragma once

#include "cuda/emulator.hpp"

#include <gradix/backend/grid/memory.hpp>
#include <gradix/backend/grid/scatter.hpp>
#include <gradix/gradix.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace gradix_test::dev {

namespace gx = gradix;
namespace grid = gradix::grid;
using gx::index_t;
using gradix_test::emu::launcher;
using gradix_test::emu::options;
using mode = grid::scatter_mode;
using dyn2 = gx::shape<gx::dyn, gx::dyn>;


template <class T>
inline std::uint64_t bits(T v) {
  std::uint64_t b = 0;
  std::memcpy(&b, &v, sizeof v);
  return b;
}

template <class F>
inline std::string error_of(F&& f) {
  try {
    f();
  } catch (gx::error const& e) {
    return e.what();
  }
  return "(no error)";
}

template <class T, class S, class Lay>
inline auto to_device(launcher& l, gx::tensor<T, S, Lay> const& h) {
  return grid::device_tensor<T, S, launcher, Lay>::from_host(l, h);
}

inline gx::tensor<std::int32_t, gx::shape<gx::dyn>> index_tensor(std::vector<std::int32_t> const& v) {
  gx::tensor<std::int32_t, gx::shape<gx::dyn>> t(gx::dims(index_t(v.size())));
  for (std::size_t k = 0; k < v.size(); ++k) t(index_t(k)) = v[k];
  return t;
}

/// Zipf-like ids in [0, n): id ~ 1 / rank.
inline std::vector<std::int32_t> zipf(index_t count, index_t n, std::uint64_t s) {
  std::vector<std::int32_t> r;
  for (index_t i = 0; i < count; ++i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    r.push_back(std::int32_t(std::pow(double(n), double(s >> 11) / double(1ull << 53))) - 1);
  }
  return r;
}

/// Element-by-element closeness of two host tensors of one shape and layout.
template <class A, class B>
inline void check_close(A const& want, B const& got, double tol, char const* what) {
  INFO(what);
  REQUIRE(want.shape() == got.shape());
  for (index_t k = 0; k < want.size(); ++k) {
    double const w = double(want.data()[k]), g = double(got.data()[k]);
    if (!(std::abs(w - g) <= tol * (1 + std::abs(w)))) {
      INFO("element " << k << ": host " << w << ", device " << g);
      REQUIRE(std::abs(w - g) <= tol * (1 + std::abs(w)));
    }
  }
}
template <class A, class B>
inline void check_bits(A const& a, B const& b, char const* what) {
  INFO(what);
  REQUIRE(a.shape() == b.shape());
  for (index_t k = 0; k < a.size(); ++k) REQUIRE(bits(a.data()[k]) == bits(b.data()[k]));
}

/// The launch configurations every device backward runs under: block sizes, grid bounds,
/// block and thread orders.
struct config {
  index_t threads, max_blocks;
  bool shuffle;
};
inline std::vector<config> const configs = {{256, 0, false}, {32, 1, false}, {64, 3, true}, {128, 7, true}};

inline launcher make_launcher(config c) {
  options o;
  o.shuffle_blocks = c.shuffle;
  o.reverse_threads = c.shuffle;
  o.seed = std::uint64_t(c.threads * 31 + c.max_blocks);
  return launcher(o);
}

}  // namespace gradix_test::dev
