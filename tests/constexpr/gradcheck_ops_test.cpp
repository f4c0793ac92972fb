// Compile-time proofs: gx::gradcheck in constant evaluation, one static_assert per op family
// (static shapes of 16 to 32 elements; inputs inside each function's domain and away from
// kinks). A wrong gradient here breaks the build of this suite, and GRADIX_STATIC_GRADCHECK
// makes the compiler print the parameter, the element and both values.
#include "testing.hpp"

#include <gradix/gradix.hpp>

#include <doctest/doctest.h>

#include <vector>

namespace gx = gradix;
using gx::shape;

namespace {

// 4 x 6 positive values in [0.35, 2.6], none near 1.25, 1.75 or 2.25 (the kinks below)
constexpr gx::tensor<double, shape<4, 6>> x{
    0.35, 0.52, 0.61, 0.78, 0.93, 1.04, 1.12, 1.37, 1.46, 1.58, 1.63, 1.91,
    2.02, 2.11, 2.38, 2.47, 2.56, 2.6,  0.44, 0.69, 0.87, 1.01, 1.49, 2.33};
constexpr gx::tensor<double, shape<6>> w{0.5, -1.0, 2.0, -0.25, 1.5, 0.75};
constexpr gx::tensor<float, shape<4, 6>> xf = [] {
  gx::tensor<float, shape<4, 6>> t{};
  for (gx::index_t k = 0; k < 24; ++k) t.data()[k] = float(x.data()[k]);
  return t;
}();

// The first proof docs/gradcheck.md shows.
// doc-snippet: first
constexpr gx::tensor<double, gx::shape<2, 3>> x23{0.5, 1, 1.5, 2, 2.5, 3};
constexpr auto r = gx::gradcheck([](auto const& a) { return gx::sum(gx::tanh(a) * a); }, x23);
static_assert(r.ok());
GRADIX_STATIC_GRADCHECK(r);  // the same, and on failure the compiler prints the values
// end doc-snippet

// Elementwise: every function and operator.
constexpr auto r_exp_log = gx::gradcheck([](auto const& a) {
  return gx::sum(gx::exp(a * 0.5) + gx::log(a) + gx::sqrt(a) + gx::square(a) - a / (a + 1.0));
}, x);
GRADIX_STATIC_GRADCHECK(r_exp_log);
// (two checks: one would need about clang's whole constant-evaluation step limit, 2^20)
constexpr auto r_tanh = gx::gradcheck([](auto const& a) {
  return gx::sum(gx::tanh(a - 1.0) * gx::sigmoid(-a) - (-a) * a);
}, x);
GRADIX_STATIC_GRADCHECK(r_tanh);
constexpr auto r_pow = gx::gradcheck([](auto const& a) { return gx::sum(gx::pow(a, 1.5) + gx::pow(2.0, a)); }, x);
GRADIX_STATIC_GRADCHECK(r_pow);
constexpr auto r_softplus = gx::gradcheck([](auto const& a) {
  return gx::sum(gx::softplus(a * 3.0 - 4.0) * w + gx::log_sigmoid(2.0 - a * 2.0) +
                 gx::clamp(a, 0.8, 2.2) * a);  // x has no element at 0.8 or 2.2
}, x);
GRADIX_STATIC_GRADCHECK(r_softplus);
// comparisons and where (x has no element at 1.0 or 1.5: the masks do not flip nearby)
constexpr auto r_where = gx::gradcheck([](auto const& a) {
  return gx::sum(gx::where(a > 1.5, gx::sin(a) * a, a * a * w) + a * (a < 1.0) * 3.0);
}, x);
GRADIX_STATIC_GRADCHECK(r_where);
// softmax family and cross-entropy, on 3 x 4 logits (labels and class weights of static
// shape; smaller than the rest: clang's constant-evaluation step limit)
constexpr gx::tensor<double, shape<3, 4>> z{0.35, -0.52, 0.61, 1.78, -0.93, 1.04, 0.12, -1.37, 1.46, 0.58, -0.63, 0.91};
constexpr gx::tensor<double, shape<4>> zw{0.5, -1.0, 2.0, -0.25};
constexpr gx::tensor<int, shape<3>> labels{2, 0, 3};
constexpr auto r_softmax = gx::gradcheck([](auto const& a) {
  return gx::sum(gx::softmax<1>(a) * zw + gx::log_softmax<0>(a * 0.5) * 0.25) +
         gx::sum(gx::logsumexp<-1>(a * 2.0));
}, z);
GRADIX_STATIC_GRADCHECK(r_softmax);
constexpr auto r_cross_entropy = gx::gradcheck([](auto const& a) {
  return gx::cross_entropy(a, labels) + gx::cross_entropy(a * 1.5, labels, zw + 1.5) +
         gx::sum(gx::take_along<1>(a, gx::unsqueeze<1>(labels)) * 2.0);
}, z);
GRADIX_STATIC_GRADCHECK(r_cross_entropy);
// ... of logits that hold a matrix product: read through a let (computed once into a buffer,
// its gradient pushed once into the product's operand; one parameter and one term, to stay
// under clang's constant-evaluation step limit)
constexpr gx::tensor<double, shape<4, 4>> zm{0.9, -0.3, 0.2, 0.5, -0.7, 0.4, 1.1, -0.2, 0.3, 0.8, -0.6, 0.1, -0.4, 0.6, 0.7, -1.0};
constexpr auto r_shared_product = gx::gradcheck([](auto const& a) { return gx::cross_entropy(gx::matmul(a, zm), labels); }, z);
GRADIX_STATIC_GRADCHECK(r_shared_product);
constexpr auto r_kinks = gx::gradcheck([](auto const& a) {
  return gx::sum(gx::relu(a - 1.25) * a + gx::abs(a - 1.75) + gx::max(a, 2.25) * a +
                 gx::min(a * a, 1.5));
}, x);
GRADIX_STATIC_GRADCHECK(r_kinks);
// float parameters, float tolerances; two parameters of different ranks
constexpr auto r_float = gx::gradcheck([](auto const& a, auto const& b) {
  return gx::sum(gx::exp(a * b * 0.25f) * b);
}, xf, gx::tensor<float, shape<6>>{0.5f, -1.0f, 2.0f, -0.25f, 1.5f, 0.75f});
GRADIX_STATIC_GRADCHECK(r_float);
// expm1, log1p, sin, cos: in double (core/math.hpp's constant-evaluation functions) and in
// float (core/vmath.hpp's polynomials, the same code as at run time)
constexpr auto r_trig = gx::gradcheck([](auto const& a) {
  return gx::sum(gx::sin(a * 2.0) * gx::cos(a) + gx::expm1(a * 0.5) + gx::log1p(a - 0.3));
}, x);
GRADIX_STATIC_GRADCHECK(r_trig);
constexpr auto r_trig_float = gx::gradcheck([](auto const& a) {
  return gx::sum(gx::sin(a * 2.0f) * gx::cos(a) + gx::expm1(a * 0.5f) + gx::log1p(a - 0.3f));
}, xf);
GRADIX_STATIC_GRADCHECK(r_trig_float);

// Broadcasting: a row vector against the matrix, a keep_dims mean against it.
constexpr auto r_broadcast = gx::gradcheck([](auto const& a, auto const& b) {
  return gx::sum(gx::square(a * b - gx::mean<1>(a, gx::keep_dims)) +
                 gx::broadcast_to(b, shape<4, 6>{}) * a);
}, x, w);
GRADIX_STATIC_GRADCHECK(r_broadcast);

// Reductions: sum, mean, max (distinct values: no ties), over chosen axes.
constexpr auto r_reduce = gx::gradcheck([](auto const& a) {
  return gx::sum(gx::square(gx::sum<0>(a))) + gx::mean(gx::exp(a * 0.1)) + gx::max(a * a) +
         gx::sum(gx::max<1>(a) * gx::mean<1>(a)) + gx::sum(gx::sum<1>(a, gx::keep_dims) * a);
}, x);
GRADIX_STATIC_GRADCHECK(r_reduce);

// Gather with repeated indices (rows and columns), at and select. The index data outlives the
// expressions f returns (an expression views its index vectors).
constexpr gx::tensor<int, shape<5>> rows{3, 0, 3, 3, 1};
constexpr gx::tensor<unsigned short, shape<4>> cols{5, 5, 0, 2};
constexpr gx::tensor<double, shape<4>> v4{1, -2, 3, -4};
constexpr auto r_gather = gx::gradcheck([](auto const& a) {
  return gx::sum(gx::exp(a(gx::indices(rows), gx::all) * 0.3)) +
         gx::sum(gx::square(a(gx::at(2), gx::indices(cols)))) + gx::sum(gx::select<1>(a, 4) * v4);
}, x);
GRADIX_STATIC_GRADCHECK(r_gather);
// the same into sparse storage along axis 0 (docs/gradcheck.md shows this region)
// doc-snippet: sparse
constexpr auto r_gather_sparse = [] {
  auto a = gx::param(x, gx::sparse_grad<0>);
  std::vector<long> idx{2, 2, 0, 2};  // lives until gradcheck returns
  return gx::gradcheck([&](auto const& p) {
    return gx::sum(gx::tanh(p(gx::indices(idx), gx::range(0, 6, 2))));
  }, a);
}();
GRADIX_STATIC_GRADCHECK(r_gather_sparse);
// end doc-snippet

// Slices with steps, negative steps.
constexpr auto r_slice = gx::gradcheck([](auto const& a) {
  return gx::sum(gx::square(gx::slice<1>(a, 1, 6, 2))) +
         gx::sum(a(gx::range(3, -1, -2), gx::range(5, 0, -3)) * 2.0);
}, x);
GRADIX_STATIC_GRADCHECK(r_slice);

// Transpose and permute, unsqueeze.
constexpr auto r_transpose = gx::gradcheck([](auto const& a, auto const& b) {
  auto t = gx::transpose(a);  // 6 x 4
  return gx::sum(gx::exp(t * 0.2) * gx::unsqueeze<1>(b)) +
         gx::sum(gx::permute<1, 0>(a) * gx::permute<1, 0>(a));
}, x, w);
GRADIX_STATIC_GRADCHECK(r_transpose);

// Reshape (logical row-major order), of a tensor and of an expression.
constexpr gx::tensor<double, shape<3>> v3{1, 2, 3};
constexpr auto r_reshape = gx::gradcheck([](auto const& a) {
  return gx::sum(gx::reshape(a, shape<8, 3>{}) * v3) +
         gx::sum(gx::square(gx::reshape(gx::transpose(a), shape<2, 12>{})) *
                 gx::reshape(gx::exp(a * 0.1), shape<2, 12>{}));
}, x);
GRADIX_STATIC_GRADCHECK(r_reshape);

// A composition: a slice of a gather of a transpose, reduced, through elementwise functions.
constexpr gx::tensor<int, shape<4>> idx4{4, 1, 4, 0};
constexpr auto r_composition = gx::gradcheck([](auto const& a, auto const& b) {
  auto g = gx::gather<0>(gx::transpose(a), idx4);  // 4 x 4, rows of a^T
  auto s = gx::slice<1>(g, 0, 4, 3);                     // 4 x 2
  return gx::sum(gx::tanh(s * gx::sum<0>(gx::reshape(b, shape<3, 2>{}))) +
                 gx::slice<0>(gx::sqrt(gx::max<0>(gx::square(a)) + 1.0), 0, 2));
}, x, w);
GRADIX_STATIC_GRADCHECK(r_composition);

static_assert(r_exp_log.checked == 24 && r_float.checked == 30 && r_composition.checked == 30);
static_assert(r_shared_product.checked == 12);

}  // namespace

TEST_CASE("constexpr gradcheck: the compile-time proofs also pass at run time") {
  auto rt = gx::gradcheck([](auto const& a) {
    return gx::sum(gx::exp(a(gx::indices(rows), gx::all) * 0.3));
  }, x);
  CHECK(rt.ok());
  CHECK(r_gather.ok());
  CHECK(r_exp_log.failures == 0);
  CHECK(r_composition.parameters == 2);
}
