#include "testing.hpp"

#include <cmath>

namespace gx = gradix;

// The generator is a pure function of (seed, counter), usable at compile time.
static_assert(gx::rng::bits(1, 0) != gx::rng::bits(2, 0));
static_assert(gx::rng::bits(1, 0) != gx::rng::bits(1, 1));
static_assert(gx::rng::uniform01(7, 3) >= 0.0 && gx::rng::uniform01(7, 3) < 1.0);

TEST_CASE("rng: fixed values (the same on every platform)") {
  // Locked in: a change of the generator changes every seeded test and benchmark.
  CHECK(gx::rng::bits(0, 0) == 0x3b9d11eb55856bafULL);
  CHECK(gx::rng::bits(42, 7) == 0xf724550ddce27c36ULL);
}

TEST_CASE("rng: values depend on seed and logical index only") {
  auto a = gx::randn<double>(gx::dims(40, 50), 5);
  auto b = gx::randn<double, gx::col_major>(gx::dims(40, 50), 5);
  CHECK_ALL_CLOSE(a, b, 0.0, 0.0);
  gx::set_num_threads(1);
  auto c = gx::randn<float>(gx::dims(300, 1000), 9);
  gx::set_num_threads(3);
  auto d = gx::randn<float>(gx::dims(300, 1000), 9);
  gx::set_num_threads(gx::host::default_num_threads());
  CHECK_ALL_CLOSE(c, d, 0.0, 0.0);
  auto e = gx::randn<double>(gx::dims(40, 50), 6);
  CHECK(a(0, 0) != e(0, 0));
}

TEST_CASE("rng: randn and uniform have the right moments") {
  auto n = gx::randn<double>(gx::dims(200000), 1);
  double m = gx::value(gx::mean(n));
  double v = gx::value(gx::mean(gx::square(n - m)));
  CHECK(std::abs(m) < 0.01);
  CHECK(std::abs(v - 1.0) < 0.02);
  auto u = gx::uniform<float>(gx::dims(200000), 2, -1.0f, 3.0f);
  CHECK(gx::value(gx::max(u)) < 3.0f);
  CHECK(-gx::value(gx::max(-u)) >= -1.0f);
  CHECK(std::abs(gx::value(gx::mean(u)) - 1.0f) < 0.02f);
}
