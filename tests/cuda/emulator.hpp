#pragma once
// The host grid emulator: a launcher (backend/grid/launch.hpp) that runs gradix's device
// kernels on the host, so that CI, which has no GPU, runs every kernel body the GPU runs.
// A test tool, not a backend for users.
//
// - Blocks run one after another, in order or in a seeded shuffled order (results that
//   depend on block order show up as differences between orders).
// - A kernel that declares uses_barriers runs one fiber per thread (Boost.Context): c.sync()
//   suspends the fiber, and the block's threads resume only when every one of them has
//   reached the barrier. A thread that ends while others wait at a barrier, or a barrier in
//   a kernel that declares none, is a gradix::error naming the block, the threads and the
//   barrier: on a GPU that is undefined behaviour, here it is found.
// - Threads of a kernel without barriers run one after another, in order or reversed (the
//   `reverse_threads` option), since nothing may depend on the order of threads.
// - Matrix products (gemm) run the host's gemm on the emulator's memory, where a GPU runs
//   cuBLAS.
// - Shared memory is one buffer per block, filled with the byte 0xFF before each block (NaN
//   as float or double, -1 as an integer), so a kernel that reads shared memory it did not
//   write gets garbage, as on a GPU; so does newly allocated memory. "Device" memory is host
//   memory (allocate / deallocate count what is live).
// - Between barriers, threads resume in ascending order in even rounds and descending in odd
//   ones; threads that wait at different sync() calls (call sites) are an error.
// - Fiber stacks (64 KiB, pooled) have no guard page: a kernel that overflows one corrupts
//   memory silently (kernels here keep small frames).
// - atomic_add is a plain add: fibers switch only at barriers, so it is atomic here.
#include <gradix/backend/grid/launch.hpp>
#include <gradix/backend/host/gemm.hpp>
#include <gradix/core/error.hpp>

#include <boost/context/fiber.hpp>
#include <boost/context/pooled_fixedsize_stack.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <numeric>
#include <source_location>
#include <utility>
#include <vector>

namespace gradix_test::emu {

using gradix::index_t;

struct options {
  bool shuffle_blocks = false;  // run blocks in a shuffled order
  std::uint64_t seed = 1;       // of the shuffle
  bool reverse_threads = false; // threads of barrier-free kernels from last to first
  std::size_t stack_bytes = 64 * 1024;
  index_t max_threads = 1024;
  std::size_t max_shared_bytes = 227 * 1024;
};

class launcher;

/// The context a kernel sees (one per thread).
class context {
 public:
  index_t block() const { return block_; }
  index_t thread() const { return thread_; }
  index_t blocks() const { return blocks_; }
  index_t threads() const { return threads_; }
  template <class T>
  T* shared() const {
    return reinterpret_cast<T*>(shared_);
  }
  template <class T>
  void atomic_add(T* p, T v) const {
    *p += v;
  }
  void atomic_min(long long* p, long long v) const { *p = v < *p ? v : *p; }
  void atomic_max(std::int32_t* p, std::int32_t v) const { *p = v > *p ? v : *p; }
  std::int32_t atomic_cas(std::int32_t* p, std::int32_t expected, std::int32_t desired) const {
    std::int32_t const old = *p;
    if (old == expected) *p = desired;
    return old;
  }
  std::uint32_t atomic_fetch_add(std::uint32_t* p, std::uint32_t v) const {
    std::uint32_t const old = *p;
    *p += v;
    return old;
  }
  void fence() const {}  // (one thread runs at a time: every write is already seen)
  /// Barrier; the call site is recorded, so that threads waiting at different sync() calls
  /// are reported (undefined behaviour on a GPU).
  void sync(std::source_location site = std::source_location::current()) const;

 private:
  friend class launcher;
  index_t block_ = 0, thread_ = 0, blocks_ = 1, threads_ = 1;
  unsigned char* shared_ = nullptr;
  launcher* l_ = nullptr;
};

class launcher {
 public:
  launcher() = default;
  explicit launcher(options o) : o_(o) {}
  launcher(launcher const&) = delete;
  launcher& operator=(launcher const&) = delete;
  ~launcher() {
    for (auto& a : live_) std::free(a.p);
  }

  index_t max_threads() const { return o_.max_threads; }
  /// The shared memory a block may have (an H200's: 227 KiB); a launch asking for more is an
  /// error, as on a GPU.
  std::size_t max_shared_bytes() const { return o_.max_shared_bytes; }
  options& opts() { return o_; }

