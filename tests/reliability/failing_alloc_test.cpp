// Strong guarantee under allocation failure: this executable replaces the global operator
// new so that the n-th allocation after arming fails (std::bad_alloc). For every n until
// the call succeeds, the call under test must throw gradix::error (never std::bad_alloc,
// never a crash) and leave every value and gradient bit-identical to before.
#include "testing.hpp"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <vector>

namespace {
std::atomic<long> g_countdown{0};  // 0: disarmed; k > 0: the k-th allocation from now fails

void* checked_alloc(std::size_t n, std::size_t align) {
  long c = g_countdown.load(std::memory_order_relaxed);
  if (c > 0 && g_countdown.fetch_sub(1, std::memory_order_relaxed) == 1) throw std::bad_alloc();
  if (n == 0) n = 1;
  void* p = align <= alignof(std::max_align_t) ? std::malloc(n) : std::aligned_alloc(align, (n + align - 1) / align * align);
  if (!p) throw std::bad_alloc();
  return p;
}
}  // namespace

// (the replacements pair malloc with free on purpose)
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif
void* operator new(std::size_t n) { return checked_alloc(n, 0); }
void* operator new[](std::size_t n) { return checked_alloc(n, 0); }
void* operator new(std::size_t n, std::align_val_t a) { return checked_alloc(n, std::size_t(a)); }
void* operator new[](std::size_t n, std::align_val_t a) { return checked_alloc(n, std::size_t(a)); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }

namespace gx = gradix;
using gx::dyn;
using gx::shape;

namespace {

template <class T>
std::vector<unsigned char> bytes_of(T const& t) {
  std::vector<unsigned char> b(std::size_t(t.size()) * sizeof(*t.data()));
  if (!b.empty()) std::memcpy(b.data(), t.data(), b.size());
  return b;
}

/// Runs call() with the n-th allocation failing, n = 1, 2, ... until it succeeds. snapshot()
/// returns the observable state; after each failure it must equal the state before.
/// Returns the number of runs that threw.
template <class Call, class Snap>
int fail_each_allocation(Call&& call, Snap&& snapshot) {
  int failures = 0;
  for (long n = 1; n < 10000; ++n) {
    auto before = snapshot();
    std::string err;
    bool other = false;
    g_countdown.store(n);
    try {
      call();
    } catch (gx::error const& e) {
      err = e.what();
    } catch (...) {
      other = true;
    }
    long left = g_countdown.exchange(0);
    INFO("allocation ", n);
    REQUIRE_FALSE(other);  // every failure is a gradix::error
    if (err.empty()) {
      // done when the call no longer reaches the failing allocation; a failure that was
      // absorbed (GRADIX_CHECK_LIFETIMES stops tracking a buffer it has no memory to
      // register) is a success too
      if (left > 0) return failures;
      continue;
    }
    ++failures;
    CHECK(snapshot() == before);  // nothing changed
  }
  FAIL("the call never succeeded");
  return -1;
}

}  // namespace

TEST_CASE("strong guarantee: backward into sparse and dense storage, every allocation failing") {
  gx::set_num_threads(2);
  auto E = gx::param(gx::randn<float>(gx::dims(6, 5000), 1), gx::sparse_grad<1>);
  auto D = gx::param(gx::randn<float>(gx::dims(6, 5000), 2), gx::dense_grad<1>);
  auto w = gx::param(gx::tensor<float, shape<>>{0.5f});
  std::vector<int> idx(40000);
  for (std::size_t k = 0; k < idx.size(); ++k) idx[k] = int((k * 7919) % 4999);
  auto snapshot = [&] {
    std::vector<std::vector<unsigned char>> s;
    s.push_back(bytes_of(E.value()));
    s.push_back(bytes_of(D.value()));
    s.push_back(bytes_of(E.grad().to_dense()));
    s.push_back(bytes_of(D.grad().dense()));
    s.push_back(bytes_of(w.grad().dense()));
    s.push_back({static_cast<unsigned char>(E.grad().size() & 0xff)});
    return s;
  };
  auto step = [&] {
    gx::backward(gx::sum(gx::tanh(E(gx::all, gx::indices(idx)) * w + D(gx::all, gx::indices(idx)))));
  };
  int failures = fail_each_allocation(step, snapshot);
  MESSAGE("backward failed cleanly at ", failures, " allocation points");
  CHECK(failures >= 1);
  // and the successful run is right: the same as a run without any failure
  auto g1 = E.grad().to_dense();
  gx::zero_grad(E, D, w);
  step();
  CHECK(bytes_of(E.grad().to_dense()) == bytes_of(g1));
  // a second, warm backward allocates nothing, so it cannot fail
  CHECK(fail_each_allocation(step, snapshot) == 0);
}

TEST_CASE("strong guarantee: grad, zero_grad, assignment and eval, every allocation failing") {
  auto E = gx::param(gx::randn<double>(gx::dims(8, 300), 3), gx::sparse_grad<1>);
  std::vector<int> idx{5, 5, 299, 0, 17};
  auto snapshot = [&] {
    std::vector<std::vector<unsigned char>> s;
    s.push_back(bytes_of(E.value()));
    s.push_back(bytes_of(E.grad().to_dense()));
    return s;
  };
  gx::backward(gx::sum(E(gx::all, gx::indices(idx))));
  fail_each_allocation([&] { (void)gx::grad(gx::sum(gx::exp(E(gx::all, gx::indices(idx)))), E); }, snapshot);
  fail_each_allocation([&] { gx::zero_grad(E); }, snapshot);
  auto t = gx::iota<double>(gx::dims(40, 40));
  auto tsnap = [&] { return bytes_of(t); };
  CHECK(fail_each_allocation([&] { t = gx::transpose(t) + 1.0; }, tsnap) >= 1);  // a temporary
  fail_each_allocation([&] { auto u = gx::eval(gx::exp(t)); (void)u; }, tsnap);
  fail_each_allocation([&] { t = gx::iota<double>(gx::dims(41, 40)); }, tsnap);  // new size
  // making parameters: dense and sparse storage
  CHECK(fail_each_allocation([&] { auto q = gx::param(gx::iota<float>(gx::dims(30, 20)), gx::sparse_grad<1>); }, tsnap) >= 2);
  CHECK(fail_each_allocation([&] { auto q = gx::param(gx::iota<float>(gx::dims(30, 20))); }, tsnap) >= 2);
}
