// gx::matmul forward against a plain cblas_sgemm call on the same data, interleaved in one
// process (machine noise hits both alike): the overhead gradix adds to the BLAS (building the
// expression, the API's checks, the save transform, folding the transposes). Shapes of an
// MLP layer (batch 256, 784-512-512-10) and a few square and skinny ones, with the right
// operand plain and transposed, at 1 thread and all threads (gradix sets the BLAS's thread
// count to its own). Prints one line per shape and thread count: medians over reps of each
// side in microseconds, and gradix's throughput as a fraction of cblas_sgemm's.
//
// Usage: bench_matmul [--reps R]
#include <gradix/gradix.hpp>

#if !defined(GRADIX_USE_OPENBLAS)
#include <cstdio>
int main() {
  std::puts("bench_matmul: gradix was built without OpenBLAS (install libopenblas-dev); nothing to compare");
  return 0;
}
#else
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace gx = gradix;
using gx::dyn;
using gx::index_t;

static double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
static double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int main(int argc, char** argv) {
  int reps = 31;
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], "--reps") == 0 && i + 1 < argc) reps = std::atoi(argv[++i]);
  struct shape3 {
    index_t m, k, n;
  };
  std::vector<shape3> shapes = {{256, 784, 512}, {256, 512, 512}, {256, 512, 10}, {512, 512, 512},
                                {64, 64, 64},    {1024, 64, 1024}, {32, 2048, 32}};
  int const hw = int(std::max(1u, std::thread::hardware_concurrency()));
  std::printf("%-18s %7s %5s %10s %10s %8s\n", "shape (m k n)", "B", "thr", "blas_us", "gradix_us", "gx/blas");
  for (int threads : {1, hw}) {
    gx::set_num_threads(threads);
    for (auto s : shapes) {
      using TF = gx::tensor<float, gx::shape<dyn, dyn>>;
      auto A = gx::uniform<float>(gx::dims(s.m, s.k), 1, -1.0f, 1.0f);
      auto B = gx::uniform<float>(gx::dims(s.k, s.n), 2, -1.0f, 1.0f);
      TF Bt(gx::dims(s.n, s.k));  // (n, k) row-major: B^T's memory
      gx::assign(Bt, gx::transpose(B));
      TF C(gx::dims(s.m, s.n)), R(gx::dims(s.m, s.n));
      for (int trans = 0; trans < 2; ++trans) {
        std::vector<double> tb, tg;
        int const inner = s.m * s.k * s.n < 4'000'000 ? 20 : 1;  // small products: many per sample
        for (int r = 0; r < reps + 2; ++r) {
          openblas_set_num_threads(threads);
          double t0 = now();
          for (int q = 0; q < inner; ++q) {
            if (trans)
              cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(s.m), int(s.n), int(s.k), 1.0f, A.data(),
                          int(s.k), Bt.data(), int(s.k), 0.0f, R.data(), int(s.n));
            else
              cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(s.m), int(s.n), int(s.k), 1.0f, A.data(),
                          int(s.k), B.data(), int(s.n), 0.0f, R.data(), int(s.n));
          }
          double t1 = now();
          for (int q = 0; q < inner; ++q) {
            if (trans) gx::assign(C, gx::matmul(A, gx::transpose(Bt)));
            else gx::assign(C, gx::matmul(A, B));
          }
          double t2 = now();
          if (r >= 2) {  // two warm-ups
            tb.push_back((t1 - t0) / inner);
            tg.push_back((t2 - t1) / inner);
          }
        }
        double maxdiff = 0;
        for (index_t e = 0; e < C.size(); ++e) maxdiff = std::max(maxdiff, double(std::abs(C.data()[e] - R.data()[e])));
        if (maxdiff != 0) std::printf("  (results differ by up to %g)\n", maxdiff);
        double mb = median(tb), mg = median(tg);
        char name[64];
        std::snprintf(name, sizeof name, "%ld %ld %ld", long(s.m), long(s.k), long(s.n));
        std::printf("%-18s %7s %5d %10.1f %10.1f %8.3f\n", name, trans ? "B^T" : "B", threads, mb * 1e6, mg * 1e6,
                    mb / mg);
      }
    }
  }
  return 0;
}
#endif
