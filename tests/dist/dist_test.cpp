// Distributed training (gradix/dist.hpp, docs/distributed.md), run under mpirun with 1, 2, 3
// and 4 ranks (tests/dist/meson.build). Every rank runs every case; each case is collective.
//
// The central check: a model with two row-sharded tables (lazy Adam on the owners) and a
// dense parameter (data parallel, Adam), trained for a few steps, gives losses, gradients
// and parameters with exactly the bits of one process without MPI that accumulates the same
// blocks' gradients in order. That process is rank-count free, so passing at every rank
// count means the bits are the same at every rank count, with either placement.
#include <gradix/dist.hpp>
#include <gradix/gradix.hpp>
#include <gradix/optim.hpp>

#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include "model.hpp"
#include "testing.hpp"

#include <gradix/dist/checkpoint.hpp>

#include <filesystem>
#include <fstream>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <utility>
#include <vector>

using namespace dist_model;

namespace {

using gradix::testing::error_of;

// What the distributed run must equal: one process, no MPI, the batch in the same blocks,
// each block's gradients taken alone and added in block order.
struct reference {
  gx::parameter<float, gx::shape<dyn, dyn>, gx::row_major, gx::sparse_grad_t<0>> E{full_table(1)}, F{full_table(2)};
  gx::parameter<float, gx::shape<dyn>> W{initial_w()};
  gx::optim::lazy_adam<decltype(E), decltype(F)> opt{{.lr = 0.05}, E, F};
  gx::optim::adam<decltype(W)> optw{{.lr = 0.02}, W};
  std::vector<double> losses;
  std::vector<std::vector<float>> w_grads;

  void step(int s) {
    batch const B = make_batch(s, kBatch, kRows);
    std::map<index_t, std::vector<float>> ge, gf;
    std::vector<float> gw(std::size_t(kDim), 0.f);
    double loss = 0;
    auto add_rows = [](auto& st, std::map<index_t, std::vector<float>>& acc) {
      for (index_t k = 0; k < st.size(); ++k) {
        auto& row = acc.try_emplace(st.id(k), std::size_t(kDim), 0.f).first->second;
        for (index_t x = 0; x < kDim; ++x) row[std::size_t(x)] += st.slice_data(k)[x];
      }
    };
    for (index_t lo = 0; lo < kBatch; lo += kBlock) {
      index_t const hi = std::min(kBatch, lo + kBlock);
      E.grad().zero();
      F.grad().zero();
      W.grad().zero();
      std::vector<std::int64_t> a(B.a.begin() + lo, B.a.begin() + hi), b(B.b.begin() + lo, B.b.begin() + hi);
      auto const y = labels(B, lo, hi);
      loss += double(gx::backward(block_loss(gx::gather<0>(E, a), gx::gather<0>(F, b), W, y)));
      add_rows(E.grad(), ge);
      add_rows(F.grad(), gf);
      for (index_t x = 0; x < kDim; ++x) gw[std::size_t(x)] += W.grad().data()[x];
    }
    auto put = [](auto& st, std::map<index_t, std::vector<float>> const& acc) {
      st.zero();
      for (auto const& [id, row] : acc) {
        index_t const slot = st.reserve(id);  // (may move the storage: before data())
        std::memcpy(st.data() + slot * kDim, row.data(), kDim * sizeof(float));
      }
    };
    put(E.grad(), ge);
    put(F.grad(), gf);
    std::memcpy(W.grad().data(), gw.data(), kDim * sizeof(float));
    W.grad().touch_all();
    opt.step();
    optw.step();
    losses.push_back(loss);
    w_grads.push_back(gw);
  }
};

// Step s's ids of table E on this rank (its blocks' samples) and each block's start in them.
std::pair<std::vector<std::int64_t>, std::vector<index_t>> rank_ids(dist::block_split const& split, int s) {
  batch const B = make_batch(s, kBatch, kRows);
  std::vector<std::int64_t> a(B.a.begin() + split.first_sample(), B.a.begin() + split.end_sample());
  std::vector<index_t> offsets;
  for (index_t j = split.first_block(); j <= split.end_block(); ++j)
    offsets.push_back(split.block_begin(j) - split.first_sample());
  return {std::move(a), std::move(offsets)};
}

bool same_bits(float const* a, float const* b, index_t n) { return std::memcmp(a, b, std::size_t(n) * sizeof(float)) == 0; }

// The same training, distributed: E and F sharded, W data parallel.
// exact = false: the dense sums go through MPI_Allreduce (W's gradient and the parameters
// are then only close to the reference; the tables stay exact).
void run_distributed(dist::placement place, reference& ref, bool exact = true) {
  dist::communicator world;
  sharded_model M(world, place, exact);
  auto& E = M.E;
  auto& F = M.F;
  auto& W = M.W;
  for (int s = 0; s < kSteps; ++s) {
    double const loss = M.gradients(s);
    CAPTURE(s);
    CHECK(std::memcmp(&loss, &ref.losses[std::size_t(s)], sizeof loss) == 0);
    if (exact) CHECK(same_bits(W.grad().data(), ref.w_grads[std::size_t(s)].data(), kDim));
    for (index_t x = 0; x < kDim; ++x)
      CHECK(W.grad().data()[x] == doctest::Approx(ref.w_grads[std::size_t(s)][std::size_t(x)]).epsilon(1e-5));
    if (!exact) return;  // (the parameters part from the reference's bits after one step)
    M.update();
  }
  // parameters after k steps: W everywhere, each owned row of E and F
  CHECK(same_bits(W.value().data(), ref.W.value().data(), kDim));
  for (index_t k = 0; k < E.owned(); ++k) {
    CAPTURE(E.global_row(k));
    CHECK(same_bits(E.local().value().data() + k * kDim, ref.E.value().data() + E.global_row(k) * kDim, kDim));
    CHECK(same_bits(F.local().value().data() + k * kDim, ref.F.value().data() + F.global_row(k) * kDim, kDim));
  }
}

}  // namespace

