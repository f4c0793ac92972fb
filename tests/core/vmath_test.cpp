// gradix's float elementary functions (core/vmath.hpp): the stated error bounds against a
// double-precision reference over the whole float range (every 997th bit pattern: every
// binade, both signs, subnormals, infinities and NaNs; sin and cos: their stated range, and
// NaN beyond it), the same bits for a scalar and for every lane of a pack, special values,
// and constant evaluation.
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
  long beyond = 0;      // finite arguments beyond the stated range whose result is not NaN
};

/// Every 997th float x: the error of f(x) against ref(x) where |x| < limit (NaN expected
/// beyond), and f on a pack against f on each lane.
template <class F, class R>
sweep_result sweep(F f, R ref, float limit = std::numeric_limits<float>::infinity()) {
  sweep_result r;
#if defined(GRADIX_HAS_VECTOR_EXT)
  constexpr int W = gradix::simd::width<float>;
  using P = gradix::simd::pack<float, W>;
#endif
  for (std::uint64_t b = 0; b < (std::uint64_t(1) << 32); b += 997) {
    float x = from_bits(std::uint32_t(b));
    float y = f(x);
    if (std::isfinite(x) && !(std::fabs(x) < limit)) {
      if (!std::isnan(y)) ++r.beyond;
      continue;
    }
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
  float const trig_limit = 33554432.f;  // 2^25: sin and cos are NaN beyond
  row rows[] = {
      {"exp", sweep([](auto x) { return vm::exp(x); }, [](double x) { return std::exp(x); }), 1.02},
      {"log", sweep([](auto x) { return vm::log(x); }, [](double x) { return std::log(x); }), 1.0},
      {"tanh", sweep([](auto x) { return vm::tanh(x); }, [](double x) { return std::tanh(x); }), 2.0},
      {"sigmoid", sweep([](auto x) { return vm::sigmoid(x); }, sigmoid_ref), 2.5},
      {"expm1", sweep([](auto x) { return vm::expm1(x); }, [](double x) { return std::expm1(x); }), 1.5},
      {"log1p", sweep([](auto x) { return vm::log1p(x); }, [](double x) { return std::log1p(x); }), 1.0},
      {"sin", sweep([](auto x) { return vm::sin(x); }, [](double x) { return std::sin(x); }, trig_limit), 1.5},
      {"cos", sweep([](auto x) { return vm::cos(x); }, [](double x) { return std::cos(x); }, trig_limit), 1.5},
  };
  for (auto const& r : rows) {
    INFO(std::string(r.name) << ": worst " << r.r.worst << " ulp at " << r.r.worst_at << " (bound "
                             << r.bound << ")");
    CHECK(r.r.worst <= r.bound);
    CHECK(r.r.mismatches == 0);
    CHECK(r.r.beyond == 0);
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
  auto negative_zero = [](float v) { return v == 0.f && std::signbit(v); };
  CHECK(vm::expm1(0.f) == 0.f);
  CHECK(negative_zero(vm::expm1(-0.f)));
  CHECK(vm::expm1(inf) == inf);
  CHECK(vm::expm1(-inf) == -1.f);
  CHECK(vm::expm1(89.f) == inf);
  CHECK(vm::expm1(88.5f) < inf);  // 2^127.7: finite (2^n has no float for n = 128)
  CHECK(ulp_error(vm::expm1(88.5f), std::expm1(88.5)) <= 1.5);
  CHECK(vm::expm1(-30.f) == -1.f);
  CHECK(vm::expm1(1e-30f) == 1e-30f);
  CHECK(vm::expm1(1e-40f) == 1e-40f);  // a subnormal argument
  CHECK(std::isnan(vm::expm1(nan)));
  CHECK(vm::log1p(0.f) == 0.f);
  CHECK(negative_zero(vm::log1p(-0.f)));
  CHECK(vm::log1p(-1.f) == -inf);
  CHECK(std::isnan(vm::log1p(-1.5f)));
  CHECK(std::isnan(vm::log1p(-inf)));
  CHECK(vm::log1p(inf) == inf);
  CHECK(vm::log1p(1e-30f) == 1e-30f);
  CHECK(vm::log1p(-1e-40f) == -1e-40f);
  CHECK(ulp_error(vm::log1p(3e38f), std::log1p(3e38)) <= 1.0);
  CHECK(std::isnan(vm::log1p(nan)));
  CHECK(vm::sin(0.f) == 0.f);
  CHECK(negative_zero(vm::sin(-0.f)));
  CHECK(vm::sin(1e-30f) == 1e-30f);
  CHECK(vm::sin(-1e-40f) == -1e-40f);
  CHECK(vm::cos(0.f) == 1.f);
  CHECK(vm::cos(-0.f) == 1.f);
  CHECK(vm::cos(1e-30f) == 1.f);
  for (float big : {inf, -inf, nan, 33554432.f, -33554432.f, 1e30f, -3.4e38f}) {
    CAPTURE(big);
    CHECK(std::isnan(vm::sin(big)));
    CHECK(std::isnan(vm::cos(big)));
  }
  // the largest float of the range, and arguments next to multiples of pi/2, where the
  // reduction cancels most
  for (float x : {33554430.f, -33554430.f, 3.14159274f, 1.57079637f, 4.71238899f, 1e7f,
                  16777215.f, 6.28318548f, 1.5e6f * 3.14159274f}) {
    CAPTURE(x);
    CHECK(ulp_error(vm::sin(x), std::sin(double(x))) <= 1.5);
    CHECK(ulp_error(vm::cos(x), std::cos(double(x))) <= 1.5);
  }
}

// Constant evaluation runs the same polynomial (scalar code, no FMA contraction).
static_assert(vm::exp(0.f) == 1.f);
static_assert(double(vm::exp(1.f)) > 2.7182816 && double(vm::exp(1.f)) < 2.7182820);
static_assert(vm::log(1.f) == 0.f);
static_assert(double(vm::tanh(0.5f)) > 0.4621171 && double(vm::tanh(0.5f)) < 0.4621172);

static_assert(vm::expm1(0.f) == 0.f);
static_assert(double(vm::expm1(1e-3f)) > 1.0005001e-3 && double(vm::expm1(1e-3f)) < 1.0005003e-3);
static_assert(vm::log1p(0.f) == 0.f);
static_assert(double(vm::log1p(1e-3f)) > 9.995003e-4 && double(vm::log1p(1e-3f)) < 9.995004e-4);
static_assert(vm::sin(0.f) == 0.f && vm::cos(0.f) == 1.f);
static_assert(double(vm::sin(1.f)) > 0.8414709 && double(vm::sin(1.f)) < 0.8414711);
static_assert(double(vm::cos(100.f)) > 0.8623188 && double(vm::cos(100.f)) < 0.8623189);
static_assert(vm::sin(1e30f) != vm::sin(1e30f));  // NaN beyond 2^25

namespace {
constexpr float args[] = {-20.f, -3.f, -0.7f, -1e-3f, 1e-4f, 0.3f, 1.f, 5.f, 40.f, 1234.5f};
}  // namespace

TEST_CASE("vmath: constant evaluation agrees with run time within the bound") {
  constexpr float e1 = vm::exp(1.f), l3 = vm::log(3.f), t2 = vm::tanh(2.f), s1 = vm::sigmoid(-1.f);
  volatile float one = 1.f, three = 3.f, two = 2.f;
  CHECK(ulp_error(e1, std::exp(double(one))) <= 1.02);
  CHECK(std::fabs(e1 - vm::exp(float(one))) <= 1e-6f * e1);
  CHECK(std::fabs(l3 - vm::log(float(three))) <= 1e-6f * l3);
  CHECK(std::fabs(t2 - vm::tanh(float(two))) <= 1e-6f);
  CHECK(std::fabs(s1 - vm::sigmoid(-float(one))) <= 1e-6f);
  // the new functions at run time, the same arguments in constant evaluation: within a float
  // ulp of each other (the same polynomial; only FMA contraction at run time can differ)
  struct cx {
    float em1[10], l1p[10], sn[10], cs[10];
  };
  constexpr cx ct = [] {
    cx r{};
    for (int i = 0; i < 10; ++i) {
      r.em1[i] = vm::expm1(args[i]);
      r.l1p[i] = args[i] > -1.f ? vm::log1p(args[i]) : 0.f;
      r.sn[i] = vm::sin(args[i]);
      r.cs[i] = vm::cos(args[i]);
    }
    return r;
  }();
  for (int i = 0; i < 10; ++i) {
    volatile float xv = args[i];
    float x = xv;
    CAPTURE(x);
    auto close = [](float a, float b) {
      return a == b || std::fabs(double(a) - double(b)) <= 1.2e-7 * std::fabs(double(b));
    };
    CHECK(close(ct.em1[i], vm::expm1(x)));
    if (x > -1.f) CHECK(close(ct.l1p[i], vm::log1p(x)));
    CHECK(close(ct.sn[i], vm::sin(x)));
    CHECK(close(ct.cs[i], vm::cos(x)));
  }
}
