#pragma once
/// \file
/// Lifetime checks (opt-in): with GRADIX_CHECK_LIFETIMES defined, for every translation unit
/// of a program, each heap buffer of a tensor and each parameter gets a generation number
/// while it lives; views, index vectors and parameter leaves built from them carry that
/// number, and the API checks it before it runs an expression. An expression that outlived
/// a tensor, index tensor or parameter it reads (a local returned from a function, a tensor
/// reassigned to another size) then throws gradix::error instead of reading freed memory.
///
/// Not tracked (generation 0, never checked): small static-shape tensors stored inline,
/// views over external memory (`view(ptr, ...)`), index vectors over std::vector or spans.
/// The check costs a mutex and a hash lookup per leaf and call: a debugging aid.
///
/// The macro changes the layout of tensor_view and index_vec: defining it in some
/// translation units and not in others breaks the one-definition rule. (Host functions
/// only; declared in nvcc's device pass too, where host code is still parsed.)

#include "gradix/config.hpp"

#include <cstdint>

#if defined(GRADIX_CHECK_LIFETIMES)
#include <mutex>
#include <new>
#include <unordered_map>

namespace gradix::detail {

struct lifetime_registry {
  std::mutex m;
  std::unordered_map<void const*, std::uint64_t> live;
  std::uint64_t next = 1;
};
inline lifetime_registry& lifetimes() {
  // never destroyed: tensors with static storage duration may end after it would
  static lifetime_registry* r = new lifetime_registry;
  return *r;
}
/// Starts tracking `key`; returns its generation (0, untracked, when out of memory).
inline std::uint64_t lifetime_begin(void const* key) {
  if (!key) return 0;
  auto& r = lifetimes();
  std::lock_guard<std::mutex> lk(r.m);
  try {
    std::uint64_t g = r.next++;
    r.live[key] = g;
    return g;
  } catch (std::bad_alloc const&) {
    return 0;
  }
}
inline void lifetime_end(void const* key) {
  if (!key) return;
  auto& r = lifetimes();
  std::lock_guard<std::mutex> lk(r.m);
  r.live.erase(key);
}
/// Is `key` still the object of generation gen (always true for generation 0)?
inline bool lifetime_alive(void const* key, std::uint64_t gen) {
  if (gen == 0) return true;
  auto& r = lifetimes();
  std::lock_guard<std::mutex> lk(r.m);
  auto it = r.live.find(key);
  return it != r.live.end() && it->second == gen;
}

}  // namespace gradix::detail
#endif
