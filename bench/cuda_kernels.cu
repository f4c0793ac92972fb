// Device bandwidth of gradix's grid kernels (backend/grid) on a GPU, against the device's own
// copy bandwidth measured in the same run: a device-to-device cudaMemcpy, one assign (out =
// x * 2 + y), the fixed-bits sum, and the scatter-add of rows (atomic and deterministic) at
// the founding benchmark's size (5000 rows of 64 into 65,535) and at a bandwidth-bound size
// (1,048,576 rows of 64). Medians of --reps timed runs (CUDA events) after a warm-up. Prints a
// table and one JSON line. With --check, also checks that the deterministic scatter gives the
// same bits twice and is close to the atomic one. Also the cost of a call apart from its work
// (host microseconds: an empty launch, a launch and a read that waits, a grid::value of the
// per-term forward's shape, one founding term's backward_only with the sum and the squared
// loss, host and device time). Without a CUDA device it exits 77.
//
// Usage: bench_cuda_kernels [--reps R] [--check]
#include <gradix/backend/cuda/launch.hpp>
#include <gradix/backend/grid/assign.hpp>
#include <gradix/backend/grid/backward.hpp>
#include <gradix/api/device_entry.hpp>
#include <gradix/backend/grid/memory.hpp>
#include <gradix/backend/grid/param.hpp>
#include <gradix/backend/grid/reduce.hpp>
#include <gradix/backend/grid/scatter.hpp>
#include <gradix/gradix.hpp>

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace gx = gradix;
using gx::index_t;
using L = gx::cuda::launcher;
using V = gx::shape<gx::dyn>;

namespace {

/// Median milliseconds of reps runs of f (after one warm-up), timed with CUDA events.
template <class F>
double time_ms(L& l, int reps, F&& f) {
  f();
  gx::cuda::check(cudaStreamSynchronize(l.stream()), "cudaStreamSynchronize");
  cudaEvent_t a, b;
  gx::cuda::check(cudaEventCreate(&a), "cudaEventCreate");
  gx::cuda::check(cudaEventCreate(&b), "cudaEventCreate");
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    gx::cuda::check(cudaEventRecord(a, l.stream()), "cudaEventRecord");
    f();
    gx::cuda::check(cudaEventRecord(b, l.stream()), "cudaEventRecord");
    gx::cuda::check(cudaEventSynchronize(b), "cudaEventSynchronize");
    float ms = 0;
    gx::cuda::check(cudaEventElapsedTime(&ms, a, b), "cudaEventElapsedTime");
    t.push_back(ms);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

struct row {
  std::string name;
  double ms;
  double bytes;
};

/// A kernel that does nothing: what a launch costs by itself.
struct empty_kernel {
  static constexpr bool uses_barriers = false;
  GRADIX_KERNEL_BODY
  template <class Ctx>
  GRADIX_HOST_DEVICE void operator()(Ctx const&) const {}
};

/// A plain sum for comparison: each thread adds 8 elements (coalesced), a block tree in
/// shared memory, one atomic add per block (bits not fixed).
struct plain_sum_kernel {
  static constexpr bool uses_barriers = true;
  float const* x_;
  index_t n_;
  float* out_;
  GRADIX_KERNEL_BODY
  template <class Ctx>
  GRADIX_HOST_DEVICE void operator()(Ctx const& c) const {
    float* sh = c.template shared<float>();
    float acc = 0;
    index_t const base = c.block() * c.threads() * 8 + c.thread();
    for (index_t q = 0; q < 8; ++q) {
      index_t const i = base + q * c.threads();
      if (i < n_) acc += x_[i];
    }
    sh[c.thread()] = acc;
    c.sync();
    for (index_t h = c.threads() / 2; h > 0; h /= 2) {
      if (c.thread() < h) sh[c.thread()] += sh[c.thread() + h];
      c.sync();
    }
    if (c.thread() == 0) c.atomic_add(out_, sh[0]);
  }
};

/// The launcher without an arrival counter: a reduction takes a launch per pass.
struct counterless {
  L& l;
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
  void synchronize() { l.synchronize(); }
};

/// Median over reps of the host microseconds per call of f, over batches of `calls` calls
/// (the device waited for at the end of each batch, inside the timing).
template <class F>
double host_us(L& l, int reps, int calls, F&& f) {
  f();
  l.synchronize();
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    auto const t0 = std::chrono::steady_clock::now();
    for (int c = 0; c < calls; ++c) f();
    l.synchronize();
    t.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / calls);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 20;
  bool check = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--reps") == 0 && i + 1 < argc) reps = std::atoi(argv[++i]);
    else if (std::strcmp(argv[i], "--check") == 0) check = true;
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("bench_cuda_kernels: no CUDA device\n");
    return 77;
  }
  cudaDeviceProp prop{};
  gx::cuda::check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  L l;
  std::vector<row> rows;
  int failures = 0;

