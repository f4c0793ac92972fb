#include "testing.hpp"

#include <atomic>
#include <vector>

namespace gx = gradix;

TEST_CASE("thread_pool: every task runs exactly once, for several sizes") {
  for (int n : {1, 2, 3, 4}) {
    gx::set_num_threads(n);
    CHECK(gx::num_threads() == n);
    std::vector<std::atomic<int>> hits(1000);
    auto f = [&](gx::index_t k) { hits[std::size_t(k)].fetch_add(1); };
    gx::host::pool().run(1000, f);
    for (auto& h : hits) CHECK(h.load() == 1);
  }
  gx::set_num_threads(gx::host::default_num_threads());
}

TEST_CASE("thread_pool: nested runs execute serially") {
  gx::set_num_threads(2);
  std::atomic<int> total{0};
  auto inner = [&](gx::index_t) { total.fetch_add(1); };
  auto outer = [&](gx::index_t) { gx::host::pool().run(10, inner); };
  gx::host::pool().run(4, outer);
  CHECK(total.load() == 40);
  gx::set_num_threads(gx::host::default_num_threads());
}
