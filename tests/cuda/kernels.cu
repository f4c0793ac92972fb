// The kernels of backend/grid on a GPU through gradix::cuda::launcher (suite `cuda`),
// against the host backend and against the grid emulator (tests/cuda/emulator.hpp), which
// runs the same kernel code in CI. Without a CUDA device the program exits 77 (meson: SKIP)
// after running the emulator half, so that nvcc still compiles every kernel here.
#include "cuda/emulator.hpp"

#include <gradix/backend/cuda/launch.hpp>
#include <gradix/backend/grid/assign.hpp>
#include <gradix/backend/grid/backward.hpp>
#include <gradix/backend/grid/memory.hpp>
#include <gradix/backend/grid/param.hpp>
#include <gradix/backend/grid/reduce.hpp>
#include <gradix/backend/grid/scatter.hpp>
#include <gradix/backend/grid/sparse.hpp>
#include <gradix/gradix.hpp>
#include <gradix/optim.hpp>

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <type_traits>
#include <vector>

namespace gx = gradix;
using gx::index_t;

namespace {

int failures = 0;

void expect(bool ok, char const* what) {
  if (!ok) {
    std::printf("FAIL: %s\n", what);
    ++failures;
  }
}

constexpr index_t rows = 301;
constexpr index_t cols = 67;

template <class Space>
auto expression(float const* x, float const* b) {
  auto X = gx::view<gx::row_major, Space>(x, gx::dims(rows, gx::fix<cols>));
  auto B = gx::view<gx::row_major, Space>(b, gx::shape<cols>{});
  return gx::exp(X - gx::max<1>(X, gx::keep_dims)) * B + gx::sigmoid(X) - gx::transpose(gx::transpose(X)) * 0.5f;
}

template <class T>
std::uint64_t bits(T v) {
  std::uint64_t r = 0;
  std::memcpy(&r, &v, sizeof(T));
  return r;
}

/// Runs the checks with launcher L over memory at x, b (in L's space), writing into out.
template <class L>
void run_all(L& l, float const* x, float const* b, float* out, std::vector<float>& host_out, float* sums,
             std::vector<float>& col_sums) {
  auto dst = gx::view<gx::row_major, gx::cuda_space>(out, gx::dims(rows, gx::fix<cols>));
  gx::grid::assign(l, dst, expression<gx::cuda_space>(x, b), {128, 7});
  l.copy_to_host(host_out.data(), out, host_out.size() * sizeof(float));
  auto X = gx::view<gx::row_major, gx::cuda_space>(x, gx::dims(rows * cols));
  sums[0] = gx::grid::sum(l, X, {256, 0});
  sums[1] = gx::grid::sum(l, X, {64, 3});
  sums[2] = gx::grid::sum(l, X, {1024, 1});
  // a root reduction over the 301 rows: block-then-grid kernels
  auto X2 = gx::view<gx::row_major, gx::cuda_space>(x, gx::dims(rows, gx::fix<cols>));
  gx::grid::assign(l, gx::view<gx::row_major, gx::cuda_space>(out, gx::shape<cols>{}), gx::sum<0>(X2), {96, 2});
  l.copy_to_host(col_sums.data(), out, col_sums.size() * sizeof(float));
}

/// Scatters the rows of x (rows x cols, device memory at x) at the indices idx (device
/// memory, n of them) into a zeroed 40 x cols table (device memory at table) with mode m, and
/// returns the table on the host.
template <class L>
std::vector<float> scatter(L& l, float const* x, std::int64_t const* idx, index_t n, float* table, gx::grid::scatter_mode m) {
  l.fill_zero(table, 40 * cols * sizeof(float));
  auto tv = gx::view<gx::row_major, gx::cuda_space>(table, gx::dims(40, cols));
  auto src = gx::view<gx::row_major, gx::cuda_space>(x, gx::dims(n, cols));
  gx::grid::scatter_add_rows(l, tv, idx, n, 1, src, m, "gradix::test", {128, 0});
  std::vector<float> r(40 * cols);
  l.copy_to_host(r.data(), table, r.size() * sizeof(float));
  return r;
}


/// The founding benchmark's backward at a small size on launcher L: sum(Eb(:, i) + Ea(:, at(j)))
/// over sparse device parameters, in mode m. Returns Eb's gradient (dense, on the host) and
/// writes the loss.
template <class L>
std::vector<float> founding_grad(L& l, gx::grid::scatter_mode m, float* loss) {
  auto const ha = gx::randn<float, gx::col_major>(gx::dims(64, 1000), 1);
  auto const hb = gx::randn<float, gx::col_major>(gx::dims(64, 300), 2);
  gx::tensor<std::int32_t, gx::shape<gx::dyn>> hi(gx::dims(500));
  for (index_t k = 0; k < 500; ++k) hi(k) = std::int32_t(((k * k * 7) % 1601) % 300);
  using S2 = typename std::remove_cvref_t<decltype(ha)>::shape_type;
  using DT = gx::grid::device_tensor<float, S2, L, gx::col_major>;
  auto pa = gx::grid::param(DT::from_host(l, ha), gx::sparse_grad<1>);
  auto pb = gx::grid::param(DT::from_host(l, hb), gx::sparse_grad<1>);
  auto di = gx::grid::device_tensor<std::int32_t, gx::shape<gx::dyn>, L>::from_host(l, hi);
  *loss = gx::grid::backward(l, gx::sum(pb(gx::all, gx::grid::indices(di)) + pa(gx::all, gx::at(17))), {m, {128, 0}});
  auto const g = pb.grad().download();
  return std::vector<float>(g.data(), g.data() + g.size());
}

#if !defined(GRADIX_TEST_NO_CUBLAS)
/// An MLP step on launcher l (issue 33: a model plan on the device): two products (the
/// launcher's gemm: cuBLAS on a GPU, the host's gemm in the emulator), tanh, log_softmax rows,
/// a one-hot target; returns the loss and both weight gradients. h: the host's gradients.
template <class L>
std::vector<float> mlp_grads(L& l, float* loss) {
  using S2 = gx::shape<gx::dyn, gx::dyn>;
  auto const hx = gx::randn<float>(gx::dims(64, 32), 5, 0.0f, 1.0f);
  auto const hw1 = gx::randn<float>(gx::dims(32, 48), 6, 0.0f, 0.2f);
  auto const hw2 = gx::randn<float>(gx::dims(48, 10), 7, 0.0f, 0.2f);
  gx::tensor<float, S2> hy(gx::dims(64, 10));
  for (index_t i = 0; i < 64; ++i)
    for (index_t j = 0; j < 10; ++j) hy(i, j) = j == (i * 7) % 10 ? 1.0f : 0.0f;
  auto loss_of = [](auto const& x, auto const& y, auto& w1, auto& w2) {
    return -gx::sum(y * gx::log_softmax<1>(gx::matmul(gx::tanh(gx::matmul(x, w1)), w2))) / 64.0f;
  };
  std::vector<float> out;
  if constexpr (std::is_same_v<L, gx::host_space>) {
    auto w1 = gx::param(hw1);
    auto w2 = gx::param(hw2);
    *loss = gx::backward(loss_of(hx, hy, w1, w2));
    auto const g1 = w1.grad().to_dense();
    auto const g2 = w2.grad().to_dense();
    out.assign(g1.data(), g1.data() + g1.size());
    out.insert(out.end(), g2.data(), g2.data() + g2.size());
  } else {
    using DT2 = gx::grid::device_tensor<float, S2, L>;
    auto dx = DT2::from_host(l, hx);
    auto dy = DT2::from_host(l, hy);
    auto w1 = gx::grid::param(DT2::from_host(l, hw1));
    auto w2 = gx::grid::param(DT2::from_host(l, hw2));
    *loss = gx::grid::backward(l, loss_of(dx.view(), dy.view(), w1, w2));
    auto const g1 = w1.grad().download();
    auto const g2 = w2.grad().download();
    out.assign(g1.data(), g1.data() + g1.size());
    out.insert(out.end(), g2.data(), g2.data() + g2.size());
    // device optimizer steps (training/device_steps.hpp): compiled by nvcc here; their
    // results are checked against the host's in the emulator suite (tests/cuda/optim_test.cpp)
    gx::optim::sgd({.lr = 0.01, .momentum = 0.9}, w1).step();
    gx::optim::adagrad({.lr = 0.01}, w2).step();
  }
  return out;
}
/// An LSTM layer (gx::cells::lstm_projected) over 6 steps as a gx::scan on launcher l (the
/// host backend for gx::host_space): the loss and the recurrent weight's gradient; then the
/// same for a GRU layer (gx::cells::gru_projected), its bias's gradient too (losses added). A step
/// kept for the sweep is the product and one launch writing the gates, c2 and the carry
/// (exec/save_scan.hpp, with_saved_together): compiled by nvcc here; its launches are
/// counted in the emulator suite (tests/cuda/model_test.cpp).
template <class L>
std::vector<float> lstm_grads(L& l, float* loss) {
  using S2 = gx::shape<gx::dyn, gx::dyn>;
  using S3 = gx::shape<gx::dyn, gx::dyn, gx::dyn>;
  index_t const H = 16;
  auto const hwh = gx::randn<float>(gx::dims(H, 4 * H), 8, 0.0f, 0.3f);
  auto const hc0 = gx::randn<float>(gx::dims(8, 2 * H), 9, 0.0f, 0.5f);
  auto const hxw = gx::randn<float>(gx::dims(6, 8, 4 * H), 10, 0.0f, 0.5f);
  // and a GRU layer (gru_projected) over the same steps: its bias's gradient taken over
  // every step when the sweep ends (add_row_sums: ordered_block_sum_kernel)
  auto const gwh = gx::randn<float>(gx::dims(H, 3 * H), 11, 0.0f, 0.3f);
  auto const gbh = gx::randn<float>(gx::dims(3 * H), 12, 0.0f, 0.2f);
  auto const gh0 = gx::randn<float>(gx::dims(8, H), 13, 0.0f, 0.5f);
  auto const gxw = gx::randn<float>(gx::dims(6, 8, 3 * H), 14, 0.0f, 0.5f);
  auto loss_of = [](auto const& c0, auto const& xw, auto& wh) {
    return gx::sum(gx::square(gx::scan(c0, xw, [&wh](auto hc, auto xt) { return gx::cells::lstm_projected(xt, hc, wh); })));
  };
  auto gru_loss = [](auto const& h0, auto const& xw, auto& wh, auto& bh) {
    return gx::sum(gx::square(gx::scan(h0, xw, [&wh, &bh](auto h, auto xt) { return gx::cells::gru_projected(xt, h, wh, bh); })));
  };
  // and an LSTM that concatenates its input and carry (gx::cells::lstm): the device takes
  // its product apart (api/scan_hoist.hpp; the host keeps it whole), its input's adjoint
  // added over every step when the sweep ends (add_rows)
  index_t const D = 5;
  auto const cw = gx::randn<float>(gx::dims(D + H, 4 * H), 15, 0.0f, 0.3f);
  auto const cb = gx::randn<float>(gx::dims(4 * H), 16, 0.0f, 0.2f);
  auto const cxs = gx::randn<float>(gx::dims(6, 8, D), 17, 0.0f, 0.5f);
  auto cat_loss = [](auto const& c0, auto const& xs, auto& w, auto& b) {
    return gx::sum(gx::square(gx::scan(c0, xs, [&w, &b](auto hc, auto xt) { return gx::cells::lstm(xt, hc, w, b); })));
  };
  std::vector<float> out;
  auto put = [&](auto const& g) { out.insert(out.end(), g.data(), g.data() + g.size()); };
  if constexpr (std::is_same_v<L, gx::host_space>) {
    auto wh = gx::param(hwh);
    *loss = gx::backward(loss_of(hc0, hxw, wh));
    put(wh.grad().to_dense());
    auto gw = gx::param(gwh);
    auto gb = gx::param(gbh);
    *loss += gx::backward(gru_loss(gh0, gxw, gw, gb));
    put(gw.grad().to_dense());
    put(gb.grad().to_dense());
    auto pw = gx::param(cw);
    auto pb = gx::param(cb);
    *loss += gx::backward(cat_loss(hc0, cxs, pw, pb));
    put(pw.grad().to_dense());
    put(pb.grad().to_dense());
  } else {
    auto dc0 = gx::grid::device_tensor<float, S2, L>::from_host(l, hc0);
    auto dxw = gx::grid::device_tensor<float, S3, L>::from_host(l, hxw);
    auto wh = gx::grid::param(gx::grid::device_tensor<float, S2, L>::from_host(l, hwh));
    *loss = gx::grid::backward(l, loss_of(dc0.view(), dxw.view(), wh));
    put(wh.grad().download());
    auto dh0 = gx::grid::device_tensor<float, S2, L>::from_host(l, gh0);
    auto dgx = gx::grid::device_tensor<float, S3, L>::from_host(l, gxw);
    auto gw = gx::grid::param(gx::grid::device_tensor<float, S2, L>::from_host(l, gwh));
    auto gb = gx::grid::param(gx::grid::device_tensor<float, gx::shape<gx::dyn>, L>::from_host(l, gbh));
    *loss += gx::grid::backward(l, gru_loss(dh0.view(), dgx.view(), gw, gb));
    put(gw.grad().download());
    put(gb.grad().download());
    auto dxs = gx::grid::device_tensor<float, S3, L>::from_host(l, cxs);
    auto pw = gx::grid::param(gx::grid::device_tensor<float, S2, L>::from_host(l, cw));
    auto pb = gx::grid::param(gx::grid::device_tensor<float, gx::shape<gx::dyn>, L>::from_host(l, cb));
    *loss += gx::grid::backward(l, cat_loss(dc0.view(), dxs.view(), pw, pb));
    put(pw.grad().download());
    put(pb.grad().download());
  }
  return out;
}
/// A bfloat16 table on launcher l (issue 35): gathered rows, the backward into its float
/// sparse gradient, then an Adagrad step and a lazy Adam step with stochastic rounding;
/// returns the table's values (widened). The emulator suite checks these steps against the
/// host's to the bit (tests/cuda/optim_test.cpp); here nvcc compiles them and a GPU's result
/// is compared with the emulator's.
template <class L>
std::vector<float> bf16_table_steps(L& l) {
  using S2 = gx::shape<gx::dyn, gx::dyn>;
  gx::tensor<gx::bfloat16, S2> h0(gx::dims(40, 16));
  h0 = gx::randn<float>(gx::dims(40, 16), 8, 0.0f, 0.5f);
  gx::tensor<std::int32_t, gx::shape<gx::dyn>> hi(gx::dims(12));
  for (index_t k = 0; k < 12; ++k) hi(k) = std::int32_t((k * k * 5) % 40);
  auto p = gx::grid::param(gx::grid::device_tensor<gx::bfloat16, S2, L>::from_host(l, h0), gx::sparse_grad<0>);
  p.set_rounding(gx::stochastic_rounding(5));
  auto di = gx::grid::device_tensor<std::int32_t, gx::shape<gx::dyn>, L>::from_host(l, hi);
  gx::optim::adagrad ada({.lr = 0.05}, p);
  gx::optim::lazy_adam adam({.lr = 0.01}, p);
  for (int step = 0; step < 2; ++step) {
    ada.zero_grad();
    gx::grid::backward(l, gx::sum(gx::square(p(gx::grid::indices(di), gx::all) - 0.25f)));
    ada.step();
    adam.step();
  }
  auto const v = p.value().download();
  std::vector<float> out;
  for (index_t k = 0; k < v.size(); ++k) out.push_back(float(v.data()[k]));
  return out;
}

bool close_all(std::vector<float> const& a, std::vector<float> const& b, float tol) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (std::abs(a[i] - b[i]) > tol * (1 + std::abs(b[i]))) return false;
  return true;
}
#endif

}  // namespace

