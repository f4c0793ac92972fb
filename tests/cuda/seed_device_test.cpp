// The founding benchmark's device run (examples/seed_embedding_device.hpp, what
// `seed_embedding --device cuda` runs) through the grid emulator, at a small size, with its
// independent reference check (--check): per term and batched, sum and square loss, both
// layouts, atomic and deterministic scatter, a dynamic embedding extent. Suite `emulator`.
#include "cuda/emulator.hpp"

#include "seed_embedding_device.hpp"

#include <doctest/doctest.h>

#include <string>

namespace {

seed::options small() {
  seed::options o;
  o.na = 3000;
  o.nb = 700;
  o.k = 90;
  o.n = 6;
  o.d = 64;
  o.reps = 2;
  o.check = true;
  return o;
}

}  // namespace

TEST_CASE("seed_embedding --device cuda, through the emulator: --check passes") {
  struct variant {
    char const* name;
    bool row, square, batched, deterministic, random_idx;
    long d, idx_mod;
  };
  variant const variants[] = {
      {"col, sum, atomic", false, false, false, false, false, 64, 0},
      {"row, square, deterministic, idx-mod 13", true, true, false, true, false, 64, 13},
      {"col, batched, square, deterministic", false, true, true, true, false, 64, 0},
      {"row, batched, random indices", true, false, true, false, true, 64, 0},
      {"col, square, d = 7 (dynamic), idx-mod 5", false, true, false, false, false, 7, 5},
  };
  for (variant const& v : variants) {
    INFO(v.name);
    seed::options o = small();
    o.row = v.row;
    o.square = v.square;
    o.batched = v.batched;
    o.deterministic = v.deterministic;
    o.random_idx = v.random_idx;
    o.d = v.d;
    o.idx_mod = v.idx_mod;
    gradix_test::emu::launcher l;
    CHECK(seed::run_device(l, o) == 0);
    CHECK(l.live_allocations() == 0);
  }
}
