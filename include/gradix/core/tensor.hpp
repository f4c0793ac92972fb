#pragma once
/// \file
/// tensor: an owning host tensor. Owning tensors never go inside an expression: operators
/// and builders take an lvalue tensor as a view of it, and refuse a temporary one.

#include "gradix/config.hpp"
#include "gradix/core/coords.hpp"
#include "gradix/core/dtype.hpp"
#include "gradix/core/error.hpp"
#include "gradix/core/layout.hpp"
#include "gradix/core/lifetime.hpp"
#include "gradix/core/shape.hpp"
#include "gradix/core/view.hpp"

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <new>
#include <span>
#include <type_traits>
#include <utility>

namespace gradix {

/// Static shapes whose elements take at most this many bytes are stored inline (in the
/// tensor object: no allocation, usable in constant evaluation); larger ones on the heap.
inline constexpr std::size_t inline_storage_bytes = 4096;

/// Heap buffers are aligned to this many bytes.
inline constexpr std::size_t buffer_alignment = 64;

namespace detail {

/// Uninitialised memory for n elements of T at buffer_alignment; in constant evaluation
/// (where the aligned operator new cannot be called) from std::allocator. Free it with
/// deallocate_buffer in the same kind of evaluation. Running out of memory, or a byte count
/// that does not fit, throws gradix::error.
template <class T>
constexpr T* allocate_buffer(std::size_t n) {
  if (std::is_constant_evaluated()) return std::allocator<T>{}.allocate(n);
  if (n > std::size_t(PTRDIFF_MAX) / sizeof(T))
    fail("gradix: cannot allocate ", n, " elements of ", sizeof(T), " bytes (the byte count overflows)");
  try {
    return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t{buffer_alignment}));
  } catch (std::bad_alloc const&) {
    fail("gradix: out of memory allocating ", n * sizeof(T), " bytes (", n, " elements)");
  }
}
/// The element count of a tensor of shape s (gradix::error when the count or its bytes
/// overflow; `op` names the caller).
template <class T, class S>
constexpr index_t checked_count(S const& s, char const* op) {
  index_t n = checked_size(s, op);
  if (std::size_t(n) > std::size_t(PTRDIFF_MAX) / sizeof(T))
    fail(op, ": ", n, " elements of ", sizeof(T), " bytes for shape ", to_string(s),
         " overflow the byte count");
  return n;
}
template <class T>
constexpr void deallocate_buffer(T* p, std::size_t n) {
  if (std::is_constant_evaluated()) std::allocator<T>{}.deallocate(p, n);
  else ::operator delete(p, std::align_val_t{buffer_alignment});
}

struct uninit_t {
  explicit constexpr uninit_t() = default;
};
inline constexpr uninit_t uninit{};

template <class T, class Shape>
inline constexpr bool stores_inline_v =
    Shape::is_static && std::size_t(size_v<Shape>) * sizeof(T) <= inline_storage_bytes;

/// Inline storage: a literal type, value-initialized.
template <class T, std::size_t N>
struct inline_storage {
  T data_[N > 0 ? N : 1]{};
  constexpr inline_storage() = default;
  constexpr explicit inline_storage(index_t) {}
  constexpr inline_storage(index_t, uninit_t) {}
  constexpr T* ptr() { return data_; }
  constexpr T const* ptr() const { return data_; }
  static constexpr std::uint64_t gen() { return 0; }  // not tracked (core/lifetime.hpp)
};

/// Heap storage: one aligned allocation of exactly n elements (none for n == 0).
template <class T>
class heap_storage {
 public:
  heap_storage() = default;
  explicit heap_storage(index_t n) : heap_storage(n, uninit) {
    for (index_t i = 0; i < n; ++i) p_[i] = T{};
  }
  heap_storage(index_t n, uninit_t) : n_(n) {
    if (n > 0) p_ = detail::allocate_buffer<T>(std::size_t(n));
#if defined(GRADIX_CHECK_LIFETIMES)
    gen_ = lifetime_begin(p_);
#endif
  }
  heap_storage(heap_storage const& o) : heap_storage(o.n_, uninit) {
    for (index_t i = 0; i < n_; ++i) p_[i] = o.p_[i];
  }
  heap_storage(heap_storage&& o) noexcept : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {
#if defined(GRADIX_CHECK_LIFETIMES)
    gen_ = std::exchange(o.gen_, 0);
#endif
  }
  /// Same size: copies into the existing buffer (views of it stay valid, nothing is
  /// allocated); otherwise a new buffer.
  heap_storage& operator=(heap_storage const& o) {
    if (this == &o) return *this;
    if (n_ == o.n_) {
      for (index_t i = 0; i < n_; ++i) p_[i] = o.p_[i];
    } else {
      heap_storage t(o);
      swap_with(t);
    }
    return *this;
  }
  heap_storage& operator=(heap_storage&& o) noexcept {
    swap_with(o);
    return *this;
  }
  ~heap_storage() {
#if defined(GRADIX_CHECK_LIFETIMES)
    lifetime_end(p_);
#endif
    if (p_) detail::deallocate_buffer(p_, std::size_t(n_));
  }
  T* ptr() { return p_; }
  T const* ptr() const { return p_; }
#if defined(GRADIX_CHECK_LIFETIMES)
  std::uint64_t gen() const { return gen_; }
#else
  static constexpr std::uint64_t gen() { return 0; }
#endif