int main() {
  std::vector<float> x(rows * cols), b(cols);
  for (index_t i = 0; i < rows * cols; ++i) x[std::size_t(i)] = float((i * 7919) % 1013) / 1013.0f - 0.4f;
  for (index_t j = 0; j < cols; ++j) b[std::size_t(j)] = 0.5f + 0.01f * float(j);
  // host backend
  gx::tensor<float, gx::shape<gx::dyn, cols>> want(gx::dims(rows, gx::fix<cols>));
  gx::assign(want, expression<gx::host_space>(x.data(), b.data()));
  // emulator (host memory stands in for device memory)
  std::vector<float> emu_out(x.size(), -1.0f), emu_buf(x.size());
  float emu_sums[3];
  std::vector<float> emu_cols(cols), dev_cols(cols);
  {
    gradix_test::emu::launcher l;
    run_all(l, x.data(), b.data(), emu_buf.data(), emu_out, emu_sums, emu_cols);
  }
  for (index_t i = 0; i < want.size(); ++i)
    if (std::abs(emu_out[std::size_t(i)] - want.data()[i]) > 1e-5f * (1 + std::abs(want.data()[i]))) {
      expect(false, "emulator assign equals the host backend");
      break;
    }
  {
    auto hc = gx::eval(gx::sum<0>(gx::view(x.data(), gx::dims(rows, gx::fix<cols>))));
    for (index_t j = 0; j < cols; ++j)
      if (std::abs(emu_cols[std::size_t(j)] - hc(j)) > 1e-4f * (1 + std::abs(hc(j)))) {
        expect(false, "emulator sum<0> equals the host backend");
        break;
      }
  }
  expect(bits(emu_sums[0]) == bits(emu_sums[1]) && bits(emu_sums[1]) == bits(emu_sums[2]),
         "emulator sum: the same bits for three launch shapes");

  // scatter: 301 rows into 40 (Zipf-like skew: low ids repeat most)
  std::vector<std::int64_t> idx(rows);
  for (index_t i = 0; i < rows; ++i) idx[std::size_t(i)] = std::int64_t((i * i * 7) % 1601) / 41;
  std::vector<float> emu_det, emu_atomic, table(40 * cols);
  {
    gradix_test::emu::launcher l;
    emu_det = scatter(l, x.data(), idx.data(), rows, table.data(), gx::grid::scatter_mode::deterministic);
    emu_atomic = scatter(l, x.data(), idx.data(), rows, table.data(), gx::grid::scatter_mode::atomic);
  }
  gx::tensor<float, gx::shape<gx::dyn, gx::dyn>> emu_sparse;
  std::vector<std::int32_t> emu_ids;
  {
    gradix_test::emu::launcher l;
    gx::grid::device_sparse_rows<float, gradix_test::emu::launcher> g(l, 40, cols);
    auto src = gx::view<gx::row_major, gx::cuda_space>(x.data(), gx::dims(rows, cols));
    g.scatter_add(idx.data(), rows, 1, src, "gradix::test");
    g.scatter_add(idx.data() + 100, 50, 1, gx::index(src, gx::range(0, 50), gx::all), "gradix::test");
    emu_sparse = g.download_dense();
    emu_ids = g.ids();
  }
  for (std::size_t i = 0; i < emu_det.size(); ++i)
    if (std::abs(emu_det[i] - emu_atomic[i]) > 1e-4f * (1 + std::abs(emu_det[i]))) {
      expect(false, "emulator: atomic and deterministic scatters agree");
      break;
    }

  std::vector<float> emu_bf16;
  {
    gradix_test::emu::launcher l;
    emu_bf16 = bf16_table_steps(l);
  }

  // the device backward of the founding benchmark's expression
  float emu_loss = 0;
  std::vector<float> emu_grad;
  {
    gradix_test::emu::launcher l;
    emu_grad = founding_grad(l, gx::grid::scatter_mode::deterministic, &emu_loss);
  }

#if !defined(GRADIX_TEST_NO_CUBLAS)
  // an MLP step (model plan) in the emulator against the host
  float host_mlp_loss = 0, emu_mlp_loss = 0;
  std::vector<float> host_mlp, emu_mlp;
  {
    gx::host_space h;
    host_mlp = mlp_grads(h, &host_mlp_loss);
    gradix_test::emu::launcher l;
    emu_mlp = mlp_grads(l, &emu_mlp_loss);
  }
  expect(close_all(emu_mlp, host_mlp, 1e-5f) && std::abs(emu_mlp_loss - host_mlp_loss) <= 1e-5f * (1 + std::abs(host_mlp_loss)),
         "emulator MLP step equals the host's");
  float host_lstm_loss = 0, emu_lstm_loss = 0;
  std::vector<float> host_lstm, emu_lstm;
  {
    gx::host_space h;
    host_lstm = lstm_grads(h, &host_lstm_loss);
    gradix_test::emu::launcher l;
    emu_lstm = lstm_grads(l, &emu_lstm_loss);
  }
  expect(close_all(emu_lstm, host_lstm, 1e-5f) && std::abs(emu_lstm_loss - host_lstm_loss) <= 1e-5f * (1 + std::abs(host_lstm_loss)),
         "emulator LSTM scans (backward; the concatenating cell taken apart) equal the host's");
#endif

  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("no CUDA device: ran the emulator half only (%d failures)\n", failures);
    return failures ? 1 : 77;
  }
  gx::cuda::launcher l;
  using V = gx::shape<gx::dyn>;
  gx::tensor<float, V> hx(gx::dims(rows * cols), x), hb(gx::dims(cols), b);
  auto dx = gx::grid::device_tensor<float, V, gx::cuda::launcher>::from_host(l, hx);
  auto db = gx::grid::device_tensor<float, V, gx::cuda::launcher>::from_host(l, hb);
  auto dout = gx::grid::device_tensor<float, V, gx::cuda::launcher>::zeros(l, gx::dims(rows * cols));
  std::vector<float> dev_out(x.size(), -1.0f);
  float dev_sums[3];
  run_all(l, dx.data(), db.data(), dout.data(), dev_out, dev_sums, dev_cols);
  for (index_t i = 0; i < want.size(); ++i)
    if (std::abs(dev_out[std::size_t(i)] - want.data()[i]) > 1e-5f * (1 + std::abs(want.data()[i]))) {
      std::printf("element %ld: device %.9g, host %.9g\n", long(i), double(dev_out[std::size_t(i)]),
                  double(want.data()[i]));
      expect(false, "device assign equals the host backend");
      break;
    }
  for (int k = 0; k < 3; ++k) expect(bits(dev_sums[k]) == bits(emu_sums[k]), "device sum has the emulator's bits");
  for (index_t j = 0; j < cols; ++j)
    if (bits(dev_cols[std::size_t(j)]) != bits(emu_cols[std::size_t(j)])) {
      expect(false, "device sum<0> has the emulator's bits");
      break;
    }
  expect(dx.download()(7) == x[7], "device_tensor round trip");
  {
    gx::tensor<std::int64_t, V> hidx(gx::dims(rows), idx);
    auto didx = gx::grid::device_tensor<std::int64_t, V, gx::cuda::launcher>::from_host(l, hidx);
    auto dtable = gx::grid::device_tensor<float, V, gx::cuda::launcher>(l, gx::dims(40 * cols));
    for (int rep = 0; rep < 3; ++rep) {
      auto det = scatter(l, dx.data(), didx.data(), rows, dtable.data(), gx::grid::scatter_mode::deterministic);
      auto at = scatter(l, dx.data(), didx.data(), rows, dtable.data(), gx::grid::scatter_mode::atomic);
      for (std::size_t i = 0; i < det.size(); ++i) {
        if (bits(det[i]) != bits(emu_det[i])) {
          expect(false, "device deterministic scatter has the emulator's bits");
          break;
        }
        if (std::abs(at[i] - emu_det[i]) > 1e-4f * (1 + std::abs(emu_det[i]))) {
          expect(false, "device atomic scatter is close to the deterministic one");
          break;
        }
      }
    }
    {
      gx::grid::device_sparse_rows<float, gx::cuda::launcher> g(l, 40, cols);
      auto src = gx::view<gx::row_major, gx::cuda_space>(dx.cview().data(), gx::dims(rows, cols));
      g.scatter_add(didx.cview().data(), rows, 1, src, "gradix::test");
      g.scatter_add(didx.cview().data() + 100, 50, 1, gx::index(src, gx::range(0, 50), gx::all), "gradix::test");
      auto d = g.download_dense();
      bool same = g.ids() == emu_ids;
      for (index_t i = 0; i < d.size(); ++i) same = same && bits(d.data()[i]) == bits(emu_sparse.data()[i]);
      expect(same, "device sparse storage: the emulator's slots and bits");
    }
    // an out-of-range index: an error, the table unchanged
    std::int64_t bad = 40;
    l.copy_to_device(didx.data() + 5, &bad, sizeof bad);
    std::vector<float> before(40 * cols), after(40 * cols);
    l.copy_to_host(before.data(), dtable.data(), before.size() * sizeof(float));
    bool threw = false;
    try {
      gx::grid::scatter_add_rows(l, gx::view<gx::row_major, gx::cuda_space>(dtable.data(), gx::dims(40, cols)), didx.data(), rows, 1,
                                 gx::view<gx::row_major, gx::cuda_space>(dx.cview().data(), gx::dims(rows, cols)),
                                 gx::grid::scatter_mode::atomic, "gradix::test");
    } catch (gx::error const& e) {
      threw = std::strcmp(e.what(), "gradix::test: index 40 (position 5) is out of range for axis 0 of extent 40") == 0;
    }
    l.copy_to_host(after.data(), dtable.data(), after.size() * sizeof(float));
    expect(threw && before == after, "device validation: out-of-range index reported, nothing written");
  }
  {
    float det_loss = 0, at_loss = 0;
    auto const det = founding_grad(l, gx::grid::scatter_mode::deterministic, &det_loss);
    auto const at = founding_grad(l, gx::grid::scatter_mode::atomic, &at_loss);
    bool same = det.size() == emu_grad.size(), close = same;
    for (std::size_t i = 0; same && i < det.size(); ++i) same = bits(det[i]) == bits(emu_grad[i]);
    for (std::size_t i = 0; close && i < at.size(); ++i) close = std::abs(at[i] - det[i]) <= 1e-4f * (1 + std::abs(det[i]));
    expect(same, "device backward, deterministic: the emulator's bits");
    expect(close, "device backward, atomic: close to the deterministic gradient");
    expect(std::abs(det_loss - emu_loss) <= 1e-4f * (1 + std::abs(emu_loss)), "device backward: the emulator's loss");
  }
  {
    // (the device may contract a * b + c into one FMA where the host does not: a value may
    // round to the neighbouring bfloat16)
    auto const dev_bf16 = bf16_table_steps(l);
    bool close = dev_bf16.size() == emu_bf16.size();
    for (std::size_t i = 0; close && i < dev_bf16.size(); ++i)
      close = std::abs(dev_bf16[i] - emu_bf16[i]) <= 0x1p-7f * std::abs(emu_bf16[i]) + 1e-30f;
    expect(close, "device bfloat16 table steps (Adagrad, lazy Adam, stochastic rounding): the emulator's within one bfloat16 step");
  }
