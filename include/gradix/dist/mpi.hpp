#pragma once
/// \file
/// The MPI layer under gradix::dist (docs/distributed.md): `<mpi.h>` (C only), the MPI
/// datatype of each element type, MPI's error strings, the check that a message's count fits
/// MPI's int, the process-wide "abandoned" flag, and `environment` (MPI_Init_thread /
/// MPI_Finalize). The other dist/ headers reach MPI through this one.
///
/// `<mpi.h>` is included with OMPI_SKIP_MPICXX and MPICH_SKIP_MPICXX defined to 1 (unless the
/// program defined them already), so that no C++ bindings come with it.
#include "gradix/core/half.hpp"
#include "gradix/config.hpp"
#include "gradix/core/error.hpp"

// (C only: Open MPI's deprecated C++ bindings do not compile warning-free)
#if !defined(OMPI_SKIP_MPICXX)
#define OMPI_SKIP_MPICXX 1
#endif
#if !defined(MPICH_SKIP_MPICXX)
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include <climits>
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>

namespace gradix::dist {

namespace detail {
template <class T>
MPI_Datatype mpi_type() {
  if constexpr (std::is_same_v<T, float>) return MPI_FLOAT;
  else if constexpr (std::is_same_v<T, double>) return MPI_DOUBLE;
  else if constexpr (std::is_same_v<T, std::int64_t>) return MPI_INT64_T;
  else if constexpr (std::is_same_v<T, std::uint64_t>) return MPI_UINT64_T;
  else if constexpr (std::is_same_v<T, int>) return MPI_INT;
  else if constexpr (is_half_width_v<T>) return MPI_UINT16_T;  // (moved as bits, never reduced)
  else static_assert(sizeof(T) == 0, "gradix::dist: element types are float, double, 64-bit integers, bfloat16 and half");
}
inline std::string mpi_message(int rc) {
  char buf[MPI_MAX_ERROR_STRING];
  int n = 0;
  if (MPI_Error_string(rc, buf, &n) != MPI_SUCCESS) return "error code " + std::to_string(rc);
  return std::string(buf, std::size_t(n));
}
/// Set when gradix abandoned an exchange (its deadline passed, or MPI_Test failed): MPI
/// could still complete it later, inside any MPI call, writing into buffers that are gone.
/// From then on gradix makes no MPI call in this process (every gradix::dist call throws,
/// destructors free no MPI objects, environment skips MPI_Finalize), and neither should
/// the program: it should report the error and exit.
inline bool& abandoned() {
  static bool a = false;
  return a;
}

inline int to_int_count(std::int64_t n, char const* what, char const* call) {
  if (n > INT_MAX)
    gradix::detail::fail(what, ": ", n, " elements in one message of ", call,
                         " (MPI counts are int; at most ", INT_MAX, ")");
  return int(n);
}
}  // namespace detail

/// MPI_Init_thread (MPI_THREAD_FUNNELED: gradix's threads never call MPI) and MPI_Finalize.
/// Does nothing when MPI is already initialized.
class environment {
 public:
  environment(int& argc, char**& argv) {
    int inited = 0;
    MPI_Initialized(&inited);
    if (inited) return;
    int provided = 0;
    if (int rc = MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided); rc != MPI_SUCCESS)
      gradix::detail::fail("gradix::dist::environment: MPI_Init_thread failed: ", detail::mpi_message(rc));
    owner_ = true;
  }
  environment(environment const&) = delete;
  environment& operator=(environment const&) = delete;
  ~environment() {
    int fin = 0;
    MPI_Finalized(&fin);
    // (after an abandoned exchange MPI_Finalize could complete it into freed memory, or
    // wait for a dead rank: the process ends without it, and mpirun reports that)
    if (owner_ && !fin && !detail::abandoned()) MPI_Finalize();
  }

 private:
  bool owner_ = false;
};

}  // namespace gradix::dist
