// doctest's main for the randomized graph tests: takes --random-seed=N (the run-time seed of
// the data, index values and positions; else GRADIX_RANDOM_SEED, else 1) and passes the other
// arguments to doctest.
#define DOCTEST_CONFIG_IMPLEMENT
#include "random/ref.hpp"

#include <doctest/doctest.h>

#include <cstdlib>
#include <cstring>
#include <iostream>
#include <vector>

int main(int argc, char** argv) {
  std::vector<char*> rest;
  for (int i = 0; i < argc; ++i) {
    char const* p = "--random-seed=";
    if (i > 0 && std::strncmp(argv[i], p, std::strlen(p)) == 0)
      rg::set_runtime_seed(std::strtoull(argv[i] + std::strlen(p), nullptr, 10));
    else
      rest.push_back(argv[i]);
  }
  std::cout << "random graphs: run-time seed " << rg::runtime_seed()
            << " (--random-seed=N or GRADIX_RANDOM_SEED=N)\n";
  doctest::Context ctx;
  ctx.applyCommandLine(int(rest.size()), rest.data());
  return ctx.run();
}