#if !defined(GRADIX_TEST_NO_CUBLAS)
  {
    float dev_mlp_loss = 0;
    auto const dev_mlp = mlp_grads(l, &dev_mlp_loss);
    expect(close_all(dev_mlp, emu_mlp, 1e-4f) && std::abs(dev_mlp_loss - emu_mlp_loss) <= 1e-4f * (1 + std::abs(emu_mlp_loss)),
           "device MLP step (cuBLAS) close to the emulator's");
  }
  {
    float dev_lstm_loss = 0;
    auto const dev_lstm = lstm_grads(l, &dev_lstm_loss);
    expect(close_all(dev_lstm, emu_lstm, 1e-4f) && std::abs(dev_lstm_loss - emu_lstm_loss) <= 1e-4f * (1 + std::abs(emu_lstm_loss)),
           "device LSTM scan (cuBLAS; a kept step: the product and one launch) close to the emulator's");
  }
#endif
  l.synchronize();
  // an error from CUDA becomes a gradix::error naming the call
  bool threw = false;
  try {
    l.launch({1, 4096, 0}, gx::grid::assign_kernel<decltype(gx::view<gx::row_major, gx::cuda_space>(dout.data(), gx::dims(1))),
                                                    decltype(gx::view<gx::row_major, gx::cuda_space>(dx.cview().data(), gx::dims(1)) * 1.0f)>{});
  } catch (gx::error const& e) {
    threw = std::strstr(e.what(), "gradix::cuda: kernel launch: ") != nullptr;
    std::printf("expected error: %s\n", e.what());
  }
  expect(threw, "a launch of 4096 threads per block is a gradix::error");
  std::printf("%s (%d failures)\n", failures ? "FAILED" : "ok", failures);
  return failures ? 1 : 0;
}