TEST_CASE("dist: sharded tables and data parallel give the bits of one process, at any rank count") {
  reference ref;
  for (int s = 0; s < kSteps; ++s) ref.step(s);
  // the reference really moved (the comparison is not of untouched values)
  CHECK(ref.losses[0] != ref.losses[kSteps - 1]);
  SUBCASE("block placement") { run_distributed(dist::placement::block, ref); }
  SUBCASE("modulo placement") { run_distributed(dist::placement::modulo, ref); }
  SUBCASE("dense sums by MPI_Allreduce (exact = false)") { run_distributed(dist::placement::block, ref, false); }
}

TEST_CASE("dist: push_options::exact = false sends less, and stays close") {
  reference ref;
  ref.step(0);
  dist::communicator world;
  std::uint64_t bytes[2] = {0, 0};
  for (bool exact : {true, false}) {
    sharded_model M(world);
    M.push_opt.exact = exact;
    world.reset_traffic();
    double const loss = M.gradients(0);
    bytes[exact ? 0 : 1] = world.traffic().bytes_sent;
    CHECK(std::memcmp(&loss, &ref.losses[0], sizeof loss) == 0);  // (the losses do not depend on it)
    M.update();
    for (index_t k = 0; k < M.E.owned(); ++k)
      for (index_t x = 0; x < kDim; ++x) {
        float const got = M.E.local().value()(k, x), want = ref.E.value()(M.E.global_row(k), x);
        if (exact) REQUIRE(got == want);
        else REQUIRE(got == doctest::Approx(want).epsilon(1e-5));
      }
  }
  CHECK(bytes[1] <= bytes[0]);
  // in all: less, where some rank has two blocks that share a row owned elsewhere (2-5 ranks)
  auto const all = world.allgather(std::span<std::uint64_t const>(bytes, 2), "test");
  std::uint64_t total[2] = {0, 0};
  for (std::size_t r = 0; r < all.size(); r += 2) total[0] += all[r], total[1] += all[r + 1];
  if (world.size() > 1 && world.size() < 6) CHECK(total[1] < total[0]);
}

TEST_CASE("dist: ownership covers every row once") {
  dist::communicator world;
  for (auto place : {dist::placement::block, dist::placement::modulo}) {
    dist::sharded_table<float> T(world, 10, 2, place);
    index_t total = 0;
    for (int r = 0; r < world.size(); ++r) total += T.owned_by(r);
    CHECK(total == 10);
    for (index_t k = 0; k < T.owned(); ++k) {
      index_t const id = T.global_row(k);
      CHECK(T.owner(id) == world.rank());
      CHECK(T.local_row(id) == k);
    }
  }
}

