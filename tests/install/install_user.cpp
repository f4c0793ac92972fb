// Compiled by tests/install/check_install.sh against the *installed* headers, with the flags
// of the installed pkg-config file only: the install is complete and usable.
#include <gradix/gradix.hpp>

#include <cstdio>

namespace gx = gradix;

int main() {
  auto x = gx::tensor<float, gx::shape<2, 3>>{1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f};
  auto y = gx::eval(x * 2.0f + 1.0f);  // 3 5 7 / 9 11 13
  float total = gx::value(gx::sum(y));
  std::printf("installed gradix: sum = %g\n", double(total));
  return total == 48.0f ? 0 : 1;
}
