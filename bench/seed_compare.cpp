// The founding benchmark, gradix against a hand-written C++ loop doing the same work, timed
// the same way and interleaved in one process (so machine noise hits both alike).
//
//   forward:  n terms, each sum(Eb(:, i) + Ea(:, j_t))        (hand: one fused loop per term)
//   backward: zero_grad + n gradient-only backward calls       (hand: in-place scatter into
//             gradient buffers allocated once, touching only the gathered columns)
//   --loss square: each term sums the squares (the adjoint depends on the values)
//   --batched: gradix's single-expression form of all terms, against the per-term hand loop
//
// Prints one line per rep and a JSON summary with medians and ratios (gradix / hand).
// Usage: seed_compare [--layout col|row] [--n N] [--reps R] [--na NA] [--nb NB] [--k K]
//                     [--loss sum|square] [--idx-mod M]
#include <gradix/gradix.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace gx = gradix;
constexpr long D = 64;

struct options {
  bool row = false, square = false;
  long n = 100, reps = 11, na = 1'000'000, nb = 65'535, k = 5000, idx_mod = 0;
};

static double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
static double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
static float hash_value(std::uint64_t r, std::uint64_t c, std::uint32_t t) {
  std::uint32_t x = std::uint32_t(r * D + c) + std::uint32_t(t * 0x9E3779B9u);
  x *= 2654435761u;
  return float(double(x) / 4294967296.0 - 0.5);
}

// The hand-written reference: tables are plain arrays, entry e's D values contiguous
// (a column of the column-major table, or a row of the row-major one: the same memory).
struct hand {
  float const* A;
  float const* B;
  std::vector<float> gA, gB;  // dense gradients, allocated once
  std::vector<std::uint32_t> touchedA, touchedB;
  std::vector<unsigned char> markA, markB;
  hand(float const* a, float const* b, long na, long nb)
      : A(a), B(b), gA(std::size_t(na * D)), gB(std::size_t(nb * D)), markA(std::size_t(na)),
        markB(std::size_t(nb)) {
    touchedA.reserve(std::size_t(na));
    touchedB.reserve(std::size_t(nb));
  }
  // 8 accumulators of 8 lanes over the 64 values of a column
  static float term_sum(float const* B, float const* a, std::uint16_t const* i, long k, bool square) {
    float acc[D] = {};
    for (long p = 0; p < k; ++p) {
      float const* b = B + std::size_t(i[p]) * D;
      if (square) {
        for (long c = 0; c < D; ++c) {
          float x = b[c] + a[c];
          acc[c] += x * x;
        }
      } else {
        for (long c = 0; c < D; ++c) acc[c] += b[c] + a[c];
      }
    }
    float s = 0;
    for (long c = 0; c < D; ++c) s += acc[c];
    return s;
  }
  double forward(std::vector<std::uint16_t> const& i, std::vector<std::uint32_t> const& js, bool square) {
    double l = 0;
    for (std::uint32_t j : js) l += term_sum(B, A + std::size_t(j) * D, i.data(), long(i.size()), square);
    return l;
  }
  void zero() {
    for (auto e : touchedA) std::memset(&gA[std::size_t(e) * D], 0, D * sizeof(float)), markA[e] = 0;
    for (auto e : touchedB) std::memset(&gB[std::size_t(e) * D], 0, D * sizeof(float)), markB[e] = 0;
    touchedA.clear();
    touchedB.clear();
  }
  void backward(std::vector<std::uint16_t> const& i, std::vector<std::uint32_t> const& js, bool square) {
    zero();
    long k = long(i.size());
    for (std::uint32_t j : js) {
      if (!markA[j]) markA[j] = 1, touchedA.push_back(j);
      float* ga = &gA[std::size_t(j) * D];
      float const* a = A + std::size_t(j) * D;
      if (!square) {
        for (long p = 0; p < k; ++p) {
          std::uint16_t e = i[p];
          if (!markB[e]) markB[e] = 1, touchedB.push_back(e);
          float* gb = &gB[std::size_t(e) * D];
          for (long c = 0; c < D; ++c) gb[c] += 1.0f;
        }
        for (long c = 0; c < D; ++c) ga[c] += float(k);
      } else {
        float accA[D] = {};
        for (long p = 0; p < k; ++p) {
          std::uint16_t e = i[p];
          if (!markB[e]) markB[e] = 1, touchedB.push_back(e);
          float* gb = &gB[std::size_t(e) * D];
          float const* b = B + std::size_t(e) * D;
          for (long c = 0; c < D; ++c) {
            float g = 2 * (b[c] + a[c]);
            gb[c] += g;
            accA[c] += g;
          }
        }
        for (long c = 0; c < D; ++c) ga[c] += accA[c];
      }
    }
  }
};

