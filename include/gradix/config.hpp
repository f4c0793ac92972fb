#pragma once
/// \file
/// Configuration macros shared by every gradix header.

#include <cstddef>

#if defined(__CUDACC__)
#define GRADIX_HOST_DEVICE __host__ __device__
#else
#define GRADIX_HOST_DEVICE
#endif

// nvcc's front end warns on loops over zero axes of rank-0 shapes ("pointless comparison of
// unsigned integer with zero", "loop is not reachable"); generic code has many of them.
#if defined(__CUDACC__) && defined(__NVCC_DIAG_PRAGMA_SUPPORT__)
#pragma nv_diag_suppress 186
#pragma nv_diag_suppress 128
#endif

// Device pass of nvcc: no host SIMD packs, no exceptions, no threads.
#if defined(__CUDA_ARCH__)
#define GRADIX_DEVICE_PASS 1
#endif

// GCC/clang vector extensions (host packs). Never used in constant evaluation.
#if (defined(__GNUC__) || defined(__clang__)) && !defined(__CUDA_ARCH__)
#define GRADIX_HAS_VECTOR_EXT 1
#endif

#if defined(__GNUC__) || defined(__clang__)
#define GRADIX_RESTRICT __restrict__
#define GRADIX_ALWAYS_INLINE inline __attribute__((always_inline))
#else
#define GRADIX_RESTRICT
#define GRADIX_ALWAYS_INLINE inline
#endif

/// GRADIX_FLATTEN: inline every call inside the function (host hot loops whose inner
/// evaluators g++ would otherwise call out of line, spilling the accumulators they keep in
/// registers).
#if (defined(__GNUC__) || defined(__clang__)) && !defined(__CUDACC__)
#define GRADIX_FLATTEN __attribute__((flatten))
#else
#define GRADIX_FLATTEN
#endif

#define GRADIX_STRINGIFY(x) #x

/// GRADIX_UNROLL(n): unroll the next loop n times (a hint; nothing under nvcc, whose front
/// end warns on GCC pragmas, and whose device code has its own unrolling).
#if defined(__CUDACC__)
#define GRADIX_UNROLL(n)
#elif defined(__clang__)
#define GRADIX_UNROLL(n) _Pragma(GRADIX_STRINGIFY(unroll n))
#elif defined(__GNUC__)
#define GRADIX_UNROLL(n) _Pragma(GRADIX_STRINGIFY(GCC unroll n))
#else
#define GRADIX_UNROLL(n)
#endif
/// GRADIX_DEVICE_UNROLL: unroll the next loop (a constant trip count) fully in device code
/// (nvcc's device pass); nothing on the host.
#if defined(__CUDA_ARCH__)
#define GRADIX_DEVICE_UNROLL _Pragma("unroll")
#else
#define GRADIX_DEVICE_UNROLL
#endif
/// GRADIX_NO_UNROLL: do not unroll the next loop (an expensive body, eval/cost.hpp).
#if defined(__CUDACC__)
#define GRADIX_NO_UNROLL
#elif defined(__clang__)
#define GRADIX_NO_UNROLL _Pragma("nounroll")
#elif defined(__GNUC__)
#define GRADIX_NO_UNROLL _Pragma("GCC unroll 1")
#else
#define GRADIX_NO_UNROLL
#endif

/// GRADIX_ASSERT checks gradix's own invariants only, never user input (user input gets a
/// thrown gradix::error in every build type).
#if defined(GRADIX_ENABLE_ASSERTS) && !defined(__CUDA_ARCH__)
#include <cassert>
#define GRADIX_ASSERT(cond) assert(cond)
#else
#define GRADIX_ASSERT(cond) ((void)0)
#endif

namespace gradix {

/// Signed index and extent type used everywhere (coordinates, extents, strides).
using index_t = std::ptrdiff_t;

/// Marker for an extent known only at run time: `shape<dyn, 64>`.
inline constexpr index_t dyn = -1;

}  // namespace gradix
