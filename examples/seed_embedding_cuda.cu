// seed_embedding --device cuda: the device run (seed_embedding_device.hpp) with
// gradix::cuda::launcher on the per-thread default stream. Built and linked into
// seed_embedding where meson finds nvcc (examples/meson.build).
#include "seed_embedding_device.hpp"

#include <gradix/backend/cuda/launch.hpp>

#include <cstdio>

int seed::run_cuda(options const& o) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "seed_embedding: --device cuda: no CUDA device\n");
    return 77;
  }
  cudaDeviceProp p{};
  (void)cudaGetDeviceProperties(&p, 0);
  std::printf("seed_embedding: device %s, %s-major tables, Ea %ld x %ld, Eb %ld x %ld, k = %ld, n = %ld, loss %s%s, %s scatter\n",
              p.name, o.row ? "row" : "column", o.row ? o.na : o.d, o.row ? o.d : o.na, o.row ? o.nb : o.d,
              o.row ? o.d : o.nb, o.k, o.n, o.square ? "square" : "sum", o.batched ? ", batched" : "",
              o.deterministic ? "deterministic" : "atomic");
  try {
    gradix::cuda::launcher l;
    int const status = seed::run_device(l, o);
    l.synchronize();
    return status;
  } catch (gradix::error const& e) {
    std::fprintf(stderr, "seed_embedding: %s\n", e.what());
    return 1;
  }
}
