#pragma once
/// \file
/// The CUDA launcher of the launch abstraction (backend/grid/launch.hpp): kernels run as
/// `__global__` entries in a stream, device memory comes from the stream-ordered allocator
/// (cudaMallocAsync / cudaFreeAsync), and every CUDA error becomes a gradix::error naming
/// the call and CUDA's message. Needs nvcc (a .cu translation unit).

#include "gradix/backend/grid/launch.hpp"
#include "gradix/config.hpp"
#include "gradix/core/error.hpp"

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <type_traits>
#include <unordered_map>
#include <vector>

namespace gradix::cuda {

/// Throws gradix::error "gradix::cuda: <what>: <CUDA's message> (<error name>)" unless e is
/// cudaSuccess.
inline void check(cudaError_t e, char const* what) {
  if (e != cudaSuccess)
    ::gradix::detail::fail("gradix::cuda: ", what, ": ", cudaGetErrorString(e), " (", cudaGetErrorName(e), ")");
}

/// The context a kernel sees on the device. Its members are host-device so that the host
/// pass of nvcc accepts the kernel templates; only the device pass calls them.
struct device_context {
  GRADIX_HOST_DEVICE index_t block() const {
#if defined(__CUDA_ARCH__)
    return index_t(blockIdx.x);
#else
    return 0;
#endif
  }
  GRADIX_HOST_DEVICE index_t thread() const {
#if defined(__CUDA_ARCH__)
    return index_t(threadIdx.x);
#else
    return 0;
#endif
  }
  GRADIX_HOST_DEVICE index_t blocks() const {
#if defined(__CUDA_ARCH__)
    return index_t(gridDim.x);
#else
    return 1;
#endif
  }
  GRADIX_HOST_DEVICE index_t threads() const {
#if defined(__CUDA_ARCH__)
    return index_t(blockDim.x);
#else
    return 1;
#endif
  }
  GRADIX_HOST_DEVICE void sync() const {
#if defined(__CUDA_ARCH__)
    __syncthreads();
#endif
  }
  template <class T>
  GRADIX_HOST_DEVICE T* shared() const {
#if defined(__CUDA_ARCH__)
    extern __shared__ __align__(16) unsigned char gradix_shared_memory[];
    return reinterpret_cast<T*>(gradix_shared_memory);
#else
    return nullptr;
#endif
  }
  template <class T>
  GRADIX_HOST_DEVICE void atomic_add(T* p, T v) const {
#if defined(__CUDA_ARCH__)
    if constexpr (std::is_integral_v<T> && sizeof(T) == 8) {
      // (atomicAdd's only 8-byte integer is unsigned long long; int64_t and uint64_t are
      // long and unsigned long here, and two's complement addition is the unsigned one)
      atomicAdd(reinterpret_cast<unsigned long long*>(p), static_cast<unsigned long long>(v));
    } else {
      static_assert(sizeof(T) >= 4, "gradix::cuda: atomic_add needs an element type of 4 or 8 bytes");
      atomicAdd(p, v);
    }
#else
    *p += v;
#endif
  }
  GRADIX_HOST_DEVICE void atomic_min(long long* p, long long v) const {
#if defined(__CUDA_ARCH__)
    atomicMin(p, v);
#else
    *p = v < *p ? v : *p;
#endif
  }
  GRADIX_HOST_DEVICE void atomic_max(std::int32_t* p, std::int32_t v) const {
#if defined(__CUDA_ARCH__)
    atomicMax(reinterpret_cast<int*>(p), int(v));
#else
    *p = v > *p ? v : *p;
#endif
  }
  /// *p = desired if *p == expected; returns the old *p.
  GRADIX_HOST_DEVICE std::int32_t atomic_cas(std::int32_t* p, std::int32_t expected, std::int32_t desired) const {
#if defined(__CUDA_ARCH__)
    return std::int32_t(atomicCAS(reinterpret_cast<int*>(p), int(expected), int(desired)));
#else
    std::int32_t const old = *p;
    if (old == expected) *p = desired;
    return old;
#endif
  }
};

/// The entry point of every gradix kernel.
template <class K>
__global__ void run_kernel(K k) {
  device_context c;
  k(c);
}

/// Launches kernels and manages memory in one stream (default: the per-thread default
/// stream), in stream order.
///
/// Small blocks (at most 1 MiB, rounded up to a power of two from 256 bytes) that gradix gives
/// back are kept for reuse, up to 64 MiB in all, and handed out again in stream order, as
/// cudaMallocAsync's pool would, without the driver call: a call like grid::value needs
/// three scratch blocks, and each cudaMallocAsync / cudaFreeAsync pair costs microseconds of
/// host time. The kept blocks go back to the driver (cudaFreeAsync) when the launcher goes.
/// Reads of at most 4 KiB (copy_to_host: a loss, a count, a flag) go through a page-locked
/// buffer the launcher keeps. Copies of a launcher share its stream, its cache and that
/// buffer; both are safe to use from several host threads.
class launcher {
 public:
  launcher() = default;
  explicit launcher(cudaStream_t s) : stream_(s) {}

