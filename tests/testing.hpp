#pragma once
// Test helpers: element-by-element comparison that reports the first bad index.
#include <gradix/gradix.hpp>

#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <sstream>
#include <string>

namespace gradix::testing {

/// The message of the gradix::error that f throws ("" when it throws nothing).
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (error const& e) {
    return e.what();
  }
  return "";
}

/// Compares a and b (same shape) elementwise with |a - b| <= atol + rtol |b|; on failure the
/// message names the first bad coordinate and both values.
template <class A, class B>
std::string all_close(A const& a_in, B const& b_in, double rtol = 1e-6, double atol = 1e-6) {
  auto a = detail::as_node(a_in);
  auto b = detail::as_node(b_in);
  if (!(a.shape() == b.shape()))
    return "shapes differ: " + to_string(a.shape()) + " vs " + to_string(b.shape());
  auto ta = eval(a);
  auto tb = eval(b);
  auto s = ta.shape();
  for (index_t k = 0; k < s.size(); ++k) {
    auto c = detail::unravel(s, k);
    double x = double(ta[c]), y = double(tb[c]);
    bool ok = std::abs(x - y) <= atol + rtol * std::abs(y) || (std::isnan(x) && std::isnan(y));
    if (!ok) {
      std::ostringstream os;
      os.precision(17);
      os << "first mismatch at [";
      for (std::size_t i = 0; i < c.size(); ++i) os << (i ? ", " : "") << c[i];
      os << "]: " << x << " vs " << y;
      return os.str();
    }
  }
  return "";
}

/// Sets the pool's thread count for a scope (thread_scope(n)), or only keeps it
/// (thread_scope()), and restores the count it had at the end.
class thread_scope {
 public:
  thread_scope() = default;
  explicit thread_scope(int n) { set_num_threads(n); }
  thread_scope(thread_scope const&) = delete;
  thread_scope& operator=(thread_scope const&) = delete;
  ~thread_scope() { set_num_threads(saved_); }

 private:
  int saved_ = num_threads();
};

/// The bits of a float or a double (results compared bit for bit).
template <class T>
auto bits_of(T v) {
  static_assert(sizeof(T) == 4 || sizeof(T) == 8, "bits_of: a float or a double");
  if constexpr (sizeof(T) == 4) return std::bit_cast<std::uint32_t>(v);
  else return std::bit_cast<std::uint64_t>(v);
}

}  // namespace gradix::testing

#define CHECK_ALL_CLOSE(...)                                     \
  do {                                                           \
    std::string gradix_msg_ = gradix::testing::all_close(__VA_ARGS__); \
    CHECK_MESSAGE(gradix_msg_.empty(), gradix_msg_);             \
  } while (0)
