// Allocation counting: evaluating an expression allocates nothing but the result's buffer.
//
// This executable interposes every C allocation function (malloc, calloc, realloc,
// reallocarray, aligned_alloc, posix_memalign, memalign, valloc, pvalloc, free) and every
// replaceable global operator new/delete, forwarding to glibc's __libc_* entry points. While
// a *window* is open, every allocation (on any thread) is counted. Inside a window the code
// runs only the gradix call under test: no test macro, no printing, no std::string; the
// counts are checked after the window closes.
//
// Checked, on the serial path (1 thread, small) and on the parallel path (4 threads, more
// than 2 * 32768 elements, so parallel_ranges and the reduction blocks really go through the
// pool), for a 10-node expression (4 leaves, 1 scalar, 5 operations):
//   eval, dynamic shape                 exactly 1 allocation (the result's buffer)
//   eval, small static shape            0 (stored inline)
//   eval, large static shape            exactly 1 (static extents, heap buffer; parallel)
//   assign / operator= into a tensor    0
//   value(sum / mean / max of it)       0
//   assign of a partial reduction       0
// A positive control checks that the interposition catches allocations (std::vector,
// malloc, aligned operator new, ...). Frees are counted too; no case frees anything inside
// its window (no temporary is allocated and released).
#include <gradix/gradix.hpp>
#include <gradix/optim.hpp>

#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <optional>
#include <vector>

#include <malloc.h>

// ---------------------------------------------------------------------------------------
// Interposition

extern "C" {
void* __libc_malloc(std::size_t);
void* __libc_calloc(std::size_t, std::size_t);
void* __libc_realloc(void*, std::size_t);
void* __libc_memalign(std::size_t, std::size_t);
void* __libc_valloc(std::size_t);
void* __libc_pvalloc(std::size_t);
void __libc_free(void*);
}

namespace {
// Constant-initialized: usable before any constructor runs.
std::atomic<bool> g_counting{false};
std::atomic<long> g_allocs{0};
std::atomic<long> g_frees{0};

inline void note_alloc() {
  if (g_counting.load(std::memory_order_relaxed)) g_allocs.fetch_add(1, std::memory_order_relaxed);
}
inline void note_free(void* p) {
  if (p && g_counting.load(std::memory_order_relaxed)) g_frees.fetch_add(1, std::memory_order_relaxed);
}
inline bool valid_alignment(std::size_t a) { return a != 0 && (a & (a - 1)) == 0; }
}  // namespace

extern "C" {
void* malloc(std::size_t n) noexcept {
  note_alloc();
  return __libc_malloc(n);
}
void* calloc(std::size_t k, std::size_t n) noexcept {
  note_alloc();
  return __libc_calloc(k, n);
}
void* realloc(void* p, std::size_t n) noexcept {
  note_alloc();
  return __libc_realloc(p, n);
}
void* reallocarray(void* p, std::size_t k, std::size_t n) noexcept {
  note_alloc();
  std::size_t bytes;
  if (__builtin_mul_overflow(k, n, &bytes)) {
    errno = ENOMEM;
    return nullptr;
  }
  return __libc_realloc(p, bytes);
}
void* aligned_alloc(std::size_t a, std::size_t n) noexcept {
  note_alloc();
  if (!valid_alignment(a)) {
    errno = EINVAL;
    return nullptr;
  }
  return __libc_memalign(a, n);
}
int posix_memalign(void** out, std::size_t a, std::size_t n) noexcept {
  note_alloc();
  if (!valid_alignment(a) || a % sizeof(void*) != 0) return EINVAL;
  void* p = __libc_memalign(a, n);
  if (!p) return ENOMEM;
  *out = p;
  return 0;
}
void* memalign(std::size_t a, std::size_t n) noexcept {
  note_alloc();
  return __libc_memalign(a, n);
}
void* valloc(std::size_t n) noexcept {
  note_alloc();
  return __libc_valloc(n);
}
void* pvalloc(std::size_t n) noexcept {
  note_alloc();
  return __libc_pvalloc(n);
}
void free(void* p) noexcept {
  note_free(p);
  __libc_free(p);
}
}  // extern "C"

