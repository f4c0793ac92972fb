// CUDA compile check of the evaluators (suite `cuda`).
//
// Compiling this file is the main check: every representative expression below is built
// over `cuda_space` views on the host, passed by value to a kernel, and there, in
// `__host__ __device__` code, turned into `gradix::ev::evaluator<E>` whose `operator()(c)`,
// `outer<Axis>(c).elem(i)` (for every axis) and `outer<invariant_axis>(c).elem(i)` are called.
// So anything device-hostile in per-element code (exceptions, std::function, Hana algorithm
// objects, host-only calls) fails the build.
//
// Run: without a CUDA device the program exits 77 (meson reports SKIP) after evaluating the
// same expressions on the host; with one it launches the kernels and compares every value
// with the host `gradix::eval` result.
#include <gradix/gradix.hpp>

#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>
#include <cstdio>
#include <type_traits>
#include <utility>

namespace gx = gradix;

namespace {

constexpr gx::index_t rows = 3;  // dynamic extent of the 2-d leaves
constexpr gx::index_t cols = 4;  // static extent

/// The leaves of every expression, in one memory space.
template <class Space>
struct leaves {
  gx::tensor_view<float const, gx::shape<gx::dyn, cols>, gx::row_major, Space> x;   // > 0
  gx::tensor_view<float const, gx::shape<gx::dyn, cols>, gx::col_major, Space> xc;  // > 0
  gx::tensor_view<float const, gx::shape<gx::dyn, cols>, gx::strided, Space> xs;    // > 0
  gx::tensor_view<float const, gx::shape<1, cols>, gx::row_major, Space> w;  // static-1 axis
  gx::tensor_view<float const, gx::shape<cols>, gx::row_major, Space> b;     // rank 1
  gx::tensor_view<double const, gx::shape<gx::dyn, cols>, gx::row_major, Space> d;
  gx::tensor_view<int const, gx::shape<gx::dyn, cols>, gx::row_major, Space> k;
  gx::tensor_view<gx::bfloat16 const, gx::shape<gx::dyn, cols>, gx::row_major, Space> hb;  // read as float
  gx::tensor_view<gx::half const, gx::shape<gx::dyn, cols>, gx::col_major, Space> hh;
};

/// The leaves' data, in one block so that one cudaMemcpy moves it.
struct data {
  float x[rows * cols];
  float xc[rows * cols];
  float xs[rows * cols * 2];  // strided view: every other element
  float w[cols];
  float b[cols];
  double d[rows * cols];
  int k[rows * cols];
  gx::bfloat16 hb[rows * cols];
  gx::half hh[rows * cols];
};

data make_data() {
  data h{};
  for (int i = 0; i < rows * cols; ++i) {
    h.x[i] = 0.25f + 0.3f * float(i);
    h.xc[i] = 2.5f - 0.15f * float(i);
    h.xs[2 * i] = 0.5f + 0.1f * float(i);
    h.xs[2 * i + 1] = -1000.0f;  // never read
    h.d[i] = 0.5 - 0.125 * i;
    h.k[i] = i * 7 % 5 - 2;
    h.hb[i] = gx::bfloat16(0.3f + 0.7f * float(i));
    h.hh[i] = gx::half(1.5f - 0.2f * float(i));
  }
  for (int j = 0; j < cols; ++j) {
    h.w[j] = 0.5f + 0.5f * float(j);
    h.b[j] = 1.0f - 0.75f * float(j);
  }
  return h;
}

template <class Space>
leaves<Space> make_leaves(data const* p) {
  auto s = gx::dims(rows, gx::fix<cols>);
  gx::array<gx::index_t, 2> strides{{2 * cols, 2}};
  return {gx::view<gx::row_major, Space>(&p->x[0], s),
          gx::view<gx::col_major, Space>(&p->xc[0], s),
          gx::strided_view<Space>(&p->xs[0], s, strides),
          gx::view<gx::row_major, Space>(&p->w[0], gx::shape<1, cols>{}),
          gx::view<gx::row_major, Space>(&p->b[0], gx::shape<cols>{}),
          gx::view<gx::row_major, Space>(&p->d[0], s),
          gx::view<gx::row_major, Space>(&p->k[0], s),
          gx::view<gx::row_major, Space>(&p->hb[0], s),
          gx::view<gx::col_major, Space>(&p->hh[0], s)};
}

// ---------------------------------------------------------------------------------------
// The representative expressions (one builder each, used for both memory spaces).

/// Every unary function, scalars on both sides.
struct unary_chain {
  static constexpr char const* name = "unary functions";
  template <class L>
  auto operator()(L const& l) const {
    return gx::exp(l.x * 0.25f) + gx::log(l.x) + gx::tanh(l.xc) + gx::sigmoid(-l.x) +
           gx::relu(l.x - 1.5f) + gx::sqrt(l.xs) + gx::square(l.x) + gx::abs(1.0f - l.xc) +
           gx::expm1(l.x * 0.25f) + gx::log1p(l.xc) + gx::sin(l.x * 3.0f) + gx::cos(l.xs);
  }
};
/// Every binary operation, broadcasting over a static-1 axis and a missing leading axis.
struct binary_chain {
  static constexpr char const* name = "binary operations";
  template <class L>
  auto operator()(L const& l) const {
    return (gx::pow(l.x, l.w) + gx::max(l.xc, l.w) * gx::min(l.xs, 2.0f) - l.x / (l.b + 3.0f)) /
           (2.0f + l.w);
  }
};
/// Mixed element types (int, float, double) and casts.
struct mixed_types {
  static constexpr char const* name = "mixed element types and casts";
  template <class L>
  auto operator()(L const& l) const {
    return gx::cast<float>(l.d * l.x + l.k + gx::sin(l.d) * gx::cos(l.d)) -
           gx::cast<float>(gx::abs(l.k)) * l.b + gx::square(l.k) * 0.5;
  }
};
/// A reduction over the static axis, inside an elementwise expression (rank-1 result).
struct row_sums {
  static constexpr char const* name = "sum<1>";
  template <class L>
  auto operator()(L const& l) const {
    return gx::sum<1>(l.x * l.w) + gx::mean<1>(l.xc);
  }
};
/// max with keep_dims broadcast back (a softmax), and a full reduction broadcast as a scalar.
struct softmax_like {
  static constexpr char const* name = "max<1> with keep_dims, sum<1> with keep_dims";
  template <class L>
  auto operator()(L const& l) const {
    return gx::exp(l.x - gx::max<1>(l.x, gx::keep_dims)) /
               gx::sum<1>(gx::exp(l.x - gx::max<1>(l.x, gx::keep_dims)), gx::keep_dims) +
           l.xc / gx::sum(l.xs);
  }
};
/// Half-width leaves (bfloat16 row-major, half column-major), widened to float on the device.
struct half_width {
  static constexpr char const* name = "bfloat16 and half leaves";
  template <class L>
  auto operator()(L const& l) const {
    return l.hb * l.hh + gx::tanh(l.hb) - gx::sum<1>(l.hh, gx::keep_dims);
  }
};
/// A full reduction (rank 0) and a reduction over the dynamic axis of a column-major leaf.
struct full_sum {
  static constexpr char const* name = "sum (rank 0)";
  template <class L>
  auto operator()(L const& l) const {
    return gx::sum(gx::max<0>(l.xc) * l.b);
  }
};

/// Index operations that read no index data (range, at, select) and views.
struct index_and_views {
  static constexpr char const* name = "range, at, select, permute, transpose, reshape, ...";
  template <class L>
  auto operator()(L const& l) const {
    auto s = gx::dims(rows, gx::fix<cols>);
    return gx::transpose(gx::permute<1, 0>(l.xc)) +
           gx::index(l.x, gx::all, gx::at(2)) * gx::unsqueeze<0>(l.b) +
           gx::broadcast_to(l.w, s) * gx::index(l.xs, 1, gx::all) +
           gx::sum<1>(gx::index(l.x, gx::all, gx::range(0, cols, 2)), gx::keep_dims) -
           gx::transpose(gx::reshape(l.x, gx::dims(gx::fix<cols>, rows)));
  }
};

// ---------------------------------------------------------------------------------------
// Device side: evaluate at a coordinate, and along each axis.

/// The value at c, read through `outer<A>` at coordinate 0 of axis A, then `elem(c[A])`.
template <std::size_t A, class Ev, std::size_t R>
GRADIX_HOST_DEVICE auto along(Ev const& ev, gx::coord<R> c) {
  gx::index_t i = c[A];
  c[A] = 0;
  return ev.template outer<int(A)>(c).elem(i);
}

/// Writes, for flat element t of e (row-major) of n: out[t] = e(c); out[(A + 1) n + t] =
/// the value read along axis A; out[(R + 1) n + t] = the value through outer<invariant_axis>.
template <class E, std::size_t... A>
GRADIX_HOST_DEVICE void probe(E const& e, gx::index_t t, gx::index_t n,
                              gx::value_type_t<E>* out, std::index_sequence<A...>) {
  constexpr std::size_t R = sizeof...(A);
  gx::ev::evaluator<E> ev(e);
  auto ext = e.shape().extents();
  gx::coord<R> c{};
  gx::index_t r = t;
  for (std::size_t j = R; j-- > 0;) {
    c[j] = r % ext[j];
    r /= ext[j];
  }
  out[t] = ev(c);
  ((out[gx::index_t(A + 1) * n + t] = along<A>(ev, c)), ...);
  out[gx::index_t(R + 1) * n + t] = ev.template outer<gx::ev::invariant_axis>(c).elem(5);
}

template <class E>
__global__ void probe_kernel(E e, gx::value_type_t<E>* out, gx::index_t n) {
  gx::index_t t = gx::index_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t < n) probe(e, t, n, out, std::make_index_sequence<gx::shape_of_t<E>::rank>{});
}

