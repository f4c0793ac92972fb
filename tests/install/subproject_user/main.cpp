// A meson project that uses gradix as a subproject (tests/install/check_subproject.sh puts
// the repository at subprojects/gradix): dependency('gradix') must just work.
#include <gradix/gradix.hpp>

#include <cstdio>

namespace gx = gradix;

int main() {
  auto x = gx::tensor<float, gx::shape<2, 3>>{1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f};
  auto y = gx::eval(x * 2.0f + 1.0f);  // 3 5 7 / 9 11 13
  float total = gx::value(gx::sum(y));
  std::printf("gradix subproject: sum = %g\n", double(total));
  return total == 48.0f ? 0 : 1;
}