template <class Layout>
int run(options const& o) {
  constexpr bool col = std::is_same_v<Layout, gx::col_major>;
  constexpr std::size_t Axis = col ? 1 : 0;
  auto shape_of = [&](long entries) {
    if constexpr (col) return gx::dims(gx::fix<D>, entries);
    else return gx::dims(entries, gx::fix<D>);
  };
  auto init = [&](long entries, std::uint32_t t) {
    return gx::generate<float, Layout>(shape_of(entries), [&](auto const& c) {
      return hash_value(std::uint64_t(c[Axis]), std::uint64_t(c[1 - Axis]), t);
    });
  };
  auto Ea = gx::param(init(o.na, 0), gx::sparse_grad<Axis>);
  auto Eb = gx::param(init(o.nb, 1), gx::sparse_grad<Axis>);
  std::vector<std::uint16_t> i(std::size_t(o.k));
  for (long r = 0; r < o.k; ++r) i[std::size_t(r)] = std::uint16_t(o.idx_mod ? r % o.idx_mod : r);
  std::vector<std::uint32_t> js;
  std::uint64_t s = 12345;
  for (long t = 0; t < o.n; ++t) {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    js.push_back(std::uint32_t((s >> 33) % std::uint64_t(o.na)));
  }
  hand h(Ea.value().data(), Eb.value().data(), o.na, o.nb);

  auto term = [&](std::uint32_t j) {
    if constexpr (col) return Eb(gx::all, gx::indices(i)) + Ea(gx::all, gx::at(j));
    else return Eb(gx::indices(i), gx::all) + Ea(gx::at(j), gx::all);
  };
  auto batched = [&] {
    if constexpr (col)
      return gx::unsqueeze<2>(Eb(gx::all, gx::indices(i))) + gx::unsqueeze<1>(Ea(gx::all, gx::indices(js)));
    else
      return gx::unsqueeze<0>(Eb(gx::indices(i), gx::all)) + gx::unsqueeze<1>(Ea(gx::indices(js), gx::all));
  };
  std::vector<double> gf, gb, hf, hb, bb;
  double lg = 0, lh = 0;
  for (long rep = 0; rep < o.reps; ++rep) {
    double t0 = now();
    double l = 0;
    for (std::uint32_t j : js) l += o.square ? gx::value(gx::sum(gx::square(term(j)))) : gx::value(gx::sum(term(j)));
    double t1 = now();
    gx::zero_grad(Ea, Eb);
    for (std::uint32_t j : js) {
      if (o.square) gx::backward_only(gx::sum(gx::square(term(j))));
      else gx::backward_only(gx::sum(term(j)));
    }
    double t2 = now();
    lh = h.forward(i, js, o.square);
    double t3 = now();
    h.backward(i, js, o.square);
    double t4 = now();
    gx::zero_grad(Ea, Eb);
    if (o.square) gx::backward_only(gx::sum(gx::square(batched())));
    else gx::backward_only(gx::sum(batched()));
    double t5 = now();
    lg = l;
    gf.push_back(t1 - t0);
    gb.push_back(t2 - t1);
    hf.push_back(t3 - t2);
    hb.push_back(t4 - t3);
    bb.push_back(t5 - t4);
    std::printf("rep %ld: gradix forward %.3f ms backward %.3f ms batched backward %.3f ms | hand "
                "forward %.3f ms backward %.3f ms\n",
                rep + 1, 1e3 * (t1 - t0), 1e3 * (t2 - t1), 1e3 * (t5 - t4), 1e3 * (t3 - t2),
                1e3 * (t4 - t3));
  }
  // the two implementations must agree (gradients: the stored gradix columns vs hand's)
  double worst = 0;
  for (gx::index_t k = 0; k < Eb.grad().size(); ++k) {
    float const* g = Eb.grad().slice_data(k);
    float const* r = &h.gB[std::size_t(Eb.grad().id(k)) * D];
    for (long c = 0; c < D; ++c) worst = std::max(worst, double(std::abs(g[c] - r[c]) / std::max(1.0f, std::abs(r[c]))));
  }
  std::printf("{\"layout\": \"%s\", \"loss_kind\": \"%s\", \"n\": %ld, \"k\": %ld, \"reps\": %ld, "
              "\"gradix_forward_s\": %.6g, \"gradix_backward_s\": %.6g, \"gradix_batched_backward_s\": %.6g, "
              "\"hand_forward_s\": %.6g, \"hand_backward_s\": %.6g, \"forward_ratio\": %.3f, "
              "\"backward_ratio\": %.3f, \"batched_over_hand_backward\": %.4f, \"loss_gradix\": %.9g, "
              "\"loss_hand\": %.9g, \"batched_grad_max_rel_diff\": %.3g}\n",
              col ? "col" : "row", o.square ? "square" : "sum", o.n, o.k, o.reps, median(gf), median(gb),
              median(bb), median(hf), median(hb), median(gf) / median(hf), median(gb) / median(hb),
              median(bb) / median(hb), lg, lh, worst);
  return 0;
}

int main(int argc, char** argv) {
  options o;
  for (int a = 1; a + 1 < argc; a += 2) {
    std::string s = argv[a], v = argv[a + 1];
    if (s == "--layout") o.row = v == "row";
    else if (s == "--n") o.n = std::stol(v);
    else if (s == "--reps") o.reps = std::stol(v);
    else if (s == "--na") o.na = std::stol(v);
    else if (s == "--nb") o.nb = std::stol(v);
    else if (s == "--k") o.k = std::stol(v);
    else if (s == "--loss") o.square = v == "square";
    else if (s == "--idx-mod") o.idx_mod = std::stol(v);
    else return std::fprintf(stderr, "seed_compare: unknown option %s\n", s.c_str()), 2;
  }
  gx::set_num_threads(1);
  std::printf("gradix seed_compare: %s\n", gx::simd::isa());
  return o.row ? run<gx::row_major>(o) : run<gx::col_major>(o);
}