namespace {
void* new_impl(std::size_t n) {
  note_alloc();
  for (;;) {
    if (void* p = __libc_malloc(n ? n : 1)) return p;
    std::new_handler h = std::get_new_handler();
    if (!h) throw std::bad_alloc();
    h();
  }
}
void* new_aligned_impl(std::size_t n, std::align_val_t al) {
  note_alloc();
  std::size_t a = static_cast<std::size_t>(al);
  if (a < sizeof(void*)) a = sizeof(void*);
  for (;;) {
    if (void* p = __libc_memalign(a, n ? n : 1)) return p;
    std::new_handler h = std::get_new_handler();
    if (!h) throw std::bad_alloc();
    h();
  }
}
template <class F>
void* nothrow_impl(F f) noexcept {
  try {
    return f();
  } catch (...) {
    return nullptr;
  }
}
}  // namespace

void* operator new(std::size_t n) { return new_impl(n); }
void* operator new[](std::size_t n) { return new_impl(n); }
void* operator new(std::size_t n, std::nothrow_t const&) noexcept {
  return nothrow_impl([&] { return new_impl(n); });
}
void* operator new[](std::size_t n, std::nothrow_t const&) noexcept {
  return nothrow_impl([&] { return new_impl(n); });
}
void* operator new(std::size_t n, std::align_val_t a) { return new_aligned_impl(n, a); }
void* operator new[](std::size_t n, std::align_val_t a) { return new_aligned_impl(n, a); }
void* operator new(std::size_t n, std::align_val_t a, std::nothrow_t const&) noexcept {
  return nothrow_impl([&] { return new_aligned_impl(n, a); });
}
void* operator new[](std::size_t n, std::align_val_t a, std::nothrow_t const&) noexcept {
  return nothrow_impl([&] { return new_aligned_impl(n, a); });
}

