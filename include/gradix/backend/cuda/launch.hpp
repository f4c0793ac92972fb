#pragma once
/// \file
/// The CUDA launcher of the launch abstraction (backend/grid/launch.hpp): kernels run as
/// `__global__` entries in a stream, device memory comes from the stream-ordered allocator
/// (cudaMallocAsync / cudaFreeAsync), and every CUDA error becomes a gradix::error naming
/// the call and CUDA's message. Needs nvcc (a .cu translation unit).

#include "gradix/backend/grid/launch.hpp"
#include "gradix/config.hpp"
#include "gradix/core/error.hpp"
#include "gradix/expr/matmul.hpp"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>
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
/// The same for a cuBLAS status.
inline void check_blas(cublasStatus_t e, char const* what) {
  if (e != CUBLAS_STATUS_SUCCESS) ::gradix::detail::fail("gradix::cuda: ", what, ": cuBLAS status ", int(e));
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
  /// *p += v; returns the old *p.
  GRADIX_HOST_DEVICE std::uint32_t atomic_fetch_add(std::uint32_t* p, std::uint32_t v) const {
#if defined(__CUDA_ARCH__)
    return std::uint32_t(atomicAdd(reinterpret_cast<unsigned int*>(p), static_cast<unsigned int>(v)));
#else
    std::uint32_t const old = *p;
    *p += v;
    return old;
#endif
  }
  GRADIX_HOST_DEVICE void fence() const {
#if defined(__CUDA_ARCH__)
    __threadfence();
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
/// buffer; both are safe to use from several host threads. With cudaStreamPerThread (a
/// different stream in each host thread) a kept block goes back only to the thread that gave
/// it back, so reuse stays in stream order; when cudaMallocAsync runs out of memory, the kept
/// blocks are given back (cudaFree, which waits for the device) and it is tried once more.
class launcher {
 public:
  launcher() = default;
  explicit launcher(cudaStream_t s) : stream_(s) {}
  // (copies share the cache; no move, so a moved-from launcher keeps working, as memory it
  // handed out is given back through it)
  launcher(launcher const&) = default;
  launcher& operator=(launcher const&) = default;

  cudaStream_t stream() const { return stream_; }
  index_t max_threads() const { return 1024; }

  /// The dynamic shared memory a block may have (the device's opt-in limit: 227 KiB on an
  /// H200). launch() raises a kernel's limit when a launch asks for more than the default
  /// 48 KiB.
  std::size_t max_shared_bytes() const { return cache_->shared_limit(); }

  template <class K>
  void launch(grid::launch_shape s, K const& k) {
    (void)cudaGetLastError();  // an earlier error (a failed, caught allocation) is not this launch's
    if (s.shared_bytes > default_shared) {
      // the kernel's own limit, raised once to the most any launch of it asked (per process:
      // one device is assumed)
      static std::mutex m;
      static std::size_t raised = default_shared;
      std::lock_guard<std::mutex> g(m);
      if (s.shared_bytes > raised) {
        check(cudaFuncSetAttribute(run_kernel<K>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(s.shared_bytes)),
              "cudaFuncSetAttribute (dynamic shared memory)");
        raised = s.shared_bytes;
      }
    }
    run_kernel<K><<<unsigned(s.blocks), unsigned(s.threads), s.shared_bytes, stream_>>>(k);
    check(cudaGetLastError(), "kernel launch");
  }
  void* allocate(std::size_t bytes) {
    std::size_t const size = block_size(bytes);
    {
      std::lock_guard<std::mutex> g(cache_->m);
      if (size <= cache::max_block) {
        auto it = cache_->free.find(key(size));
        if (it != cache_->free.end() && !it->second.empty()) {
          void* p = it->second.back();
          it->second.pop_back();
          cache_->kept -= size;
          cache_->live.insert_or_assign(p, size);
          return p;
        }
      }
    }
    void* p = nullptr;
    cudaError_t e = cudaMallocAsync(&p, size, stream_);
    if (e == cudaErrorMemoryAllocation) {  // give the kept blocks back, then try once more
      (void)cudaGetLastError();
      cache_->trim();
      e = cudaMallocAsync(&p, size, stream_);
    }
    check(e, "cudaMallocAsync");
    std::lock_guard<std::mutex> g(cache_->m);
    cache_->live.insert_or_assign(p, size);
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
          cache_->free[key(size)].push_back(p);
          cache_->kept += size;
          return;
        }
      }
    }
    (void)cudaFreeAsync(p, stream_);
  }
  /// Memory that kernels write and the host reads without a copy or a wait (page-locked,
  /// mapped; zeroed), at most 64 bytes, or null when there is none (cudaHostAlloc failed, or
  /// no unified addressing): the caller then reads device memory back instead. Slots of 64
  /// bytes come from 4 KiB pages the launcher keeps (cudaHostAlloc is slow), freed with it.
  void* allocate_host_visible(std::size_t bytes) {
    if (bytes > cache::visible_slot) return nullptr;
    std::lock_guard<std::mutex> g(cache_->m);
    if (cache_->visible_free.empty()) {
      void* page = nullptr;
      if (cudaHostAlloc(&page, cache::visible_page, cudaHostAllocMapped | cudaHostAllocPortable) != cudaSuccess) {
        (void)cudaGetLastError();
        return nullptr;
      }
      void* dev = nullptr;
      if (cudaHostGetDevicePointer(&dev, page, 0) != cudaSuccess || dev != page) {
        (void)cudaGetLastError();
        (void)cudaFreeHost(page);
        return nullptr;
      }
      cache_->visible_pages.push_back(page);
      for (std::size_t off = 0; off < cache::visible_page; off += cache::visible_slot)
        cache_->visible_free.push_back(static_cast<unsigned char*>(page) + off);
    }
    void* p = cache_->visible_free.back();
    cache_->visible_free.pop_back();
    std::memset(p, 0, cache::visible_slot);
    return p;
  }
  void deallocate_host_visible(void* p) {
    if (!p) return;
    std::lock_guard<std::mutex> g(cache_->m);
    cache_->visible_free.push_back(p);
  }
  /// A word of device memory that is zero between launches in this launcher's stream (each
  /// stream, and each host thread on cudaStreamPerThread, has its own): a kernel that counts
  /// on it (reduce_last_block_kernel) leaves it zero. Made and cleared on first use.
  std::uint32_t* arrival_counter() {
    std::lock_guard<std::mutex> g(cache_->m);
    auto const k = counter_key();
    auto it = cache_->counters.find(k);
    if (it != cache_->counters.end()) return it->second;
    void* p = nullptr;
    check(cudaMallocAsync(&p, sizeof(std::uint32_t), stream_), "cudaMallocAsync");
    check(cudaMemsetAsync(p, 0, sizeof(std::uint32_t), stream_), "cudaMemsetAsync");
    auto* c = static_cast<std::uint32_t*>(p);
    cache_->counters.emplace(k, c);
    return c;
  }
  void copy_to_host(void* dst, void const* src, std::size_t bytes) {
    if (bytes <= cache::staging_bytes && cache_->staging_buffer()) {
      // a small read (a loss, a count, a flag) goes through page-locked memory the launcher
      // keeps: a copy into pageable memory is staged by the driver, which costs more than the
      // read itself
      std::lock_guard<std::mutex> g(cache_->staging_use);
      void* const pinned = cache_->staging;
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

  /// C = A B (+ C) in the launcher's stream through cuBLAS (float, double): the call
  /// backend/grid/executor.hpp makes for matrix products, with host::gemm's arguments
  /// (mat_ref operands, each with a unit stride along one axis: blas_form_of; a batch of
  /// products, or with cbs = 0 a batch summed into one C, in batch order). The row-major
  /// product is cuBLAS's column-major C^T = B^T A^T. A program that calls it links cuBLAS
  /// (-lcublas). Compiled in CI; never run on a GPU yet (docs/cuda.md).
  template <class T>
  void gemm(index_t batch, index_t m, index_t n, index_t k, mat_ref<T> a, mat_ref<T> b, T* c, index_t ldc,
            index_t cbs, bool accumulate) {
    static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>,
                  "gradix::cuda: matrix products on the device are float or double");
    if (batch <= 0 || m <= 0 || n <= 0) return;
    if (k == 0) {  // C = 0 (+ C)
      if (!accumulate)
        for (index_t q = 0; q < (cbs == 0 ? 1 : batch); ++q)
          check(cudaMemset2DAsync(c + q * cbs, std::size_t(ldc) * sizeof(T), 0, std::size_t(n) * sizeof(T), std::size_t(m), stream_),
                "cudaMemset2DAsync (gemm with k = 0)");
      return;
    }
    blas_form const fa = blas_form_of(m, k, a.rs, a.cs), fb = blas_form_of(k, n, b.rs, b.cs);
    constexpr index_t imax = 2147483647;
    if (!fa.ok || !fb.ok)
      ::gradix::detail::fail("gradix::cuda: gemm: an operand has no unit stride (the save transform copies such operands)");
    if (m > imax || n > imax || k > imax || fa.ld > imax || fb.ld > imax || ldc > imax || batch > imax)
      ::gradix::detail::fail("gradix::cuda: gemm: extents beyond cuBLAS's int range");
    cublasHandle_t const h = blas_handle();
    cublasOperation_t const ob = fb.trans ? CUBLAS_OP_T : CUBLAS_OP_N, oa = fa.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
    T const one = T(1), zero = T(0);
    auto call = [&](T const* bp, T const* ap, T* cp, T const* beta, index_t count) {
      if constexpr (std::is_same_v<T, float>)
        check_blas(cublasSgemmStridedBatched(h, ob, oa, int(n), int(m), int(k), &one, bp, int(fb.ld), b.bs, ap, int(fa.ld),
                                             a.bs, beta, cp, int(ldc), cbs, int(count)),
                   "cublasSgemmStridedBatched");
      else
        check_blas(cublasDgemmStridedBatched(h, ob, oa, int(n), int(m), int(k), &one, bp, int(fb.ld), b.bs, ap, int(fa.ld),
                                             a.bs, beta, cp, int(ldc), cbs, int(count)),
                   "cublasDgemmStridedBatched");
    };
    if (cbs != 0 || batch == 1) {
      call(b.p, a.p, c, accumulate ? &one : &zero, batch);
    } else {  // one C for the whole batch: the products added one after another
      for (index_t q = 0; q < batch; ++q)
        call(b.p + q * b.bs, a.p + q * a.bs, c, (accumulate || q > 0) ? &one : &zero, 1);
    }
  }

 private:
  // A kept block is handed out again only in an order the stream guarantees: to any thread
  // when the stream is one stream for all of them, but for cudaStreamPerThread (a different
  // stream in each host thread) only to the thread that gave it back.
  using block_key = std::pair<std::size_t, std::thread::id>;
  struct key_hash {
    std::size_t operator()(block_key const& k) const {
      return std::hash<std::size_t>()(k.first) ^ (std::hash<std::thread::id>()(k.second) << 1);
    }
  };
  struct cache {
    static constexpr std::size_t max_block = std::size_t(1) << 20;
    static constexpr std::size_t max_kept = std::size_t(64) << 20;
    std::mutex m;
    std::unordered_map<void*, std::size_t> live;                          // every block handed out
    std::unordered_map<block_key, std::vector<void*>, key_hash> free;     // small blocks kept
    std::size_t kept = 0;
    // the opt-in shared memory limit per block, asked once
    std::once_flag shared_once;
    std::size_t shared_max = 48 * 1024;
    std::size_t shared_limit() {
      std::call_once(shared_once, [&] {
        int dev = 0, v = 0;
        if (cudaGetDevice(&dev) == cudaSuccess &&
            cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) == cudaSuccess && v > 0)
          shared_max = std::size_t(v);
        (void)cudaGetLastError();
      });
      return shared_max;
    }
    // host-visible slots (allocate_host_visible)
    static constexpr std::size_t visible_slot = 64;
    static constexpr std::size_t visible_page = 4096;
    std::vector<void*> visible_pages;
    std::vector<void*> visible_free;
    // arrival counters, per stream (and thread, on cudaStreamPerThread)
    std::unordered_map<block_key, std::uint32_t*, key_hash> counters;
    // cuBLAS handles, the same way (gemm); destroyed through blas_destroy, set where the
    // first is made, so that a program without products does not link cuBLAS
    std::unordered_map<block_key, void*, key_hash> blas;
    void (*blas_destroy)(void*) = nullptr;
    // page-locked host memory for small reads (copy_to_host), made on first use (null if
    // cudaMallocHost fails: the reads then go to pageable memory)
    static constexpr std::size_t staging_bytes = 4096;
    std::mutex staging_m;    // making the buffer
    std::mutex staging_use;  // a read through it
    void* staging = nullptr;
    bool staging_tried = false;
    void* staging_buffer() {
      std::lock_guard<std::mutex> g(staging_m);
      if (!staging_tried) {
        staging_tried = true;
        if (cudaMallocHost(&staging, staging_bytes) != cudaSuccess) {
          (void)cudaGetLastError();
          staging = nullptr;
        }
      }
      return staging;
    }
    /// Gives every kept block back to the driver. cudaFree waits for the device, so a block
    /// that another thread's stream may still be using is safe to free from here.
    void trim() {
      std::lock_guard<std::mutex> g(m);
      for (auto& [k, blocks] : free)
        for (void* p : blocks) (void)cudaFree(p);
      free.clear();
      kept = 0;
    }
    ~cache() {
      trim();
      for (auto& [k, p] : counters) (void)cudaFree(p);
      if (blas_destroy)
        for (auto& [k, h] : blas) blas_destroy(h);
      for (void* p : visible_pages) (void)cudaFreeHost(p);
      if (staging) (void)cudaFreeHost(staging);
    }
  };
  block_key counter_key() const {
    return {reinterpret_cast<std::size_t>(stream_), stream_ == cudaStreamPerThread ? std::this_thread::get_id() : std::thread::id()};
  }
  block_key key(std::size_t size) const {
    return {size, stream_ == cudaStreamPerThread ? std::this_thread::get_id() : std::thread::id()};
  }
  static std::size_t block_size(std::size_t bytes) {
    if (bytes > cache::max_block) return bytes;
    std::size_t s = 256;
    while (s < bytes) s *= 2;
    return s;
  }
  /// This stream's cuBLAS handle (and thread's, on cudaStreamPerThread), made on first use.
  cublasHandle_t blas_handle() {
    std::lock_guard<std::mutex> g(cache_->m);
    void*& h = cache_->blas[counter_key()];
    if (!h) {
      cublasHandle_t x = nullptr;
      check_blas(cublasCreate(&x), "cublasCreate");
      check_blas(cublasSetStream(x, stream_), "cublasSetStream");
      h = x;
      cache_->blas_destroy = [](void* p) { (void)cublasDestroy(static_cast<cublasHandle_t>(p)); };
    }
    return static_cast<cublasHandle_t>(h);
  }
  static constexpr std::size_t default_shared = 48 * 1024;
  cudaStream_t stream_ = cudaStreamPerThread;
  std::shared_ptr<cache> cache_ = std::make_shared<cache>();
};

/// This thread's launcher on cudaStreamPerThread: the one gx::eval, value and assign use for a
/// device expression without a device parameter (whose launcher they use otherwise).
inline launcher& default_launcher() {
  thread_local launcher l;
  return l;
}

}  // namespace gradix::cuda
