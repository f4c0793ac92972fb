// The fused pair of uses (ad::fused_use, backend/host/fused.hpp): the two uses of one `+`
// node with the same domain and value run as one loop nest. The founding benchmark's square
// loss gives both kinds: per term, A (the gathered block) projects nothing and B (the
// broadcast column) every non-inner axis; batched, A projects the term axis and B the
// gathered-entry axis, B's sums kept in one row per term. The gradients must be the bits of
// the two uses run apart (grad() of one parameter runs its use alone; several threads run
// the pair apart), and the loss value that the per-term pair carries the bits of value(e).
#include "testing.hpp"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

namespace gx = gradix;
using gx::testing::thread_scope;

namespace {

auto table(gx::index_t n, std::uint32_t seed) {
  return gx::param(gx::randn<float, gx::col_major>(gx::dims(gx::fix<64>, n), seed), gx::sparse_grad<1>);
}
using Table = decltype(table(1, 0));

template <class P>
std::vector<float> dense_grad(P const& p) {
  auto d = p.grad().to_dense();
  return std::vector<float>(d.data(), d.data() + d.shape().size());
}
template <class G>
std::vector<float> dense_of(G const& g) {
  auto d = g.to_dense();
  return std::vector<float>(d.data(), d.data() + d.shape().size());
}
bool same(std::vector<float> const& a, std::vector<float> const& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

struct tables {
  Table Ea = table(1000, 1);
  Table Eb = table(5000, 2);
  std::vector<std::uint16_t> i;
  std::vector<std::uint32_t> js;
  tables(long S, long T) : i(std::size_t(S)), js(std::size_t(T)) {
    for (long s = 0; s < S; ++s) i[std::size_t(s)] = std::uint16_t((s * 7) % 4000);
    for (long t = 0; t < T; ++t) js[std::size_t(t)] = std::uint32_t((t * 13) % 37);  // repeats
  }
  auto term() const { return Eb(gx::all, gx::indices(i)) + Ea(gx::all, gx::at(5)); }
  auto batched() const {
    return gx::unsqueeze<2>(Eb(gx::all, gx::indices(i))) + gx::unsqueeze<1>(Ea(gx::all, gx::indices(js)));
  }
};

template <class E>
using plan_of = gx::backward_plan_t<E>;
template <class E>
using first_t = std::remove_cvref_t<decltype(gx::get<0>(std::declval<plan_of<E>&>()))>;
using term_sq = decltype(gx::sum(gx::square(std::declval<tables const&>().term())));
using batched_sq = decltype(gx::sum(gx::square(std::declval<tables const&>().batched())));
using batched_sum = decltype(gx::sum(std::declval<tables const&>().batched()));

// both square losses plan one fused pair; the batched sum loss two collapsed kernels
static_assert(gx::ad::is_fused<first_t<term_sq>>::value);
static_assert(gx::ad::is_fused<first_t<batched_sq>>::value);
static_assert(!gx::ad::is_fused<first_t<batched_sum>>::value);
// both pairs carry the loss value (docs/ad.md): the per-term one as a nest whose A projects
// nothing, the batched one (A summing over terms) because F comes from its region top's value
// (host::detail::top_in_f_v)
template <class E>
constexpr int carrier_v = gx::detail::loss_carrier<gx::host::executor, gx::saved_expr_t<E>, plan_of<E>>::value;
static_assert(carrier_v<term_sq> == 0);
static_assert(carrier_v<decltype(gx::mean(gx::square(std::declval<tables const&>().term())))> == 0);
static_assert(carrier_v<batched_sq> == 0);
static_assert(gx::host::detail::top_in_f_v<gx::host::detail::loss_root<gx::saved_expr_t<batched_sq>>::arg,
                                                decltype(first_t<batched_sq>::first_), 3>);

}  // namespace

TEST_CASE("fused pair: gradients are the bits of the uses apart, at 1 and 2 threads; the carried value the bits of value()") {
  for (long S : {50L, 3000L}) {
    for (long T : {10L, 100L}) {
      CAPTURE(S);
      CAPTURE(T);
      tables tb(S, T);
      std::vector<float> ref_a[6], ref_b[6];  // per loss, at one thread
      for (int threads : {1, 2}) {
        CAPTURE(threads);
        thread_scope ts(threads);
        auto check = [&](auto const& e, int which) {
          float const v = gx::value(e);
          gx::zero_grad(tb.Ea, tb.Eb);
          float const w = gx::backward(e);
          auto ga = dense_grad(tb.Ea), gb = dense_grad(tb.Eb);
          CHECK(std::memcmp(&v, &w, sizeof v) == 0);
          // one parameter wanted: its use runs alone
          CHECK(same(dense_of(gx::grad(e, tb.Ea)), ga));
          CHECK(same(dense_of(gx::grad(e, tb.Eb)), gb));
          gx::zero_grad(tb.Ea, tb.Eb);
          gx::backward_only(e);
          CHECK(same(dense_grad(tb.Ea), ga));
          CHECK(same(dense_grad(tb.Eb), gb));
          if (threads == 1) {
            ref_a[which] = ga;
            ref_b[which] = gb;
          } else {  // the pair runs apart with two threads on enough work: the same bits
            CHECK(same(ga, ref_a[which]));
            CHECK(same(gb, ref_b[which]));
          }
        };
        check(gx::sum(gx::square(tb.batched())), 0);
        check(gx::sum(gx::square(tb.term())), 1);
        check(gx::mean(gx::square(tb.term())), 2);
        check(gx::sum(gx::square(tb.batched()) * 0.5f), 3);  // a constant factor outside the region
        check(gx::sum(gx::tanh(tb.batched())), 4);            // another region top
        check(gx::mean(gx::tanh(tb.term())), 5);
      }
    }
  }
}

TEST_CASE("fused pair: the carried value when a block of the summation scheme ends inside a run") {
  // F with 64 x 32896 (per term) or 64 x 1028 x 32 (batched) elements: the scheme's blocks
  // hold 8224 elements (eval/reduce.hpp block_size: 2,105,344 / 256, rounded to 32 lanes),
  // not a multiple of the nest's 64-element runs, so every other block ends inside a run,
  // which the lanes add themselves (host::detail::loss_lanes::run) after the runs the nest
  // added in registers: the value still has value()'s bits
  thread_scope ts(1);
  static_assert(gx::ev::block_size<float>(64 * 32896) == 8224);
  tables per_term(32896, 1);
  tables batched(1028, 32);
  auto check = [](auto& tb, auto const& e) {
    float const v = gx::value(e);
    gx::zero_grad(tb.Ea, tb.Eb);
    float const w = gx::backward(e);
    CHECK(std::memcmp(&v, &w, sizeof v) == 0);
    auto ga = dense_grad(tb.Ea), gb = dense_grad(tb.Eb);
    gx::zero_grad(tb.Ea, tb.Eb);
    gx::backward_only(e);
    CHECK(same(dense_grad(tb.Ea), ga));
    CHECK(same(dense_grad(tb.Eb), gb));
  };
  check(per_term, gx::sum(gx::square(per_term.term())));
  check(per_term, gx::mean(gx::square(per_term.term())));
  check(batched, gx::sum(gx::square(batched.batched())));
  check(batched, gx::sum(gx::square(batched.batched()) * 0.5f));
  check(batched, gx::mean(gx::tanh(batched.batched())));
}

TEST_CASE("fused pair: the batched square loss's gradient matches central differences") {
  std::vector<int> i{3, 0, 3, 5};   // a repeated entry
  std::vector<int> js{1, 4, 1};     // a repeated term column
  auto A = gx::uniform<double, gx::col_major>(gx::dims(gx::fix<8>, 6), 3, -1.0, 1.0);
  auto B = gx::uniform<double, gx::col_major>(gx::dims(gx::fix<8>, 7), 4, -1.0, 1.0);
  auto f = [&](auto const& a, auto const& b) {
    return gx::sum(gx::square(gx::unsqueeze<2>(a(gx::all, gx::indices(i))) +
                              gx::unsqueeze<1>(b(gx::all, gx::indices(js)))));
  };
  auto r = gx::gradcheck(f, A, B);
  CHECK_MESSAGE(r.ok(), r);
}

TEST_CASE("batched sum loss: backward's value by the broadcast rule, close to value() and to the exact sum") {
  // sum(unsqueeze<2>(A) + unsqueeze<1>(B)) = T sum(A) + S sum(B) (api/backward.hpp,
  // split_sum): two small reductions instead of one over 64 x S x T; not value()'s bits
  static_assert(gx::detail::split_sum_v<gx::saved_expr_t<batched_sum>>);
  static_assert(!gx::detail::split_sum_v<gx::saved_expr_t<batched_sq>>);
  for (long S : {50L, 3000L}) {
    for (long T : {10L, 100L}) {
      CAPTURE(S);
      CAPTURE(T);
      tables tb(S, T);
      double exact = 0;
      for (long s = 0; s < S; ++s)
        for (long t = 0; t < T; ++t)
          for (int r = 0; r < 64; ++r)
            exact += double(tb.Eb.value()(r, tb.i[std::size_t(s)])) + double(tb.Ea.value()(r, tb.js[std::size_t(t)]));
      for (bool mean : {false, true}) {
        CAPTURE(mean);
        double const n = double(S) * double(T) * 64;
        double const want = mean ? exact / n : exact;
        float const v = mean ? gx::value(gx::mean(tb.batched())) : gx::value(gx::sum(tb.batched()));
        gx::zero_grad(tb.Ea, tb.Eb);
        float const w = mean ? gx::backward(gx::mean(tb.batched())) : gx::backward(gx::sum(tb.batched()));
        // the scale of the terms, not of their sum (which cancels)
        double const scale = (mean ? 1.0 : n) * 4.0;
        CHECK(std::abs(double(w) - want) <= 1e-5 * scale);
        CHECK(std::abs(double(w) - double(v)) <= 2e-5 * scale);
        // the gradients are those of backward_only
        auto ga = dense_grad(tb.Ea), gb = dense_grad(tb.Eb);
        gx::zero_grad(tb.Ea, tb.Eb);
        if (mean) gx::backward_only(gx::mean(tb.batched()));
        else gx::backward_only(gx::sum(tb.batched()));
        CHECK(same(dense_grad(tb.Ea), ga));
        CHECK(same(dense_grad(tb.Eb), gb));
      }
    }
  }
}

TEST_CASE("fused pair: a row broadcast over a row-major matrix, losses with a factor, the bits of the uses apart") {
  // A (n x 48) and a row B (1 x 48): B's use sums every row; v carries a factor (mean's 1/n,
  // a second read of A) that g++ may contract into the additions: it must do so as the two
  // uses' own kernels do (grad() of one parameter; two threads on enough work)
  for (gx::index_t rows : {gx::index_t(7), gx::index_t(5000)}) {
    CAPTURE(rows);
    auto A = gx::param(gx::uniform<float>(gx::dims(rows, gx::fix<48>), 21, -1.f, 1.f));
    auto B = gx::param(gx::uniform<float>(gx::dims(gx::fix<1>, gx::fix<48>), 22, -1.f, 1.f));
    auto check = [&](auto const& e) {
      std::vector<float> ra, rb;
      for (int threads : {1, 2}) {
        CAPTURE(threads);
        thread_scope ts(threads);
        gx::zero_grad(A, B);
        gx::backward(e);
        auto flat = [](auto const& t) { return std::vector<float>(t.data(), t.data() + t.shape().size()); };
        auto const va = flat(A.grad().dense());
        auto const vb = flat(B.grad().dense());
        CHECK(same(flat(gx::grad(e, A).dense()), va));
        CHECK(same(flat(gx::grad(e, B).dense()), vb));
        if (threads == 1) {
          ra = va;
          rb = vb;
        } else {
          CHECK(same(va, ra));
          CHECK(same(vb, rb));
        }
      }
    };
    check(gx::mean(gx::square(A + B)));
    check(gx::mean(gx::tanh(A + B)));
    check(gx::mean(gx::exp(A + B)));
    check(gx::sum(gx::square(A + B) * A));
  }
}

TEST_CASE("batched sum loss: backward's value by the broadcast rule keeps its accuracy when the terms cancel") {
  // terms near +1000 and -1000: the parts of the rule are large and of opposite signs (they
  // are accumulated in double, so the value stays as close to the exact sum as value()'s)
  auto A = gx::param(gx::uniform<float>(gx::dims(gx::fix<64>, 500), 31, 999.f, 1001.f));
  auto B = gx::param(gx::uniform<float>(gx::dims(gx::fix<64>, 100), 32, -1001.f, -999.f));
  auto e = gx::sum(gx::unsqueeze<2>(A) + gx::unsqueeze<1>(B));
  static_assert(gx::detail::split_sum_v<gx::saved_expr_t<decltype(e)>>);
  double exact = 0;
  for (int r = 0; r < 64; ++r)
    for (gx::index_t s = 0; s < 500; ++s)
      for (gx::index_t t = 0; t < 100; ++t) exact += double(A.value()(r, s)) + double(B.value()(r, t));
  float const v = gx::value(e);
  float const w = gx::backward(e);
  CAPTURE(exact);
  CAPTURE(v);
  CAPTURE(w);
  CHECK(std::abs(double(w) - exact) <= std::max(1.0, std::abs(double(v) - exact)));
}
