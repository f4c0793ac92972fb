// Trains the distributed test model (model.hpp) for some steps, with checkpoints, a resume
// at any rank count, and a rank killed mid-step (tests/dist/resume.sh drives it).
//
//   mpirun -np R test_dist_train --steps N [--ckpt PATH [--save-every K] [--resume]]
//       [--kill-rank r --kill-at s] [--timeout SECONDS]
//
// Rank 0 prints `loss STEP HEX` (the loss's bits) per step and, at the end, `params HEX`: a
// digest of every row of E and F (by global id, so it does not depend on the rank count) and
// of W. A gradix::error is printed as `rank R: gradix::error: ...` and exits with status 3
// (without MPI_Finalize, which could wait for a dead rank).
#include <gradix/dist/checkpoint.hpp>

#include "model.hpp"

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

using namespace dist_model;

namespace {
std::uint64_t fnv(void const* p, std::size_t n, std::uint64_t h = 14695981039346656037ull) {
  auto const* b = static_cast<unsigned char const*>(p);
  for (std::size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}
}  // namespace

int main(int argc, char** argv) {
  dist::environment env(argc, argv);
  int steps = 6, save_every = 0, kill_rank = -1, kill_at = -1;
  double timeout = 60;
  bool resume = false;
  std::string ckpt;
  for (int a = 1; a < argc; ++a) {
    std::string s = argv[a];
    auto next = [&] { return a + 1 < argc ? std::string(argv[++a]) : std::string(); };
    if (s == "--steps") steps = std::stoi(next());
    else if (s == "--ckpt") ckpt = next();
    else if (s == "--save-every") save_every = std::stoi(next());
    else if (s == "--resume") resume = true;
    else if (s == "--kill-rank") kill_rank = std::stoi(next());
    else if (s == "--kill-at") kill_at = std::stoi(next());
    else if (s == "--timeout") timeout = std::stod(next());
    else {
      std::fprintf(stderr, "test_dist_train: unknown option %s\n", s.c_str());
      return 2;
    }
  }
  int rank = 0;
  try {
    dist::communicator world(MPI_COMM_WORLD, {.timeout = timeout});
    rank = world.rank();
    sharded_model M(world);
    gx::tensor<double, gx::shape<dyn>> progress(gx::dims(1));  // the next step
    // doc-snippet: checkpoint
    dist::checkpoint ck(world);
    ck.add_table("E", M.E).add_table("F", M.F).add_table_optimizer("opt", M.opt, M.E, M.F);
    ck.add("W", M.W).add("optw", M.optw).add("progress", progress);
    if (resume) ck.load(ckpt);  // saved at any rank count
    // end doc-snippet
    int const start = int(progress(0));
    for (int s = start; s < steps; ++s) {
      M.mid_step = [&] {
        if (s == kill_at && world.rank() == kill_rank) std::raise(SIGKILL);
      };
      double const loss = M.gradients(s);
      M.update();
      std::uint64_t bits;
      std::memcpy(&bits, &loss, 8);
      if (rank == 0) std::printf("loss %d %016llx\n", s, (unsigned long long)bits);
      if (save_every > 0 && (s + 1) % save_every == 0) {
        progress(0) = s + 1;
        ck.save(ckpt);
        if (rank == 0) std::printf("saved after step %d\n", s);
      }
      std::fflush(stdout);
    }
    // the digest: rows by global id (XOR of per-row hashes: any order, any rank count)
    std::uint64_t h = 0;
    for (auto* T : {&M.E, &M.F})
      for (index_t k = 0; k < T->owned(); ++k) {
        std::int64_t const id = T->global_row(k) + (T == &M.F ? kRows : 0);
        h ^= fnv(T->local().value().data() + k * kDim, kDim * sizeof(float), fnv(&id, 8));
      }
    auto const all = world.allgather(std::span<std::uint64_t const>(&h, 1), "digest");
    std::uint64_t d = fnv(M.W.value().data(), kDim * sizeof(float));
    for (auto x : all) d ^= x;
    if (rank == 0) std::printf("params %016llx\n", (unsigned long long)d);
  } catch (gx::error const& e) {
    std::printf("rank %d: gradix::error: %s\n", rank, e.what());
    std::fflush(stdout);
    std::_Exit(3);
  }
  return 0;
}
