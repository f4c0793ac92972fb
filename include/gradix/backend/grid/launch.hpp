#pragma once
/// \file
/// The launch abstraction that gradix's device kernels are written against. A kernel is a
/// trivially copyable functor
///
///     struct K {
///       static constexpr bool uses_barriers = ...;  // does it call c.sync()?
///       GRADIX_KERNEL_BODY  // (below)
///       template <class Ctx> GRADIX_HOST_DEVICE void operator()(Ctx const& c) const;
///     };
///
/// run once per thread of a one-dimensional grid of blocks. The context c offers, and a kernel
/// uses nothing else of the machine:
///
///     c.block()          this thread's block, in [0, c.blocks())
///     c.thread()         this thread within its block, in [0, c.threads())
///     c.blocks(), c.threads()
///     c.sync()           barrier over the block's threads (every thread of the block must
///                        reach the same barriers in the same order)
///     c.template shared<T>()   the block's shared memory (launch_shape::shared_bytes)
///     c.atomic_add(p, v) *p += v, atomically with respect to every other thread of the grid
///     c.atomic_min(p, v) *p = min(*p, v) for long long, atomically
///     c.atomic_max(p, v) *p = max(*p, v) for std::int32_t, atomically
///     c.atomic_cas(p, e, d)   *p = d if *p == e, for std::int32_t, atomically; returns the old *p
///     c.atomic_fetch_add(p, v)   *p += v for std::uint32_t, atomically; returns the old *p
///     c.fence()          orders this thread's earlier global writes before its later ones, as
///                        every thread of the grid sees them (CUDA's __threadfence)
///
/// Several kernels can run as one launch (fused_kernel, below): each gets its own range of
/// the launch's blocks, and sees it through a member_context as a grid of its own.
///
/// Two launchers run such kernels: gradix::cuda::launcher (backend/cuda/launch.hpp) on a GPU,
/// in a stream, and the host grid emulator of the tests (tests/cuda/emulator.hpp), which runs
/// the same code block by block with one fiber per thread and honours barriers. A launcher L
/// also owns the memory the kernels touch, so backend code is written once against:
///
///     l.launch(launch_shape, kernel)          enqueue (in order with everything else on l)
///     l.allocate(bytes) / l.deallocate(p)     device memory, ordered like launches
///     l.copy_to_host(dst, src, bytes)         waits for what was enqueued before it
///     l.copy_to_device(dst, src, bytes), l.copy_device_to_device(dst, src, bytes),
///     l.fill_zero(p, bytes)
///     l.max_threads()                         the largest block the device takes

#include "gradix/config.hpp"
#include "gradix/core/coords.hpp"
#include "gradix/core/shape.hpp"

#include "gradix/core/array.hpp"
#include "gradix/core/tuple.hpp"

#include <cstddef>
#include <cstdint>
#include <source_location>
#include <utility>

/// GRADIX_KERNEL_BODY: put before the `template <class Ctx> GRADIX_HOST_DEVICE void
/// operator()(Ctx const&) const` of a device kernel. It tells nvcc not to check the execution
/// space of that template's calls, so the same body is instantiated with the CUDA context
/// (device code) and with a host-only context (the tests' grid emulator) in one .cu file.
#if defined(__CUDACC__)
#define GRADIX_KERNEL_BODY _Pragma("nv_exec_check_disable")
#else
#define GRADIX_KERNEL_BODY
#endif