void operator delete(void* p) noexcept { free(p); }
void operator delete[](void* p) noexcept { free(p); }
void operator delete(void* p, std::size_t) noexcept { free(p); }
void operator delete[](void* p, std::size_t) noexcept { free(p); }
void operator delete(void* p, std::nothrow_t const&) noexcept { free(p); }
void operator delete[](void* p, std::nothrow_t const&) noexcept { free(p); }
void operator delete(void* p, std::align_val_t) noexcept { free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { free(p); }
void operator delete(void* p, std::align_val_t, std::nothrow_t const&) noexcept { free(p); }
void operator delete[](void* p, std::align_val_t, std::nothrow_t const&) noexcept { free(p); }

// ---------------------------------------------------------------------------------------
// Windows and results

namespace {

struct counts {
  long allocs, frees;
};

/// Runs f with counting on; returns what it counted. Nothing else runs inside.
template <class F>
counts window(F&& f) {
  g_allocs.store(0);
  g_frees.store(0);
  g_counting.store(true);
  f();
  g_counting.store(false);
  return {g_allocs.load(), g_frees.load()};
}

/// Keeps a pointer alive for the optimizer (no new/delete elision).
inline void escape(void const* p) { asm volatile("" : : "r"(p) : "memory"); }

int g_failures = 0;

void expect(char const* what, counts c, long allocs, long frees = 0) {
  bool ok = c.allocs == allocs && c.frees == frees;
  std::printf("%s %-62s allocs %ld (expected %ld), frees %ld (expected %ld)\n", ok ? "ok  " : "FAIL",
              what, c.allocs, allocs, c.frees, frees);
  if (!ok) ++g_failures;
}
void expect_true(char const* what, bool ok) {
  std::printf("%s %s\n", ok ? "ok  " : "FAIL", what);
  if (!ok) ++g_failures;
}

namespace gx = gradix;
using gx::dyn;
using gx::shape;

// Records which threads evaluate elements: tracked_exp(x) = exp(x), and the first call on a
// thread in each epoch bumps g_threads_seen. No allocation (static TLS, atomics).
std::atomic<int> g_epoch{0};
std::atomic<int> g_threads_seen{0};
thread_local int t_epoch = -1;
struct tracked_exp {
  [[maybe_unused]] static constexpr char const* name = "tracked_exp";
  static constexpr bool needs_floating = true;
  template <class T>
  static T value(T x) {
    int e = g_epoch.load(std::memory_order_relaxed);
    if (t_epoch != e) {
      t_epoch = e;
      g_threads_seen.fetch_add(1, std::memory_order_relaxed);
    }
    return gx::op::exp::value(x);
  }
};
void new_epoch() {
  g_epoch.fetch_add(1);
  g_threads_seen.store(0);
}

/// The 10-node expression: leaves a, b, c, d; the scalar 2; *, +, tracked_exp, *, -.
template <class A, class B, class C, class D>
auto expr10(A const& a, B const& b, C const& c, D const& d) {
  return (a * 2.0f + b) * gx::unary<tracked_exp>(c) - d;
}
template <class A, class B, class C, class D>
float expected_at(A const& a, B const& b, C const& c, D const& d, gx::index_t i, gx::index_t j) {
  return (a(i, j) * 2.0f + b(i, j)) * std::exp(c(i, j)) - d(i, j);
}
template <class R, class A, class B, class C, class D>
bool result_ok(R const& r, A const& a, B const& b, C const& c, D const& d) {
  gx::index_t m = r.extent(0), n = r.extent(1);
  gx::index_t pts[][2] = {{0, 0}, {m - 1, n - 1}, {m / 2, n / 3}, {m - 1, 0}, {0, n - 1}};
  for (auto& p : pts) {
    float want = expected_at(a, b, c, d, p[0], p[1]);
    if (!(std::abs(r(p[0], p[1]) - want) <= 1e-5f * (1 + std::abs(want)))) return false;
  }
  return true;
}

/// All cases on tensors of shape m x n (layout L), with `threads` threads.
template <class L>
void run_cases(char const* label, int threads, gx::index_t m, gx::index_t n) {
  std::printf("-- %s: %d thread(s), %td x %td\n", label, threads, m, n);
  gx::set_num_threads(threads);
  auto a = gx::uniform<float, L>(gx::dims(m, n), 1, -1.0f, 1.0f);
  auto b = gx::uniform<float, L>(gx::dims(m, n), 2, -1.0f, 1.0f);
  auto c = gx::uniform<float, L>(gx::dims(m, n), 3, -1.0f, 1.0f);
  auto d = gx::uniform<float, L>(gx::dims(m, n), 4, -1.0f, 1.0f);
  gx::tensor<float, shape<dyn, dyn>, L> dst(gx::dims(m, n));
  gx::tensor<float, shape<dyn>> rows(gx::dims(m));
  bool parallel = threads > 1 && m * n >= 2 * gx::host::parallel_min_elements;
  // several evaluations per window on the parallel path, so that the workers surely take part
  int reps = parallel ? 4 : 1;
  int seen_max = 0;
  auto note_threads = [&] { seen_max = std::max(seen_max, g_threads_seen.load()); };

  {
    new_epoch();
    std::vector<gx::tensor<float, shape<dyn, dyn>, L>> out;
    out.reserve(std::size_t(reps));  // outside the window
    auto k = window([&] {
      for (int r = 0; r < reps; ++r) out.push_back(gx::eval(expr10(a, b, c, d)));
    });
    note_threads();
    expect("eval, dynamic shape: one allocation per eval", k, reps);
    expect_true("  ... and the result is right", result_ok(out.back(), a, b, c, d));
  }
  {
    new_epoch();
    auto k = window([&] {
      for (int r = 0; r < reps; ++r) gx::assign(dst, expr10(a, b, c, d));
    });
    note_threads();
    expect("assign into an existing tensor: none", k, 0);
    expect_true("  ... and the result is right", result_ok(dst, a, b, c, d));
    k = window([&] {
      for (int r = 0; r < reps; ++r) dst = expr10(a, b, c, d);
    });
    expect("tensor = expression: none", k, 0);
    auto v = dst.view();
    k = window([&] {
      for (int r = 0; r < reps; ++r) gx::assign(v, expr10(a, b, c, d));
    });
    expect("assign into a view: none", k, 0);
  }
  {
    new_epoch();
    float s = 0, mu = 0, mx = 0;
    auto k = window([&] {
      for (int r = 0; r < reps; ++r) {
        s = gx::value(gx::sum(expr10(a, b, c, d)));
        mu = gx::value(gx::mean(expr10(a, b, c, d)));
        mx = gx::value(gx::max(expr10(a, b, c, d)));
      }
    });
    note_threads();
    expect("value(sum), value(mean), value(max): none", k, 0);
    double ref = 0, mag = 0;
    for (gx::index_t i = 0; i < m; ++i)
      for (gx::index_t j = 0; j < n; ++j) {
        double t = expected_at(a, b, c, d, i, j);
        ref += t;
        mag += std::abs(t);
      }
    double nn = double(m * n);
    expect_true("  ... and sum, mean, max are right",
                std::abs(double(s) - ref) <= 1e-5 * mag &&
                    std::abs(double(mu) - ref / nn) <= 1e-5 * mag / nn && mx > 0);
  }
  {
    new_epoch();
    auto k = window([&] {
      for (int r = 0; r < reps; ++r) gx::assign(rows, gx::sum<1>(expr10(a, b, c, d)));
    });
    note_threads();
    expect("assign of sum<1>(...) into an existing tensor: none", k, 0);
  }
  if (parallel) {
    std::printf("     threads that evaluated elements in one window: up to %d\n", seen_max);
    expect_true("the parallel path really ran on several threads", seen_max >= 2);
  }
}

/// Static shapes: small (inline storage) and large (static extents, heap buffer).
template <int M, int N>
void run_static(char const* label, int threads) {
  // small static shapes store their elements inline, larger ones on the heap (core/tensor.hpp)
  constexpr long expected_allocs = gx::tensor<float, shape<M, N>>::stores_inline ? 0 : 1;
  std::printf("-- %s: %d thread(s), static %d x %d\n", label, threads, M, N);
  gx::set_num_threads(threads);
  using S = shape<M, N>;
  auto a = gx::uniform<float>(S{}, 1, -1.0f, 1.0f);
  auto b = gx::uniform<float>(S{}, 2, -1.0f, 1.0f);
  auto c = gx::uniform<float>(S{}, 3, -1.0f, 1.0f);
  auto d = gx::uniform<float>(S{}, 4, -1.0f, 1.0f);
  gx::tensor<float, S> dst;
  std::optional<gx::tensor<float, S>> out;  // the result outlives the window, unmoved
  new_epoch();
  auto k = window([&] { out.emplace(gx::eval(expr10(a, b, c, d))); });
  expect(expected_allocs ? "eval, large static shape: one allocation (heap buffer)"
                         : "eval, small static shape: none (stored inline)",
         k, expected_allocs);
  expect_true("  ... and the result is right", result_ok(*out, a, b, c, d));
  k = window([&] { gx::assign(dst, expr10(a, b, c, d)); });
  expect("assign into an existing static tensor: none", k, 0);
  expect_true("  ... and the result is right", result_ok(dst, a, b, c, d));
  float s = 0;
  k = window([&] { s = gx::value(gx::sum(expr10(a, b, c, d))); });
  escape(&s);
  expect("value(sum(...)) of a static expression: none", k, 0);
}

/// Saved values (api/saved.hpp): the first call that keeps values grows the calling thread's
/// workspace; a warm call allocates nothing (backward with its kept max, arg-max and sum;
/// value; eval: only its result).
void run_saved(char const* label, int threads, gx::index_t m, gx::index_t n) {
  std::printf("-- saved values, %s: %d thread(s), %ld x %ld\n", label, threads, long(m), long(n));
  gx::set_num_threads(threads);
  auto x = gx::param(gx::uniform<float>(gx::dims(m, n), 9, -2.0f, 2.0f));
  auto lse = [&] {
    return gx::sum(gx::log(gx::sum<1>(gx::exp(x - gx::max<1>(x, gx::keep_dims)))) + gx::max<1>(x));
  };
  new_epoch();
  float v = 0;
  auto k = window([&] { v = gx::backward(lse()); });
  escape(&v);
  expect_true("  cold backward: the workspace grows (at least one allocation)", k.allocs >= 1);
  k = window([&] { v = gx::backward(lse()); });
  escape(&v);
  expect("warm backward with kept max, arg-max and sum: none", k, 0);
  k = window([&] { v = gx::value(lse()); });
  escape(&v);
  expect("warm value with kept values: none", k, 0);
  std::optional<gx::tensor<float, shape<dyn, dyn>>> out;
  k = window([&] { out.emplace(gx::eval(x - gx::max<1>(x, gx::keep_dims))); });
  expect("warm eval of x - max<1>(x): one allocation (the result)", k, 1);
  expect_true("  workspace_bytes <= the thread's workspace",
              gx::workspace_bytes(lse()) <= gx::workspace_capacity());
}

/// Optimizers (gradix/optim.hpp): their state is allocated when they are made; a step and a
/// zero_grad allocate nothing (dense and sparse gradients; lazy Adam's per-slice steps), nor
/// does a warm backward with a fused step.
/// The cross-entropy backward that produced the gradient is warm too.
void run_optim(int threads) {
  std::printf("-- optimizers: %d thread(s)\n", threads);
  gx::set_num_threads(threads);
  auto W = gx::param(gx::uniform<float>(gx::dims(300, 10), 11, -1.0f, 1.0f));
  auto E = gx::param(gx::uniform<float>(gx::dims(1000, 10), 12, -1.0f, 1.0f), gx::sparse_grad<0>);
  gx::tensor<std::int64_t, shape<dyn>> y(gx::dims(300));
  std::vector<std::int64_t> rows(300);
  for (gx::index_t i = 0; i < 300; ++i) {
    y(i) = i % 10;
    rows[std::size_t(i)] = (i * 37) % 1000;
  }
  auto loss = [&] { return gx::cross_entropy(W + gx::gather<0>(E, rows), y); };
  gx::optim::sgd sgd({.lr = 0.1, .momentum = 0.9}, W, E);
  gx::optim::adagrad ada({}, W, E);
  gx::optim::adam adam({}, W, E);
  gx::optim::lazy_adam lazy({}, W, E);
  gx::optim::rowwise_adagrad rowwise({}, W, E);
  new_epoch();
  float v = 0;
  auto round = [&] {
    v = gx::backward(loss());
    sgd.step();
    ada.step();
    adam.step();
    lazy.step();
    rowwise.step();
    sgd.zero_grad();
  };
  round();  // cold: the workspaces and slots grow
  auto k = window([&] { v = gx::backward(loss()); });
  escape(&v);
  expect("warm cross_entropy backward: none", k, 0);
  {  // logits that hold a product: the let's buffers come from the workspace too
    auto X = gx::uniform<float>(gx::dims(300, 16), 13, -1.0f, 1.0f);
    auto W2 = gx::param(gx::uniform<float>(gx::dims(16, 10), 14, -1.0f, 1.0f));
    auto shared = [&] { return gx::cross_entropy(gx::matmul(X, W2) + W, y); };
    v = gx::backward(shared());  // cold
    k = window([&] { v = gx::backward(shared()); });
    escape(&v);
    expect("warm cross_entropy backward of a product (a let): none", k, 0);
  }
  k = window([&] { sgd.step(); });
  expect("sgd (momentum) step: none", k, 0);
  k = window([&] { ada.step(); });
  expect("adagrad step: none", k, 0);
  k = window([&] { adam.step(); });
  expect("adam step: none", k, 0);
  k = window([&] { lazy.step(); });
  expect("lazy_adam step: none", k, 0);
  k = window([&] { rowwise.step(); });
  expect("rowwise_adagrad step: none", k, 0);
  // a backward with the step fused: the optimizer's call buffers are made by the first call
  // and kept (training/fused.hpp)
  v = gx::backward(loss(), gx::optim::fused(ada));  // cold
  k = window([&] { v = gx::backward(loss(), gx::optim::fused(ada)); });
  escape(&v);
  expect("warm backward with a fused adagrad step: none", k, 0);
  k = window([&] { sgd.zero_grad(); });
  expect("zero_grad: none", k, 0);
}

void positive_control() {
  std::printf("-- positive control: the interposition sees allocations\n");
  auto k = window([] {
    std::vector<float> v(1000);
    escape(v.data());
  });
  expect("std::vector<float>(1000) in the window", k, 1, 1);
  k = window([] {
    void* p = std::malloc(100);
    escape(p);
    std::free(p);
  });
  expect("malloc + free", k, 1, 1);
  k = window([] {
    void* p = std::calloc(10, 10);
    escape(p);
    p = std::realloc(p, 1000);
    escape(p);
    std::free(p);
  });
  expect("calloc + realloc + free", k, 2, 1);
  k = window([] {
    void* p = std::aligned_alloc(64, 128);
    escape(p);
    std::free(p);
    void* q = nullptr;
    int rc = posix_memalign(&q, 64, 128);
    escape(&rc);
    escape(q);
    std::free(q);
    void* r = memalign(64, 128);
    escape(r);
    std::free(r);
    void* s = valloc(128);
    escape(s);
    std::free(s);
  });
  expect("aligned_alloc, posix_memalign, memalign, valloc", k, 4, 4);
  k = window([] {
    auto* p = new int(1);
    escape(p);
    delete p;
    auto* q = new int[10];
    escape(q);
    delete[] q;
    auto* r = new (std::nothrow) int(2);
    escape(r);
    delete r;
    void* s = ::operator new(256, std::align_val_t{64});
    escape(s);
    ::operator delete(s, std::align_val_t{64});
    void* t = ::operator new[](256, std::align_val_t{128}, std::nothrow);
    escape(t);
    ::operator delete[](t, std::align_val_t{128});
  });
  expect("operator new: plain, array, nothrow, aligned, aligned nothrow", k, 5, 5);
  // a gradix buffer: one aligned operator new, seen by the interposer
  k = window([] {
    gx::tensor<float, shape<dyn>> t(gx::dims(1000));
    escape(t.data());
  });
  expect("gx::tensor of 1000 floats (created and destroyed)", k, 1, 1);
}

}  // namespace

// A recurrence (gx::scan) of 64 steps: a warm backward allocates nothing (the carries, the
// inputs, the adjoints and one step's own kept values come from the call's workspace; the
// steps' nodes from the thread's node arena, rewound after each step).
void run_scan(int threads) {
  gx::set_num_threads(threads);
  gx::index_t const T = 64, B = 8, D = 12, H = 16;
  auto xs = gx::uniform<float>(gx::dims(T, B, D), 21, -1.0f, 1.0f);
  auto wx = gx::param(gx::uniform<float>(gx::dims(D, H), 22, -0.3f, 0.3f));
  auto wh = gx::param(gx::uniform<float>(gx::dims(H, H), 23, -0.3f, 0.3f));
  auto b = gx::param(gx::uniform<float>(gx::dims(H), 24, -0.1f, 0.1f));
  auto h0 = gx::zeros<float>(gx::dims(B, H));
  auto loss = [&] {
    return gx::mean(gx::square(gx::scan(h0, xs, [&](auto h, auto x) {
      return gx::tanh(gx::matmul(x, wx) + gx::matmul(h, wh) + b);
    })));
  };
  new_epoch();
  float v = gx::backward(loss());  // cold
  auto k = window([&] { v = gx::backward(loss()); });
  escape(&v);
  expect("warm backward through a 64-step scan: none", k, 0);
  k = window([&] { v = gx::value(loss()); });
  escape(&v);
  expect("warm value of a 64-step scan: none", k, 0);
}

// The same with a 256 x 256 carry weight over 16 steps of 8 rows: the host's sweep reads it
// through a transposed copy made once per sweep (exec/sweep.hpp, step_transposed), whose
// memory is the thread's, taken by the cold call and kept: a warm backward allocates nothing.
void run_scan_transposed(int threads) {
  gx::set_num_threads(threads);
  gx::index_t const T = 16, B = 8, H = 256;
  auto xs = gx::uniform<float>(gx::dims(T, B, H), 25, -1.0f, 1.0f);
  auto wh = gx::param(gx::uniform<float>(gx::dims(H, H), 26, -0.06f, 0.06f));
  auto h0 = gx::zeros<float>(gx::dims(B, H));
  auto loss = [&] {
    return gx::mean(gx::square(gx::scan(h0, xs, [&](auto h, auto x) { return gx::tanh(x + gx::matmul(h, wh)); })));
  };
  new_epoch();
  float v = gx::backward(loss());  // cold
  auto k = window([&] { v = gx::backward(loss()); });
  escape(&v);
  expect("warm backward through a 16-step scan reading a 256 x 256 weight transposed: none", k, 0);
}

int main() {
  positive_control();

  // Start the pool (threads allocate their stacks and state) before any window.
  gx::set_num_threads(4);
  {
    auto x = gx::ones<float>(gx::dims(1024, 1024));
    auto y = gx::eval(x * 2.0f + 1.0f);
    std::printf("-- pool started: %d threads (warm-up eval gave %g)\n", gx::num_threads(),
                double(y(3, 5)));
  }

  {
    // the positive control on the pool's threads: allocations there are counted too
    new_epoch();
    auto task = [&](gx::index_t) {
      int* p = new int(7);
      escape(p);
      delete p;
      float acc = 0;  // some work, so that the workers take tasks too
      for (int i = 0; i < 20000; ++i) acc += tracked_exp::value(float(i) * 1e-4f);
      escape(&acc);
    };
    auto k = window([&] {
      for (int r = 0; r < 5; ++r) gx::host::pool().run(64, task);
    });
    expect("operator new in 5 x 64 pool tasks", k, 320, 320);
    std::printf("     threads that ran tasks: %d\n", g_threads_seen.load());
    expect_true("  ... on several threads", g_threads_seen.load() >= 2);
  }

  run_cases<gx::row_major>("serial, row-major", 1, 37, 53);
  run_cases<gx::col_major>("serial, column-major", 1, 37, 53);
  run_cases<gx::row_major>("small work with 4 threads (runs serially)", 4, 37, 53);
  static_assert(gx::tensor<float, shape<8, 16>>::stores_inline);
  run_static<8, 16>("serial", 1);
  run_static<8, 16>("small static work with 4 threads", 4);
  // parallel path: 4 threads, 1031 x 1021 = 1,052,651 elements > 2 * 32768; with 100,003
  // rows, the partial reduction sum<1> has enough output elements to run on the pool too
  run_cases<gx::row_major>("parallel, row-major", 4, 1031, 1021);
  run_cases<gx::col_major>("parallel, column-major", 4, 1031, 1021);
  run_cases<gx::row_major>("parallel, row-major, many rows", 4, 100003, 11);
  run_cases<gx::col_major>("parallel, column-major, many rows", 4, 100003, 11);
  static_assert(!gx::tensor<float, shape<256, 512>>::stores_inline);
  run_static<256, 512>("parallel, large static shape", 4);
  run_saved("serial", 1, 37, 53);
  run_saved("parallel", 4, 1031, 1021);
  run_optim(1);
  run_optim(4);
  run_scan(1);
  run_scan(4);
  run_scan_transposed(1);
  run_scan_transposed(4);

  std::printf("%s: %d failure(s)\n", g_failures ? "FAILED" : "PASSED", g_failures);
  return g_failures ? 1 : 0;
}