 private:
  void swap_with(heap_storage& o) noexcept {
    std::swap(p_, o.p_);
    std::swap(n_, o.n_);
#if defined(GRADIX_CHECK_LIFETIMES)
    std::swap(gen_, o.gen_);
#endif
  }
  T* p_ = nullptr;
  index_t n_ = 0;
#if defined(GRADIX_CHECK_LIFETIMES)
  std::uint64_t gen_ = 0;
#endif
};

template <class T, class Shape>
using storage_t = std::conditional_t<stores_inline_v<T, Shape>,
                                     inline_storage<T, std::size_t(stores_inline_v<T, Shape> ? size_v<Shape> : 0)>,
                                     heap_storage<T>>;

/// Coordinate of logical row-major linear index k.
template <class Shape>
constexpr coord<Shape::rank> unravel(Shape const& s, index_t k) {
  return coords::unravel(s.extents(), k);
}

}  // namespace detail

/// An owning host tensor of T with shape Shape (static or dynamic extents) and layout
/// Layout (row_major or col_major). Element access: `t(i, j)`. Copying copies the elements.
/// Use `t.view()` (or just `t`, as an lvalue) in expressions.
template <class T, class Shape, class Layout = row_major>
class tensor {
  static_assert(storage_element<T>,
                "gradix::tensor: the element type must be an arithmetic type other than bool, gx::bfloat16 or "
                "gx::half");
  static_assert(is_shape_v<Shape>, "gradix::tensor: Shape must be a gradix::shape<...>");
  static_assert(std::is_same_v<Layout, row_major> || std::is_same_v<Layout, col_major>,
                "gradix::tensor: the layout of an owning tensor is row_major or col_major");

 public:
  using value_type = T;
  using shape_type = Shape;
  using layout_type = Layout;
  using space_type = host_space;
  static constexpr std::size_t rank = Shape::rank;
  /// True when the elements live inside the object (small static shapes).
  static constexpr bool stores_inline = detail::stores_inline_v<T, Shape>;

  /// Zero-filled tensor of a static shape (or of extent 0 along dynamic axes).
  constexpr tensor() : tensor(Shape{}) {}
  /// Zero-filled tensor of the given shape.
  constexpr explicit tensor(Shape s) : shape_(s), store_(detail::checked_count<T>(s, "gradix::tensor")) {}
  /// Zero-filled tensor; the extents are checked against the static extents of Shape.
  template <index_t... E>
    requires(!std::is_same_v<shape<E...>, Shape>)
  constexpr explicit tensor(shape<E...> s) : tensor(shape_cast<Shape>(s, "gradix::tensor")) {}
  /// Tensor from values in logical row-major order (whatever the layout).
  constexpr tensor(Shape s, std::span<T const> values) : tensor(s, detail::uninit) {
    if (index_t(values.size()) != s.size())
      detail::fail("gradix::tensor: ", values.size(), " values given for shape ", to_string(s),
                   " of ", s.size(), " elements");
    for (index_t k = 0; k < s.size(); ++k) (*this)[detail::unravel(s, k)] = values[std::size_t(k)];
  }
  constexpr tensor(Shape s, std::initializer_list<T> values)
      : tensor(s, std::span<T const>(values.begin(), values.size())) {}
  /// Static shape from values in logical row-major order: `tensor<float, shape<2, 2>>({1, 2, 3, 4})`.
  constexpr tensor(std::initializer_list<T> values)
    requires Shape::is_static
      : tensor(Shape{}, values) {}
  /// Uninitialized tensor (internal: eval writes every element).
  constexpr tensor(Shape s, detail::uninit_t)
      : shape_(s), store_(detail::checked_count<T>(s, "gradix::tensor"), detail::uninit) {}

  constexpr tensor(tensor const&) = default;
  constexpr tensor(tensor&&) noexcept = default;
  /// Copies the elements (and the extents). With equal sizes the elements are copied into
  /// the existing buffer, so views of this tensor (and expressions over a parameter's value)
  /// stay valid. A move assignment takes the other buffer instead.
  constexpr tensor& operator=(tensor const&) = default;
  constexpr tensor& operator=(tensor&&) noexcept = default;

