// Forward-evaluation benchmark (not a test): gradix against hand-written loops, 1 thread.
//
//   exp      out = a*b + exp(c)    gradix::assign  vs  for i: out[i] = a[i]*b[i] + std::exp(c[i])
//   axpc     out = a*b + c         gradix::assign  vs  the same hand loop without exp
//   sum      sum(a*b)              gradix::value   vs  a hand loop following gradix's summation
//                                  scheme (same blocks, 32 lanes, same tree, blocks left to
//                                  right), checked bit for bit; naive loops for context
//   memcpy / copy loop / read-only stream of one array: the bandwidth references
//
// Every case runs `--reps` times (default 21), all cases interleaved in each repeat (in a random
// order), so the noise of a shared machine hits them alike; the figures are medians. The last line of output
// is one JSON object with every median and ratio. See docs/performance.md.
//
// Bandwidth definitions (GB = 1e9 bytes):
//   copy bandwidth    = (bytes read + bytes written) / time = 2 x 64 MiB / time of a 64 MiB copy
//                       (the faster of memcpy and a copy loop with ordinary stores)
//   stream bandwidth  = bytes read / time of a read-only sum of one 64 MiB array, or of two
//   sum(a*b)          = 2 x 64 MiB read / time;  a*b + c = (3 x 64 MiB read + 64 MiB written) / time
// Write-allocate traffic (a store also reads its line unless it is a non-temporal store) is not
// counted: it is the same for gradix and the hand loops.

#include <gradix/gradix.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace gx = gradix;
using gx::index_t;

#define BENCH_NOINLINE __attribute__((noinline))

