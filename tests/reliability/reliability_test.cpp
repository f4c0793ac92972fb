// (names the node that produced a non-finite value in check_finite messages)
#define GRADIX_CHECK_FINITE_NODES 1
// Regression tests for the defects of the reliability issue (docs/reliability.md): each case
// below gave a wrong result or corrupted memory before its fix.
#include "testing.hpp"

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace gx = gradix;
using gx::dyn;
using gx::shape;

namespace {

struct thread_count_guard {
  int saved = gx::num_threads();
  ~thread_count_guard() { gx::set_num_threads(saved); }
};

using gx::testing::error_of;
bool contains(std::string const& s, std::string const& part) {
  return s.find(part) != std::string::npos;
}

template <class A, class B>
bool same_bits(A const& a, B const& b) {
  return a.size() == b.size() &&
         std::memcmp(a.data(), b.data(), std::size_t(a.size()) * sizeof(*a.data())) == 0;
}

}  // namespace

// ---------------------------------------------------------------------------------------
// 1. zero_grad of rank-0 dense parameters

TEST_CASE("zero_grad: clears a rank-0 dense parameter") {
  auto s = gx::param(gx::tensor<float, shape<>>{3.f});
  gx::backward(s * s);
  CHECK(s.grad().dense()() == 6.f);
  gx::zero_grad(s);
  CHECK(s.grad().dense()() == 0.f);
  gx::backward(s * 2.f);
  CHECK(s.grad().dense()() == 2.f);
}

TEST_CASE("zero_grad: clears a rank-0 parameter broadcast inside sum(x * w)") {
  auto x = gx::tensor<double, shape<4>>{1, 2, 3, 4};
  auto w = gx::param(gx::tensor<double, shape<>>{0.5});
  gx::backward(gx::sum(x * w));
  CHECK(w.grad().dense()() == 10.0);
  gx::zero_grad(w);
  gx::backward(gx::sum(x * w));
  CHECK(w.grad().dense()() == 10.0);
}

// ---------------------------------------------------------------------------------------
// 2. concurrency

namespace {
constexpr gx::index_t conc_rows = 3000, conc_cols = 64, conc_idx = 40000;
std::vector<std::int32_t> conc_indices(int salt) {
  std::vector<std::int32_t> idx(static_cast<std::size_t>(conc_idx));
  for (gx::index_t k = 0; k < conc_idx; ++k)
    idx[std::size_t(k)] = std::int32_t((k * 7919 + salt) % 500);  // many duplicates
  return idx;
}
}  // namespace

TEST_CASE("threads: concurrent backward from two user threads on their own parameters") {
  thread_count_guard guard;
  gx::set_num_threads(2);
  auto idx_a = conc_indices(1), idx_b = conc_indices(2);
  auto make = [] { return gx::param(gx::randn<float>(gx::dims(conc_rows, conc_cols), 3)); };
  auto pa = make(), pb = make();
  // references, one at a time
  gx::backward(gx::sum(gx::tanh(pa(gx::indices(idx_a), gx::all))));
  gx::backward(gx::sum(gx::tanh(pb(gx::indices(idx_b), gx::all))));
  auto ref_a = pa.grad().to_dense(), ref_b = pb.grad().to_dense();
  std::atomic<int> wrong{0};
  auto worker = [&](auto& p, auto const& idx, auto const& ref) {
    for (int rep = 0; rep < 20; ++rep) {
      gx::zero_grad(p);
      gx::backward(gx::sum(gx::tanh(p(gx::indices(idx), gx::all))));
      auto g = p.grad().to_dense();
      if (!same_bits(g, ref)) ++wrong;
    }
  };
  std::thread ta([&] { worker(pa, idx_a, ref_a); });
  std::thread tb([&] { worker(pb, idx_b, ref_b); });
  ta.join();
  tb.join();
  CHECK(wrong.load() == 0);
}

TEST_CASE("threads: set_num_threads while other threads run backward and eval") {
  thread_count_guard guard;
  auto idx = conc_indices(5);
  auto p = gx::param(gx::randn<float>(gx::dims(conc_rows, conc_cols), 4));
  gx::set_num_threads(1);
  gx::backward(gx::sum(gx::exp(p(gx::indices(idx), gx::all))));
  auto ref = p.grad().to_dense();
  auto x = gx::randn<float>(gx::dims(300000), 9);
  auto ref_sum = gx::value(gx::sum(x * x));
  std::atomic<bool> done{false};
  std::atomic<int> wrong{0};
  std::thread resizer([&] {
    int k = 0;
    while (!done.load()) gx::set_num_threads(1 + (k++ % 4));
  });
  std::thread evaluator([&] {
    for (int rep = 0; rep < 20; ++rep)
      if (gx::value(gx::sum(x * x)) != ref_sum) ++wrong;
  });
  for (int rep = 0; rep < 20; ++rep) {
    gx::zero_grad(p);
    gx::backward(gx::sum(gx::exp(p(gx::indices(idx), gx::all))));
    if (!same_bits(p.grad().to_dense(), ref)) ++wrong;
  }
  evaluator.join();
  done = true;
  resizer.join();
  CHECK(wrong.load() == 0);
}

