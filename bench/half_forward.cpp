// The founding forward (100 terms, each sum(Eb(:, i) + Ea(:, j_t)), i = 0..4999, 64 rows,
// column-major tables) written by hand twice: fp32 tables, and bfloat16 tables widened on
// load (one 16-lane zero-extension and a shift, Ea's column widened once per term, two
// columns in flight). No gradix in it: it bounds what issue 35's point 3 asks of gradix's
// bf16 forward (0.6x of the fp32 hand loop) on the machine it runs on (docs/performance.md,
// "Half-width tables on the founding benchmark"). Needs AVX-512 (exits 77 without it).
// Run: ninja -C build bench/bench_half_forward && taskset -c 1 build/bench/bench_half_forward
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <utility>
#include <vector>
#if defined(__AVX512F__)
#include <immintrin.h>

namespace {
constexpr long D = 64;

double lane_sum(__m512 a, __m512 b, __m512 c, __m512 d) {
  alignas(64) float l[16];
  _mm512_store_ps(l, _mm512_add_ps(_mm512_add_ps(a, b), _mm512_add_ps(c, d)));
  float s = 0;
  for (float x : l) s += x;
  return s;
}

__attribute__((noinline)) double term_f32(float const* B, float const* a, std::uint16_t const* i, long k) {
  __m512 acc[4], acc2[4], av[4];
  for (int v = 0; v < 4; ++v) {
    acc[v] = acc2[v] = _mm512_setzero_ps();
    av[v] = _mm512_loadu_ps(a + 16 * v);
  }
  long q = 0;
  for (; q + 1 < k; q += 2) {
    float const* b = B + std::size_t(i[q]) * D;
    float const* b2 = B + std::size_t(i[q + 1]) * D;
    for (int v = 0; v < 4; ++v) acc[v] = _mm512_add_ps(acc[v], _mm512_add_ps(_mm512_loadu_ps(b + 16 * v), av[v]));
    for (int v = 0; v < 4; ++v) acc2[v] = _mm512_add_ps(acc2[v], _mm512_add_ps(_mm512_loadu_ps(b2 + 16 * v), av[v]));
  }
  for (; q < k; ++q)
    for (int v = 0; v < 4; ++v)
      acc[v] = _mm512_add_ps(acc[v], _mm512_add_ps(_mm512_loadu_ps(B + std::size_t(i[q]) * D + 16 * v), av[v]));
  for (int v = 0; v < 4; ++v) acc[v] = _mm512_add_ps(acc[v], acc2[v]);
  return lane_sum(acc[0], acc[1], acc[2], acc[3]);
}
inline __m512 widen(std::uint16_t const* p) {
  // (the zero-masked forms with every lane on: g++ 12 -Werror reads the unmasked ones as
  // maybe-uninitialized, as in core/half.hpp)
  __m256i const h = _mm256_loadu_si256(reinterpret_cast<__m256i const*>(p));
  return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(0xFFFF, _mm512_maskz_cvtepu16_epi32(0xFFFF, h), 16));
}
__attribute__((noinline)) double term_bf16(std::uint16_t const* B, std::uint16_t const* a, std::uint16_t const* i, long k) {
  __m512 acc[4], acc2[4], av[4];
  for (int v = 0; v < 4; ++v) {
    acc[v] = acc2[v] = _mm512_setzero_ps();
    av[v] = widen(a + 16 * v);
  }
  long q = 0;
  for (; q + 1 < k; q += 2) {
    std::uint16_t const* b = B + std::size_t(i[q]) * D;
    std::uint16_t const* b2 = B + std::size_t(i[q + 1]) * D;
    for (int v = 0; v < 4; ++v) acc[v] = _mm512_add_ps(acc[v], _mm512_add_ps(widen(b + 16 * v), av[v]));
    for (int v = 0; v < 4; ++v) acc2[v] = _mm512_add_ps(acc2[v], _mm512_add_ps(widen(b2 + 16 * v), av[v]));
  }
  for (; q < k; ++q)
    for (int v = 0; v < 4; ++v) acc[v] = _mm512_add_ps(acc[v], _mm512_add_ps(widen(B + std::size_t(i[q]) * D + 16 * v), av[v]));
  for (int v = 0; v < 4; ++v) acc[v] = _mm512_add_ps(acc[v], acc2[v]);
  return lane_sum(acc[0], acc[1], acc[2], acc[3]);
}
std::uint16_t to_bf16(float x) {  // (truncation: the values only need to be bfloat16s)
  std::uint32_t u;
  std::memcpy(&u, &x, 4);
  return std::uint16_t(u >> 16);
}
}  // namespace

int main() {
  long const nb = 65535, na = 1000000, k = 5000, n = 100;
  std::vector<float> bf(std::size_t(nb * D)), af(std::size_t(na * D));
  std::mt19937 g(1);
  std::uniform_real_distribution<float> u(-1, 1);
  for (auto& x : bf) x = u(g);
  for (auto& x : af) x = u(g);
  std::vector<std::uint16_t> bh(bf.size()), ah(af.size()), idx(static_cast<std::size_t>(k));
  std::transform(bf.begin(), bf.end(), bh.begin(), to_bf16);
  std::transform(af.begin(), af.end(), ah.begin(), to_bf16);
  for (long q = 0; q < k; ++q) idx[std::size_t(q)] = std::uint16_t(q);
  std::vector<std::uint32_t> js(static_cast<std::size_t>(n));
  for (auto& j : js) j = std::uint32_t(g() % std::uint32_t(na));
  auto median_ms = [&](auto f) {
    std::vector<double> t;
    double l = 0;
    for (int r = 0; r < 15; ++r) {
      auto a = std::chrono::steady_clock::now();
      l = 0;
      for (auto j : js) l += f(j);
      auto b = std::chrono::steady_clock::now();
      t.push_back(std::chrono::duration<double, std::milli>(b - a).count());
    }
    std::sort(t.begin(), t.end());
    return std::pair{t[t.size() / 2], l};
  };
  for (int round = 0; round < 3; ++round) {
    auto [tf, lf] = median_ms([&](std::uint32_t j) { return term_f32(bf.data(), af.data() + std::size_t(j) * D, idx.data(), k); });
    auto [th, lh] = median_ms([&](std::uint32_t j) { return term_bf16(bh.data(), ah.data() + std::size_t(j) * D, idx.data(), k); });
    std::printf("round %d: fp32 hand %.3f ms, bf16 hand %.3f ms, bf16 / fp32 %.2f (loss %.4f, %.4f)\n", round + 1, tf, th,
                th / tf, lf, lh);
  }
}
#else
int main() {
  std::puts("bench_half_forward: needs AVX-512 (build with -march=native on such a CPU)");
  return 77;
}
#endif
