// gradix::dist::nccl_data_parallel (gradix/dist/nccl.hpp) on a GPU, under mpirun (suite cuda;
// exits 77, SKIP, without a device). Per block, known gradients are written into the device
// parameters' gradients and kept; after reduce() the device gradients must have the bits of
// gradix::dist::data_parallel over host parameters given the same blocks (exact mode), and be
// close to them with exact = false. One GPU per rank (NCCL refuses two ranks on one GPU).
#include <gradix/dist/nccl.hpp>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

namespace gx = gradix;
namespace dist = gradix::dist;
using gx::dyn;
using gx::index_t;

namespace {
float grad_value(index_t block, index_t x) {
  std::uint64_t s = std::uint64_t(block) * 1000003u + std::uint64_t(x) * 7919u + 17u;
  s = s * 6364136223846793005ull + 1442695040888963407ull;
  return float(double(s >> 40) / double(1 << 24) - 0.5) * float(1 << (s >> 61));
}
}  // namespace

int main(int argc, char** argv) {
  dist::environment env(argc, argv);
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("no CUDA device: skipped\n");
    return 77;
  }
  int failures = 0;
  try {
    dist::communicator world;
    if (world.size() > devices) {
      if (world.rank() == 0) std::printf("%d ranks for %d GPUs: skipped (one GPU per rank)\n", world.size(), devices);
      return 77;
    }
    cudaSetDevice(world.rank());
    gx::cuda::launcher l;
    dist::nccl_communicator gpus(world, l.stream());
    index_t const n = 1000;
    dist::block_split split(world, 40, 7);
    for (bool exact : {true, false}) {
      // host reference
      gx::parameter<float, gx::shape<dyn>> H{gx::tensor<float, gx::shape<dyn>>(gx::dims(n))};
      dist::data_parallel host(world, split, dist::data_parallel_options{.exact = exact}, H);
      // device
      auto D = gx::grid::param(gx::grid::make_device_tensor<float>(l, gx::dims(n)));
      dist::nccl_data_parallel dev(gpus, split, dist::data_parallel_options{.exact = exact}, D);
      std::vector<float> g(static_cast<std::size_t>(n));
      for (index_t j = split.first_block(); j < split.end_block(); ++j) {
        for (index_t x = 0; x < n; ++x) g[std::size_t(x)] = grad_value(j, x);
        std::memcpy(H.grad().data(), g.data(), g.size() * sizeof(float));
        H.grad().touch_all();
        host.keep(j);
        l.copy_to_device(D.grad().data(), g.data(), g.size() * sizeof(float));
        dev.keep(j);
      }
      host.reduce();
      dev.reduce();
      auto const got = D.grad().download();
      int bad = 0;
      for (index_t x = 0; x < n; ++x) {
        float const want = H.grad().data()[x], have = got(x);
        bool const ok = exact ? std::memcmp(&want, &have, sizeof want) == 0
                              : std::abs(want - have) <= 1e-5f * (1 + std::abs(want));
        if (!ok && bad++ < 3) std::printf("rank %d, exact %d: element %ld: %a, host %a\n", world.rank(), int(exact), long(x), double(have), double(want));
      }
      if (world.rank() == 0) std::printf("exact = %d: %s\n", int(exact), bad ? "MISMATCH" : "ok");
      failures += bad > 0;
    }
  } catch (gx::error const& e) {
    std::printf("gradix::error: %s\n", e.what());
    return 1;
  }
  return failures ? 1 : 0;
}
