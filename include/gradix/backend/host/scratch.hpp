#pragma once
/// \file
/// The scratch arena of the host's backward kernels: one buffer per user thread that only
/// grows, reserved by backward's pre-pass (the largest scratch_bytes of the plan's elements),
/// so that no update kernel allocates. Kernels take their memory with try_get and, should it
/// be short, take another path (serial, the fused pair's uses apart, no loss value carried).

#include <algorithm>
#include <cstddef>
#include <new>

namespace gradix::host {

/// A buffer that only grows, reused by every backward of one user thread (no allocation
/// once warm). backward reserves what its kernels need in its pre-pass, so kernels never
/// allocate (and nothing can fail once the first gradient element is written).
struct scratch_buffer {
  void* p_ = nullptr;
  std::size_t bytes_ = 0;
  scratch_buffer() = default;
  scratch_buffer(scratch_buffer const&) = delete;
  scratch_buffer& operator=(scratch_buffer const&) = delete;
  ~scratch_buffer() { ::operator delete(p_, std::align_val_t{64}); }
  /// Makes room for `need` bytes (std::bad_alloc when out of memory, the old buffer kept).
  void reserve(std::size_t need) {
    if (need <= bytes_) return;
    std::size_t b = std::max(need, bytes_ * 2);
    void* q = ::operator new(b, std::align_val_t{64});
    ::operator delete(p_, std::align_val_t{64});
    p_ = q;
    bytes_ = b;
  }
  /// n elements of T from the reserved room, or nullptr when it is too small.
  template <class T>
  T* try_get(std::size_t n) {
    return n * sizeof(T) <= bytes_ ? static_cast<T*>(p_) : nullptr;
  }
};
/// The calling thread's scratch buffer (per user thread: concurrent backward calls from
/// several threads never share it).
/// Out of line, as host::pool(): one copy of the thread-local start and exit registration.
[[gnu::noinline]] inline scratch_buffer& scratch() {
  thread_local scratch_buffer s;
  return s;
}

}  // namespace gradix::host