namespace {

using vec = gx::tensor<float, gx::shape<gx::dyn>>;

// ---------------------------------------------------------------- gradix (kept out of line
// so that each kernel is one symbol in `objdump -d`)
BENCH_NOINLINE void gradix_exp(vec& out, vec const& a, vec const& b, vec const& c) {
  gx::assign(out, a * b + gx::exp(c));
}
BENCH_NOINLINE void gradix_axpc(vec& out, vec const& a, vec const& b, vec const& c) {
  gx::assign(out, a * b + c);
}
BENCH_NOINLINE float gradix_sum(vec const& a, vec const& b) {
  return gx::value(gx::sum(a * b));
}

// ---------------------------------------------------------------- hand-written loops
// The product is a statement of its own so that clang's default -ffp-contract=on does not
// fuse it into an FMA (gradix computes a*b, then adds): the outputs stay bit-comparable.
BENCH_NOINLINE void hand_exp(float* __restrict out, float const* __restrict a,
                             float const* __restrict b, float const* __restrict c, index_t n) {
  for (index_t i = 0; i < n; ++i) {
    float p = a[i] * b[i];
    out[i] = p + std::exp(c[i]);
  }
}
BENCH_NOINLINE void hand_axpc(float* __restrict out, float const* __restrict a,
                              float const* __restrict b, float const* __restrict c, index_t n) {
  for (index_t i = 0; i < n; ++i) {
    float p = a[i] * b[i];
    out[i] = p + c[i];
  }
}

// gradix's summation scheme, written out (eval/reduce.hpp): blocks of
// B = max(8192, ceil(n / 256)) elements rounded up to 32; in a block, element j goes to lane
// j mod 32; a block's 32 lanes are combined by the tree lane[i] += lane[i + s],
// s = 16, 8, 4, 2, 1; block results are added left to right.
constexpr int L = 32;
inline index_t scheme_block(index_t n) {
  index_t b = (n + 255) / 256;
  if (b < 8192) b = 8192;
  return (b + L - 1) / L * L;
}
inline float lane_tree(float* t) {
  for (int s = L / 2; s >= 1; s /= 2)
    for (int i = 0; i < s; ++i) t[i] = t[i] + t[i + s];
  return t[0];
}

// (a) plain C++: a float[32] array of accumulators.
BENCH_NOINLINE float hand_sum_scheme(float const* __restrict a, float const* __restrict b,
                                     index_t n) {
  index_t B = scheme_block(n);
  float r = 0.0f;
  for (index_t f = 0; f < n; f += B) {
    index_t e = std::min(f + B, n);
    float acc[L] = {};
    index_t j = f;
    for (; j + L <= e; j += L)
      for (int l = 0; l < L; ++l) {
        float p = a[j + l] * b[j + l];
        acc[l] += p;
      }
    for (; j < e; ++j) {
      float p = a[j] * b[j];
      acc[(j - f) % L] += p;
    }
    float t = lane_tree(acc);
    r = f == 0 ? t : r + t;
  }
  return r;
}

// (b) the same scheme with explicit SIMD accumulators (GCC/clang vector extensions):
// 4 packs of 8 floats, lane q*8 + w of the scheme is lane w of pack q.
typedef float v8 __attribute__((vector_size(32)));
inline v8 load8(float const* p) {
  v8 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store8(float* p, v8 v) { std::memcpy(p, &v, sizeof v); }

BENCH_NOINLINE float hand_sum_scheme_simd(float const* __restrict a, float const* __restrict b,
                                          index_t n) {
  index_t B = scheme_block(n);
  float r = 0.0f;
  for (index_t f = 0; f < n; f += B) {
    index_t e = std::min(f + B, n);
    v8 s0 = {}, s1 = {}, s2 = {}, s3 = {};
    index_t j = f;
    for (; j + L <= e; j += L) {
      // products as statements of their own: no FMA contraction (see hand_exp)
      v8 p0 = load8(a + j) * load8(b + j);
      v8 p1 = load8(a + j + 8) * load8(b + j + 8);
      v8 p2 = load8(a + j + 16) * load8(b + j + 16);
      v8 p3 = load8(a + j + 24) * load8(b + j + 24);
      s0 += p0;
      s1 += p1;
      s2 += p2;
      s3 += p3;
    }
    float acc[L];
    store8(acc, s0);
    store8(acc + 8, s1);
    store8(acc + 16, s2);
    store8(acc + 24, s3);
    for (; j < e; ++j) {
      float p = a[j] * b[j];
      acc[(j - f) % L] += p;
    }
    float t = lane_tree(acc);
    r = f == 0 ? t : r + t;
  }
  return r;
}

// Context: what one might write without a scheme. One accumulator (serial dependency chain),
// and 8 accumulators over the whole range.
BENCH_NOINLINE float naive_sum_1acc(float const* __restrict a, float const* __restrict b,
                                    index_t n) {
  float s = 0.0f;
  for (index_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}
BENCH_NOINLINE float naive_sum_8acc(float const* __restrict a, float const* __restrict b,
                                    index_t n) {
  float s[8] = {};
  index_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int l = 0; l < 8; ++l) s[l] += a[i + l] * b[i + l];
  for (; i < n; ++i) s[0] += a[i] * b[i];
  return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

// ---------------------------------------------------------------- bandwidth references
BENCH_NOINLINE void ref_memcpy(float* __restrict d, float const* __restrict s, index_t n) {
  std::memcpy(d, s, std::size_t(n) * sizeof(float));
}
// A copy loop with ordinary (write-allocating) stores, like the stores of an elementwise
// kernel. The empty asm keeps compilers from turning it into a memcpy call.
BENCH_NOINLINE void ref_copy_loop(float* __restrict d, float const* __restrict s, index_t n) {
  index_t i = 0;
  for (; i + 32 <= n; i += 32) {
    v8 x0 = load8(s + i), x1 = load8(s + i + 8), x2 = load8(s + i + 16), x3 = load8(s + i + 24);
    store8(d + i, x0);
    store8(d + i + 8, x1);
    store8(d + i + 16, x2);
    store8(d + i + 24, x3);
    asm volatile("" ::: "memory");
  }
  for (; i < n; ++i) d[i] = s[i];
}
// Read-only stream: sum of one array with 4 SIMD accumulators (memory bound).
BENCH_NOINLINE float ref_read_stream(float const* __restrict s, index_t n) {
  v8 s0 = {}, s1 = {}, s2 = {}, s3 = {};
  index_t i = 0;
  for (; i + 32 <= n; i += 32) {
    s0 += load8(s + i);
    s1 += load8(s + i + 8);
    s2 += load8(s + i + 16);
    s3 += load8(s + i + 24);
  }
  v8 t = (s0 + s1) + (s2 + s3);
  float r = 0.0f;
  for (int w = 0; w < 8; ++w) r += t[w];
  for (; i < n; ++i) r += s[i];
  return r;
}

// Read-only stream of two arrays (the traffic of sum(a*b) without the product): sum of a + b.
BENCH_NOINLINE float ref_read_stream2(float const* __restrict s, float const* __restrict t,
                                      index_t n) {
  v8 s0 = {}, s1 = {}, s2 = {}, s3 = {};
  index_t i = 0;
  for (; i + 32 <= n; i += 32) {
    s0 += load8(s + i) + load8(t + i);
    s1 += load8(s + i + 8) + load8(t + i + 8);
    s2 += load8(s + i + 16) + load8(t + i + 16);
    s3 += load8(s + i + 24) + load8(t + i + 24);
  }
  v8 u = (s0 + s1) + (s2 + s3);
  float r = 0.0f;
  for (int w = 0; w < 8; ++w) r += u[w];
  for (; i < n; ++i) r += s[i] + t[i];
  return r;
}

// ---------------------------------------------------------------- timing
using clk = std::chrono::steady_clock;
volatile float g_sink;  // keeps results alive

template <class F>
double time_ms(F&& f) {
  auto t0 = clk::now();
  f();
  auto t1 = clk::now();
  return std::chrono::duration<double, std::milli>(t1 - t0).count();
}
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  std::size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}
double minimum(std::vector<double> const& v) { return *std::min_element(v.begin(), v.end()); }

std::uint32_t bits(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}

struct stats {
  index_t mismatches = 0;
  double max_abs = 0;
};
stats compare(float const* x, float const* y, index_t n) {
  stats s;
  for (index_t i = 0; i < n; ++i) {
    if (bits(x[i]) != bits(y[i])) ++s.mismatches;
    s.max_abs = std::max(s.max_abs, double(std::fabs(x[i] - y[i])));
  }
  return s;
}

// The 1-minute load average (Linux), to judge how much other work shared the machine.
double load_average() {
  double l = -1;
  if (std::FILE* f = std::fopen("/proc/loadavg", "r")) {
    if (std::fscanf(f, "%lf", &l) != 1) l = -1;
    std::fclose(f);
  }
  return l;
}

std::string compiler_name() {
#if defined(__clang__)
  return "clang++ " + std::to_string(__clang_major__) + "." + std::to_string(__clang_minor__);
#elif defined(__GNUC__)
  return "g++ " + std::to_string(__GNUC__) + "." + std::to_string(__GNUC_MINOR__);
#else
  return "unknown";
#endif
}

}  // namespace

int main(int argc, char** argv) {
  index_t n = index_t(1) << 24;  // 16M floats = 64 MiB per array
  int reps = 21;
  for (int i = 1; i < argc; ++i) {
    std::string s = argv[i];
    if (s.rfind("--reps=", 0) == 0) reps = std::atoi(s.c_str() + 7);
    else if (s.rfind("--n=", 0) == 0) n = std::atoll(s.c_str() + 4);
    else {
      std::fprintf(stderr, "usage: %s [--reps=21] [--n=16777216]\n", argv[0]);
      return 2;
    }
  }
  if (reps < 1 || n < 1) return 2;

  gx::set_num_threads(1);
  auto a = gx::uniform<float>(gx::dims(n), 1, -1.0f, 1.0f);
  auto b = gx::uniform<float>(gx::dims(n), 2, -1.0f, 1.0f);
  auto c = gx::uniform<float>(gx::dims(n), 3, -1.0f, 1.0f);
  auto out = gx::zeros<float>(gx::dims(n));   // gradix's destination (resident: zero-filled)
  auto out_h = gx::zeros<float>(gx::dims(n)); // the hand loops' destination
  auto dst = gx::zeros<float>(gx::dims(n));   // the copies' destination
  float const* pa = a.data();
  float const* pb = b.data();
  float const* pc = c.data();
  double const MiB64 = double(n) * sizeof(float);

  std::printf("gradix forward benchmark: %s, %s, n = %lld floats (%.0f MiB per array), 1 thread, "
              "%d repeats, medians\n",
              gx::simd::isa(), compiler_name().c_str(), (long long)n, MiB64 / (1 << 20), reps);

  double load_before = load_average();

  // ---- correctness first (also warms every path)
  gradix_exp(out, a, b, c);
  hand_exp(out_h.data(), pa, pb, pc, n);
  stats s_exp = compare(out.data(), out_h.data(), n);
  gradix_axpc(out, a, b, c);
  hand_axpc(out_h.data(), pa, pb, pc, n);
  stats s_axpc = compare(out.data(), out_h.data(), n);
  float sum_g = gradix_sum(a, b);
  float sum_h = hand_sum_scheme(pa, pb, n);
  float sum_hs = hand_sum_scheme_simd(pa, pb, n);
  bool sum_bitwise = bits(sum_g) == bits(sum_h) && bits(sum_g) == bits(sum_hs);
  double sum_d = 0;  // double-precision reference, for the error of each float sum
  for (index_t i = 0; i < n; ++i) sum_d += double(pa[i]) * double(pb[i]);
  float sum_n1 = naive_sum_1acc(pa, pb, n), sum_n8 = naive_sum_8acc(pa, pb, n);
  std::printf("check: exp bitwise mismatches %lld (max |diff| %.3g); a*b+c mismatches %lld; "
              "sum gradix %.9g, scheme loop %.9g, scheme SIMD loop %.9g: %s; "
              "|error| vs double: scheme %.3g, naive 1 acc %.3g, naive 8 acc %.3g\n",
              (long long)s_exp.mismatches, s_exp.max_abs, (long long)s_axpc.mismatches,
              double(sum_g), double(sum_h), double(sum_hs),
              sum_bitwise ? "bitwise equal" : "DIFFER", std::fabs(sum_g - sum_d),
              std::fabs(sum_n1 - sum_d), std::fabs(sum_n8 - sum_d));

  // ---- timing: every case once per repeat, interleaved, in a new (seeded) random order each
  // repeat, so that no case always follows the same one (with a fixed or rotated order, a case
  // that reads what its predecessor just read finds it in cache, which matters at L2 sizes).
  struct bench_case {
    char const* name;
    std::function<void()> run;
    std::vector<double> ms;
  };
  std::vector<bench_case> cases;
  cases.push_back({"exp_gradix", [&] { gradix_exp(out, a, b, c); }, {}});
  cases.push_back({"exp_hand", [&] { hand_exp(out_h.data(), pa, pb, pc, n); }, {}});
  cases.push_back({"axpc_gradix", [&] { gradix_axpc(out, a, b, c); }, {}});
  cases.push_back({"axpc_hand", [&] { hand_axpc(out_h.data(), pa, pb, pc, n); }, {}});
  cases.push_back({"sum_gradix", [&] { g_sink = gradix_sum(a, b); }, {}});
  cases.push_back({"sum_scheme_loop", [&] { g_sink = hand_sum_scheme(pa, pb, n); }, {}});
  cases.push_back({"sum_scheme_simd", [&] { g_sink = hand_sum_scheme_simd(pa, pb, n); }, {}});
  cases.push_back({"sum_naive_1acc", [&] { g_sink = naive_sum_1acc(pa, pb, n); }, {}});
  cases.push_back({"sum_naive_8acc", [&] { g_sink = naive_sum_8acc(pa, pb, n); }, {}});
  cases.push_back({"memcpy", [&] { ref_memcpy(dst.data(), pa, n); }, {}});
  cases.push_back({"copy_loop", [&] { ref_copy_loop(dst.data(), pa, n); }, {}});
  cases.push_back({"read_stream", [&] { g_sink = ref_read_stream(pa, n); }, {}});
  cases.push_back({"read_stream2", [&] { g_sink = ref_read_stream2(pa, pb, n); }, {}});
  std::size_t nc = cases.size();
  std::vector<std::size_t> order(nc);
  for (std::size_t k = 0; k < nc; ++k) order[k] = k;
  std::mt19937 shuffle_rng(12345);
  for (int r = 0; r < reps; ++r) {
    std::shuffle(order.begin(), order.end(), shuffle_rng);
    for (std::size_t k : order) cases[k].ms.push_back(time_ms(cases[k].run));
  }

  double load_after = load_average();
  auto find = [&](char const* name) -> std::vector<double> const& {
    for (auto& bc : cases)
      if (std::strcmp(bc.name, name) == 0) return bc.ms;
    std::abort();
  };
  auto med = [&](char const* name) { return median(find(name)); };
  auto mini = [&](char const* name) { return minimum(find(name)); };
  auto gbs = [&](double bytes, double ms) { return bytes / (ms * 1e-3) / 1e9; };

  std::printf("\n%-18s %10s %10s %10s\n", "case", "median ms", "min ms", "GB/s");
  double bytes_of[] = {0, 0, 4 * MiB64, 4 * MiB64, 2 * MiB64, 2 * MiB64, 2 * MiB64, 2 * MiB64,
                       2 * MiB64, 2 * MiB64, 2 * MiB64, MiB64, 2 * MiB64};
  for (std::size_t k = 0; k < nc; ++k) {
    double m = median(cases[k].ms);
    if (bytes_of[k] > 0)
      std::printf("%-18s %10.3f %10.3f %10.2f\n", cases[k].name, m, minimum(cases[k].ms),
                  gbs(bytes_of[k], m));
    else
      std::printf("%-18s %10.3f %10.3f %10s\n", cases[k].name, m, minimum(cases[k].ms), "-");
  }

  double exp_ratio = med("exp_gradix") / med("exp_hand");
  double axpc_ratio = med("axpc_gradix") / med("axpc_hand");
  // the faster of the two hand-written scheme loops is the reference
  double sum_ratio = med("sum_gradix") / std::min(med("sum_scheme_loop"), med("sum_scheme_simd"));
  double memcpy_gbs = gbs(2 * MiB64, med("memcpy"));
  double copy_loop_gbs = gbs(2 * MiB64, med("copy_loop"));
  double copy_gbs = std::max(memcpy_gbs, copy_loop_gbs);  // "copy bandwidth": the faster copy
  double stream1_gbs = gbs(MiB64, med("read_stream"));
  double stream2_gbs = gbs(2 * MiB64, med("read_stream2"));
  double sum_gbs = gbs(2 * MiB64, med("sum_gradix"));
  double axpc_gbs = gbs(4 * MiB64, med("axpc_gradix"));

  std::printf("\nload average (1 min) %.2f before, %.2f after: above about 0.5 the machine was "
              "shared and the medians are unreliable (compare the ratios of the minima)\n",
              load_before, load_after);
  std::printf("\nratios, time gradix / time hand loop (requirement: <= 1.2):\n");
  std::printf("  a*b + exp(c)  %.3f   (%.0f Melem/s gradix, %.0f Melem/s hand)\n", exp_ratio,
              double(n) / med("exp_gradix") * 1e-3, double(n) / med("exp_hand") * 1e-3);
  std::printf("  a*b + c       %.3f\n", axpc_ratio);
  std::printf("  sum(a*b)      %.3f   (vs plain scheme loop %.3f, vs SIMD scheme loop %.3f)\n",
              sum_ratio, med("sum_gradix") / med("sum_scheme_loop"),
              med("sum_gradix") / med("sum_scheme_simd"));
  std::printf("bandwidth (requirement: memory-bound case >= 80%% of the copy bandwidth):\n");
  std::printf("  copy bandwidth (read + written) %.2f GB/s  [memcpy %.2f, copy loop %.2f]\n",
              copy_gbs, memcpy_gbs, copy_loop_gbs);
  std::printf("  read-only stream: one array %.2f GB/s, two arrays %.2f GB/s\n", stream1_gbs,
              stream2_gbs);
  std::printf("  sum(a*b) gradix %.2f GB/s = %.0f%% of copy, %.0f%% of the 1-array stream, %.0f%% "
              "of the 2-array stream\n",
              sum_gbs, 100 * sum_gbs / copy_gbs, 100 * sum_gbs / stream1_gbs,
              100 * sum_gbs / stream2_gbs);
  std::printf("  a*b + c  gradix %.2f GB/s = %.0f%% of copy\n", axpc_gbs, 100 * axpc_gbs / copy_gbs);

  // ---- one JSON line with every median and ratio
  std::vector<std::pair<std::string, double>> kv;
  for (auto& bc : cases) kv.push_back({std::string(bc.name) + "_ms", median(bc.ms)});
  kv.insert(kv.end(), {{"ratio_exp", exp_ratio},
                       {"ratio_axpc", axpc_ratio},
                       {"ratio_sum", sum_ratio},
                       {"ratio_sum_vs_scheme_loop", med("sum_gradix") / med("sum_scheme_loop")},
                       {"ratio_sum_vs_scheme_simd", med("sum_gradix") / med("sum_scheme_simd")},
                       {"ratio_exp_of_minima", mini("exp_gradix") / mini("exp_hand")},
                       {"ratio_axpc_of_minima", mini("axpc_gradix") / mini("axpc_hand")},
                       {"ratio_sum_of_minima", mini("sum_gradix") / std::min(mini("sum_scheme_loop"),
                                                                             mini("sum_scheme_simd"))},
                       {"sum_pct_of_copy_of_minima",
                        100 * std::min(mini("memcpy"), mini("copy_loop")) / mini("sum_gradix")},
                       {"load_before", load_before},
                       {"load_after", load_after},
                       {"copy_gbs", copy_gbs},
                       {"memcpy_gbs", memcpy_gbs},
                       {"copy_loop_gbs", copy_loop_gbs},
                       {"read_stream1_gbs", stream1_gbs},
                       {"read_stream2_gbs", stream2_gbs},
                       {"sum_gradix_gbs", sum_gbs},
                       {"axpc_gradix_gbs", axpc_gbs},
                       {"sum_pct_of_copy", 100 * sum_gbs / copy_gbs},
                       {"sum_pct_of_stream1", 100 * sum_gbs / stream1_gbs},
                       {"sum_pct_of_stream2", 100 * sum_gbs / stream2_gbs},
                       {"axpc_pct_of_copy", 100 * axpc_gbs / copy_gbs},
                       {"exp_mismatches", double(s_exp.mismatches)},
                       {"axpc_mismatches", double(s_axpc.mismatches)}});
  std::printf("{\"bench\":\"forward\",\"compiler\":\"%s\",\"n\":%lld,\"threads\":1,\"reps\":%d,"
              "\"sum_bitwise_equal\":%s",
              compiler_name().c_str(), (long long)n, reps, sum_bitwise ? "true" : "false");
  for (auto& [k, v] : kv) std::printf(",\"%s\":%.4f", k.c_str(), v);
  std::printf("}\n");
  return sum_bitwise ? 0 : 1;
}
