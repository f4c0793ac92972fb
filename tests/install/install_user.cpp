// A consumer of gradix from outside the tree, built four ways by CI: with the installed
// pkg-config file's flags (check_install.sh), with CMake's find_package against the install
// (check_install.sh, cmake_user/), with a plain -I of the source tree (check_plain.sh, with
// and without OpenBLAS), and through a meson subproject (subproject_user/, its own main).
// It exercises the headers, a matrix product (OpenBLAS's gemm where GRADIX_USE_OPENBLAS) and
// the version header.
#include <gradix/gradix.hpp>

#include <cstdio>
#include <cstring>

namespace gx = gradix;

int main() {
  auto x = gx::tensor<float, gx::shape<2, 3>>{1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f};
  auto y = gx::eval(x * 2.0f + 1.0f);  // 3 5 7 / 9 11 13
  float const total = gx::value(gx::sum(y));
  auto w = gx::tensor<float, gx::shape<3, 2>>{1.0f, 0.0f, 0.0f, 1.0f, 1.0f, 1.0f};
  auto p = gx::eval(gx::matmul(x, w));  // [1 2 3; 4 5 6] [1 0; 0 1; 1 1] = [4 5; 10 11]
  float const prod = gx::value(gx::sum(p));
  bool const version_ok = std::strcmp(gx::version.string, GRADIX_VERSION_STRING) == 0 &&
                          gx::version.major == GRADIX_VERSION_MAJOR && GRADIX_VERSION >= 100;
  std::printf("gradix %s%s: sum = %g, sum of the product = %g\n", gx::version.string,
#if defined(GRADIX_USE_OPENBLAS)
              " (OpenBLAS)",
#else
              "",
#endif
              double(total), double(prod));
  return total == 48.0f && prod == 30.0f && version_ok ? 0 : 1;
}
