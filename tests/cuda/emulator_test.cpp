// The grid emulator (tests/cuda/emulator.hpp) and the device kernels of backend/grid run
// through it, compared with the host backend. Suite `emulator`: built and run on every
// machine (no GPU needed); tests/cuda/kernels.cu runs the same kernels on a GPU.
#include "cuda/emulator.hpp"

#include <gradix/backend/grid/assign.hpp>
#include <gradix/backend/grid/block_sum.hpp>
#include <gradix/backend/grid/memory.hpp>
#include <gradix/backend/grid/reduce.hpp>
#include <gradix/backend/grid/scatter.hpp>
#include <gradix/backend/grid/sparse.hpp>
#include <gradix/gradix.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace gx = gradix;
using gx::index_t;
using gradix_test::emu::launcher;
using gradix_test::emu::options;

namespace {

// ---------------------------------------------------------------------------------------
// The emulator itself.

/// Each thread writes its slot of shared memory, then (after a barrier) reads its
/// neighbour's: right only if the barrier held every thread until all had written.
struct neighbour_kernel {
  static constexpr bool uses_barriers = true;
  int const* in_;
  int* out_;
  template <class Ctx>
  void operator()(Ctx const& c) const {
    int* sh = c.template shared<int>();
    index_t const t = c.thread(), n = c.threads(), g = c.block() * n;
    sh[t] = in_[g + t];
    c.sync();
    out_[g + t] = sh[(t + 1) % n];
    c.sync();
    sh[t] = -1;  // only after everyone has read
  }
};

/// Thread 0 leaves before the barrier that the others reach.
struct divergent_kernel {
  static constexpr bool uses_barriers = true;
  template <class Ctx>
  void operator()(Ctx const& c) const {
    if (c.thread() == 0) return;
    c.sync();
  }
};

/// Calls sync() although it declares no barriers.
struct undeclared_barrier_kernel {
  static constexpr bool uses_barriers = false;
  template <class Ctx>
  void operator()(Ctx const& c) const {
    c.sync();
  }
};

/// Records the order in which blocks start, and adds through atomic_add.
struct order_kernel {
  static constexpr bool uses_barriers = false;
  index_t* order_;
  index_t* next_;
  index_t* total_;
  template <class Ctx>
  void operator()(Ctx const& c) const {
    if (c.thread() == 0) order_[(*next_)++] = c.block();
    c.atomic_add(total_, c.block() * c.threads() + c.thread());
  }
};

std::string error_of(auto&& f) {
  try {
    f();
  } catch (gx::error const& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("emulator: a barrier holds every thread of the block until all reach it") {
  for (index_t threads : {1, 2, 32, 33, 256, 1024}) {
    index_t const blocks = 3;
    std::vector<int> in(std::size_t(blocks * threads)), out(in.size(), 0);
    for (std::size_t i = 0; i < in.size(); ++i) in[i] = int(7 * i + 1);
    launcher l;
    l.launch({blocks, threads, std::size_t(threads) * sizeof(int)}, neighbour_kernel{in.data(), out.data()});
    for (index_t b = 0; b < blocks; ++b)
      for (index_t t = 0; t < threads; ++t)
        REQUIRE(out[std::size_t(b * threads + t)] == in[std::size_t(b * threads + (t + 1) % threads)]);
  }
}

TEST_CASE("emulator: barrier divergence and undeclared barriers are errors") {
  launcher l;
  std::string m = error_of([&] { l.launch({2, 64, 0}, divergent_kernel{}); });
  CHECK(m.find("barrier divergence in block 0") != std::string::npos);
  CHECK(m.find("63 of 64 threads wait at barrier 1 while 1 have ended") != std::string::npos);
  m = error_of([&] { l.launch({1, 4, 0}, undeclared_barrier_kernel{}); });
  CHECK(m.find("sync() in a kernel that declares uses_barriers = false") != std::string::npos);
  m = error_of([&] { l.launch({1, 2048, 0}, divergent_kernel{}); });
  CHECK(m.find("at most 1024 threads per block") != std::string::npos);
}

TEST_CASE("emulator: blocks in order or shuffled; atomic_add") {
  for (bool shuffle : {false, true}) {
    options o;
    o.shuffle_blocks = shuffle;
    o.seed = 7;
    launcher l(o);
    index_t const blocks = 40, threads = 8;
    std::vector<index_t> order(blocks, -1);
    index_t next = 0, total = 0;
    l.launch({blocks, threads, 0}, order_kernel{order.data(), &next, &total});
    CHECK(next == blocks);
    CHECK(total == blocks * threads * (blocks * threads - 1) / 2);
    std::vector<index_t> sorted = order;
    std::sort(sorted.begin(), sorted.end());
    for (index_t b = 0; b < blocks; ++b) REQUIRE(sorted[std::size_t(b)] == b);
    bool in_order = std::is_sorted(order.begin(), order.end());
    CHECK(in_order == !shuffle);
  }
}

TEST_CASE("grid::ordered_block_sum (gradix/dist/nccl.hpp's sum over blocks) has the host loop's bits") {
  // rows of mixed magnitudes, so that another order would round differently
  index_t const blocks = 7, width = 1000;
  std::vector<float> in(std::size_t(blocks * width));
  std::uint64_t s = 99;
  for (auto& x : in) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x = float(double(s >> 40) / double(1 << 24) - 0.5) * float(1 << (s >> 60));
  }
  std::vector<float> want(static_cast<std::size_t>(width));
  for (index_t x = 0; x < width; ++x) {
    float a = 0;
    for (index_t b = 0; b < blocks; ++b) a += in[std::size_t(b * width + x)];
    want[std::size_t(x)] = a;
  }
  // the reverse order differs somewhere (the test would not see a wrong order otherwise)
  bool differs = false;
  for (index_t x = 0; x < width && !differs; ++x) {
    float a = 0;
    for (index_t b = blocks; b-- > 0;) a += in[std::size_t(b * width + x)];
    differs = a != want[std::size_t(x)];
  }
  CHECK(differs);
  for (bool shuffle : {false, true})
    for (index_t threads : {index_t(1), index_t(32), index_t(256)}) {
      options o;
      o.shuffle_blocks = shuffle;
      launcher l(o);
      std::vector<float> out(std::size_t(width), -1.f), acc(std::size_t(width), 1.f);
      gx::grid::ordered_block_sum(l, in.data(), out.data(), blocks, width, width, {threads, 3});
      CHECK(std::memcmp(out.data(), want.data(), out.size() * sizeof(float)) == 0);
      gx::grid::add_into(l, acc.data(), in.data(), width, {threads, 0});
      for (index_t x = 0; x < width; ++x) REQUIRE(acc[std::size_t(x)] == 1.f + in[std::size_t(x)]);
    }
}

// ---------------------------------------------------------------------------------------
// Forward kernels against the host backend.

namespace {

constexpr index_t rows = 37;  // dynamic
constexpr index_t cols = 53;  // static

/// The leaves of the expressions, in one memory space (both spaces view the same host
/// memory: the emulator's device memory is host memory).
template <class Space>
struct leaves {
  gx::tensor_view<float const, gx::shape<gx::dyn, cols>, gx::row_major, Space> x;
  gx::tensor_view<float const, gx::shape<gx::dyn, cols>, gx::col_major, Space> xc;
  gx::tensor_view<float const, gx::shape<gx::dyn, cols>, gx::strided, Space> xs;
  gx::tensor_view<float const, gx::shape<cols>, gx::row_major, Space> b;
  gx::tensor_view<double const, gx::shape<gx::dyn, cols>, gx::row_major, Space> d;
  gx::tensor_view<int const, gx::shape<gx::dyn, cols>, gx::row_major, Space> k;
};

struct data {
  std::vector<float> x, xc, xs, b;
  std::vector<double> d;
  std::vector<int> k;
  data() : x(rows * cols), xc(rows * cols), xs(2 * rows * cols), b(cols), d(rows * cols), k(rows * cols) {
    for (index_t i = 0; i < rows * cols; ++i) {
      auto u = std::size_t(i);
      x[u] = 0.25f + 0.5f * float((i * 37) % 101) / 101.0f;
      xc[u] = 1.5f - float((i * 11) % 89) / 89.0f;
      xs[2 * u] = 0.5f + float((i * 5) % 13) / 13.0f;
      xs[2 * u + 1] = -1000.0f;  // never read
      d[u] = 0.5 - 0.001 * double(i % 977);
      k[u] = int(i * 7 % 5) - 2;
    }
    for (index_t j = 0; j < cols; ++j) b[std::size_t(j)] = 1.0f - 0.03f * float(j);
  }
  template <class Space>
  leaves<Space> view() const {
    auto s = gx::dims(rows, gx::fix<cols>);
    gx::array<gx::index_t, 2> strides{{2 * cols, 2}};
    return {gx::view<gx::row_major, Space>(x.data(), s), gx::view<gx::col_major, Space>(xc.data(), s),
            gx::strided_view<Space>(xs.data(), s, strides), gx::view<gx::row_major, Space>(b.data(), gx::shape<cols>{}),
            gx::view<gx::row_major, Space>(d.data(), s), gx::view<gx::row_major, Space>(k.data(), s)};
  }
};

struct elementwise_family {
  template <class L>
  auto operator()(L const& l) const {
    return gx::exp(l.x * 0.25f) + gx::log(l.xc) * l.b - gx::tanh(l.xs) + gx::sigmoid(-l.x) + gx::relu(l.x - 0.5f) +
           gx::where(l.x > l.xc, l.x, l.xc) + gx::pow(l.xs, 1.5f);
  }
};
struct mixed_family {
  template <class L>
  auto operator()(L const& l) const {
    return gx::cast<float>(l.d * l.x + l.k) - gx::cast<float>(gx::abs(l.k)) * l.b;
  }
};
struct reduce_family {
  template <class L>
  auto operator()(L const& l) const {
    return gx::exp(l.x - gx::max<1>(l.x, gx::keep_dims)) / gx::sum<1>(gx::exp(l.x - gx::max<1>(l.x, gx::keep_dims)), gx::keep_dims) +
           gx::mean<0>(l.xc, gx::keep_dims);
  }
};
struct view_family {
  template <class L>
  auto operator()(L const& l) const {
    auto s = gx::dims(rows, gx::fix<cols>);
    return gx::transpose(gx::transpose(l.xc)) + gx::index(l.x, gx::all, gx::at(2)) * gx::unsqueeze<0>(l.b) +
           gx::broadcast_to(gx::index(l.xs, 1, gx::all), s) + gx::reshape(gx::reshape(l.x, gx::dims(cols, rows)), s);
  }
};

/// The relative difference a device evaluation (per element, scalar functions) may have from
/// the host's (SIMD packs: gradix's vector exp, log, tanh, pow).
template <class T>
bool close(T got, T want) {
  if constexpr (std::is_integral_v<T>) {
    return got == want;
  } else {
    T scale = std::abs(want) > T(1) ? std::abs(want) : T(1);
    return std::abs(got - want) <= T(16) * std::numeric_limits<T>::epsilon() * scale;
  }
}

template <class F>
void check_assign(F f, char const* name) {
  data dt;
  auto hl = dt.view<gx::host_space>();
  auto dl = dt.view<gx::cuda_space>();
  using T = gx::value_type_t<decltype(f(dl))>;
  using S = gx::shape_of_t<decltype(f(dl))>;
  gx::tensor<T, S> want(f(hl).shape());  // row-major, as dst
  gx::assign(want, f(hl));
  std::vector<T> out(std::size_t(want.size()), T(-7));
  auto dst = gx::view<gx::row_major, gx::cuda_space>(out.data(), want.shape());
  for (index_t threads : {32, 256, 1024})
    for (index_t max_blocks : {1, 5, 0})
      for (bool shuffle : {false, true}) {
        options o;
        o.shuffle_blocks = shuffle;
        o.reverse_threads = shuffle;
        launcher l(o);
        std::fill(out.begin(), out.end(), T(-7));
        gx::grid::assign(l, dst, f(dl), {threads, max_blocks});
        CHECK(l.launches() == 1);
        index_t bad = 0;
        for (index_t i = 0; i < want.size(); ++i)
          if (!close(out[std::size_t(i)], want.data()[i])) ++bad;
        INFO(std::string(name) << ": threads " << threads << ", max_blocks " << max_blocks);
        REQUIRE(bad == 0);
      }
}

}  // namespace

TEST_CASE("grid::assign through the emulator equals the host backend") {
  check_assign(elementwise_family{}, "elementwise");
  check_assign(mixed_family{}, "mixed types");
  check_assign(reduce_family{}, "reductions inside");
  check_assign(view_family{}, "views");
}

TEST_CASE("grid::assign: a shape mismatch is an error and writes nothing") {
  data dt;
  auto dl = dt.view<gx::cuda_space>();
  std::vector<float> out(rows * (cols + 1), 3.0f);
  auto dst = gx::view<gx::row_major, gx::cuda_space>(out.data(), gx::dims(rows, cols + 1));
  launcher l;
  std::string m = error_of([&] { gx::grid::assign(l, dst, dl.x * 2.0f); });
  CHECK(m == "gradix::grid::assign: destination shape [37, 54] differs from expression shape [37, 53]");
  CHECK(l.launches() == 0);
  for (float v : out) REQUIRE(v == 3.0f);
}

// ---------------------------------------------------------------------------------------
// The deterministic sum.

namespace {
template <class T>
std::uint64_t bits(T v) {
  std::uint64_t r = 0;
  std::memcpy(&r, &v, sizeof(T));
  return r;
}
}  // namespace

TEST_CASE("grid::sum: the same bits for every launch shape and block order, close to the exact sum") {
  for (index_t n : {0, 1, 31, 1023, 1024, 1025, 5000, 40000, 1100000}) {
    std::vector<float> v(static_cast<std::size_t>(n));
    double exact = 0;
    for (index_t i = 0; i < n; ++i) {
      float x = float((i * 7919) % 1000) / 1000.0f - 0.3f;
      v[std::size_t(i)] = x;
      exact += double(x);
    }
    auto dv = gx::view<gx::row_major, gx::cuda_space>(v.data(), gx::dims(n));
    float first = 0;
    bool have = false;
    for (index_t threads : {32, 96, 256, 1024})
      for (index_t max_blocks : {1, 3, 0})
        for (bool shuffle : {false, true}) {
          if (n > 100000 && (threads != 256 || max_blocks == 1)) continue;  // (keeps the test short)
          options o;
          o.shuffle_blocks = shuffle;
          o.seed = std::uint64_t(n + threads);
          launcher l(o);
          float s = gx::grid::sum(l, dv * 1.0f, {threads, max_blocks});
          CHECK(l.live_allocations() == 0);
          if (!have) {
            first = s;
            have = true;
            double tol = 1e-6 * (1.0 + double(n));
            INFO("n " << n << ": sum " << s << ", exact " << exact);
            CHECK(std::abs(double(s) - exact) <= tol);
          }
          INFO("n " << n << ", threads " << threads << ", max_blocks " << max_blocks << ", shuffled " << shuffle);
          REQUIRE(bits(s) == bits(first));
        }
  }
}

TEST_CASE("grid::sum of an expression over a rank-3 broadcast, and of doubles and ints") {
  data dt;
  auto hl = dt.view<gx::host_space>();
  auto dl = dt.view<gx::cuda_space>();
  launcher l;
  auto e3 = [](auto const& L) { return gx::unsqueeze<0>(L.x) * gx::unsqueeze<1>(gx::sum<1>(L.xc, gx::keep_dims)); };
  // rank 3: [1, 37, 53] * [37, 1, 1] broadcasts to [37, 37, 53]
  float got = gx::grid::sum(l, e3(dl));
  double want = 0;
  auto h = gx::eval(e3(hl));
  for (index_t i = 0; i < h.size(); ++i) want += double(h.data()[i]);
  CHECK(std::abs(double(got) - want) <= 1e-5 * std::abs(want));
  CHECK(gx::grid::sum(l, dl.d) == doctest::Approx(gx::value(gx::sum(hl.d))).epsilon(1e-12));
  CHECK(gx::grid::sum(l, dl.k) == gx::value(gx::sum(hl.k)));
}

// ---------------------------------------------------------------------------------------
// Device tensors (backend/grid/memory.hpp).

TEST_CASE("grid::device_tensor: upload, download, zeros, moves; memory given back") {
  launcher l;
  {
    auto h = gx::uniform<float>(gx::dims(5, gx::fix<7>), 3, -1.0f, 1.0f);
    using S = decltype(h)::shape_type;
    auto d = gx::grid::device_tensor<float, S, launcher>::from_host(l, h);
    CHECK(l.live_allocations() == 1);
    auto back = d.download();
    for (index_t i = 0; i < h.size(); ++i) REQUIRE(back.data()[i] == h.data()[i]);
    auto z = gx::grid::device_tensor<float, S, launcher>::zeros(l, h.shape());
    auto zh = z.download();
    for (index_t i = 0; i < zh.size(); ++i) REQUIRE(zh.data()[i] == 0.0f);
    // out = exp(d) * 2 + z, on the device
    auto out = gx::grid::make_device_tensor<float>(l, h.shape());
    gx::grid::assign(l, out.view(), gx::exp(d.cview()) * 2.0f + z.cview());
    auto want = gx::eval(gx::exp(h) * 2.0f);
    auto got = out.download();
    for (index_t i = 0; i < h.size(); ++i) REQUIRE(close(got.data()[i], want.data()[i]));
    CHECK(gx::grid::sum(l, d.cview()) == doctest::Approx(gx::value(gx::sum(h))).epsilon(1e-6));
    auto moved = std::move(d);
    CHECK(d.data() == nullptr);
    CHECK(moved.download()(4, 6) == h(4, 6));
    CHECK(l.live_allocations() == 3);
    // a host tensor of another shape: an error, nothing copied
    gx::tensor<float, S> other(gx::dims(4, gx::fix<7>));
    std::string m = error_of([&] { moved.upload(other); });
    CHECK(m == "gradix::device_tensor::upload: host shape [4, 7] differs from device shape [5, 7]");
    CHECK(moved.download()(4, 6) == h(4, 6));
  }
  CHECK(l.live_allocations() == 0);
}

// ---------------------------------------------------------------------------------------
// Reductions over chosen axes at the root of an assign (block-then-grid kernels when each
// output reduces at least grid::block_reduce_min elements).

namespace {
/// The emulator launcher without an arrival counter: reductions then take a launch per pass
/// (the path of a launcher that has none, and of reductions with too many partials for one
/// block).
struct counterless {
  launcher& l;
  index_t max_threads() const { return l.max_threads(); }
  template <class K>
  void launch(gx::grid::launch_shape s, K const& k) {
    l.launch(s, k);
  }
  void* allocate(std::size_t bytes) { return l.allocate(bytes); }
  void deallocate(void* p) { l.deallocate(p); }
  void copy_to_host(void* dst, void const* src, std::size_t bytes) { l.copy_to_host(dst, src, bytes); }
  void copy_to_device(void* dst, void const* src, std::size_t bytes) { l.copy_to_device(dst, src, bytes); }
  void copy_device_to_device(void* dst, void const* src, std::size_t bytes) { l.copy_device_to_device(dst, src, bytes); }
  void fill_zero(void* p, std::size_t bytes) { l.fill_zero(p, bytes); }
};

template <class F>
void check_root_reduction(F f, char const* name, index_t launches) {
  auto x = gx::uniform<float>(gx::dims(3000, gx::fix<5>), 11, -1.0f, 1.0f);
  auto y = gx::uniform<float>(gx::dims(40, gx::fix<7>, 30), 12, -1.0f, 1.0f);
  auto hx = x.view();
  auto hy = y.view();
  auto dx = gx::view<gx::row_major, gx::cuda_space>(x.data(), x.shape());
  auto dy = gx::view<gx::row_major, gx::cuda_space>(y.data(), y.shape());
  using T = gx::value_type_t<decltype(f(dx, dy))>;
  using S = gx::shape_of_t<decltype(f(dx, dy))>;
  gx::tensor<T, S> want(f(hx, hy).shape());
  gx::assign(want, f(hx, hy));
  std::vector<T> out(std::size_t(want.size())), first;
  auto dst = gx::view<gx::row_major, gx::cuda_space>(out.data(), want.shape());
  for (index_t threads : {32, 256, 1024})
    for (index_t max_blocks : {1, 4, 0})
      for (bool shuffle : {false, true}) {
        options o;
        o.shuffle_blocks = shuffle;
        o.seed = std::uint64_t(threads * 7 + max_blocks);
        launcher l(o);
        std::fill(out.begin(), out.end(), T(-7));
        gx::grid::assign(l, dst, f(dx, dy), {threads, max_blocks});
        CHECK(l.live_allocations() == 0);
        // 1: the tiles' partials, and the last block to finish reduces them; 1: per output
        CHECK(l.launches() == 1);
        INFO(std::string(name) << ": threads " << threads << ", max_blocks " << max_blocks << ", shuffled " << shuffle);
        for (index_t i = 0; i < want.size(); ++i) {
          T scale = std::abs(want.data()[i]) > T(1) ? std::abs(want.data()[i]) : T(1);
          REQUIRE(std::abs(out[std::size_t(i)] - want.data()[i]) <= T(1e-5) * scale);
        }
        if (first.empty()) first = out;
        for (std::size_t i = 0; i < out.size(); ++i) REQUIRE(bits(out[i]) == bits(first[i]));
        // a launch per pass (no arrival counter): the same bits
        std::fill(out.begin(), out.end(), T(-7));
        index_t const l0 = l.launches();
        counterless cl{l};
        gx::grid::assign(cl, dst, f(dx, dy), {threads, max_blocks});
        CHECK(l.launches() - l0 == launches);  // 2: tiles, then the partials; 1: per output
        CHECK(l.live_allocations() == 0);
        for (std::size_t i = 0; i < out.size(); ++i) REQUIRE(bits(out[i]) == bits(first[i]));
      }
}
}  // namespace

TEST_CASE("grid::assign of a root reduction: block-then-grid kernels, fixed bits, equal to the host") {
  check_root_reduction([](auto const& x, auto const&) { return gx::sum<0>(x); }, "sum<0> (3 tiles per output)", 2);
  check_root_reduction([](auto const& x, auto const&) { return gx::mean<0>(gx::exp(x), gx::keep_dims); }, "mean<0> keep_dims", 2);
  check_root_reduction([](auto const& x, auto const&) { return gx::max<0>(x * 2.0f); }, "max<0>", 2);
  check_root_reduction([](auto const&, auto const& y) { return gx::sum<0, 2>(y); }, "sum<0, 2> (rank 3)", 2);
  check_root_reduction([](auto const&, auto const& y) { return gx::sum<0, 2>(y, gx::keep_dims); }, "sum<0, 2> keep_dims", 2);
  check_root_reduction([](auto const&, auto const& y) { return gx::sum<2>(y); }, "sum<2> (30 elements: per thread)", 1);
  check_root_reduction([](auto const& x, auto const&) { return gx::sum(gx::transpose(x)); }, "sum of a transpose", 2);
}

TEST_CASE("grid::sum_to: three levels in one launch (the last block reduces 353 partials, then 2), the same bits as a launch per level") {
  auto x = gx::uniform<float>(gx::dims(300, 301), 13, -1.0f, 1.0f);  // 90,300 elements: 353 tiles
  auto dx = gx::view<gx::row_major, gx::cuda_space>(x.data(), x.shape());
  double want = 0;
  for (index_t i = 0; i < x.size(); ++i) want += double(x.data()[i]);
  float first = 0;
  bool have = false;
  for (index_t threads : {32, 256})
    for (index_t max_blocks : {1, 5, 0})
      for (bool shuffle : {false, true}) {
        options o;
        o.shuffle_blocks = shuffle;
        o.seed = std::uint64_t(threads + max_blocks);
        launcher l(o);
        INFO("threads " << threads << ", max_blocks " << max_blocks << ", shuffled " << shuffle);
        float one = -7, per_level = -7;
        gx::grid::sum_to(l, &one, dx, {threads, max_blocks});
        CHECK(l.launches() == 1);
        counterless cl{l};
        gx::grid::sum_to(cl, &per_level, dx, {threads, max_blocks});
        CHECK(l.launches() == 1 + 3);
        CHECK(l.live_allocations() == 0);
        CHECK(bits(one) == bits(per_level));
        CHECK(std::abs(double(one) - want) <= 1e-3);
        if (!have) first = one, have = true;
        CHECK(bits(one) == bits(first));
      }
}

// ---------------------------------------------------------------------------------------
// Scatter-add of rows (backend/grid/scatter.hpp): atomic and deterministic, validation.

namespace {
/// The deterministic mode's result computed on the host: per target row, the rows of its
/// positions summed in position order from 0, then added into dst once.
std::vector<float> scatter_reference(std::vector<float> dst, std::vector<std::int64_t> const& idx,
                                     std::vector<float> const& src, index_t cols) {
  index_t const rows = index_t(dst.size()) / cols, n = index_t(idx.size());
  for (index_t t = 0; t < rows; ++t)
    for (index_t d = 0; d < cols; ++d) {
      float acc = 0;
      bool any = false;
      for (index_t i = 0; i < n; ++i)
        if (idx[std::size_t(i)] == t) {
          acc += src[std::size_t(i * cols + d)];
          any = true;
        }
      if (any) dst[std::size_t(t * cols + d)] += acc;
    }
  return dst;
}

void check_scatter(std::vector<std::int64_t> const& idx, index_t rows, index_t cols, char const* name) {
  index_t const n = index_t(idx.size());
  std::vector<float> src(std::size_t(n * cols)), dst0(std::size_t(rows * cols));
  for (std::size_t i = 0; i < src.size(); ++i) src[i] = float((i * 7919) % 997) / 997.0f - 0.45f;
  for (std::size_t i = 0; i < dst0.size(); ++i) dst0[i] = float(i % 13) * 0.25f;
  auto const want = scatter_reference(dst0, idx, src, cols);
  auto sv = gx::view<gx::row_major, gx::cuda_space>(src.data(), gx::dims(n, cols));
  for (auto mode : {gx::grid::scatter_mode::deterministic, gx::grid::scatter_mode::atomic})
    for (index_t threads : {32, 256})
      for (index_t max_blocks : {1, 7, 0})
        for (bool shuffle : {false, true}) {
          options o;
          // a small shared memory: sort tiles of 512 keys, so the sort also takes steps
          // across tiles (through global memory); else one tile (up to 8192 keys)
          if (shuffle) o.max_shared_bytes = 8 * 1024;
          o.shuffle_blocks = shuffle;
          o.reverse_threads = shuffle;
          o.seed = std::uint64_t(threads + max_blocks);
          launcher l(o);
          std::vector<float> dst = dst0;
          auto dv = gx::view<gx::row_major, gx::cuda_space>(dst.data(), gx::dims(rows, cols));
          // src read through an expression (times 1): the evaluator path, as in a backward
          gx::grid::scatter_add_rows(l, dv, idx.data(), n, 1, sv * 1.0f, mode, "gradix::test", {threads, max_blocks});
          CHECK(l.live_allocations() == 0);
          INFO(std::string(name) << std::string(mode == gx::grid::scatter_mode::atomic ? ", atomic" : ", deterministic")
                                 << ": threads " << threads << ", max_blocks " << max_blocks << ", shuffled " << shuffle);
          if (mode == gx::grid::scatter_mode::deterministic) {
            for (std::size_t i = 0; i < dst.size(); ++i) REQUIRE(bits(dst[i]) == bits(want[i]));
          } else {
            for (std::size_t i = 0; i < dst.size(); ++i) REQUIRE(std::abs(dst[i] - want[i]) <= 1e-4f * (1 + std::abs(want[i])));
          }
        }
}
}  // namespace

TEST_CASE("grid::scatter_add_rows: repeated, all-equal and skewed indices, both modes, against the host") {
  std::vector<std::int64_t> repeated;
  for (index_t i = 0; i < 300; ++i) repeated.push_back((i * 37) % 50);
  check_scatter(repeated, 64, 5, "repeated (each about 6 times)");
  check_scatter(std::vector<std::int64_t>(257, 3), 8, 7, "all equal");
  std::vector<std::int64_t> zipf;  // Zipf-like: id ~ 1 / rank
  std::uint64_t s = 42;
  for (index_t i = 0; i < 1000; ++i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    double u = double(s >> 11) / double(1ull << 53);
    zipf.push_back(std::int64_t(std::pow(500.0, u)) - 1);
  }
  check_scatter(zipf, 500, 3, "Zipf-like");
  check_scatter({}, 4, 3, "no indices");
  check_scatter({2}, 4, 3, "one index");
}

TEST_CASE("grid::scatter_add_rows: an out-of-range index is found before anything is written") {
  std::vector<float> src(4 * 3, 1.0f), dst(5 * 3, 2.0f);
  auto sv = gx::view<gx::row_major, gx::cuda_space>(src.data(), gx::dims(4, 3));
  auto dv = gx::view<gx::row_major, gx::cuda_space>(dst.data(), gx::dims(5, 3));
  for (auto mode : {gx::grid::scatter_mode::deterministic, gx::grid::scatter_mode::atomic}) {
    for (std::vector<std::int64_t> idx : {std::vector<std::int64_t>{0, 4, 5, 7}, std::vector<std::int64_t>{1, -1, 2, 9}}) {
      launcher l;
      std::string m = error_of([&] { gx::grid::scatter_add_rows(l, dv, idx.data(), 4, 1, sv, mode, "gradix::embedding"); });
      if (idx[1] == 4) CHECK(m == "gradix::embedding: index 5 (position 2) is out of range for axis 0 of extent 5");
      else CHECK(m == "gradix::embedding: index -1 (position 1) is out of range for axis 0 of extent 5");
      for (float v : dst) REQUIRE(v == 2.0f);
      CHECK(l.live_allocations() == 0);
    }
  }
  // strided indices (a column of a 2-d index array)
  std::vector<std::int32_t> idx2{0, 100, 3, 100, 9, 100, 1, 100};
  launcher l;
  std::string m = error_of([&] { gx::grid::scatter_add_rows(l, dv, idx2.data(), 4, 2, sv, gx::grid::scatter_mode::atomic); });
  CHECK(m == "gradix::scatter_add: index 9 (position 2) is out of range for axis 0 of extent 5");
  // a source of the wrong shape
  m = error_of([&] { gx::grid::scatter_add_rows(l, dv, idx2.data(), 3, 2, sv, gx::grid::scatter_mode::atomic); });
  CHECK(m == "gradix::scatter_add: the source rows have shape [4, 3] for 3 indices into rows of 3 columns");
}

TEST_CASE("grid::scatter_add_rows: device_indices, checked by their bounds on the host") {
  std::vector<float> src(4 * 3), dst(5 * 3, 2.0f);
  for (std::size_t k = 0; k < src.size(); ++k) src[k] = float(k) * 0.5f;
  auto sv = gx::view<gx::row_major, gx::cuda_space>(src.data(), gx::dims(4, 3));
  for (auto mode : {gx::grid::scatter_mode::deterministic, gx::grid::scatter_mode::atomic}) {
    launcher l;
    std::vector<std::int32_t> const ids{3, 0, 3, 4};
    auto known = gx::grid::device_indices<std::int32_t, launcher>::from_host(l, ids);
    std::vector<float> a = dst, b = dst;
    auto av = gx::view<gx::row_major, gx::cuda_space>(a.data(), gx::dims(5, 3));
    auto bv = gx::view<gx::row_major, gx::cuda_space>(b.data(), gx::dims(5, 3));
    index_t const l0 = l.launches();
    gx::grid::scatter_add_rows(l, av, ids.data(), 4, 1, sv, mode);
    index_t const l1 = l.launches();
    gx::grid::scatter_add_rows(l, bv, known, sv, mode);
    CHECK(l.launches() - l1 == l1 - l0 - 1);  // the same, less the validation kernel
    CHECK(a == b);
    // out of range: the validation kernel names the first bad position; nothing written
    auto bad = gx::grid::device_indices<std::int32_t, launcher>::from_host(l, std::vector<std::int32_t>{1, 2, 5, -1});
    std::string m = error_of([&] { gx::grid::scatter_add_rows(l, bv, bad, sv, mode, "gradix::embedding"); });
    CHECK(m == "gradix::embedding: index 5 (position 2) is out of range for axis 0 of extent 5");
    CHECK(a == b);
  }
}

// ---------------------------------------------------------------------------------------
// Sparse row gradient storage on the device (backend/grid/sparse.hpp).

TEST_CASE("grid::device_sparse_rows: slots on the device, the rows touched and no more, fixed bits") {
  index_t const rows = 700, cols = 6;
  // three calls: Zipf-like ids, then some new and some repeated, then an empty call
  std::vector<std::vector<std::int64_t>> calls(3);
  std::uint64_t s = 9;
  for (index_t i = 0; i < 400; ++i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    calls[0].push_back(std::int64_t(std::pow(double(rows), double(s >> 11) / double(1ull << 53))) - 1);
  }
  for (index_t i = 0; i < 90; ++i) calls[1].push_back((i * 53 + 11) % rows);
  std::vector<std::vector<float>> srcs;
  for (auto const& c : calls) {
    std::vector<float> v(c.size() * std::size_t(cols));
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = float((i * 31 + c.size()) % 211) / 211.0f - 0.5f;
    srcs.push_back(v);
  }
  // the host reference: per call and row, the rows summed in position order from 0, added once
  std::vector<float> want(std::size_t(rows * cols), 0.0f);
  std::vector<bool> touched(std::size_t(rows), false);
  for (std::size_t k = 0; k < calls.size(); ++k) {
    auto const& c = calls[k];
    for (index_t t = 0; t < rows; ++t) {
      bool any = false;
      std::vector<float> acc(std::size_t(cols), 0.0f);
      for (std::size_t i = 0; i < c.size(); ++i)
        if (c[i] == t) {
          any = true;
          for (index_t d = 0; d < cols; ++d) acc[std::size_t(d)] += srcs[k][i * std::size_t(cols) + std::size_t(d)];
        }
      if (any) {
        touched[std::size_t(t)] = true;
        for (index_t d = 0; d < cols; ++d) want[std::size_t(t * cols + d)] += acc[std::size_t(d)];
      }
    }
  }
  index_t const ntouched = index_t(std::count(touched.begin(), touched.end(), true));
  std::vector<std::int32_t> first_ids;
  for (index_t threads : {32, 256})
    for (bool shuffle : {false, true}) {
      options o;
      o.shuffle_blocks = shuffle;
      o.reverse_threads = shuffle;
      launcher l(o);
      {
        gx::grid::device_sparse_rows<float, launcher> g(l, rows, cols);
        for (int round = 0; round < 2; ++round) {  // the second round after zero(): memory reused
          for (std::size_t k = 0; k < calls.size(); ++k) {
            auto sv = gx::view<gx::row_major, gx::cuda_space>(srcs[k].data(), gx::dims(index_t(calls[k].size()), cols));
            g.scatter_add(calls[k].data(), index_t(calls[k].size()), 1, sv * 1.0f, "gradix::test", {threads, 3});
          }
          INFO("threads " << threads << ", shuffled " << shuffle << ", round " << round);
          CHECK(g.size() == ntouched);
          auto ids = g.ids();
          std::vector<std::int32_t> sorted = ids;
          std::sort(sorted.begin(), sorted.end());
          CHECK(std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end());  // each row once
          for (std::int32_t id : ids) REQUIRE(touched[std::size_t(id)]);
          if (first_ids.empty()) first_ids = ids;
          CHECK(ids == first_ids);  // the same slots whatever the launch
          auto d = g.download_dense();
          for (index_t i = 0; i < rows * cols; ++i) REQUIRE(bits(d.data()[i]) == bits(want[std::size_t(i)]));
          index_t cap = g.capacity();
          CHECK(cap <= rows);
          g.zero();
          CHECK(g.size() == 0);
          CHECK(g.capacity() == cap);
          auto z = g.download_dense();
          for (index_t i = 0; i < z.size(); ++i) REQUIRE(z.data()[i] == 0.0f);
        }
        // an out-of-range index: an error, nothing stored
        std::vector<std::int64_t> bad{1, 2, rows};
        std::vector<float> bsrc(3 * cols, 1.0f);
        auto bv = gx::view<gx::row_major, gx::cuda_space>(bsrc.data(), gx::dims(3, cols));
        std::string m = error_of([&] { g.scatter_add(bad.data(), 3, 1, bv, "gradix::embedding"); });
        CHECK(m == "gradix::embedding: index 700 (position 2) is out of range for axis 0 of extent 700");
        CHECK(g.size() == 0);
      }
      CHECK(l.live_allocations() == 0);
    }
}

// ---------------------------------------------------------------------------------------
// Found in review: aliasing, call sites of barriers, a throwing kernel, moved-from tensors.

namespace {
/// Odd threads wait at one sync() call, even ones at another.
struct split_barrier_kernel {
  static constexpr bool uses_barriers = true;
  template <class Ctx>
  void operator()(Ctx const& c) const {
    if (c.thread() % 2) c.sync();
    else c.sync();
  }
};
struct throwing_kernel {
  static constexpr bool uses_barriers = false;
  template <class Ctx>
  void operator()(Ctx const& c) const {
    if (c.thread() == 1) gx::detail::fail("kernel failed");
  }
};
/// A race: thread t reads the slot of its neighbour (t + 1, or t - 1 with Left) in the same
/// phase as the neighbour writes it, with no barrier between. Left runs after one barrier.
template <bool Left>
struct racy_kernel {
  static constexpr bool uses_barriers = true;
  int* out_;
  template <class Ctx>
  void operator()(Ctx const& c) const {
    int* sh = c.template shared<int>();
    index_t const t = c.thread(), u = Left ? t - 1 : t + 1;
    if constexpr (Left) c.sync();
    sh[t] = int(t);
    out_[t] = u >= 0 && u < c.threads() ? sh[u] : int(u);
    c.sync();
  }
};
}  // namespace

TEST_CASE("emulator: different sync() sites, a racy kernel, and a throwing kernel") {
  launcher l;
  std::string m = error_of([&] { l.launch({1, 8, 0}, split_barrier_kernel{}); });
  CHECK(m.find("threads wait at different sync() calls") != std::string::npos);
  // both directions of a race within a phase show: the neighbour has not written yet, and
  // the slot still holds the 0xFF fill (-1)
  std::vector<int> out(16, -5);
  l.launch({1, 16, 16 * sizeof(int)}, racy_kernel<false>{out.data()});
  CHECK(out[3] == -1);
  l.launch({1, 16, 16 * sizeof(int)}, racy_kernel<true>{out.data()});
  CHECK(out[3] == -1);
  m = error_of([&] { l.launch({1, 4, 0}, throwing_kernel{}); });
  CHECK(m == "kernel failed");
  // the launcher still runs kernels with barriers afterwards
  std::vector<int> in(64), nb(64);
  for (int i = 0; i < 64; ++i) in[std::size_t(i)] = i;
  l.launch({2, 32, 32 * sizeof(int)}, neighbour_kernel{in.data(), nb.data()});
  CHECK(nb[31] == 0);
  CHECK(nb[32] == 33);
}

TEST_CASE("grid::assign: x = transpose(x) and a reduction into its own argument go through a temporary") {
  launcher l;
  std::vector<float> x(16 * 16);
  for (int i = 0; i < 256; ++i) x[std::size_t(i)] = float(i);
  auto xv = gx::view<gx::row_major, gx::cuda_space>(x.data(), gx::dims(16, 16));
  gx::grid::assign(l, xv, gx::transpose(xv) + 1.0f);
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 16; ++j) REQUIRE(x[std::size_t(i * 16 + j)] == float(j * 16 + i) + 1.0f);
  CHECK(l.live_allocations() == 0);
  // row 0 = the column sums of the 300 x 16 matrix it is part of (block reduction path)
  std::vector<float> y(300 * 16, 1.0f), want(16, 300.0f);
  auto yv = gx::view<gx::row_major, gx::cuda_space>(y.data(), gx::dims(300, 16));
  gx::grid::assign(l, gx::view<gx::row_major, gx::cuda_space>(y.data(), gx::dims(16)), gx::sum<0>(yv));
  for (int j = 0; j < 16; ++j) REQUIRE(y[std::size_t(j)] == 300.0f);
  // x = x * 2 (in place, the identity map): no temporary
  index_t before = l.launches();
  gx::grid::assign(l, xv, xv * 2.0f);
  CHECK(l.launches() == before + 1);
  CHECK(x[1] == 2.0f * (16.0f + 1.0f));
}

TEST_CASE("grid::device_tensor: a moved-from tensor holds nothing") {
  launcher l;
  auto a = gx::grid::make_device_tensor<float>(l, gx::dims(4));
  auto b = std::move(a);
  std::string m = error_of([&] { (void)a.download(); });
  CHECK(m == "gradix::device_tensor::download: the tensor was moved from and holds no memory");
}
