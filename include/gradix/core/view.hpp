#pragma once
/// \file
/// tensor_view: a non-owning view (pointer, extents, strides) tagged with its layout and
/// memory space. Views are the leaves of expressions.

#include "gradix/config.hpp"
#include "gradix/core/array.hpp"
#include "gradix/core/dtype.hpp"
#include "gradix/core/error.hpp"
#include "gradix/core/layout.hpp"
#include "gradix/core/shape.hpp"

#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace gradix {

/// A non-owning view of T elements with shape Shape.
/// - Layout `row_major` / `col_major`: contiguous strides, computed from the extents; the
///   contiguous axis is known at compile time.
/// - Layout `strided`: arbitrary strides given at construction (in elements).
/// - Space `host_space` or `cuda_space`: where the data lives; host code reads only host views.
/// T may be const. Views are trivially copyable, so an expression holding them can be passed
/// to a kernel unchanged. Copying a view copies the reference, not the elements.
template <class T, class Shape, class Layout = row_major, class Space = host_space>
struct tensor_view {
  static_assert(storage_element<std::remove_const_t<T>>,
                "gradix::tensor_view: the element type must be an arithmetic type other than bool, "
                "gx::bfloat16 or gx::half");
  static_assert(is_shape_v<Shape>, "gradix::tensor_view: Shape must be a gradix::shape<...>");
  static_assert(is_layout_v<Layout>, "gradix::tensor_view: unknown layout");

  using is_gradix_expression = void;
  using element_type = T;
  /// What the elements are stored as (T without const).
  using storage_type = std::remove_const_t<T>;
  /// What an expression reads them as: storage_type, or float for bfloat16 and half.
  using value_type = compute_type_t<T>;
  using shape_type = Shape;
  using layout_type = Layout;
  using space_type = Space;
  static constexpr std::size_t rank = Shape::rank;

  T* data_ = nullptr;
  Shape shape_{};
  array<index_t, rank> strides_{};
#if defined(GRADIX_CHECK_LIFETIMES)
  std::uint64_t gen_ = 0;  // generation of the tensor buffer viewed (core/lifetime.hpp)
#endif

  constexpr tensor_view() = default;
  /// Contiguous view (row_major / col_major).
  GRADIX_HOST_DEVICE constexpr tensor_view(T* data, Shape s)
    requires(!std::is_same_v<Layout, strided>)
      : data_(data), shape_(s), strides_(contiguous_strides<Layout>(s.extents())) {}
  /// Strided view: strides in elements, one per axis.
  GRADIX_HOST_DEVICE constexpr tensor_view(T* data, Shape s, array<index_t, rank> strides)
    requires std::is_same_v<Layout, strided>
      : data_(data), shape_(s), strides_(strides) {}
  /// A view of non-const elements converts to a view of const elements.
  template <class U>
    requires(std::is_same_v<T, U const> && !std::is_const_v<U>)
  GRADIX_HOST_DEVICE constexpr tensor_view(tensor_view<U, Shape, Layout, Space> const& o)
      : data_(o.data_), shape_(o.shape_), strides_(o.strides_) {
#if defined(GRADIX_CHECK_LIFETIMES)
    gen_ = o.gen_;
#endif
  }

  GRADIX_HOST_DEVICE constexpr Shape const& shape() const { return shape_; }
  GRADIX_HOST_DEVICE constexpr index_t extent(std::size_t i) const { return shape_.extent(i); }
  GRADIX_HOST_DEVICE constexpr index_t size() const { return shape_.size(); }
  GRADIX_HOST_DEVICE constexpr T* data() const { return data_; }
  GRADIX_HOST_DEVICE constexpr array<index_t, rank> const& strides() const { return strides_; }
  GRADIX_HOST_DEVICE constexpr index_t stride(std::size_t i) const { return strides_[i]; }

  /// Offset of a coordinate, in elements.
  GRADIX_HOST_DEVICE constexpr index_t offset(coord<rank> const& c) const {
    index_t o = 0;
    for (std::size_t i = 0; i < rank; ++i) o += c[i] * strides_[i];
    return o;
  }
  /// Element at a coordinate (unchecked).
  GRADIX_HOST_DEVICE constexpr T& operator[](coord<rank> const& c) const {
    return data_[offset(c)];
  }
  /// Element at indices (unchecked): `v(i, j)`.
  template <class... I>
    requires(sizeof...(I) == rank && (std::is_integral_v<I> && ...))
  GRADIX_HOST_DEVICE constexpr T& operator()(I... i) const {
    return (*this)[detail::to_coord<rank>(i...)];
  }
  /// An index expression when some argument is not an integer: `v(all, indices(i))`,
  /// `v(2, range(0, 8, 2))` (see expr/index.hpp; integers then select and drop their axis).
  template <class... A>
    requires(sizeof...(A) == rank && !(std::is_integral_v<A> && ...))
  constexpr auto operator()(A const&... a) const {
    return index(*this, a...);
  }
  /// Element at indices, bounds-checked: throws gradix::error naming the axis.
  template <class... I>
    requires(sizeof...(I) == rank && (std::is_integral_v<I> && ...))
  constexpr T& at(I... i) const {
    coord<rank> c = detail::to_coord<rank>(i...);
    for (std::size_t k = 0; k < rank; ++k)
      if (c[k] < 0 || c[k] >= extent(k))
        detail::fail("gradix::tensor_view::at: index ", c[k], " is out of range for axis ", k,
                     " of extent ", extent(k));
    return (*this)[c];
  }
};

template <class V>
struct is_view : std::false_type {};
template <class T, class S, class L, class Sp>
struct is_view<tensor_view<T, S, L, Sp>> : std::true_type {};
template <class V>
inline constexpr bool is_view_v = is_view<V>::value;

/// A view over external memory: `view(ptr, dims(3, 4))` (row-major),
/// `view<col_major>(ptr, dims(3, 4))`, `view<row_major, cuda_space>(dev_ptr, ...)`.
template <class Layout = row_major, class Space = host_space, class T, index_t... E>
  requires(!std::is_same_v<Layout, strided>)
constexpr tensor_view<T, shape<E...>, Layout, Space> view(T* data, shape<E...> s) {
  return {data, s};
}
/// A strided view over external memory (strides in elements, one per axis).
template <class Space = host_space, class T, index_t... E>
constexpr tensor_view<T, shape<E...>, strided, Space> strided_view(
    T* data, shape<E...> s, array<index_t, sizeof...(E)> strides) {
  return {data, s, strides};
}

}  // namespace gradix