  cudaStream_t stream() const { return stream_; }
  index_t max_threads() const { return 1024; }

  template <class K>
  void launch(grid::launch_shape s, K const& k) {
    (void)cudaGetLastError();  // an earlier error (a failed, caught allocation) is not this launch's
    run_kernel<K><<<unsigned(s.blocks), unsigned(s.threads), s.shared_bytes, stream_>>>(k);
    check(cudaGetLastError(), "kernel launch");
  }
  void* allocate(std::size_t bytes) {
    std::size_t const size = block_size(bytes);
    {
      std::lock_guard<std::mutex> g(cache_->m);
      if (size <= cache::max_block) {
        auto it = cache_->free.find(size);
        if (it != cache_->free.end() && !it->second.empty()) {
          void* p = it->second.back();
          it->second.pop_back();
          cache_->kept -= size;
          cache_->live.emplace(p, size);
          return p;
        }
      }
    }
    void* p = nullptr;
    check(cudaMallocAsync(&p, size, stream_), "cudaMallocAsync");
    std::lock_guard<std::mutex> g(cache_->m);
    cache_->live.emplace(p, size);
    return p;
  }
  void deallocate(void* p) {
    // (no throw: called from destructors; a failure here shows at the next checked call)
    if (!p) return;
    {
      std::lock_guard<std::mutex> g(cache_->m);
      auto it = cache_->live.find(p);
      if (it != cache_->live.end()) {
        std::size_t const size = it->second;
        cache_->live.erase(it);
        if (size <= cache::max_block && cache_->kept + size <= cache::max_kept) {
          cache_->free[size].push_back(p);
          cache_->kept += size;
          return;
        }
      }
    }
    (void)cudaFreeAsync(p, stream_);
  }
  void copy_to_host(void* dst, void const* src, std::size_t bytes) {
    if (bytes <= cache::staging_bytes) {
      // a small read (a loss, a count, a flag) goes through page-locked memory the launcher
      // keeps: a copy into pageable memory is staged by the driver, which costs more than the
      // read itself
      std::lock_guard<std::mutex> g(cache_->staging_m);
      void* const pinned = cache_->staging_buffer();
      check(cudaMemcpyAsync(pinned, src, bytes, cudaMemcpyDeviceToHost, stream_), "cudaMemcpyAsync (device to host)");
      check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
      std::memcpy(dst, pinned, bytes);
      return;
    }
    check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_), "cudaMemcpyAsync (device to host)");
    check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  }
  void copy_to_device(void* dst, void const* src, std::size_t bytes) {
    check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_), "cudaMemcpyAsync (host to device)");
  }
  void copy_device_to_device(void* dst, void const* src, std::size_t bytes) {
    check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_), "cudaMemcpyAsync (device to device)");
  }
  void fill_zero(void* p, std::size_t bytes) { check(cudaMemsetAsync(p, 0, bytes, stream_), "cudaMemsetAsync"); }
  void synchronize() { check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"); }

 private:
  struct cache {
    static constexpr std::size_t max_block = std::size_t(1) << 20;
    static constexpr std::size_t max_kept = std::size_t(64) << 20;
    std::mutex m;
    std::unordered_map<void*, std::size_t> live;              // every block handed out, by size
    std::unordered_map<std::size_t, std::vector<void*>> free;  // small blocks kept for reuse
    std::size_t kept = 0;
    cudaStream_t stream = cudaStreamPerThread;
    // page-locked host memory for small reads (copy_to_host), made on first use
    static constexpr std::size_t staging_bytes = 4096;
    std::mutex staging_m;
    void* staging = nullptr;
    void* staging_buffer() {
      if (!staging) check(cudaMallocHost(&staging, staging_bytes), "cudaMallocHost");
      return staging;
    }
    ~cache() {
      for (auto& [size, blocks] : free)
        for (void* p : blocks) (void)cudaFreeAsync(p, stream);
      if (staging) (void)cudaFreeHost(staging);
    }
  };
  static std::size_t block_size(std::size_t bytes) {
    if (bytes > cache::max_block) return bytes;
    std::size_t s = 256;
    while (s < bytes) s *= 2;
    return s;
  }
  static std::shared_ptr<cache> make_cache(cudaStream_t s) {
    auto c = std::make_shared<cache>();
    c->stream = s;
    return c;
  }
  cudaStream_t stream_ = cudaStreamPerThread;
  std::shared_ptr<cache> cache_ = make_cache(stream_);
};

/// This thread's launcher on cudaStreamPerThread: the one gx::eval, value and assign use for a
/// device expression without a device parameter (whose launcher they use otherwise).
inline launcher& default_launcher() {
  thread_local launcher l;
  return l;
}

}  // namespace gradix::cuda
