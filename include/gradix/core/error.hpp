#pragma once
/// \file
/// gradix::error: the one exception type for user errors, thrown in every build type.

#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>

namespace gradix {

/// Thrown for bad user input detected at run time (shape mismatch of dynamic extents,
/// out-of-range index, bad argument). The message names the operation and the values.
class error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace detail {

inline void append_piece(std::string& s, std::string_view v) { s.append(v); }
inline void append_piece(std::string& s, char const* v) { s.append(v); }
inline void append_piece(std::string& s, std::string const& v) { s.append(v); }
template <class T>
  requires std::is_arithmetic_v<T>
inline void append_piece(std::string& s, T v) {
  s.append(std::to_string(v));
}

/// Builds the message from its pieces and throws gradix::error. Kept out of line of the
/// callers' hot paths: [[gnu::cold]] and noinline so validation costs one compare.
template <class... P>
[[noreturn]] [[gnu::cold]] [[gnu::noinline]] void fail(P const&... pieces) {
  std::string s;
  (append_piece(s, pieces), ...);
  throw error(s);
}

}  // namespace detail
}  // namespace gradix