TEST_CASE("threads: a parameter shared by concurrent backward calls is never silently wrong") {
  // Each call either completes or throws gradix::error (the parameter is busy); the
  // gradient is exactly the sum of the completed calls.
  thread_count_guard guard;
  gx::set_num_threads(2);
  auto idx = conc_indices(7);
  auto p = gx::param(gx::tensor<double, shape<dyn, dyn>>(gx::dims(conc_rows, 8)), gx::sparse_grad<0>);
  std::atomic<int> completed{0}, rejected{0}, other{0};
  auto worker = [&] {
    for (int rep = 0; rep < 50; ++rep) {
      try {
        gx::backward(gx::sum(p(gx::indices(idx), gx::all) + 1.0));
        ++completed;
      } catch (gx::error const& e) {
        if (contains(e.what(), "in use by another thread")) ++rejected;
        else ++other;
      }
    }
  };
  std::thread t1(worker), t2(worker);
  t1.join();
  t2.join();
  CHECK(other.load() == 0);
  CHECK(completed.load() + rejected.load() == 100);
  // every index k hits row idx[k]: the row's gradient is (number of hits) * completed
  std::vector<int> hits(std::size_t(conc_rows), 0);
  for (auto i : idx) ++hits[std::size_t(i)];
  auto g = p.grad().to_dense();
  int bad = 0;
  for (gx::index_t r = 0; r < conc_rows; ++r)
    for (gx::index_t c = 0; c < 8; ++c)
      bad += g(r, c) != double(hits[std::size_t(r)]) * completed.load();
  CHECK(bad == 0);
}

TEST_CASE("threads: set_num_threads from inside a task throws") {
  thread_count_guard guard;
  gx::set_num_threads(2);
  std::atomic<int> errors{0};
  auto t = gx::generate<float>(gx::dims(100000), [&](auto) {
    try {
      gx::set_num_threads(3);
    } catch (gx::error const&) {
      ++errors;
    }
    return 1.f;
  });
  CHECK(errors.load() == 100000);
  CHECK(t(0) == 1.f);
}

// ---------------------------------------------------------------------------------------
// 3. replacing a parameter's value

TEST_CASE("parameters: a value replaced by a temporary of the same shape is read by expressions built before") {
  auto p = gx::param(gx::iota<float>(gx::dims(4, 3)), gx::sparse_grad<0>);
  std::vector<int> idx{3, 0, 3};
  auto e = gx::sum(gx::square(p(gx::indices(idx), gx::all)));
  auto base = gx::iota<float>(gx::dims(4, 3));
  p.value() = gx::eval(base * 2.f);  // a move: a new buffer
  CHECK(gx::value(e) == doctest::Approx(4.f * (2 * (81 + 100 + 121) + 0 + 1 + 4)));
  gx::backward(e);
  auto g = p.grad().to_dense();
  CHECK(g(3, 2) == 2 * 2 * 22.f);  // 2 uses of row 3, d/dx x^2 = 2x, x = 22
  CHECK(g(0, 1) == 2 * 2.f);
}

TEST_CASE("parameters: a value of a new shape is an error, and nothing is written") {
  SUBCASE("dense") {
    auto p = gx::param(gx::iota<float>(gx::dims(4, 3)));
    auto e = gx::sum(gx::exp(p));
    p.value() = gx::iota<float>(gx::dims(8, 3));
    auto msg = error_of([&] { gx::backward(e); });
    CHECK(contains(msg, "gradix::backward: a parameter's value now has shape [8, 3]"));
    CHECK(p.grad().touched().empty());
    // an expression built after the change: the value no longer matches its storage
    auto msg2 = error_of([&] { gx::backward(gx::sum(gx::exp(p))); });
    CHECK(contains(msg2, "its gradient storage has shape [4, 3]"));
    CHECK(contains(error_of([&] { (void)gx::eval(e); }), "gradix::eval: a parameter's value now"));
  }
  SUBCASE("sparse") {
    auto p = gx::param(gx::iota<float>(gx::dims(4, 3)), gx::sparse_grad<0>);
    std::vector<int> idx{3, 1};
    auto e = gx::sum(p(gx::indices(idx), gx::all));
    p.value() = gx::iota<float>(gx::dims(2, 3));
    CHECK(contains(error_of([&] { gx::backward(e); }), "now has shape [2, 3]"));
    CHECK(p.grad().size() == 0);
  }
}