  index_t const n = index_t(1) << 26;  // 64 Mi floats, 256 MiB
  std::vector<float> hx(static_cast<std::size_t>(n));
  for (index_t i = 0; i < n; ++i) hx[std::size_t(i)] = float((i * 7919) % 1000) / 1000.0f;
  auto x = gx::grid::device_tensor<float, V, L>::from_host(l, gx::tensor<float, V>(gx::dims(n), hx));
  auto y = gx::grid::device_tensor<float, V, L>::zeros(l, gx::dims(n));
  auto out = gx::grid::device_tensor<float, V, L>(l, gx::dims(n));
  double const nb = double(n) * sizeof(float);
  rows.push_back({"copy (device to device)", time_ms(l, reps, [&] { l.copy_device_to_device(out.data(), x.data(), std::size_t(nb)); }), 2 * nb});
  rows.push_back({"assign out = x * 2 + y", time_ms(l, reps, [&] { gx::grid::assign(l, out.view(), x.cview() * 2.0f + y.cview()); }), 3 * nb});
  gx::grid::device_tensor<float, gx::shape<>, L> s(l, gx::shape<>{});
  rows.push_back({"sum (fixed bits)", time_ms(l, reps, [&] { gx::grid::sum_to(l, s.data(), x.cview()); }), nb});

  // scatter-add of rows: the founding benchmark's per-term size, and a bandwidth-bound one
  for (index_t k : {index_t(5000), index_t(1) << 20}) {
    index_t const vocab = 65535, d = 64;
    std::vector<std::uint16_t> hidx(static_cast<std::size_t>(k));
    for (index_t i = 0; i < k; ++i) hidx[std::size_t(i)] = std::uint16_t((i * 40503u) % vocab);
    // device_indices: bounds known on the host, so the scatter validates them without a
    // kernel and a wait for the device (a device_tensor's would be checked on each call)
    auto idx = gx::grid::device_indices<std::uint16_t, L>::from_host(l, hidx);
    auto table = gx::grid::device_tensor<float, V, L>::zeros(l, gx::dims(vocab * d));
    auto tv = gx::view<gx::row_major, gx::cuda_space>(table.data(), gx::dims(vocab, d));
    auto src = gx::view<gx::row_major, gx::cuda_space>(x.cview().data(), gx::dims(k, d));
    double const bytes = double(k) * d * sizeof(float) * 3 + double(k) * sizeof(std::uint16_t);
    for (auto mode : {gx::grid::scatter_mode::atomic, gx::grid::scatter_mode::deterministic}) {
      std::string name = std::string("scatter ") + std::to_string(k) + " x 64 into 65535 rows, " +
                         (mode == gx::grid::scatter_mode::atomic ? "atomic" : "deterministic");
      rows.push_back({name, time_ms(l, reps, [&] { gx::grid::scatter_add_rows(l, tv, idx, src, mode); }), bytes});
    }
    if (check) {
      auto once = [&](gx::grid::scatter_mode m) {
        l.fill_zero(table.data(), table.bytes());
        gx::grid::scatter_add_rows(l, tv, idx, src, m);
        return table.download();
      };
      auto d1 = once(gx::grid::scatter_mode::deterministic), d2 = once(gx::grid::scatter_mode::deterministic);
      auto a1 = once(gx::grid::scatter_mode::atomic);
      bool same = std::memcmp(d1.data(), d2.data(), std::size_t(d1.size()) * sizeof(float)) == 0;
      bool close = true;
      for (index_t i = 0; i < d1.size(); ++i)
        close = close && std::abs(d1.data()[i] - a1.data()[i]) <= 1e-4f * (1 + std::abs(d1.data()[i]));
      std::printf("check scatter %ld: deterministic twice the same bits: %s; atomic close: %s\n", long(k),
                  same ? "yes" : "NO", close ? "yes" : "NO");
      failures += !same + !close;
    }
  }

