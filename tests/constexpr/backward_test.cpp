// Constant evaluation of backward, backward_only, grad and zero_grad of static-shape expressions in constant
// evaluation (the serial update path of backend/host/update.hpp), and the same gradients at
// run time (SIMD, fused and threaded kernels): the two must agree.
#include "testing.hpp"

#include <gradix/gradix.hpp>

#include <doctest/doctest.h>

#include <vector>

namespace gx = gradix;
using gx::shape;

namespace {

using t23 = gx::tensor<double, shape<2, 3>>;
using t43 = gx::tensor<double, shape<4, 3>>;

constexpr t23 a0{0.5, 1, 1.5, 2, 2.5, 3};
constexpr t43 e0{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};

// Elementwise functions and broadcasting.
constexpr t23 grad_elementwise() {
  auto a = gx::param(a0);
  gx::tensor<double, shape<3>> w{0.5, -1, 2};
  auto e = gx::sum(a * a + gx::exp(a * w) - gx::log(a) / (a + 1.0) + gx::tanh(a) * gx::sigmoid(-a) +
                   gx::sqrt(a) + gx::pow(a, 1.5) + gx::relu(a - 1.25) + gx::abs(a - 1.75) +
                   gx::max(a, 2.25) + gx::square(gx::min(a, 1.25)));
  return gx::grad(e, a).to_dense();
}
// A sum of squares: the gradient is exactly 2a (docs/ad.md shows this region).
// doc-snippet: grad_square
constexpr gx::tensor<double, gx::shape<2, 3>> grad_square() {
  auto a = gx::param(gx::tensor<double, gx::shape<2, 3>>{0.5, 1, 1.5, 2, 2.5, 3});
  return gx::grad(gx::sum(a * a), a).to_dense();
}
static_assert(grad_square()(1, 2) == 6);
// end doc-snippet
static_assert(grad_square()(0, 0) == 1);

// Gather with repeated indices into sparse storage, at(j), a range with a step.
constexpr t43 grad_index() {
  auto e = gx::param(e0, gx::sparse_grad<0>);
  gx::tensor<int, shape<5>> idx{2, 0, 2, 3, 2};
  std::vector<unsigned short> cols{2, 2, 0};
  auto x = e(gx::indices(idx), gx::all) * 0.1;
  auto y = e(gx::at(1), gx::indices(cols));
  auto z = e(gx::range(3, -1, -2), gx::range(0, 3, 2));
  return gx::grad(gx::sum(gx::exp(x)) + gx::sum(y * y) + gx::sum(z * 3.0), e).to_dense();
}
// Row 1 is read through at(1) at columns 2 (twice) and 0, and by z at columns 0 and 2.
static_assert(grad_index()(1, 2) == 4 * 6 + 3 && grad_index()(1, 0) == 2 * 4 + 3 && grad_index()(1, 1) == 0);

// Views: transpose, permute, reshape, unsqueeze, broadcast_to, select, slice.
constexpr t23 grad_views() {
  auto a = gx::param(a0);
  gx::tensor<double, shape<3, 2>> b{1, 2, 3, 4, 5, 6};
  auto r = gx::reshape(a, shape<3, 2>{});
  auto u = gx::unsqueeze<0>(gx::transpose(a));                    // 1 x 3 x 2
  auto bc = gx::broadcast_to(gx::select<0>(a, 1), shape<2, 3>{});  // row 1, twice
  auto e = gx::sum(gx::transpose(a) * b * r) + gx::sum(u * u) + gx::sum(bc * a) +
           gx::sum(gx::permute<1, 0>(gx::slice<1>(a, 0, 3, 2)) * 5.0);
  return gx::grad(e, a).to_dense();
}

// Reductions: mean along an axis with keep_dims, max, nested sums.
constexpr t23 grad_reduce() {
  auto a = gx::param(a0);
  auto m = gx::mean<1>(a, gx::keep_dims);
  auto e = gx::sum(gx::square(a - m)) + gx::max(a * a) + gx::sum(gx::sum<0>(a) * gx::sum<0>(a));
  return gx::grad(e, a).to_dense();
}

// Saved values in constant evaluation (api/saved.hpp: buffers from std::allocator, freed
// when the call returns): a row-wise logsumexp keeps its max (with its arg-max) and its sum.
// Its gradient is the row softmax: each row sums to 1, and the max's own adjoint cancels.
constexpr t23 grad_lse() {
  auto a = gx::param(a0);
  auto m = gx::max<1>(a, gx::keep_dims);
  auto e = gx::sum(gx::log(gx::sum<1>(gx::exp(a - m))) + gx::max<1>(a));
  return gx::grad(e, a).to_dense();
}
constexpr bool rows_sum_to_one(t23 const& g) {
  for (gx::index_t i = 0; i < 2; ++i) {
    double s = g(i, 0) + g(i, 1) + g(i, 2);
    if (s - 1 > 1e-14 || 1 - s > 1e-14) return false;
  }
  return g(0, 2) > g(0, 1) && g(0, 1) > g(0, 0);
}
static_assert(rows_sum_to_one(grad_lse()));

// backward (value and gradient), backward_only, a seeded backward, detach, zero_grad, and a
// gradient-only call that grad() makes without touching the parameters' storage.
struct several {
  double v;
  t23 ga;
  gx::tensor<double, shape<3, 2>> gb;
  double after_zero;
  t23 fresh;
};
constexpr several backward_forms() {
  auto a = gx::param(a0);
  auto b = gx::param(gx::tensor<double, shape<3, 2>>{1, 2, 3, 4, 5, 6});
  several s{};
  s.v = gx::backward(gx::sum(gx::transpose(a) * b + gx::reshape(a, shape<3, 2>{})));
  gx::backward_only(gx::max(a) * gx::detach(gx::sum(b)));
  gx::tensor<double, shape<2, 3>> seed{1, 0, -1, 2, 0, 1};
  gx::backward(a * 2.0, seed);
  s.ga = a.grad().dense();
  s.gb = b.grad().dense();
  s.fresh = gx::grad(gx::sum(a * 3.0), a).to_dense();
  s.v += a.grad().dense()(0, 0) - s.ga(0, 0);  // grad() left a's storage as it was
  gx::zero_grad(a, b);
  s.after_zero = a.grad().dense()(1, 2) + b.grad().dense()(2, 0);
  return s;
}
constexpr several bf = backward_forms();
// value: sum(a^T * b) + sum(a) = 0.5+4+3+10+7.5+18 + 10.5
static_assert(bf.v == 53.5);
// d/d a[1][2]: b[2][1] + 1 (reshape) + sum(b) (the max, a[1][2]) + 2 * seed[1][2]
static_assert(bf.ga(1, 2) == 6 + 1 + 21 + 2);
static_assert(bf.gb(2, 0) == 1.5);  // a[0][2]; detach(b) gives b nothing from the max term
static_assert(bf.after_zero == 0 && bf.fresh(1, 1) == 3);

template <class T, class S>
void check_same(gx::tensor<T, S> const& compile_time, gx::tensor<T, S> const& run_time) {
  for (gx::index_t i = 0; i < compile_time.extent(0); ++i)
    for (gx::index_t j = 0; j < compile_time.extent(1); ++j)
      CHECK(compile_time(i, j) == doctest::Approx(run_time(i, j)).epsilon(1e-13));
}

}  // namespace

TEST_CASE("constexpr grad: compile-time gradients equal run-time gradients") {
  constexpr t23 ce_elementwise = grad_elementwise();
  constexpr t43 ce_index = grad_index();
  constexpr t23 ce_views = grad_views();
  constexpr t23 ce_reduce = grad_reduce();
  constexpr t23 ce_lse = grad_lse();
  check_same(ce_lse, grad_lse());
  check_same(ce_elementwise, grad_elementwise());
  check_same(ce_index, grad_index());
  check_same(ce_views, grad_views());
  check_same(ce_reduce, grad_reduce());
  several rt = backward_forms();
  CHECK(rt.v == bf.v);
  check_same(bf.ga, rt.ga);
  check_same(bf.gb, rt.gb);
}