  /// Runs every block of kernel k now (the emulator has no queue: it is always in order).
  template <class K>
  void launch(gradix::grid::launch_shape s, K const& k) {
    if (s.blocks < 1 || s.threads < 1 || s.threads > o_.max_threads)
      gradix::detail::fail("grid emulator: launch of ", s.blocks, " blocks of ", s.threads,
                           " threads (at most ", o_.max_threads, " threads per block)");
    if (s.shared_bytes > o_.max_shared_bytes)
      gradix::detail::fail("grid emulator: launch with ", s.shared_bytes, " bytes of shared memory per block (at most ",
                           o_.max_shared_bytes, ")");
    ++launches_;
    std::vector<index_t> order(std::size_t(s.blocks));
    std::iota(order.begin(), order.end(), index_t(0));
    if (o_.shuffle_blocks) shuffle(order);
    std::vector<unsigned char> shared((s.shared_bytes + 15) / 16 * 16 + 16);
    for (index_t b : order) {
      std::fill(shared.begin(), shared.end(), static_cast<unsigned char>(0xFF));
      if constexpr (K::uses_barriers) {
        run_block_fibers(s, b, shared.data(), k);
      } else {
        for (index_t i = 0; i < s.threads; ++i) {
          index_t t = o_.reverse_threads ? s.threads - 1 - i : i;
          context c = make_context(s, b, t, shared.data());
          struct flag_guard {
            bool& f;
            ~flag_guard() { f = false; }
          } guard{in_barrier_free_};
          in_barrier_free_ = true;
          k(c);
        }
      }
    }
    if (counter_ != 0) {
      counter_ = 0;
      gradix::detail::fail("grid emulator: a kernel left the arrival counter at a non-zero value");
    }
  }

  /// A word of device memory that is zero between launches: a kernel that counts on it
  /// (reduce_last_block_kernel) leaves it zero (checked after every launch).
  std::uint32_t* arrival_counter() { return &counter_; }

  /// Memory both the kernels and the host read and write without a copy (zeroed); counted
  /// with the allocations.
  void* allocate_host_visible(std::size_t bytes) {
    void* p = allocate(bytes);
    std::memset(p, 0, bytes);
    return p;
  }
  void deallocate_host_visible(void* p) { deallocate(p); }

  void* allocate(std::size_t bytes) {
    void* p = std::malloc(bytes ? bytes : 1);
    if (!p) gradix::detail::fail("grid emulator: allocate(", bytes, ") failed");
    std::memset(p, 0xFF, bytes);  // uninitialised device memory is garbage (NaN, -1)
    live_.push_back({p, bytes});
    return p;
  }
  void deallocate(void* p) {
    auto it = std::find_if(live_.begin(), live_.end(), [&](auto const& a) { return a.p == p; });
    if (it == live_.end()) gradix::detail::fail("grid emulator: deallocate of a pointer it did not allocate");
    std::free(p);
    live_.erase(it);
  }
  void copy_to_host(void* dst, void const* src, std::size_t bytes) {
    ++reads_;
    std::memcpy(dst, src, bytes);
  }
  void copy_to_device(void* dst, void const* src, std::size_t bytes) { std::memcpy(dst, src, bytes); }
  void copy_device_to_device(void* dst, void const* src, std::size_t bytes) { std::memcpy(dst, src, bytes); }
  void fill_zero(void* p, std::size_t bytes) { std::memset(p, 0, bytes); }
  void synchronize() {}
  /// C = A B (+ C) on "device" memory (host memory here): the host's gemm, the call
  /// gradix::cuda::launcher makes through cuBLAS (backend/grid/executor.hpp).
  template <class T>
  void gemm(gradix::index_t batch, gradix::index_t m, gradix::index_t n, gradix::index_t k, gradix::mat_ref<T> a,
            gradix::mat_ref<T> b, T* c, gradix::index_t ldc, gradix::index_t cbs, bool accumulate) {
    ++launches_;
    gradix::host::gemm(batch, m, n, k, a, b, c, ldc, cbs, accumulate);
  }

  /// Kernels launched and allocations live, for tests.
  index_t launches() const { return launches_; }
  /// copy_to_host calls (each a wait for the device on a GPU), for tests.
  index_t reads() const { return reads_; }
  std::size_t live_allocations() const { return live_.size(); }

