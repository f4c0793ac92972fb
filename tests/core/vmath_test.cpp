// gradix's float elementary functions (core/vmath.hpp): the stated error bounds against a
// double-precision reference over the whole float range (every 997th bit pattern: every
// binade, both signs, subnormals, infinities and NaNs), the same bits for a scalar and for
// every lane of a pack, special values, and constant evaluation.
#include "testing.hpp"

#include <gradix/core/vmath.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>

namespace vm = gradix::vmath;

namespace {

float from_bits(std::uint32_t u) {
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}
bool same_bits(float a, float b) {
  return std::memcmp(&a, &b, 4) == 0 || (std::isnan(a) && std::isnan(b));
}

/// Error of got in units in the last place of the float nearest to ref (the spacing of
/// subnormals below the normal range); 0 when both are the same infinity or NaN.
double ulp_error(float got, double ref) {
  if (std::isnan(ref)) return std::isnan(got) ? 0 : 1e30;
  float rf = float(ref);
  if (std::isinf(rf)) return got == rf ? 0 : 1e30;
  if (std::isnan(got) || std::isinf(got)) return 1e30;
  double ulp;
  if (std::fabs(rf) < std::numeric_limits<float>::min()) {
    ulp = std::ldexp(1.0, -149);
  } else {
    int e = 0;
    std::frexp(rf, &e);
    ulp = std::ldexp(1.0, e - 24);
  }
  return std::fabs(double(got) - ref) / ulp;
}

struct sweep_result {
  double worst = 0;
  float worst_at = 0;
  long mismatches = 0;  // scalar vs pack lanes
};

template <class F, class R>
sweep_result sweep(F f, R ref) {
  sweep_result r;
#if defined(GRADIX_HAS_VECTOR_EXT)
  constexpr int W = gradix::simd::width<float>;
  using P = gradix::simd::pack<float, W>;
#endif
  for (std::uint64_t b = 0; b < (std::uint64_t(1) << 32); b += 997) {
    float x = from_bits(std::uint32_t(b));
    float y = f(x);
    double e = ulp_error(y, ref(double(x)));
    if (e > r.worst) {
      r.worst = e;
      r.worst_at = x;
    }
#if defined(GRADIX_HAS_VECTOR_EXT)
    P xp{};
    for (int w = 0; w < W; ++w) xp[w] = from_bits(std::uint32_t(b + std::uint64_t(w) * 7919));
    P yp = f(xp);
    for (int w = 0; w < W; ++w)
      if (!same_bits(yp[w], f(xp[w]))) ++r.mismatches;
#endif
  }
  return r;
}

double sigmoid_ref(double x) { return 1.0 / (1.0 + std::exp(-x)); }

}  // namespace

TEST_CASE("vmath: error bounds over the whole float range, the same bits in packs and scalars") {
  struct row {
    char const* name;
    sweep_result r;
    double bound;
  };
  row rows[] = {
      {"exp", sweep([](auto x) { return vm::exp(x); }, [](double x) { return std::exp(x); }), 1.01},
      {"log", sweep([](auto x) { return vm::log(x); }, [](double x) { return std::log(x); }), 1.0},
      {"tanh", sweep([](auto x) { return vm::tanh(x); }, [](double x) { return std::tanh(x); }), 2.0},
      {"sigmoid", sweep([](auto x) { return vm::sigmoid(x); }, sigmoid_ref), 2.5},
  };
  for (auto const& r : rows) {
    INFO(r.name << ": worst " << r.r.worst << " ulp at " << r.r.worst_at);
    CHECK(r.r.worst <= r.bound);
    CHECK(r.r.mismatches == 0);
  }
}

TEST_CASE("vmath: special values") {
  float const inf = std::numeric_limits<float>::infinity();
  float const nan = std::numeric_limits<float>::quiet_NaN();
  CHECK(vm::exp(0.f) == 1.f);
  CHECK(vm::exp(inf) == inf);
  CHECK(vm::exp(-inf) == 0.f);
  CHECK(vm::exp(89.f) == inf);
  CHECK(vm::exp(-104.f) == 0.f);
  CHECK(vm::exp(-100.f) > 0.f);  // a subnormal result
  CHECK(std::isnan(vm::exp(nan)));
  CHECK(vm::log(1.f) == 0.f);
  CHECK(vm::log(0.f) == -inf);
  CHECK(vm::log(-0.f) == -inf);
  CHECK(std::isnan(vm::log(-1.f)));
  CHECK(vm::log(inf) == inf);
  CHECK(std::isnan(vm::log(nan)));
  CHECK(ulp_error(vm::log(1e-45f), std::log(double(1e-45f))) <= 1.0);  // smallest subnormal
  CHECK(vm::tanh(0.f) == 0.f);
  CHECK(vm::tanh(inf) == 1.f);
  CHECK(vm::tanh(-inf) == -1.f);
  CHECK(vm::tanh(-20.f) == -1.f);
  CHECK(std::isnan(vm::tanh(nan)));
  CHECK(vm::sigmoid(0.f) == 0.5f);
  CHECK(vm::sigmoid(inf) == 1.f);
  CHECK(vm::sigmoid(-inf) == 0.f);
  CHECK(vm::sigmoid(-100.f) > 0.f);  // e^-100, not 0
  CHECK(std::isnan(vm::sigmoid(nan)));
}

// Constant evaluation runs the same polynomial (scalar code, no FMA contraction).
static_assert(vm::exp(0.f) == 1.f);
static_assert(double(vm::exp(1.f)) > 2.7182816 && double(vm::exp(1.f)) < 2.7182820);
static_assert(vm::log(1.f) == 0.f);
static_assert(double(vm::tanh(0.5f)) > 0.4621171 && double(vm::tanh(0.5f)) < 0.4621172);

TEST_CASE("vmath: constant evaluation agrees with run time within the bound") {
  constexpr float e1 = vm::exp(1.f), l3 = vm::log(3.f), t2 = vm::tanh(2.f), s1 = vm::sigmoid(-1.f);
  volatile float one = 1.f, three = 3.f, two = 2.f;
  CHECK(ulp_error(e1, std::exp(double(one))) <= 1.01);
  CHECK(std::fabs(e1 - vm::exp(float(one))) <= 1e-6f * e1);
  CHECK(std::fabs(l3 - vm::log(float(three))) <= 1e-6f * l3);
  CHECK(std::fabs(t2 - vm::tanh(float(two))) <= 1e-6f);
  CHECK(std::fabs(s1 - vm::sigmoid(-float(one))) <= 1e-6f);
}