// ---------------------------------------------------------------------------------------
// 4. extent arithmetic

TEST_CASE("shapes: element counts and byte counts that overflow are errors") {
  constexpr gx::index_t big = gx::index_t(1) << 32;
  CHECK(contains(error_of([&] { (void)gx::dims(big, big); }),
                 "gradix::dims: the extents [4294967296, 4294967296] have more than"));
  CHECK(contains(error_of([&] { gx::tensor<float, shape<dyn>> t(gx::dims((gx::index_t(1) << 62) + 1)); }),
                 "overflow the byte count"));
  auto x = gx::iota<float>(gx::dims(8));
  CHECK(contains(error_of([&] { (void)gx::reshape(x, gx::dims(4, (gx::index_t(1) << 62) + 2)); }),
                 "gradix::dims"));
  CHECK(contains(error_of([&] { (void)gx::dims(std::numeric_limits<std::uint64_t>::max()); }),
                 "exceeds the largest extent"));
  CHECK(contains(error_of([&] { (void)gx::dims(-3); }), "negative"));
}

#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define GRADIX_TEST_UNDER_TSAN 1
#endif
#endif
#if defined(__SANITIZE_THREAD__)
#define GRADIX_TEST_UNDER_TSAN 1
#endif
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define GRADIX_TEST_UNDER_TSAN 1  // (meson test replaces ASAN_OPTIONS: no may_return_null)
#endif
#endif

TEST_CASE("shapes: running out of memory is a gradix::error") {
#if defined(GRADIX_TEST_UNDER_TSAN)
  // (ThreadSanitizer's allocator dies on a huge request instead of failing it)
  return;
#endif
  // 2^44 bytes: more than this machine has (and over ASan's allocation limit)
  auto msg = error_of([&] { gx::tensor<float, shape<dyn>> t(gx::dims(gx::index_t(1) << 42)); });
  CHECK(contains(msg, "gradix: out of memory allocating 17592186044416 bytes"));
}

// ---------------------------------------------------------------------------------------
// 5. ranges, arange, select

TEST_CASE("range: extreme steps and bounds") {
  auto r = gx::range(0, 10, INT64_MAX);
  CHECK(r.size_ == 1);
  CHECK(gx::range(10, 0, INT64_MIN).size_ == 1);
  CHECK(gx::range(INT64_MIN, INT64_MAX, INT64_MAX).size_ == 3);
  CHECK(contains(error_of([] { (void)gx::range(INT64_MIN, INT64_MAX); }),
                 "gradix::range: from -9223372036854775808 to 9223372036854775807 with step 1 has"));
  auto x = gx::iota<float>(gx::dims(5));
  CHECK(contains(error_of([&] { (void)x(gx::range(0, INT64_MAX, 2)); }),
                 "gradix::slice: range from 0 with step 2"));
  CHECK(gx::value(gx::sum(x(gx::range(0, 10, INT64_MAX)))) == 0.f);
  CHECK(gx::value(gx::sum(x(gx::range(4, -1, INT64_MIN)))) == 4.f);
  CHECK(contains(error_of([&] { (void)x(gx::range(4, INT64_MIN, INT64_MIN)); }),
                 "(2 values, last -9223372036854775804) is out of range for axis 0 of extent 5"));
}

TEST_CASE("arange: huge or infinite bounds name arange") {
  CHECK(contains(error_of([] { (void)gx::arange<double>(0.0, 1e300); }), "gradix::arange"));
  CHECK(contains(error_of([] { (void)gx::arange<float>(0.f, INFINITY); }),
                 "the bounds and the step must be finite"));
  CHECK(contains(error_of([] { (void)gx::arange<std::int64_t>(INT64_MIN, INT64_MAX); }),
                 "gradix::arange"));
  CHECK(contains(error_of([] { (void)gx::arange<std::int64_t>(0, INT64_MAX, 1); }), "gradix::"));
  CHECK(gx::arange<std::int64_t>(INT64_MAX - 2, INT64_MAX).size() == 2);
}