 private:
  friend class context;
  struct allocation {
    void* p;
    std::size_t bytes;
  };
  struct fiber_thread {
    boost::context::fiber f;  // the thread, while suspended
    boost::context::fiber sink;  // the scheduler, while the thread runs
    bool done = false;
    std::exception_ptr error;
    unsigned line = 0, column = 0;  // of the sync() call it waits at
  };

  context make_context(gradix::grid::launch_shape s, index_t b, index_t t, unsigned char* shared) {
    context c;
    c.block_ = b;
    c.thread_ = t;
    c.blocks_ = s.blocks;
    c.threads_ = s.threads;
    c.shared_ = shared;
    c.l_ = this;
    return c;
  }

  void shuffle(std::vector<index_t>& v) const {
    std::uint64_t x = o_.seed * 0x9E3779B97F4A7C15ull + 1;
    for (std::size_t i = v.size(); i > 1; --i) {
      x ^= x >> 12;
      x ^= x << 25;
      x ^= x >> 27;
      std::size_t j = std::size_t((x * 0x2545F4914F6CDD1Dull) % i);
      std::swap(v[i - 1], v[j]);
    }
  }

  template <class K>
  void run_block_fibers(gradix::grid::launch_shape s, index_t b, unsigned char* shared, K const& k) {
    namespace bc = boost::context;
    // (ctx first: the suspended fibers, unwound when th goes, still refer to it)
    std::vector<context> ctx(std::size_t(s.threads));
    std::vector<fiber_thread> th(std::size_t(s.threads));
    for (index_t t = 0; t < s.threads; ++t) {
      ctx[std::size_t(t)] = make_context(s, b, t, shared);
      fiber_thread* me = &th[std::size_t(t)];
      context const* cp = &ctx[std::size_t(t)];
      me->f = bc::fiber(std::allocator_arg, stacks_, [me, cp, &k](bc::fiber&& sink) {
        me->sink = std::move(sink);
        try {
          k(*cp);
        } catch (bc::detail::forced_unwind const&) {
          throw;
        } catch (...) {
          me->error = std::current_exception();
        }
        me->done = true;
        return std::move(me->sink);
      });
    }
    // Rounds: run every live thread until it reaches its next barrier or ends, in ascending
    // thread order in even rounds and descending in odd ones (so a race between two threads
    // of one phase comes out both ways).
    index_t round = 0;
    while (true) {
      index_t waiting = 0, ended = 0;
      for (index_t i = 0; i < s.threads; ++i) {
        index_t const t = round % 2 == 0 ? i : s.threads - 1 - i;
        fiber_thread& x = th[std::size_t(t)];
        if (x.done) {
          ++ended;
          continue;
        }
        current_ = &x;
        x.f = std::move(x.f).resume();
        current_ = nullptr;
        if (x.error) std::rethrow_exception(x.error);
        if (x.done) ++ended;
        else ++waiting;
      }
      if (waiting == 0) return;
      if (ended > 0)
        gradix::detail::fail("grid emulator: barrier divergence in block ", b, ": ", waiting, " of ", s.threads,
                             " threads wait at barrier ", round + 1, " while ", ended, " have ended");
      for (auto const& x : th)
        if (x.line != th[0].line || x.column != th[0].column)
          gradix::detail::fail("grid emulator: barrier divergence in block ", b, ": at barrier ", round + 1,
                               " threads wait at different sync() calls (line ", th[0].line, " and line ", x.line, ")");
      ++round;
    }
  }

  void at_barrier(std::source_location const& site) {
    if (in_barrier_free_ || !current_)
      gradix::detail::fail("grid emulator: sync() in a kernel that declares uses_barriers = false");
    fiber_thread& x = *current_;
    x.line = site.line();
    x.column = site.column();
    x.sink = std::move(x.sink).resume();
  }

  options o_{};
  boost::context::pooled_fixedsize_stack stacks_{o_.stack_bytes};
  std::vector<allocation> live_;
  index_t launches_ = 0;
  index_t reads_ = 0;
  std::uint32_t counter_ = 0;
  fiber_thread* current_ = nullptr;
  bool in_barrier_free_ = false;
};

inline void context::sync(std::source_location site) const { l_->at_barrier(site); }

}  // namespace gradix_test::emu
