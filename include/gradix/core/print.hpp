#pragma once
/// \file
/// Printing tensors and views: a header line (element type, shape, layout) and nested
/// brackets; axes longer than 6 show their first and last 3 entries around "...".
/// Values use the stream's own formatting (precision, flags).

#include "gradix/core/layout.hpp"
#include "gradix/core/shape.hpp"
#include "gradix/core/tensor.hpp"
#include "gradix/core/view.hpp"

#include <cstdint>
#include <ostream>
#include <string>
#include <type_traits>

namespace gradix {
namespace detail {

template <class T>
constexpr char const* type_name() {
  if constexpr (std::is_same_v<T, float>) return "float";
  else if constexpr (std::is_same_v<T, double>) return "double";
  else if constexpr (std::is_same_v<T, std::int8_t>) return "int8";
  else if constexpr (std::is_same_v<T, std::uint8_t>) return "uint8";
  else if constexpr (std::is_same_v<T, std::int16_t>) return "int16";
  else if constexpr (std::is_same_v<T, std::uint16_t>) return "uint16";
  else if constexpr (std::is_same_v<T, std::int32_t>) return "int32";
  else if constexpr (std::is_same_v<T, std::uint32_t>) return "uint32";
  else if constexpr (std::is_same_v<T, std::int64_t>) return "int64";
  else if constexpr (std::is_same_v<T, std::uint64_t>) return "uint64";
  else return "element";
}
template <class L>
constexpr char const* layout_name() {
  if constexpr (std::is_same_v<L, row_major>) return "row_major";
  else if constexpr (std::is_same_v<L, col_major>) return "col_major";
  else return "strided";
}

inline constexpr index_t print_edge = 3;

template <class V>
void print_axis(std::ostream& os, V const& v, coord<V::rank>& c, std::size_t axis, int indent) {
  using T = typename V::value_type;
  index_t n = v.extent(axis);
  os << '[';
  for (index_t i = 0; i < n; ++i) {
    if (n > 2 * print_edge && i == print_edge) {
      os << "...";
      i = n - print_edge;
      if (axis + 1 == V::rank) os << ", ";
      else os << ",\n" << std::string(std::size_t(indent + 1), ' ');
    }
    c[axis] = i;
    if (axis + 1 == V::rank) {
      T x = v[c];
      if constexpr (sizeof(T) == 1) os << int(x);
      else os << x;
    } else {
      print_axis(os, v, c, axis + 1, indent + 1);
    }
    if (i + 1 < n) {
      if (axis + 1 == V::rank) os << ", ";
      else os << ",\n" << std::string(std::size_t(indent + 1), ' ');
    }
  }
  os << ']';
}

}  // namespace detail

/// Prints a host view: `tensor<float, [2, 3], row_major>` and then the elements.
template <class T, class S, class L>
std::ostream& operator<<(std::ostream& os, tensor_view<T, S, L, host_space> const& v) {
  os << "tensor<" << detail::type_name<std::remove_const_t<T>>() << ", " << to_string(v.shape())
     << ", " << detail::layout_name<L>() << ">\n";
  if constexpr (S::rank == 0) {
    os << v[coord<0>{}];
  } else {
    coord<S::rank> c{};
    if (v.size() == 0) {
      os << "[]";
    } else {
      detail::print_axis(os, v, c, 0, 0);
    }
  }
  return os;
}
template <class T, class S, class L>
std::ostream& operator<<(std::ostream& os, tensor<T, S, L> const& t) {
  return os << t.view();
}

}  // namespace gradix