TEST_CASE("dist: traffic counts touched rows, not the table's size") {
  dist::communicator world;
  dist::block_split split(world, kBatch, kBlock);
  auto const [a, offsets] = rank_ids(split, 0);
  std::vector<std::uint64_t> sent;
  // (modulo placement: the owner of an id does not depend on the table's size)
  for (index_t rows : {index_t(kRows), index_t(2'000'000)}) {
    dist::sharded_table<float> E(world, rows, kDim, dist::placement::modulo);
    world.reset_traffic();
    auto L = E.fetch(a, offsets, split);
    for (index_t j = split.first_block(); j < split.end_block(); ++j)
      gx::backward(gx::sum(gx::gather<0>(L.rows(), L.block(j))));
    E.push(L);
    // expected, from this rank's ids: each distinct id owned elsewhere travels there (8 bytes)
    // and its row comes back; each (block, id) row owned elsewhere goes there with its key
    std::vector<std::int64_t> distinct;
    std::uint64_t pairs_remote = 0;
    for (std::size_t b = 0; b + 1 < offsets.size(); ++b) {
      std::vector<std::int64_t> in_block(a.begin() + offsets[b], a.begin() + offsets[b + 1]);
      std::sort(in_block.begin(), in_block.end());
      in_block.erase(std::unique(in_block.begin(), in_block.end()), in_block.end());
      for (auto id : in_block) {
        pairs_remote += E.owner(id) != world.rank();
        distinct.push_back(id);
      }
    }
    std::sort(distinct.begin(), distinct.end());
    distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
    std::uint64_t ids_remote = 0;
    for (auto id : distinct) ids_remote += E.owner(id) != world.rank();
    std::uint64_t const row = kDim * sizeof(float);
    std::uint64_t const mine[2] = {ids_remote * 8 + pairs_remote * (16 + row), ids_remote * row};
    auto const all = world.allgather(std::span<std::uint64_t const>(mine, 2), "test");
    std::uint64_t expected = 0;
    for (int r = 0; r < world.size(); ++r) expected += all[std::size_t(2 * r)] + all[std::size_t(2 * r + 1)];
    std::uint64_t const got_mine = world.traffic().bytes_sent;
    auto const got = world.allgather(std::span<std::uint64_t const>(&got_mine, 1), "test");
    std::uint64_t total = 0;
    for (auto g : got) total += g;
    CHECK(total == expected);
    if (world.size() == 1) CHECK(total == 0);
    sent.push_back(total);
  }
  CHECK(sent[0] == sent[1]);  // a table 54000 times larger: the same bytes
}

TEST_CASE("dist: a bfloat16 table: rows travel as 16 bits, gradients as float, the float twin's bits") {
  dist::communicator world;
  dist::block_split split(world, kBatch, kBlock);
  auto const [a, offsets] = rank_ids(split, 1);
  auto init_b = [](index_t id, std::span<gx::bfloat16> row) {
    for (std::size_t x = 0; x < row.size(); ++x) row[x] = gx::bfloat16(0.01f * float(id) - 0.3f * float(x) + 0.123f);
  };
  auto init_f = [&](index_t id, std::span<float> row) {  // the same values, widened
    std::vector<gx::bfloat16> b(row.size());
    init_b(id, b);
    for (std::size_t x = 0; x < row.size(); ++x) row[x] = float(b[x]);
  };
  dist::sharded_table<gx::bfloat16> Eb(world, kRows, kDim, dist::placement::modulo, init_b);
  dist::sharded_table<float> Ef(world, kRows, kDim, dist::placement::modulo, init_f);
  static_assert(std::is_same_v<dist::sharded_table<gx::bfloat16>::grad_type, float>);
  auto const w = gx::iota<float>(gx::dims(kDim));
  auto round_trip = [&](auto& E) {
    world.reset_traffic();
    auto L = E.fetch(a, offsets, split);
    for (index_t j = split.first_block(); j < split.end_block(); ++j)
      gx::backward(gx::sum(gx::square(gx::gather<0>(L.rows(), L.block(j))) * w));
    E.push(L);
    return world.traffic().bytes_sent;
  };
  std::uint64_t const sent_b = round_trip(Eb), sent_f = round_trip(Ef);
  if (world.size() > 1) CHECK(sent_b < sent_f);
  else CHECK(sent_b == 0);
  // the owners' gradients: float, the twin's bits
  auto const gb = Eb.local().grad().to_dense(), gf = Ef.local().grad().to_dense();
  CHECK(same_bits(gb.data(), gf.data(), gb.size()));
  // an Adagrad step on the owners: the twin's values rounded to nearest
  gx::optim::adagrad ob({.lr = 0.1}, Eb.local());
  gx::optim::adagrad of({.lr = 0.1}, Ef.local());
  ob.step();
  of.step();
  auto const& vb = Eb.local().value();
  auto const& vf = Ef.local().value();
  int moved = 0;
  for (index_t k = 0; k < vb.size(); ++k) {
    REQUIRE(vb.data()[k].bits() == gx::bfloat16(vf.data()[k]).bits());
    moved += gb.data()[k] != 0.0f;
  }
  if (Eb.owned() > 0) CHECK(moved > 0);
}

