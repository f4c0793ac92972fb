// The summation scheme of a reduction, bit for bit (eval/reduce.hpp): whatever path the host
// takes (a lone block, interleaved groups of blocks, cursors whose runs differ, whole runs of
// a static inner extent, tails shorter than a pack, threads), a reduction's result has the
// bits of the scheme written out plainly below: fixed blocks of block_size<T>(n) elements of
// the reduced domain in order (rows of the other reduced axes, the inner axis innermost), in
// each block element r of a run (a row's part inside the block) goes to lane r % L, the lanes
// combine by a fixed tree, the blocks left to right.
#include "testing.hpp"

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace gx = gradix;
using gx::index_t;
using gx::testing::bits_of;
using gx::testing::thread_scope;

namespace {

/// Values spread over many binades, so that a different order of additions gives different
/// bits.
float spread_value(std::uint64_t k) {
  std::uint64_t h = (k + 1) * 0x9E3779B97F4A7C15ull;
  h ^= h >> 29;
  h *= 0xBF58476D1CE4E5B9ull;
  h ^= h >> 32;
  float u = float(h & 0xFFFFFF) / float(1 << 24) * 2.0f - 1.0f;
  int e = int((h >> 24) % 20) - 10;
  return std::ldexp(u, e);
}

/// The scheme over a reduced domain of `rows` rows of n_in elements; elem(row, i).
template <class Op, class F>
float scheme(index_t rows, index_t n_in, F const& elem) {
  constexpr int L = gx::ev::lanes_v<float>;
  index_t const n = rows * n_in;
  if (n == 0) return Op::template identity<float>();
  index_t const bsize = gx::ev::block_size<float>(n);
  index_t const nb = (n + bsize - 1) / bsize;
  float total = 0;
  for (index_t k = 0; k < nb; ++k) {
    float lane[L];
    for (float& l : lane) l = Op::template identity<float>();
    index_t f = k * bsize, f1 = f + bsize < n ? f + bsize : n;
    while (f < f1) {
      index_t row = f / n_in, off = f % n_in;
      index_t len = n_in - off < f1 - f ? n_in - off : f1 - f;
      for (index_t j = 0; j < len; ++j) lane[j % L] = Op::combine(lane[j % L], elem(row, off + j));
      f += len;
    }
    for (int s = L / 2; s >= 1; s /= 2)
      for (int i = 0; i < s; ++i) lane[i] = Op::combine(lane[i], lane[i + s]);
    total = k == 0 ? lane[0] : Op::combine(total, lane[0]);
  }
  return total;
}

/// sum(x) and max(x) of a rows x n_in tensor whose inner (contiguous) axis has extent n_in,
/// with that extent static (Inner) or dynamic (Inner = dyn), checked against the scheme.
template <class Layout, index_t Inner>
void check_full(index_t rows, index_t n_in) {
  constexpr bool col = std::is_same_v<Layout, gx::col_major>;
  auto inner = [&] {
    if constexpr (Inner == gx::dyn) return n_in;
    else return gx::fix_t<Inner>{};
  }();
  auto shape = [&] {
    if constexpr (col) return gx::dims(inner, rows);
    else return gx::dims(rows, inner);
  }();
  auto x = gx::generate<float, Layout>(shape, [&](auto const& c) {
    index_t r = col ? c[1] : c[0], i = col ? c[0] : c[1];
    return spread_value(std::uint64_t(r * n_in + i));
  });
  auto elem = [&](index_t r, index_t i) { return col ? x(i, r) : x(r, i); };
  float want_sum = scheme<gx::op::sum_of>(rows, n_in, elem);
  float want_max = scheme<gx::op::max_of>(rows, n_in, elem);
  // x * ones: an elementwise operand (a binary node, a cheap body), the same values
  auto y = gx::eval(gx::exp(x * 0.0f));  // all ones
  float want_sum_y = scheme<gx::op::sum_of>(rows, n_in, [&](index_t r, index_t i) { return elem(r, i) * 1.0f; });
  for (int t : {1, 3}) {
    thread_scope tc(t);
    INFO("layout ", col ? "col" : "row", ", rows ", rows, ", inner ", n_in,
         Inner == gx::dyn ? " (dynamic)" : " (static)", ", threads ", t);
    CHECK(bits_of(gx::value(gx::sum(x))) == bits_of(want_sum));
    CHECK(bits_of(gx::value(gx::max(x))) == bits_of(want_max));
    CHECK(bits_of(gx::value(gx::sum(x * y))) == bits_of(want_sum_y));
  }
}

}  // namespace

TEST_CASE("reduce scheme: a full reduction has the scheme's bits, dynamic inner extent") {
  // inner extents below, at and past a pack and the lane count, not dividing the block size
  // (blocks start inside rows: cursors of a group run differing lengths); row counts giving
  // one block, a few (lone blocks and groups) and many
  for (index_t n_in : {1, 5, 8, 31, 32, 37, 64, 100, 1000}) {
    for (index_t rows : {index_t(1), index_t(3), index_t(40000 / n_in + 1), index_t(300000 / n_in + 7)}) {
      check_full<gx::row_major, gx::dyn>(rows, n_in);
      check_full<gx::col_major, gx::dyn>(rows, n_in);
    }
  }
}

TEST_CASE("reduce scheme: a full reduction has the scheme's bits, static inner extent") {
  for (index_t rows : {index_t(1), index_t(200), index_t(1000), index_t(5003)}) {
    check_full<gx::row_major, 64>(rows, 64);  // whole runs; blocks start at rows
    check_full<gx::col_major, 64>(rows, 64);
    check_full<gx::row_major, 96>(rows, 96);  // whole runs; blocks start inside rows
    check_full<gx::col_major, 96>(rows, 96);
    check_full<gx::row_major, 40>(rows, 40);  // not a multiple of the lanes: runs with tails
    check_full<gx::col_major, 40>(rows, 40);
  }
}

TEST_CASE("reduce scheme: a reduction over a gather and over some axes has the scheme's bits") {
  // sum(E(all, indices(i))) over a column-major table: runs are the gathered columns
  index_t const d = 37, entries = 500, k = 3000;
  auto E = gx::generate<float, gx::col_major>(gx::dims(d, entries), [&](auto const& c) {
    return spread_value(std::uint64_t(c[1] * d + c[0]) + 77);
  });
  std::vector<std::uint32_t> idx(static_cast<std::size_t>(k));
  for (index_t r = 0; r < k; ++r) idx[std::size_t(r)] = std::uint32_t((r * 7919) % entries);
  float want = scheme<gx::op::sum_of>(k, d, [&](index_t r, index_t i) { return E(i, index_t(idx[std::size_t(r)])); });
  // sum<0, 2>(X) of a row-major A x B x C tensor: per b, rows over axis 0, inner axis 2
  index_t const A = 700, B = 3, C = 45;
  auto X = gx::generate<float, gx::row_major>(gx::dims(A, B, C), [&](auto const& c) {
    return spread_value(std::uint64_t((c[0] * B + c[1]) * C + c[2]) + 5);
  });
  for (int t : {1, 3}) {
    thread_scope tc(t);
    INFO("threads ", t);
    CHECK(bits_of(gx::value(gx::sum(E(gx::all, gx::indices(idx))))) == bits_of(want));
    auto s = gx::eval(gx::sum<0, 2>(X));
    for (index_t b = 0; b < B; ++b) {
      float w = scheme<gx::op::sum_of>(A, C, [&](index_t r, index_t i) { return X(r, b, i); });
      CHECK(bits_of(s(b)) == bits_of(w));
    }
  }
}