TEST_CASE("select: a huge unsigned index is reported as it was given") {
  auto x = gx::iota<float>(gx::dims(5, 2));
  auto msg = error_of([&] { (void)x(SIZE_MAX, gx::all); });
  CHECK(contains(msg, "index 18446744073709551615"));
  CHECK(contains(error_of([&] { (void)gx::select<0>(x, SIZE_MAX); }), "18446744073709551615"));
  CHECK(contains(error_of([&] { (void)gx::select<0>(x, 5); }), "gradix::select: index 5 is out of range for axis 0 of extent 5"));
  CHECK(contains(error_of([&] { (void)x(gx::at(std::uint64_t(1) << 63), gx::all); }), "9223372036854775808"));
}

// ---------------------------------------------------------------------------------------
// 7. aliasing

TEST_CASE("assign: a transpose of the destination goes through a temporary") {
  auto a = gx::iota<float>(gx::dims(600, 600));
  auto expect = gx::eval(gx::transpose(a));
  a = gx::transpose(a);
  CHECK(gx::testing::all_close(a, expect, 0, 0) == "");
}

TEST_CASE("assign: gathers and reversed slices of the destination") {
  auto a = gx::iota<float>(gx::dims(5, 3));
  std::vector<int> idx{1, 0, 0, 2, 4};
  auto e1 = gx::eval(a(gx::indices(idx), gx::all));
  a = a(gx::indices(idx), gx::all);
  CHECK(gx::testing::all_close(a, e1, 0, 0) == "");
  auto v = gx::iota<float>(gx::dims(5));
  auto e2 = gx::eval(v(gx::range(4, -1, -1)));
  v = v(gx::range(4, -1, -1));
  CHECK(gx::testing::all_close(v, e2, 0, 0) == "");
  CHECK(v(0) == 4.f);
  // a write into the index data the expression gathers with
  auto src = gx::tensor<std::int32_t, shape<4>>{10, 11, 12, 13};
  auto it = gx::tensor<std::int32_t, shape<4>>{3, 2, 1, 0};
  auto e3 = gx::eval(src(gx::indices(it)) + it);
  it = src(gx::indices(it)) + it;
  CHECK(gx::testing::all_close(it, e3, 0, 0) == "");
  CHECK(it(0) == 16);
}

TEST_CASE("assign: a parameter's value set from an expression over itself") {
  auto p = gx::param(gx::iota<double>(gx::dims(30, 30)));
  auto expect = gx::eval(gx::transpose(p) * 2.0);
  p.value() = gx::transpose(p) * 2.0;
  CHECK(gx::testing::all_close(p.value(), expect, 0, 0) == "");
}

TEST_CASE("assign: elementwise self-assignment stays in place, and is right") {
  auto x = gx::iota<float>(gx::dims(1000));
  float const* before = x.data();
  x = x * 2.f + 1.f;
  CHECK(x.data() == before);
  CHECK(x(999) == 1999.f);
  CHECK_FALSE(gx::detail::aliases(x.view(), gx::detail::as_node(x * 2.f + x)));
  CHECK(gx::detail::aliases(x.view(), gx::detail::as_node(x * 2.f + x(gx::range(999, -1, -1)))));
  CHECK(gx::detail::aliases(x.view(), gx::detail::as_node(x + gx::sum(x))));
}

// ---------------------------------------------------------------------------------------
// Lifetimes (GRADIX_CHECK_LIFETIMES is on in the test build)

static_assert(sizeof(gx::tensor_view<float, shape<dyn>>) > sizeof(float*) + 2 * sizeof(gx::index_t),
              "the test build must define GRADIX_CHECK_LIFETIMES");

namespace {
auto over_a_local_tensor() {
  auto t = gx::iota<float>(gx::dims(100));
  return t * 2.f;  // the expression views t, which is destroyed on return
}
auto gather_with_local_indices(gx::tensor<float, shape<dyn, dyn>> const& x) {
  auto idx = gx::arange<std::int32_t>(3);
  return gx::sum(x(gx::indices(idx), gx::all));
}
}  // namespace

TEST_CASE("lifetimes: an expression that outlived a tensor it reads throws") {
  auto e = over_a_local_tensor();
  CHECK(contains(error_of([&] { (void)gx::eval(e); }),
                 "gradix::eval: the expression reads a tensor of shape [100] that was destroyed"));
  auto x = gx::iota<float>(gx::dims(4, 2));
  auto s = gather_with_local_indices(x);
  CHECK(contains(error_of([&] { (void)gx::value(s); }), "gathers with an index tensor of 3 indices"));
}