// ---------------------------------------------------------------------------------------
// Host side.

int failures = 0;

#define CUDA_CHECK(call)                                                                  \
  do {                                                                                    \
    cudaError_t err_ = (call);                                                            \
    if (err_ != cudaSuccess) {                                                            \
      std::printf("%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(err_)); \
      ++failures;                                                                         \
      return;                                                                             \
    }                                                                                     \
  } while (0)

template <class T>
bool close(T got, T want) {
  if constexpr (std::is_integral_v<T>) {
    return got == want;
  } else {
    // the device's exp/log/tanh/pow may differ from the host's by a few ulp
    T tol = std::is_same_v<T, float> ? T(2e-5) : T(1e-12);
    return std::abs(got - want) <= tol * (T(1) + std::abs(want));
  }
}

/// Compares the probe's slots (see probe) with the host result ref; reports the first
/// difference.
template <class Ref, class T>
bool matches(char const* where, char const* name, Ref const& ref, T const* got, gx::index_t n) {
  constexpr std::size_t R = gx::shape_of_t<decltype(ref.view())>::rank;
  constexpr std::size_t slots = R + 2;
  auto ext = ref.shape().extents();
  for (gx::index_t t = 0; t < n; ++t) {
    gx::coord<R> c{};
    gx::index_t r = t;
    for (std::size_t j = R; j-- > 0;) {
      c[j] = r % ext[j];
      r /= ext[j];
    }
    T want = ref[c];
    if (!std::isfinite(double(want))) {
      std::printf("FAIL %s: host value %td is not finite\n", name, t);
      ++failures;
      return false;
    }
    for (std::size_t s = 0; s < slots; ++s) {
      T g = got[s * std::size_t(n) + std::size_t(t)];
      if (!close(g, want)) {
        char const* how =
            s == 0 ? "e(c)" : (s == slots - 1 ? "outer<invariant_axis>" : "outer<axis>");
        std::printf("FAIL %s (%s): element %td through %s (slot %zu): %.9g, host eval %.9g\n",
                    name, where, t, how, s, double(g), double(want));
        ++failures;
        return false;
      }
    }
  }
  return true;
}

/// Evaluates Make's expression on the host; with a device, also in probe_kernel, and compares.
template <class Make>
void check(Make make, data const* host, data const* dev, bool have_device) {
  auto he = make(make_leaves<gx::host_space>(host));
  auto de = make(make_leaves<gx::cuda_space>(dev));
  using E = decltype(de);
  using T = gx::value_type_t<E>;
  constexpr std::size_t R = gx::shape_of_t<E>::rank;
  static_assert(std::is_same_v<gx::space_of_t<E>, gx::cuda_space>);
  static_assert(std::is_same_v<T, gx::value_type_t<decltype(he)>>);
  static_assert(std::is_trivially_copyable_v<E>, "kernel arguments must be trivially copyable");

  auto ref = gx::eval(he);
  gx::index_t n = ref.size();
  constexpr std::size_t slots = R + 2;
  T got[slots * rows * cols];
  if (std::size_t(n) * slots > sizeof(got) / sizeof(T)) {
    std::printf("FAIL %s: result too large for the test buffer\n", Make::name);
    ++failures;
    return;
  }
  // The same probe on the host, over host views: checks the probe and the comparison too.
  for (gx::index_t t = 0; t < n; ++t)
    probe(he, t, n, got, std::make_index_sequence<R>{});
  if (!matches("host", Make::name, ref, got, n)) return;
  if (!have_device) {  // probe_kernel<E> is compiled all the same
    std::printf("ok   %s (host probe)\n", Make::name);
    return;
  }

  T* out = nullptr;
  CUDA_CHECK(cudaMalloc(&out, sizeof(T) * slots * std::size_t(n)));
  probe_kernel<<<unsigned((n + 127) / 128), 128>>>(de, out, n);
  CUDA_CHECK(cudaGetLastError());
  CUDA_CHECK(cudaMemcpy(got, out, sizeof(T) * slots * std::size_t(n), cudaMemcpyDeviceToHost));
  CUDA_CHECK(cudaFree(out));
  if (matches("device", Make::name, ref, got, n)) std::printf("ok   %s\n", Make::name);
}

}  // namespace

int main() {
  data h = make_data();
  int count = 0;
  bool have_device = cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
  data* dev = nullptr;
  if (have_device && (cudaMalloc(&dev, sizeof(data)) != cudaSuccess ||
                      cudaMemcpy(dev, &h, sizeof(data), cudaMemcpyHostToDevice) != cudaSuccess)) {
    std::printf("FAIL: cannot copy the leaves to the device\n");
    return 1;
  }
  // Without a device the views get a host address they never read through.
  data const* d = have_device ? dev : &h;

  check(unary_chain{}, &h, d, have_device);
  check(binary_chain{}, &h, d, have_device);
  check(mixed_types{}, &h, d, have_device);
  check(row_sums{}, &h, d, have_device);
  check(softmax_like{}, &h, d, have_device);
  check(full_sum{}, &h, d, have_device);
  check(half_width{}, &h, d, have_device);
  check(index_and_views{}, &h, d, have_device);

  if (dev) cudaFree(dev);
  if (failures) return 1;
  if (!have_device) {
    std::printf("no CUDA device: kernels compiled, probes checked on the host; skipping\n");
    return 77;
  }
  return 0;
}
