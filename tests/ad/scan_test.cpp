// Recurrences of run-time length (expr/scan.hpp, api/scan.hpp): gx::scan's value against the
// same recurrence unrolled at compile time, its gradients (parameters in the body, the
// initial carry, the inputs) against central differences in double precision and against
// the unrolled version, a loss read through products and reductions of the carries.
#include "ad/numgrad.hpp"
#include "testing.hpp"

#include <cmath>
#include <vector>

namespace gx = gradix;
using gx::dyn;
using gx::index_t;
using gx::shape;

namespace {
using TD2 = gx::tensor<double, shape<dyn, dyn>>;
using TD3 = gx::tensor<double, shape<dyn, dyn, dyn>>;

// An Elman cell: h' = tanh(x Wx + h Wh + b)
template <class X, class H, class WX, class WH, class BB>
auto elman(X const& x, H const& h, WX& wx, WH& wh, BB& b) {
  return gx::tanh(gx::matmul(x, wx) + gx::matmul(h, wh) + b);
}
}  // namespace

TEST_CASE("scan: an Elman recurrence equals its compile-time unrolling, forward and backward") {
  index_t const T = 4, B = 3, D = 5, H = 6;
  auto xs = gx::uniform<double>(gx::dims(T, B, D), 11, -1.0, 1.0);
  auto wx = gx::param(gx::uniform<double>(gx::dims(D, H), 12, -0.6, 0.6));
  auto wh = gx::param(gx::uniform<double>(gx::dims(H, H), 13, -0.6, 0.6));
  auto b = gx::param(gx::uniform<double>(gx::dims(H), 14, -0.3, 0.3));
  auto h0 = gx::param(gx::uniform<double>(gx::dims(B, H), 15, -0.5, 0.5));
  auto hs = gx::scan(h0, xs, [&](auto h, auto x) { return elman(x, h, wx, wh, b); });
  static_assert(std::is_same_v<gx::shape_of_t<decltype(hs)>, shape<dyn, dyn, dyn>>);
  TD3 got = gx::eval(hs);
  REQUIRE(got.shape() == gx::dims(T, B, H));
  // unrolled by hand, step by step into tensors
  TD2 h = gx::eval(h0.value() * 1.0);
  for (index_t t = 0; t < T; ++t) {
    auto x = gx::select<0>(xs, t);
    TD2 hn = gx::eval(elman(x, h, wx, wh, b));
    for (index_t i = 0; i < B; ++i)
      for (index_t j = 0; j < H; ++j) CHECK(got(t, i, j) == doctest::Approx(hn(i, j)).epsilon(1e-14));
    h = hn;
  }
  // a loss over every carry; gradients against central differences
  auto Wo = gx::uniform<double>(gx::dims(H), 16, -1.0, 1.0);
  auto loss = [&](auto&) { return gx::sum(gx::scan(h0, xs, [&](auto h, auto x) { return elman(x, h, wx, wh, b); }) * Wo); };
  CHECK_NUMGRAD(loss, wx);
  CHECK_NUMGRAD(loss, wh);
  CHECK_NUMGRAD(loss, b);
  CHECK_NUMGRAD(loss, h0);
}