TEST_CASE("dist: an index out of range on one rank is an error on every rank, and nothing moves") {
  dist::communicator world;
  dist::block_split split(world, 8, 2);
  dist::sharded_table<float> E(world, 5, 3, dist::placement::modulo,
                               [](index_t id, std::span<float> row) { std::fill(row.begin(), row.end(), float(id)); });
  std::vector<std::int64_t> ids;
  std::vector<index_t> offsets{0};
  for (index_t j = split.first_block(); j < split.end_block(); ++j) {
    ids.push_back(j % 5);
    ids.push_back((j + 1) % 5);
    offsets.push_back(index_t(ids.size()));
  }
  int const last = world.size() - 1;
  if (world.rank() == last && !ids.empty()) ids[1] = 17;
  bool const has_ids = split.local_blocks() > 0;
  auto const msg = error_of([&] { E.fetch(ids, offsets, split); });
  if (world.rank() == last && has_ids)
    CHECK(msg.find("gradix::dist::sharded_table::fetch: index 17 at position 1 is out of range for axis 0 of extent 5 (rank " +
                   std::to_string(last) + ")") == 0);
  else if (split.blocks() > 0)
    CHECK(msg.find("found bad input") != std::string::npos);
  // the communicator still works, and the table is as it was
  CHECK(world.usable());
  if (world.rank() == last && has_ids) ids[1] = 4;
  auto L = E.fetch(ids, offsets, split);
  for (index_t k = 0; k < E.owned(); ++k) CHECK(E.local().value()(k, 0) == float(E.global_row(k)));
  for (std::size_t i = 0; i < ids.size(); ++i) CHECK(L.rows().value()(L.all()[i], 2) == float(ids[i]));
}

TEST_CASE("dist: ranks that disagree on a shape all get an error") {
  dist::communicator world;
  auto const msg = error_of([&] { dist::sharded_table<float> T(world, 37 + world.rank(), 4); });
  if (world.size() == 1) CHECK(msg.empty());
  else
    CHECK(msg == "gradix::dist::sharded_table: the ranks disagree on the number of rows: rank 0 has 37, rank 1 has 38");
  auto const msg2 = error_of([&] { dist::block_split s(world, 100, world.rank() == 0 ? 10 : 12); });
  if (world.size() > 1)
    CHECK(msg2 == "gradix::dist::block_split: the ranks disagree on the block size: rank 0 has 10, rank 1 has 12");
}

TEST_CASE("dist: an MPI error is a gradix::error naming the call, and the communicator is then refused") {
  dist::communicator c;  // (a copy of its own: this case breaks it)
  int x = 0, y = 0;
  MPI_Request req;
  // a negative count: Open MPI's argument check returns MPI_ERR_COUNT on every rank
  auto const msg = error_of([&] { c.check(MPI_Ialltoall(&x, -1, MPI_INT, &y, -1, MPI_INT, c.get(), &req), "MPI_Ialltoall"); });
  CAPTURE(msg);
  CHECK(msg.find("gradix::dist: MPI_Ialltoall failed on rank " + std::to_string(c.rank()) + " of " +
                 std::to_string(c.size()) + ": MPI_ERR_COUNT") == 0);
  CHECK(!c.usable());
  CHECK(error_of([&] { dist::block_split s(c, 10, 2); }) ==
        "gradix::dist::block_split: the communicator is unusable after an earlier MPI error or timeout on rank " +
            std::to_string(c.rank()));
}

