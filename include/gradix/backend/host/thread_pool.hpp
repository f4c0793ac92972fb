#pragma once
/// \file
/// gradix's own thread pool (std::thread). Size: all cores by default, or the environment
/// variable GRADIX_NUM_THREADS, or set_num_threads(n). Dispatching work allocates nothing:
/// a job is a function pointer and a context pointer. The calling thread takes part; a task
/// that itself calls run() runs its work serially.
///
/// Several user threads may call run() at once: jobs take turns (one job at a time, each
/// on all threads). resize() may be called at any time from any user thread: it waits for
/// the running job to finish. (From inside a task it throws: the job would wait for itself.)

#include "gradix/config.hpp"
#include "gradix/core/error.hpp"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace gradix::host {

class thread_pool {
 public:
  explicit thread_pool(int n) { start(n); }
  thread_pool(thread_pool const&) = delete;
  thread_pool& operator=(thread_pool const&) = delete;
  ~thread_pool() { stop(); }

  /// Number of threads that run work, the calling thread included.
  int size() const { return size_.load(std::memory_order_relaxed); }

  /// Changes the number of threads (>= 1); waits for a running job to finish first.
  void resize(int n) {
    if (in_worker())
      ::gradix::detail::fail("gradix::set_num_threads: called from inside a gradix task (a generate() "
                   "function or a user op); call it between gradix calls");
    if (n < 1) n = 1;
    std::lock_guard<std::mutex> busy(run_mutex_);
    if (n == size()) return;
    stop();
    start(n);
  }

  /// Runs f(k) for k in [0, n): each task exactly once, on any thread, in any order; with
  /// serial, in order on the calling thread.
  template <class F>
  void run(index_t n, F& f, bool serial = false) {
    if (n <= 0) return;
    run_erased(n, &task_thunk<F>, &f, serial);
  }

 private:
  /// A task type's one entry point: f's body is compiled here once, whether its tasks run
  /// on the pool or on the calling thread (a serial loop of its own in run() was a second
  /// copy of every kernel's task).
  template <class F>
  [[gnu::noinline]] static void task_thunk(void* ctx, index_t k) {
    (*static_cast<F*>(ctx))(k);
  }
  /// The pool's side of run(), once per program rather than once per task type (every
  /// kernel's instantiation of run() is a small thunk around this).
  [[gnu::noinline]] void run_erased(index_t n, void (*fn)(void*, index_t), void* ctx, bool serial) {
    if (serial || n == 1 || in_worker() || size() == 1) {
      for (index_t k = 0; k < n; ++k) fn(ctx, k);
      return;
    }
    std::unique_lock<std::mutex> busy(run_mutex_);  // one job at a time
    if (workers_.empty()) {  // resized to 1 thread while this caller waited
      busy.unlock();
      for (index_t k = 0; k < n; ++k) fn(ctx, k);
      return;
    }
    {
      std::lock_guard<std::mutex> lk(m_);
      fn_ = fn;
      ctx_ = ctx;
      ntasks_ = n;
      next_.store(0, std::memory_order_relaxed);
      int helpers = int(std::min<index_t>(n - 1, index_t(workers_.size())));
      active_ = helpers;
      wanted_ = helpers;
      ++generation_;
    }
    cv_.notify_all();
    work();
    std::unique_lock<std::mutex> lk(m_);
    done_cv_.wait(lk, [&] { return active_ == 0; });
    fn_ = nullptr;
  }

  static bool& in_worker() {
    thread_local bool flag = false;
    return flag;
  }
  void work() {
    bool was = in_worker();
    in_worker() = true;
    for (;;) {
      index_t k = next_.fetch_add(1, std::memory_order_relaxed);
      if (k >= ntasks_) break;
      fn_(ctx_, k);
    }
    in_worker() = was;
  }
  void worker_loop() {
    std::uint64_t seen = 0;
    for (;;) {
      {
        std::unique_lock<std::mutex> lk(m_);
        cv_.wait(lk, [&] { return stop_ || (generation_ != seen && wanted_ > 0); });
        if (stop_) return;
        seen = generation_;
        --wanted_;
      }
      work();
      {
        std::lock_guard<std::mutex> lk(m_);
        if (--active_ == 0) done_cv_.notify_one();
      }
    }
  }
  void start(int n) {
    n = n < 1 ? 1 : n;
    stop_ = false;
    try {
      workers_.reserve(std::size_t(n - 1));
      for (int i = 1; i < n; ++i) workers_.emplace_back([this] { worker_loop(); });
    } catch (std::exception const&) {
      // no more threads could be started (std::system_error, or no memory): run with the
      // ones that did start; results do not depend on the thread count
      n = int(workers_.size()) + 1;
    }
    size_.store(n, std::memory_order_relaxed);
  }
  void stop() {
    {
      std::lock_guard<std::mutex> lk(m_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : workers_) t.join();
    workers_.clear();
  }

  std::atomic<int> size_{1};
  std::vector<std::thread> workers_;
  std::mutex m_, run_mutex_;
  std::condition_variable cv_, done_cv_;
  void (*fn_)(void*, index_t) = nullptr;
  void* ctx_ = nullptr;
  index_t ntasks_ = 0;
  std::atomic<index_t> next_{0};
  int active_ = 0;
  int wanted_ = 0;
  std::uint64_t generation_ = 0;
  bool stop_ = false;
};

/// Default thread count: GRADIX_NUM_THREADS if set, else all cores.
inline int default_num_threads() {
  if (char const* s = std::getenv("GRADIX_NUM_THREADS")) {
    int n = std::atoi(s);
    if (n >= 1) return n;
  }
  unsigned h = std::thread::hardware_concurrency();
  return h ? int(h) : 1;
}

/// The process-wide pool (started on first use).
/// The process's pool, started on first use. Out of line: inlined, the guarded start of the
/// pool (threads, vector growth, exit registration) was copied into every kernel that asks
/// for the pool's size.
[[gnu::noinline]] inline thread_pool& pool() {
  static thread_pool p(default_num_threads());
  return p;
}

/// Work below this many elements runs serially.
inline constexpr index_t parallel_min_elements = index_t(1) << 15;

}  // namespace gradix::host

namespace gradix {
/// Sets the number of threads gradix uses (>= 1), the calling thread included.
inline void set_num_threads(int n) { host::pool().resize(n); }
/// The number of threads gradix uses.
inline int num_threads() { return host::pool().size(); }
}  // namespace gradix
