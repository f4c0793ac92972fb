// The founding benchmark (seed_embedding.cpp) with both tables row-sharded over MPI ranks
// (docs/distributed.md): what a step costs, and what it sends, at 1, 2, 3, 4 ranks.
//
//   mpirun -np R build/examples/seed_embedding_dist [--na NA] [--nb NB] [--k K] [--d D]
//       [--n N] [--block TERMS] [--reps R] [--placement block|modulo] [--loss sum|square]
//       [--idx-mod M] [--random-idx] [--check] [--inexact]
//
//   Ea: NA x D rows (1,000,000 x 64)   Eb: NB x D (65,535 x 64)   i = 0..K-1 (5000)
//   loss = sum over terms t of sum( Eb[i, :] + Ea[j_t, :] )   (or of its square), N = 100 terms
//
// The terms are the batch, cut into blocks of TERMS terms (default 25: 4 blocks, so up to 4
// ranks have work); each rank takes a run of blocks. A step: every rank fetches the rows its
// blocks read (one all-to-all-v of ids, one of rows, per table), runs one backward per
// term, and pushes each (block, row) gradient to the row's owner, which sums them in block
// order. Rank 0 prints the median times over the reps (the slowest rank's), the bytes and
// messages sent per step, the loss's bits (the same at every rank count), and a JSON line.
// --check compares the loss and every owned row's gradient with plain loops in double.
// --inexact pushes with push_options::exact = false: each rank adds its blocks' rows of an
// id before sending (less traffic; the bits then depend on the rank count).
#include <gradix/dist.hpp>
#include <gradix/gradix.hpp>

#include "seed_embedding.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace gx = gradix;
namespace dist = gradix::dist;
using gx::index_t;