  /// Assigns an expression of the same shape elementwise (see gradix::assign).
  template <class E>
    requires requires { typename std::remove_cvref_t<E>::is_gradix_expression; }
  constexpr tensor& operator=(E const& e) {
    assign(view(), e);
    return *this;
  }

  /// Converts the elements of a tensor of the same shape to or from a half-width type
  /// (bfloat16, half): widening is exact, narrowing rounds to nearest, ties to even.
  template <class U, class S2, class L2>
    requires(!std::is_same_v<U, T> && (is_half_width_v<U> || is_half_width_v<T>))
  constexpr tensor& operator=(tensor<U, S2, L2> const& o) {
    assign(view(), o.view());
    return *this;
  }

  constexpr Shape const& shape() const { return shape_; }
  constexpr index_t extent(std::size_t i) const { return shape_.extent(i); }
  constexpr index_t size() const { return shape_.size(); }
  constexpr T* data() { return store_.ptr(); }
  constexpr T const* data() const { return store_.ptr(); }

  /// A view of the elements (const elements for a const tensor).
  constexpr tensor_view<T, Shape, Layout> view() { return stamped(tensor_view<T, Shape, Layout>{data(), shape_}); }
  constexpr tensor_view<T const, Shape, Layout> view() const {
    return stamped(tensor_view<T const, Shape, Layout>{data(), shape_});
  }
  /// The lifetime generation of the elements' buffer (0: not tracked; core/lifetime.hpp).
  constexpr std::uint64_t generation() const { return store_.gen(); }

  constexpr T& operator[](coord<rank> const& c) { return data()[offset(c)]; }
  constexpr T const& operator[](coord<rank> const& c) const { return data()[offset(c)]; }
  template <class... I>
    requires(sizeof...(I) == rank && (std::is_integral_v<I> && ...))
  constexpr T& operator()(I... i) {
    return (*this)[detail::to_coord<rank>(i...)];
  }
  template <class... I>
    requires(sizeof...(I) == rank && (std::is_integral_v<I> && ...))
  constexpr T const& operator()(I... i) const {
    return (*this)[detail::to_coord<rank>(i...)];
  }
  /// An index expression over a view of this tensor when some argument is not an integer:
  /// `t(all, indices(i))` (see expr/index.hpp). Refused on a temporary tensor.
  template <class... A>
    requires(sizeof...(A) == rank && !(std::is_integral_v<A> && ...))
  constexpr auto operator()(A const&... a) const& {
    return index(view(), a...);
  }
  template <class... A>
    requires(sizeof...(A) == rank && !(std::is_integral_v<A> && ...))
  void operator()(A const&... a) && = delete;  // the expression would view a destroyed tensor
  /// Bounds-checked access: throws gradix::error naming the axis, the index and the extent.
  template <class... I>
    requires(sizeof...(I) == rank && (std::is_integral_v<I> && ...))
  constexpr T const& at(I... i) const {
    return view().at(i...);
  }
  template <class... I>
    requires(sizeof...(I) == rank && (std::is_integral_v<I> && ...))
  constexpr T& at(I... i) {
    return view().at(i...);
  }

 private:
  constexpr index_t offset(coord<rank> const& c) const {
    index_t o = 0, acc = 1;
    if constexpr (std::is_same_v<Layout, col_major>) {
      for (std::size_t i = 0; i < rank; ++i) {
        o += c[i] * acc;
        acc *= shape_.extent(i);
      }
    } else {
      for (std::size_t i = rank; i-- > 0;) {
        o += c[i] * acc;
        acc *= shape_.extent(i);
      }
    }
    return o;
  }

  template <class V>
  constexpr V stamped(V v) const {
#if defined(GRADIX_CHECK_LIFETIMES)
    v.gen_ = store_.gen();
#endif
    return v;
  }

  Shape shape_;
  detail::storage_t<T, Shape> store_;
};

template <class X>
struct is_tensor : std::false_type {};
template <class T, class S, class L>
struct is_tensor<tensor<T, S, L>> : std::true_type {};
template <class X>
inline constexpr bool is_tensor_v = is_tensor<X>::value;

/// The view of an lvalue tensor. A temporary tensor is refused: the view would dangle.
template <class T, class S, class L>
constexpr auto view(tensor<T, S, L>& t) {
  return t.view();
}
template <class T, class S, class L>
constexpr auto view(tensor<T, S, L> const& t) {
  return t.view();
}
template <class T, class S, class L>
void view(tensor<T, S, L>&&) = delete;  // a view of a temporary tensor would dangle

}  // namespace gradix