TEST_CASE("dist: misuse is named") {
  dist::communicator world;
  dist::block_split split(world, 4, 4);
  dist::sharded_table<float> E(world, 5, 2), F(world, 5, 2);
  std::vector<std::int64_t> ids;
  std::vector<index_t> offsets{0};
  if (split.local_blocks() == 1) ids = {1, 2, 1, 3}, offsets.push_back(4);
  auto L = E.fetch(ids, offsets, split);
  CHECK(error_of([&] { F.push(L); }) .find("the lookup was fetched from another table") != std::string::npos);
  E.push(L);
  CHECK(error_of([&] { E.push(L); }).find("the lookup was already pushed") != std::string::npos);
  CHECK(error_of([&] { (void)L.block(split.end_block()); }).find("is not one of this rank's blocks") != std::string::npos);
  CHECK(error_of([&] { dist::sharded_table<float> T(world, 0, 2); }) ==
        "gradix::dist::sharded_table: a table of 0 x 2 (both extents must be > 0)");
  gx::parameter<float, gx::shape<dyn>> W{initial_w()};
  dist::data_parallel dp(world, split, W);
  CHECK(error_of([&] { dp.keep(split.end_block()); }).find("is not one of this rank's blocks") != std::string::npos);
  auto const msg = error_of([&] { dp.reduce(); });
  if (split.local_blocks() == 1) CHECK(msg.find("block 0 was not kept on rank") != std::string::npos);
  else CHECK(msg.find("found bad input") != std::string::npos);
  // nothing was written: W's gradient is still zero
  for (index_t x = 0; x < kDim; ++x) CHECK(W.grad().data()[x] == 0.f);
  // and the next step works
  if (split.local_blocks() == 1) {
    gx::backward(gx::sum(W * W));
    dp.keep(0);
    CHECK(error_of([&] { dp.keep(0); }) == "gradix::dist::data_parallel::keep: block 0 was already kept");
  }
  dp.reduce();
  for (index_t x = 0; x < kDim; ++x) CHECK(W.grad().data()[x] == 2 * W.value()(x));
  dist::block_split two(world, 4, 1);
  gx::parameter<float, gx::shape<dyn>> V{initial_w()};
  dist::data_parallel dv(world, two, V);
  if (two.local_blocks() >= 2)
    CHECK(error_of([&] { dv.keep(two.first_block() + 1); }) ==
          "gradix::dist::data_parallel::keep: blocks are kept in order: block " + std::to_string(two.first_block()) +
              " comes before block " + std::to_string(two.first_block() + 1));
}

namespace {
// A directory all ranks share (rank 0's pid names it), removed at the end.
struct shared_dir {
  dist::communicator& c;
  std::filesystem::path path;
  explicit shared_dir(dist::communicator& w) : c(w) {
    std::int64_t const pid = ::getpid();
    auto const all = c.allgather(std::span<std::int64_t const>(&pid, 1), "test");
    path = std::filesystem::temp_directory_path() / ("gradix_dist_" + std::to_string(all[0]));
    if (c.rank() == 0) std::filesystem::create_directories(path);
    c.allgather(std::span<std::int64_t const>(&pid, 1), "test");  // (a barrier)
  }
  ~shared_dir() {
    c.allgather(std::span<std::int64_t const>(&zero, 1), "test");  // (a barrier)
    if (c.rank() == 0) std::filesystem::remove_all(path);
  }
  std::int64_t zero = 0;
};
std::vector<float> values_of(sharded_model& M) {
  std::vector<float> v(M.E.local().value().data(), M.E.local().value().data() + M.E.owned() * kDim);
  v.insert(v.end(), M.F.local().value().data(), M.F.local().value().data() + M.F.owned() * kDim);
  v.insert(v.end(), M.W.value().data(), M.W.value().data() + kDim);
  return v;
}
}  // namespace