  // what a call costs apart from its work: the founding benchmark's per-term loop makes
  // 100 calls per step, each a few launches and (for a value) one read that waits
  struct call_row {
    char const* name;
    double us;
  };
  std::vector<call_row> calls;
  calls.push_back({"launch of an empty kernel (queued, 1000 per wait)",
                   host_us(l, reps, 1000, [&] { l.launch(gx::grid::launch_shape{1, 32, 0}, empty_kernel{}); })});
  calls.push_back({"empty kernel, then a 4-byte read that waits",
                   host_us(l, reps, 100, [&] {
                     l.launch(gx::grid::launch_shape{1, 32, 0}, empty_kernel{});
                     float v = 0;
                     l.copy_to_host(&v, s.data(), sizeof v);
                   })});
  calls.push_back({"a 4-byte read that waits, nothing queued", host_us(l, reps, 100, [&] {
                     float v = 0;
                     l.copy_to_host(&v, s.data(), sizeof v);
                   })});
  auto const term = gx::view<gx::row_major, gx::cuda_space>(x.cview().data(), gx::dims(5000, 64));
  calls.push_back({"grid::value(sum of 5000 x 64), the per-term forward's shape",
                   host_us(l, reps, 100, [&] { (void)gx::grid::value(l, gx::sum(term)); })});
  {
    counterless cl{l};
    calls.push_back({"the same, a launch per pass (no arrival counter)",
                     host_us(l, reps, 100, [&] { (void)gx::grid::value(cl, gx::sum(term)); })});
  }
  calls.push_back({"grid::sum_to(sum of 5000 x 64): device time (events), no read",
                   1e3 * time_ms(l, reps, [&] { gx::grid::sum_to(l, s.data(), term); })});
  {
    counterless cl{l};
    calls.push_back({"the same, a launch per pass: device time",
                     1e3 * time_ms(l, reps, [&] { gx::grid::sum_to(cl, s.data(), term); })});
  }
  calls.push_back({"the same, 1024 threads per block: device time",
                   1e3 * time_ms(l, reps, [&] { gx::grid::sum_to(l, s.data(), term, {1024, 0}); })});
  calls.push_back({"an empty kernel: device time (events)",
                   1e3 * time_ms(l, reps, [&] { l.launch(gx::grid::launch_shape{1, 32, 0}, empty_kernel{}); })});
  calls.push_back({"a plain sum of 320000 floats (256-thread blocks, one atomic add each): device time",
                   1e3 * time_ms(l, reps, [&] {
                     l.fill_zero(s.data(), sizeof(float));
                     l.launch(gx::grid::launch_shape{157, 256, 256 * sizeof(float)}, plain_sum_kernel{x.cview().data(), 320000, s.data()});
                   })});
  {
    // one term of the founding benchmark (Eb 64 x 65,535 gathered at 5000 columns, plus one
    // column of a 64 x 100,000 table, sparse gradients): its backward_only, host time per
    // call when queued, and device time of one call; the sum and the squared loss
    namespace grid = gx::grid;
    using S2 = gx::shape<gx::dyn, gx::dyn>;
    using DT = grid::device_tensor<float, S2, L, gx::col_major>;
    auto const ha = gx::randn<float, gx::col_major>(gx::dims(64, 100000), 7);
    auto const hb = gx::randn<float, gx::col_major>(gx::dims(64, 65535), 8);
    auto Ea = grid::param(DT::from_host(l, ha), gx::sparse_grad<1>);
    auto Eb = grid::param(DT::from_host(l, hb), gx::sparse_grad<1>);
    std::vector<std::uint16_t> hi(5000);
    for (std::size_t r = 0; r < hi.size(); ++r) hi[r] = std::uint16_t(r);
    auto const di = grid::device_indices<std::uint16_t, L>::from_host(l, hi);
    index_t const j = 4242;
    auto term = [&] { return Eb(gx::all, grid::indices(di)) + Ea(gx::all, gx::at(j)); };
    grid::backward_options const atomic{grid::scatter_mode::atomic, {}};
    calls.push_back({"backward_only of one founding term, sum (queued, 100 per wait)",
                     host_us(l, reps, 100, [&] { grid::backward_only(l, gx::sum(term()), atomic); })});
    calls.push_back({"the same: device time (events)",
                     1e3 * time_ms(l, reps, [&] { grid::backward_only(l, gx::sum(term()), atomic); })});
    calls.push_back({"backward_only of one founding term, square (queued, 100 per wait)",
                     host_us(l, reps, 100, [&] { grid::backward_only(l, gx::sum(gx::square(term())), atomic); })});
    calls.push_back({"the same: device time (events)",
                     1e3 * time_ms(l, reps, [&] { grid::backward_only(l, gx::sum(gx::square(term())), atomic); })});
    calls.push_back({"grid::value of one founding term, square",
                     host_us(l, reps, 100, [&] { (void)grid::value(l, gx::sum(gx::square(term()))); })});
  }
  std::printf("\n| call | us |\n| --- | ---: |\n");
  for (auto const& c : calls) std::printf("| %s | %.2f |\n", c.name, c.us);

  double const copy_gbs = rows[0].bytes / rows[0].ms / 1e6;
  std::printf("device: %s\n\n| kernel | ms | GB/s | of copy |\n| --- | ---: | ---: | ---: |\n", prop.name);
  std::string json = std::string("{\"bench\":\"cuda_kernels\",\"device\":\"") + prop.name + "\",\"rows\":[";
  for (std::size_t i = 0; i < rows.size(); ++i) {
    double gbs = rows[i].bytes / rows[i].ms / 1e6;
    std::printf("| %s | %.4f | %.0f | %.2f |\n", rows[i].name.c_str(), rows[i].ms, gbs, gbs / copy_gbs);
    char buf[256];
    std::snprintf(buf, sizeof buf, "%s{\"name\":\"%s\",\"ms\":%.5f,\"gbs\":%.1f}", i ? "," : "", rows[i].name.c_str(),
                  rows[i].ms, gbs);
    json += buf;
  }
  json += "],\"calls\":[";
  for (std::size_t i = 0; i < calls.size(); ++i) {
    char buf[256];
    std::snprintf(buf, sizeof buf, "%s{\"name\":\"%s\",\"us\":%.3f}", i ? "," : "", calls[i].name, calls[i].us);
    json += buf;
  }
  json += "],\"failures\":" + std::to_string(failures) + "}";
  std::printf("\n%s\n", json.c_str());
  return failures ? 1 : 0;
}