int main(int argc, char** argv) {
  dist::environment env(argc, argv);
  seed::options o;
  o.d = 64;
  long block = 25;
  auto place = dist::placement::block;
  dist::push_options push;
  {
    // seed_embedding's options, minus those that do not apply, plus --block and --placement
    std::vector<char*> rest = {argv[0]};
    for (int a = 1; a < argc; ++a) {
      std::string s = argv[a];
      if (s == "--block" && a + 1 < argc) block = std::stol(argv[++a]);
      else if (s == "--inexact") push.exact = false;
      else if (s == "--placement" && a + 1 < argc) place = std::string(argv[++a]) == "modulo" ? dist::placement::modulo : dist::placement::block;
      else rest.push_back(argv[a]);
    }
    o = seed::parse(int(rest.size()), rest.data());
  }
  dist::communicator world;
  int const R = world.size(), me = world.rank();
  auto const i = seed::gathered_entries(o);
  auto const js = seed::term_columns(o.n, o.na);
  index_t const d = o.d, k = o.k;
  auto init = [&](std::uint32_t t) {
    return [t, d](index_t id, std::span<float> row) {
      for (index_t c = 0; c < d; ++c) row[std::size_t(c)] = seed::hash_value(std::uint64_t(id), std::uint64_t(c), std::uint64_t(d), t);
    };
  };
  dist::sharded_table<float> Ea(world, o.na, d, place, init(0)), Eb(world, o.nb, d, place, init(1));
  dist::block_split split(world, o.n, block);

  // this rank's ids, per block: Eb's i once per term, Ea's j_t per term
  std::vector<std::int64_t> ids_a, ids_b;
  std::vector<index_t> off_a{0}, off_b{0};
  for (index_t j = split.first_block(); j < split.end_block(); ++j) {
    for (index_t t = split.block_begin(j); t < split.block_end(j); ++t) {
      ids_a.push_back(js[std::size_t(t)]);
      ids_b.insert(ids_b.end(), i.begin(), i.end());
    }
    off_a.push_back(index_t(ids_a.size()));
    off_b.push_back(index_t(ids_b.size()));
  }

  std::vector<double> t_fetch, t_back, t_push, t_step;
  double loss = 0;
  std::uint64_t bytes = 0, messages = 0;
  auto now = [] { return std::chrono::steady_clock::now(); };
  for (long rep = 0; rep < o.reps; ++rep) {
    Ea.local().grad().zero();
    Eb.local().grad().zero();
    world.reset_traffic();
    auto t0 = now();
    auto La = Ea.fetch(ids_a, off_a, split);
    auto Lb = Eb.fetch(ids_b, off_b, split);
    auto t1 = now();
    std::vector<double> block_loss;
    for (index_t j = split.first_block(); j < split.end_block(); ++j) {
      auto const ia = La.block(j), ib = Lb.block(j);
      double l = 0;
      for (index_t t = 0; t < split.block_end(j) - split.block_begin(j); ++t) {
        // (term t's Ea row: one row of La, selected, so that it broadcasts against Eb's block)
        auto x = gx::gather<0>(Lb.rows(), ib.subspan(std::size_t(t * k), std::size_t(k))) +
                 La.rows()(gx::at(ia[std::size_t(t)]), gx::all);
        l += o.square ? gx::backward(gx::sum(gx::square(x))) : gx::backward(gx::sum(x));
      }
      block_loss.push_back(l);
    }
    auto t2 = now();
    Ea.push(La, push);
    Eb.push(Lb, push);
    loss = dist::ordered_sum(world, split, block_loss);
    auto t3 = now();
    bytes = world.traffic().bytes_sent;
    messages = world.traffic().messages_sent;
    double const mine[4] = {std::chrono::duration<double>(t1 - t0).count(), std::chrono::duration<double>(t2 - t1).count(),
                            std::chrono::duration<double>(t3 - t2).count(), std::chrono::duration<double>(t3 - t0).count()};
    auto const all = world.allgather(std::span<double const>(mine, 4), "seed_embedding_dist");
    double slowest[4] = {0, 0, 0, 0};
    for (int r = 0; r < R; ++r)
      for (int q = 0; q < 4; ++q) slowest[q] = std::max(slowest[q], all[std::size_t(4 * r + q)]);
    t_fetch.push_back(slowest[0]);
    t_back.push_back(slowest[1]);
    t_push.push_back(slowest[2]);
    t_step.push_back(slowest[3]);
  }
  // traffic of one step, every rank's
  std::uint64_t const tr[2] = {bytes, messages};
  auto const traffic = world.allgather(std::span<std::uint64_t const>(tr, 2), "seed_embedding_dist");
  std::uint64_t total_bytes = 0, max_bytes = 0, total_msgs = 0;
  for (int r = 0; r < R; ++r) {
    total_bytes += traffic[std::size_t(2 * r)];
    max_bytes = std::max(max_bytes, traffic[std::size_t(2 * r)]);
    total_msgs += traffic[std::size_t(2 * r + 1)];
  }

  int status = 0;
  if (o.check) {
    // the loss and this rank's rows' gradients, by plain loops in double
    auto va = [&](long entry, long c) { return double(seed::hash_value(std::uint64_t(entry), std::uint64_t(c), std::uint64_t(d), 0)); };
    auto vb = [&](long entry, long c) { return double(seed::hash_value(std::uint64_t(entry), std::uint64_t(c), std::uint64_t(d), 1)); };
    double ref = 0, scale = 0;
    std::vector<std::vector<double>> ga(std::size_t(Ea.owned())), gb(std::size_t(Eb.owned())), ma(ga.size()), mb(gb.size());
    for (std::uint32_t j : js)
      for (std::uint16_t r : i)
        for (long c = 0; c < d; ++c) {
          double const x = vb(r, c) + va(long(j), c);
          ref += o.square ? x * x : x;
          scale += o.square ? x * x : std::abs(x);
          double const g = o.square ? 2 * x : 1.0;
          auto add = [&](dist::sharded_table<float>& T, std::vector<std::vector<double>>& G, std::vector<std::vector<double>>& M, long id) {
            if (T.owner(id) != me) return;
            auto& row = G[std::size_t(T.local_row(id))];
            auto& mag = M[std::size_t(T.local_row(id))];
            if (row.empty()) row.assign(std::size_t(d), 0.0), mag.assign(std::size_t(d), 0.0);
            row[std::size_t(c)] += g;
            mag[std::size_t(c)] += std::abs(g);
          };
          add(Ea, ga, ma, long(j));
          add(Eb, gb, mb, long(r));
        }
    bool ok = std::abs(loss - ref) <= 1e-6 * std::max(1.0, scale);
    double worst = 0;
    long wrong_rows = 0;
    auto compare = [&](dist::sharded_table<float>& T, std::vector<std::vector<double>> const& G,
                       std::vector<std::vector<double>> const& M) {
      auto const& st = T.local().grad();
      for (index_t kk = 0; kk < T.owned(); ++kk) {
        index_t const slot = st.find(kk);
        if (G[std::size_t(kk)].empty() != (slot < 0)) {
          ++wrong_rows;
          continue;
        }
        if (slot < 0) continue;
        for (index_t c = 0; c < d; ++c)
          worst = std::max(worst, std::abs(double(st.slice_data(slot)[c]) - G[std::size_t(kk)][std::size_t(c)]) /
                                      std::max(1.0, M[std::size_t(kk)][std::size_t(c)]));
      }
    };
    compare(Ea, ga, ma);
    compare(Eb, gb, mb);
    ok = ok && wrong_rows == 0 && worst < 1e-4;
    std::int64_t const bad = ok ? 0 : 1;
    auto const oks = world.allgather(std::span<std::int64_t const>(&bad, 1), "check");
    for (auto b : oks) status |= int(b);
    if (me == 0)
      std::printf("check: loss %.9g, reference %.9g; rank 0's rows: %ld stored wrongly, worst |err| / "
                  "sum|contributions| %.3g; all ranks: %s\n",
                  loss, ref, wrong_rows, worst, status ? "FAILED" : "ok");
  }
  if (me == 0) {
    std::printf("%d ranks, %s placement, %ld terms in blocks of %ld: fetch %.2f ms, backward %.2f ms, push %.2f ms, "
                "step %.2f ms (medians of %ld, slowest rank)\n",
                R, place == dist::placement::block ? "block" : "modulo", o.n, block, 1e3 * seed::median(t_fetch),
                1e3 * seed::median(t_back), 1e3 * seed::median(t_push), 1e3 * seed::median(t_step), o.reps);
    std::printf("sent per step: %.2f MB in all, %.2f MB by the busiest rank, %llu messages; loss %.9g (bits %a)\n",
                double(total_bytes) / 1e6, double(max_bytes) / 1e6, (unsigned long long)total_msgs, loss, loss);
    std::printf("{\"ranks\": %d, \"placement\": \"%s\", \"block\": %ld, \"exact\": %s, \"fetch_ms\": %.3f, \"backward_ms\": %.3f, "
                "\"push_ms\": %.3f, \"step_ms\": %.3f, \"bytes_total\": %llu, \"bytes_max_rank\": %llu, "
                "\"messages\": %llu, \"loss_bits\": \"%a\"}\n",
                R, place == dist::placement::block ? "block" : "modulo", block, push.exact ? "true" : "false",
                1e3 * seed::median(t_fetch), 1e3 * seed::median(t_back), 1e3 * seed::median(t_push),
                1e3 * seed::median(t_step), (unsigned long long)total_bytes, (unsigned long long)max_bytes, (unsigned long long)total_msgs, loss);
  }
  return status;
}