TEST_CASE("dist: checkpoints round trip, and a bad one changes nothing on any rank") {
  dist::communicator world;
  shared_dir dir(world);
  std::string const path = (dir.path / "ck").string();
  sharded_model M(world);
  dist::checkpoint ck(world);
  ck.add_table("E", M.E).add_table("F", M.F).add_table_optimizer("opt", M.opt, M.E, M.F);
  ck.add("W", M.W).add("optw", M.optw);
  M.gradients(0);
  M.update();
  ck.save(path);
  auto const saved = values_of(M);
  M.gradients(1);
  M.update();
  auto const moved = values_of(M);
  CHECK(moved != saved);

  SUBCASE("round trip") {
    ck.load(path);
    CHECK(values_of(M) == saved);
    // and the next step is the one the saved run would take
    M.gradients(1);
    M.update();
    CHECK(values_of(M) == moved);
  }
  for (bool in_data : {false, true})
    SUBCASE(in_data ? "a shard file damaged in a row" : "a shard file damaged in a header") {
      // (a byte in a header is found as the file is read; one in the rows by the checksum)
      if (world.rank() == 0)
        for (auto const& e : std::filesystem::directory_iterator(dir.path))
          if (e.path().filename().string().rfind("ck.shard-0-of-", 0) == 0) {
            auto const size = std::filesystem::file_size(e.path());
            std::fstream f(e.path(), std::ios::in | std::ios::out | std::ios::binary);
            f.seekg(in_data ? std::streamoff(size - 12) : std::streamoff(40));
            char const old = char(f.get());
            f.seekp(in_data ? std::streamoff(size - 12) : std::streamoff(40));
            f.put(char(old ^ 0x5a));
          }
      std::int64_t const z = 0;
      world.allgather(std::span<std::int64_t const>(&z, 1), "test");
      auto const msg = error_of([&] { ck.load(path); });
      CAPTURE(msg);
      CHECK(msg.find("gradix::dist::checkpoint::load: ") == 0);  // every rank reads shard 0
      if (in_data) CHECK(msg.find("the checksum does not match") != std::string::npos);
      else CHECK(msg.find("damaged") != std::string::npos);
      CHECK(values_of(M) == moved);
    }
  SUBCASE("a missing shard file") {
    if (world.rank() == 0)
      for (auto const& e : std::filesystem::directory_iterator(dir.path))
        if (e.path().filename().string().rfind("ck.shard-" + std::to_string(world.size() - 1) + "-of-", 0) == 0)
          std::filesystem::remove(e.path());
    std::int64_t const z = 0;
    world.allgather(std::span<std::int64_t const>(&z, 1), "test");
    auto const msg = error_of([&] { ck.load(path); });
    CHECK(msg.find("cannot open") != std::string::npos);
    CHECK(values_of(M) == moved);
  }
  SUBCASE("a table of another shape") {
    dist::sharded_table<float> G(world, kRows + 1, kDim);
    dist::checkpoint other(world);
    other.add_table("E", G).add_table("F", M.F).add_table_optimizer("opt", M.opt, G, M.F);
    other.add("W", M.W).add("optw", M.optw);
    auto const msg = error_of([&] { other.load(path); });
    CHECK(msg.find("table 'E' was saved with 37 x 6 elements, the program's has 38 x 6") != std::string::npos);
    CHECK(values_of(M) == moved);
  }
  SUBCASE("a save that cannot write keeps the old checkpoint") {
    auto const msg = error_of([&] { ck.save((dir.path / "no_such_dir" / "ck").string()); });
    CHECK(msg.find("gradix::checkpoint::save: cannot create") != std::string::npos);
    ck.load(path);
    CHECK(values_of(M) == saved);
  }
}

