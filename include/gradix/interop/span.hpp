#pragma once
/// \file
/// Views of standard containers' memory: `std::span` and mdspan.
///
/// - `gx::view(std::span<T, N>)`: a rank-1 view (a static extent when N is);
///   `gx::view(span, dims(3, 4))`: the span's elements as a row-major (or `view<col_major>`)
///   tensor of that shape; the element counts must agree (a gradix::error names both).
/// - `gx::view(md)` for an mdspan: `std::mdspan` where the standard library has it (C++23),
///   or any type with its interface (the reference implementation, Kokkos'): `data_handle()`,
///   `extents()` with `rank()`, `static_extent(k)` and `extent(k)`, and `stride(k)`. The
///   view is strided with the mdspan's strides (so layout_right, layout_left and
///   layout_stride all come out right); static extents stay static (std::dynamic_extent
///   becomes gradix::dyn). The accessor must be the default one (plain pointer reads).
/// Nothing is copied; the memory must outlive the views, as with `gx::view(ptr, ...)`.

#include "gradix/config.hpp"
#include "gradix/core/error.hpp"
#include "gradix/core/layout.hpp"
#include "gradix/core/shape.hpp"
#include "gradix/core/view.hpp"

#include <cstddef>
#include <span>
#include <type_traits>
#include <utility>

namespace gradix {

/// A rank-1 view of a span's elements (static extent N when the span has one).
template <class T, std::size_t N>
constexpr auto view(std::span<T, N> s) {
  if constexpr (N == std::dynamic_extent) return tensor_view<T, shape<dyn>>(s.data(), dims(index_t(s.size())));
  else return tensor_view<T, shape<index_t(N)>>(s.data(), shape<index_t(N)>{});
}
/// The span's elements as a tensor of shape sh (row-major unless Layout says), which must
/// have as many elements as the span.
template <class Layout = row_major, class T, std::size_t N, index_t... E>
  requires(!std::is_same_v<Layout, strided>)
constexpr tensor_view<T, shape<E...>, Layout> view(std::span<T, N> s, shape<E...> sh) {
  if (index_t(s.size()) != sh.size())
    ::gradix::detail::fail("gradix::view: a span of ", s.size(), " elements viewed as shape ", to_string(sh), " (",
                           sh.size(), " elements)");
  return {s.data(), sh};
}

/// Whether M has mdspan's interface (see the file comment), with a plain pointer handle.
template <class M>
concept mdspan_like = requires(M const& m, std::size_t k) {
  { m.data_handle() };
  requires std::is_pointer_v<std::remove_cvref_t<decltype(m.data_handle())>>;
  { M::rank() } -> std::convertible_to<std::size_t>;
  { M::static_extent(k) } -> std::convertible_to<std::size_t>;
  { m.extent(k) } -> std::convertible_to<std::size_t>;
  { m.stride(k) } -> std::convertible_to<std::size_t>;
};

namespace detail {
template <class M, std::size_t... K>
auto mdspan_shape_type(std::index_sequence<K...>)
    -> shape<(M::static_extent(K) == std::dynamic_extent ? dyn : index_t(M::static_extent(K)))...>;
}  // namespace detail

/// A strided view of an mdspan's elements, with its extents and strides.
template <mdspan_like M>
auto view(M const& m) {
  using T = std::remove_pointer_t<std::remove_cvref_t<decltype(m.data_handle())>>;
  constexpr std::size_t R = M::rank();
  using S = decltype(detail::mdspan_shape_type<M>(std::make_index_sequence<R>{}));
  S s{};
  array<index_t, R> st{};
  for (std::size_t k = 0; k < R; ++k) {
    s.set_extent(k, index_t(m.extent(k)));
    st[k] = index_t(m.stride(k));
  }
  ::gradix::detail::checked_size(s, "gradix::view (mdspan)");
  return tensor_view<T, S, strided>(m.data_handle(), s, st);
}

}  // namespace gradix