namespace gradix::grid {

/// Threads per block and blocks per grid of one launch, and the shared memory per block.
struct launch_shape {
  index_t blocks = 1;
  index_t threads = 1;
  std::size_t shared_bytes = 0;
};

/// What a backend call may choose about its launches (tests vary them to show that results
/// do not depend on them): threads per block (0: the backend's default, 256) and an upper
/// bound on blocks per grid (0: as many as the work needs).
struct launch_options {
  index_t threads = 0;
  index_t max_blocks = 0;
};

/// The most blocks a gradix launch uses when launch_options does not bound them (well
/// inside CUDA's 2^31 - 1; the loops are grid-stride loops, so any count covers the work).
inline constexpr index_t max_grid_blocks = index_t(1) << 20;

/// The most bytes a kernel's parameters (the functor, passed by value) may take: 32,764 on
/// every architecture that CUDA 12.1 and later compile for (Volta on; nvcc 13, this
/// project's toolkit, starts at Turing), 4,096 with an older nvcc. The emulator takes what
/// CUDA 12.1 takes, so both count the same launches.
#if defined(__CUDACC__) && (__CUDACC_VER_MAJOR__ < 12 || (__CUDACC_VER_MAJOR__ == 12 && __CUDACC_VER_MINOR__ < 1))
inline constexpr std::size_t kernel_param_bytes = 4096;
#else
inline constexpr std::size_t kernel_param_bytes = 32764;
#endif

/// The launch shape of a grid-stride loop over n items (at least one block).
GRADIX_HOST_DEVICE constexpr launch_shape shape_for(index_t n, launch_options o, index_t max_threads,
                                                    std::size_t shared_bytes = 0) {
  index_t t = o.threads > 0 ? o.threads : 256;
  if (t > max_threads) t = max_threads;
  index_t b = (n + t - 1) / t;
  if (b < 1) b = 1;
  index_t cap = o.max_blocks > 0 ? o.max_blocks : max_grid_blocks;
  if (b > cap) b = cap;
  return {b, t, shared_bytes};
}

/// The first flat index and the step of a grid-stride loop.
GRADIX_KERNEL_BODY
template <class Ctx>
GRADIX_HOST_DEVICE constexpr index_t grid_first(Ctx const& c) {
  return c.block() * c.threads() + c.thread();
}
GRADIX_KERNEL_BODY
template <class Ctx>
GRADIX_HOST_DEVICE constexpr index_t grid_step(Ctx const& c) {
  return c.blocks() * c.threads();
}

/// What one member of a fused launch sees: the launch's blocks [first, first + count) as a
/// grid of its own (block() from 0, blocks() = count); everything else is the launch's context.
template <class Ctx>
struct member_context {
  Ctx const& c_;
  index_t first_;
  index_t count_;
  GRADIX_KERNEL_BODY
  template <int = 0>
  GRADIX_HOST_DEVICE index_t block() const {
    return c_.block() - first_;
  }
  GRADIX_KERNEL_BODY
  template <int = 0>
  GRADIX_HOST_DEVICE index_t blocks() const {
    return count_;
  }
  GRADIX_KERNEL_BODY
  template <int = 0>
  GRADIX_HOST_DEVICE index_t thread() const {
    return c_.thread();
  }
  GRADIX_KERNEL_BODY
  template <int = 0>
  GRADIX_HOST_DEVICE index_t threads() const {
    return c_.threads();
  }
  GRADIX_KERNEL_BODY
  template <class T>
  GRADIX_HOST_DEVICE T* shared() const {
    return c_.template shared<T>();
  }
#if defined(__CUDA_ARCH__)
  GRADIX_KERNEL_BODY
  template <int = 0>
  GRADIX_HOST_DEVICE void sync() const {
    c_.sync();
  }
#else
  // (on the host, the call site goes on to a context that records it: the emulator reports
  // threads that wait at different barriers)
  template <int = 0>
  void sync(std::source_location site = std::source_location::current()) const {
    if constexpr (requires { c_.sync(site); }) c_.sync(site);
    else c_.sync();
  }
#endif
  GRADIX_KERNEL_BODY
  template <class P, class V>
  GRADIX_HOST_DEVICE void atomic_add(P* p, V v) const {
    c_.atomic_add(p, v);
  }
  GRADIX_KERNEL_BODY
  template <int = 0>
  GRADIX_HOST_DEVICE void atomic_min(long long* p, long long v) const {
    c_.atomic_min(p, v);
  }
  GRADIX_KERNEL_BODY
  template <int = 0>
  GRADIX_HOST_DEVICE void atomic_max(std::int32_t* p, std::int32_t v) const {
    c_.atomic_max(p, v);
  }
  GRADIX_KERNEL_BODY
  template <int = 0>
  GRADIX_HOST_DEVICE std::int32_t atomic_cas(std::int32_t* p, std::int32_t expected, std::int32_t desired) const {
    return c_.atomic_cas(p, expected, desired);
  }
  GRADIX_KERNEL_BODY
  template <int = 0>
  GRADIX_HOST_DEVICE std::uint32_t atomic_fetch_add(std::uint32_t* p, std::uint32_t v) const {
    return c_.atomic_fetch_add(p, v);
  }
  GRADIX_KERNEL_BODY
  template <int = 0>
  GRADIX_HOST_DEVICE void fence() const {
    c_.fence();
  }
};

/// Kernels W... as one launch: member i runs on the blocks [begin_[i], end_[i]) and sees them
/// as its grid (member_context); a member with no blocks does not run. Members whose ranges
/// overlap run one after the other in the blocks they share, in member order, with a
/// barrier between them (so the later one sees what the earlier one wrote in that block).
/// Every member must work with the launch's threads per block and shared memory. Members on
/// different blocks run concurrently, in no order, so they must not depend on each other's
/// writes, nor write the same memory unless atomically.
template <class... W>
struct fused_kernel {
  static constexpr bool uses_barriers = (W::uses_barriers || ...) || sizeof...(W) > 1;
  static constexpr std::size_t members = sizeof...(W);
  tuple<W...> w_;
  array<index_t, sizeof...(W)> begin_;
  array<index_t, sizeof...(W)> end_;

  GRADIX_KERNEL_BODY
  template <std::size_t I, class Ctx>
  GRADIX_HOST_DEVICE void run_member(Ctx const& c, index_t b, bool& ran) const {
    if (b >= begin_[I] && b < end_[I]) {
      if (ran) c.sync();  // (block-uniform: every thread of the block takes the same members)
      get<I>(w_)(member_context<Ctx>{c, begin_[I], end_[I] - begin_[I]});
      ran = true;
    }
  }
  GRADIX_KERNEL_BODY
  template <class Ctx, std::size_t... I>
  GRADIX_HOST_DEVICE void run_members(Ctx const& c, std::index_sequence<I...>) const {
    index_t const b = c.block();
    bool ran = false;
    (run_member<I>(c, b, ran), ...);
  }
  GRADIX_KERNEL_BODY
  template <class Ctx>
  GRADIX_HOST_DEVICE void operator()(Ctx const& c) const {
    run_members(c, std::index_sequence_for<W...>{});
  }
};

}  // namespace gradix::grid