TEST_CASE("dist: a checkpoint of a bfloat16 table with stochastic rounding resumes as the uninterrupted run") {
  dist::communicator world;
  shared_dir dir(world);
  std::string const path = (dir.path / "ckb").string();
  dist::block_split split(world, kBatch, kBlock);
  auto const [a, offsets] = rank_ids(split, 1);
  dist::sharded_table<gx::bfloat16> E(world, kRows, kDim, dist::placement::modulo, [](index_t id, std::span<gx::bfloat16> row) {
    for (std::size_t x = 0; x < row.size(); ++x) row[x] = gx::bfloat16(0.01f * float(id) - 0.3f * float(x) + 0.123f);
  });
  E.local().set_rounding(gx::stochastic_rounding(7));
  gx::optim::adagrad opt({.lr = 0.01}, E.local());
  auto const w = gx::iota<float>(gx::dims(kDim));
  auto step = [&] {
    auto L = E.fetch(a, offsets, split);
    for (index_t j = split.first_block(); j < split.end_block(); ++j)
      gx::backward(gx::sum(gx::square(gx::gather<0>(L.rows(), L.block(j))) * w));
    E.push(L);
    opt.step();
    opt.zero_grad();
  };
  auto bits = [&] {
    std::vector<std::uint16_t> b;
    for (index_t k = 0; k < E.local().value().size(); ++k) b.push_back(E.local().value().data()[k].bits());
    return b;
  };
  dist::checkpoint ck(world);
  ck.add_table("E", E).add_table_optimizer("opt", opt, E);
  step();
  ck.save(path);
  std::uint64_t const saved_updates = E.local().rounded_updates();
  step();
  step();
  auto const uninterrupted = bits();
  ck.load(path);
  CHECK(E.local().rounded_updates() == saved_updates);
  step();
  step();
  CHECK(bits() == uninterrupted);
}

TEST_CASE("dist: data_parallel: ranks with different parameter lists, and a failed non-exact reduce") {
  dist::communicator world;
  dist::block_split split(world, 4, 4);  // one block: rank 0's
  gx::parameter<float, gx::shape<dyn>> W{initial_w()}, V{initial_w()};
  auto const msg = error_of([&] {
    if (world.rank() == 0) dist::data_parallel dp(world, split, W);
    else dist::data_parallel dp(world, split, W, V);
  });
  if (world.size() > 1)
    CHECK(msg == "gradix::dist::data_parallel: the ranks disagree on the number of parameters: rank 0 has 1, rank 1 has 2");
  CHECK(world.usable());
  // exact = false: a reduce that fails (rank 0 did not keep its block) leaves the next step clean
  dist::data_parallel dp(world, split, dist::data_parallel_options{.exact = false}, W);
  CHECK(!error_of([&] { dp.reduce(); }).empty());
  if (split.local_blocks() == 1) {
    gx::backward(gx::sum(W * W));
    dp.keep(0);
  }
  dp.reduce();
  for (index_t x = 0; x < kDim; ++x) CHECK(W.grad().data()[x] == 2 * W.value()(x));
}

TEST_CASE("dist: a checkpoint of a table with fewer rows than ranks, and SGD's optional state") {
  // a rank that owns no rows cannot tell per-row state from replicated state on its own
  dist::communicator world;
  shared_dir dir(world);
  std::string const path = (dir.path / "small").string();
  for (double momentum : {0.0, 0.9}) {
    CAPTURE(momentum);
    auto init = [](index_t id, std::span<float> row) {
      for (std::size_t x = 0; x < row.size(); ++x) row[x] = float(id) + 0.25f * float(x);
    };
    dist::sharded_table<float> T(world, 2, 3, dist::placement::block, init);
    gx::optim::sgd opt({.lr = 0.1, .momentum = momentum}, T.local());
    dist::checkpoint ck(world);
    ck.add_table("T", T).add_table_optimizer("opt", opt, T);
    ck.save(path);
    for (index_t k = 0; k < T.owned(); ++k) T.local().value()(k, 0) = -1;
    ck.load(path);
    for (index_t k = 0; k < T.owned(); ++k) CHECK(T.local().value()(k, 0) == float(T.global_row(k)));
  }
}

int main(int argc, char** argv) {
  dist::environment env(argc, argv);
  doctest::Context ctx(argc, argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank > 0) ctx.setOption("minimal", true);  // rank 0 prints the summary; the others their failures
  int rc = ctx.run();
  // every rank's verdict: one failing rank fails the run on all of them
  int any = rc != 0, all = 0;
  MPI_Allreduce(&any, &all, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return all;
}
