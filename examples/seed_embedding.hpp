// The founding benchmark's options, data and independent reference check, shared by its
// host run (seed_embedding.cpp) and its device run (seed_embedding_device.hpp, built for
// CUDA by seed_embedding_cuda.cu and run through the grid emulator by the tests).
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <tuple>
#include <vector>

namespace seed {

struct options {
  bool row = false, square = false, batched = false, check = false, random_idx = false;
  bool hash = true, cuda = false, deterministic = false;
  long n = 100, reps = 5, threads = 1, na = 1'000'000, nb = 65'535, k = 5000, d = 64, idx_mod = 0;
  std::string dtype = "f32";  // the tables' element type: f32, bf16 or f16 (host only)
  std::string fused_optimizer;  // "", sgd or adagrad: also time backward + step and the fused step
};

inline options parse(int argc, char** argv) {
  options o;
  for (int a = 1; a < argc; ++a) {
    std::string s = argv[a];
    auto next = [&]() -> std::string {
      if (a + 1 >= argc) {
        std::fprintf(stderr, "seed_embedding: %s needs a value\n", s.c_str());
        std::exit(2);
      }
      return argv[++a];
    };
    auto num = [&]() { return std::stol(next()); };
    if (s == "--layout") o.row = next() == "row";
    else if (s == "--n") o.n = num();
    else if (s == "--reps") o.reps = num();
    else if (s == "--threads") o.threads = num();
    else if (s == "--na") o.na = num();
    else if (s == "--nb") o.nb = num();
    else if (s == "--k") o.k = num();
    else if (s == "--d") o.d = num();
    else if (s == "--loss") o.square = next() == "square";
    else if (s == "--idx-mod") o.idx_mod = num();
    else if (s == "--random-idx") o.random_idx = true;
    else if (s == "--batched") o.batched = true;
    else if (s == "--init") o.hash = next() == "hash";
    else if (s == "--check") o.check = true;
    else if (s == "--deterministic") o.deterministic = true;
    else if (s == "--dtype") {
      o.dtype = next();
      if (o.dtype != "f32" && o.dtype != "bf16" && o.dtype != "f16") {
        std::fprintf(stderr, "seed_embedding: --dtype takes f32, bf16 or f16, not %s\n", o.dtype.c_str());
        std::exit(2);
      }
    }
    else if (s == "--fused-optimizer") {
      o.fused_optimizer = next();
      if (o.fused_optimizer != "sgd" && o.fused_optimizer != "adagrad") {
        std::fprintf(stderr, "seed_embedding: --fused-optimizer takes sgd or adagrad, not %s\n",
                     o.fused_optimizer.c_str());
        std::exit(2);
      }
    }
    else if (s == "--device") {
      std::string const v = next();
      if (v != "cpu" && v != "cuda") {
        std::fprintf(stderr, "seed_embedding: --device takes cpu or cuda, not %s\n", v.c_str());
        std::exit(2);
      }
      o.cuda = v == "cuda";
    } else {
      std::fprintf(stderr, "seed_embedding: unknown option %s (see the comment at the top of "
                           "examples/seed_embedding.cpp)\n", s.c_str());
      std::exit(2);
    }
  }
  return o;
}

// The term columns j_t: the 64-bit LCG shared with the PyTorch peer (lcg_rows).
inline std::vector<std::uint32_t> term_columns(long n, long na) {
  std::vector<std::uint32_t> js;
  std::uint64_t s = 12345;
  for (long t = 0; t < n; ++t) {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    js.push_back(std::uint32_t((s >> 33) % std::uint64_t(na)));
  }
  return js;
}

// The gathered entries i: 0..k-1, or r % idx_mod, or random in [0, nb).
inline std::vector<std::uint16_t> gathered_entries(options const& o) {
  std::vector<std::uint16_t> i(std::size_t(o.k));
  std::mt19937_64 rng(2024);
  for (long r = 0; r < o.k; ++r)
    i[std::size_t(r)] = std::uint16_t(o.random_idx ? long(rng() % std::uint64_t(o.nb))
                                                   : (o.idx_mod ? r % o.idx_mod : r));
  return i;
}

// E_t[r, c] = u32((r*D + c + t*0x9E3779B9) * 2654435761) / 2^32 - 0.5, r the table entry,
// c the position in the embedding (the PyTorch peer's formula).
inline float hash_value(std::uint64_t r, std::uint64_t c, std::uint64_t d, std::uint32_t t) {
  std::uint32_t x = std::uint32_t(r * d + c) + std::uint32_t(t * 0x9E3779B9u);
  x *= 2654435761u;
  return float(double(x) / 4294967296.0 - 0.5);
}

template <class Clock = std::chrono::steady_clock>
double seconds_since(typename Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}
inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// ------------------------------------------------------------------ --check
// An independent reference with plain loops over the tables (not gradix's machinery): the
// loss in double, and each stored gradient entry compared with its exact value.
//   va(entry, c), vb(entry, c): the tables' values;
//   ga(entry), gb(entry): the stored gradient slice of an entry (d contiguous floats), or
//                         nullptr when the entry is not stored;
//   stored_a, stored_b:   the number of stored entries.
template <class VA, class VB, class GA, class GB>
int reference_check(options const& o, std::vector<std::uint16_t> const& i,
                    std::vector<std::uint32_t> const& js, double loss, VA va, VB vb, GA ga, GB gb,
                    long stored_a, long stored_b) {
  long const d = o.d;
  double ref = 0, scale = 0;
  for (std::uint32_t j : js)
    for (std::uint16_t r : i)
      for (long c = 0; c < d; ++c) {
        double x = vb(long(r), c) + va(long(j), c);
        double term = o.square ? x * x : x;
        ref += term;
        scale += std::abs(term);
      }
  bool ok = std::abs(loss - ref) <= 1e-6 * std::max(1.0, scale);
  std::printf("check: loss %.9g, reference %.9g, |diff| / sum|terms| = %.3g\n", loss, ref,
              std::abs(loss - ref) / std::max(1.0, scale));
  // gradients: d loss / d Eb(c, r) = sum over terms and positions p with i[p] == r of
  // (1 or 2x); the same for Ea over terms with j_t == j. Build the expected entries sparsely,
  // with the sum of the contributions' magnitudes: a float sum of many signed contributions
  // (duplicate indices, --loss square) is accurate relative to that, not to its result.
  using cols = std::vector<std::tuple<long, std::vector<double>, std::vector<double>>>;
  auto compare = [&](auto const& g, long stored, char const* name, cols const& expected) {
    double worst = 0;
    long missing = 0;
    for (auto const& [entry, values, magnitudes] : expected) {
      float const* s = g(entry);
      if (s == nullptr) {
        ++missing;
        continue;
      }
      for (long c = 0; c < d; ++c)
        worst = std::max(worst, std::abs(double(s[c]) - values[std::size_t(c)]) /
                                    std::max(1.0, magnitudes[std::size_t(c)]));
    }
    bool const this_ok = missing == 0 && stored == long(expected.size()) && worst < 1e-4;
    std::printf("check: grad %s: %ld stored entries (expected %zu), %ld missing, worst |err| / "
                "sum|contributions| %.3g: %s\n",
                name, stored, expected.size(), missing, worst, this_ok ? "ok" : "MISMATCH");
    return this_ok;
  };
  auto build = [&](bool for_a) {
    std::vector<long> pos(std::size_t(for_a ? o.na : o.nb), -1);
    cols out;
    for (std::uint32_t j : js)
      for (std::uint16_t r : i) {
        long entry = for_a ? long(j) : long(r);
        if (pos[std::size_t(entry)] < 0) {
          pos[std::size_t(entry)] = long(out.size());
          out.push_back({entry, std::vector<double>(std::size_t(d), 0.0), std::vector<double>(std::size_t(d), 0.0)});
        }
        auto& [e_, v, m] = out[std::size_t(pos[std::size_t(entry)])];
        for (long c = 0; c < d; ++c) {
          double x = o.square ? 2 * (vb(long(r), c) + va(long(j), c)) : 1.0;
          v[std::size_t(c)] += x;
          m[std::size_t(c)] += std::abs(x);
        }
      }
    return out;
  };
  ok = compare(gb, stored_b, "Eb", build(false)) && ok;
  ok = compare(ga, stored_a, "Ea", build(true)) && ok;
  std::printf("check: %s\n", ok ? "ok" : "FAILED");
  return ok ? 0 : 1;
}

/// The device run (seed_embedding_cuda.cu), or an error when the binary was built without
/// nvcc.
int run_cuda(options const& o);

}  // namespace seed