TEST_CASE("lifetimes: a tensor reassigned to another size invalidates expressions over it") {
  auto t = gx::iota<double>(gx::dims(10));
  auto e = gx::sum(gx::exp(t));
  auto same = gx::iota<double>(gx::dims(10));
  t = same;  // a copy of the same size: into the same buffer, still valid
  CHECK(error_of([&] { (void)gx::value(e); }) == "");
  t = gx::iota<double>(gx::dims(10));  // a move: t takes the temporary's buffer
  CHECK(contains(error_of([&] { (void)gx::value(e); }), "destroyed or reallocated"));
  auto e2 = gx::sum(gx::exp(t));
  t = gx::iota<double>(gx::dims(20));  // another size: a new buffer
  CHECK(contains(error_of([&] { (void)gx::value(e2); }), "destroyed or reallocated"));
}

TEST_CASE("lifetimes: an expression that outlived its parameter throws") {
  // (a unique_ptr rather than a std::optional: g++ 12 warns, wrongly, that the optional's
  // parameter may be used uninitialized in its destructor, depending on inlining)
  auto p = std::make_unique<gx::parameter<float, shape<dyn>>>(gx::iota<float>(gx::dims(5)));
  auto e = gx::sum(*p * *p);
  gx::backward(e);
  p.reset();
  CHECK(contains(error_of([&] { gx::backward(e); }), "reads a parameter that was destroyed"));
}

// ---------------------------------------------------------------------------------------
// Non-finite check mode

namespace {
struct check_finite_on {
  check_finite_on() { gx::set_check_finite(true); }
  ~check_finite_on() { gx::set_check_finite(false); }
};
}  // namespace

TEST_CASE("check_finite: off by default, a NaN passes silently") {
  CHECK_FALSE(gx::check_finite());
  auto x = gx::iota<float>(gx::dims(3));
  auto y = gx::eval(gx::log(x - 1.f));
  CHECK(std::isnan(y(0)));
}

TEST_CASE("check_finite: a forward pass names the element and the node that produced it") {
  check_finite_on on;
  auto x = gx::iota<float>(gx::dims(3, 4));
  auto msg = error_of([&] { (void)gx::eval(gx::exp(gx::log(x - 5.f) * 2.f)); });
  CHECK(contains(msg, "gradix::eval: check_finite: element [0, 0] of the result is NaN"));
  CHECK(contains(msg, "the node log (shape [3, 4]) produced NaN at [0, 0]"));
  // a reduction: the value, and the division by zero inside
  auto msg2 = error_of([&] { (void)gx::value(gx::sum(1.f / x)); });
  CHECK(contains(msg2, "gradix::value: check_finite: element [] of the result is +inf"));
  CHECK(contains(msg2, "the node operator/ (shape [3, 4]) produced +inf at [0, 0]"));
  // an input that already holds a NaN
  x(1, 2) = NAN;
  auto msg3 = error_of([&] { (void)gx::eval(x * 2.f); });
  CHECK(contains(msg3, "the input tensor (shape [3, 4]) holds NaN at [1, 2]"));
  // assign into an existing tensor
  auto d = gx::tensor<float, shape<dyn, dyn>>(gx::dims(3, 4));
  CHECK(contains(error_of([&] { d = x + 1.f; }), "gradix::assign: check_finite: element [1, 2]"));
  // finite results pass
  x(1, 2) = 0.f;
  CHECK(error_of([&] { (void)gx::eval(x * 2.f); }) == "");
}

TEST_CASE("check_finite: a backward pass names the parameter and the element") {
  check_finite_on on;
  auto a = gx::param(gx::iota<double>(gx::dims(2, 3)));
  auto b = gx::param(gx::iota<double>(gx::dims(2, 3)), gx::sparse_grad<0>);
  std::vector<int> rows{1, 0};
  // d sqrt(x)/dx = inf at x = 0: b's element [0, 0]
  auto msg = error_of([&] { gx::backward(gx::sum(a * 2.0 + gx::sqrt(b(gx::indices(rows), gx::all)))); });
  CHECK(contains(msg, "gradix::backward: check_finite: the gradient of parameter 1 (shape [2, 3]) is +inf at [0, 0]"));
  gx::zero_grad(a, b);
  // grad() checks the gradients it returns
  auto msg2 = error_of([&] { (void)gx::grad(gx::sum(gx::log(a)), a); });
  CHECK(contains(msg2, "gradix::grad: check_finite: the gradient of parameter 0 (shape [2, 3]) is +inf at [0, 0]"));
  // a forward value that is not finite is reported before any gradient is written
  auto msg3 = error_of([&] { gx::backward(gx::sum(gx::log(a))); });
  CHECK(contains(msg3, "gradix::backward: check_finite: element [] of the result is -inf"));
  CHECK(contains(msg3, "the node log (shape [2, 3]) produced -inf at [0, 0]"));
  CHECK(a.grad().touched().empty());
}
