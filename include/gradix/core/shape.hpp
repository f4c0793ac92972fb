#pragma once
/// \file
/// Shapes are types: `shape<3, 4>` is static, `shape<dyn, 64>` keeps its run-time extent in
/// the object (a fully static shape is an empty type).

#include "gradix/config.hpp"
#include "gradix/core/array.hpp"
#include "gradix/core/error.hpp"

#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>

namespace gradix {

namespace detail {
// The dynamic extents live in a base class: empty (by the empty-base optimisation) for
// static shapes. ([[no_unique_address]] on a member crashes clang 16's code generation.)
template <std::size_t N>
struct dyn_extents {
  array<index_t, N> dyn_{};
};
template <>
struct dyn_extents<0> {};
template <index_t... E>
inline constexpr std::size_t count_dyn_v = (std::size_t{0} + ... + std::size_t{E == dyn});
}  // namespace detail

/// The shape of a tensor or expression. Each template argument is a static extent (>= 0)
/// or `dyn`; only the dynamic extents are stored.
template <index_t... E>
struct shape : detail::dyn_extents<detail::count_dyn_v<E...>> {
  static_assert(((E >= 0 || E == dyn) && ...),
                "gradix::shape: an extent must be non-negative or gradix::dyn");
  static constexpr std::size_t rank = sizeof...(E);
  static constexpr std::size_t num_dyn = (std::size_t{0} + ... + std::size_t{E == dyn});
  static constexpr bool is_static = num_dyn == 0;
  /// The static extents, with `dyn` where the extent is dynamic.
  static constexpr array<index_t, rank> static_extents{E...};


  /// Position of axis i's extent among the dynamic extents (meaningless for static axes).
  GRADIX_HOST_DEVICE static constexpr std::size_t dyn_slot(std::size_t i) {
    std::size_t k = 0;
    for (std::size_t j = 0; j < i; ++j) k += static_extents[j] == dyn;
    return k;
  }

  /// Extent of axis i (run-time i).
  /// Extent of axis i (run-time i). Written as a fold over compile-time axes: device code
  /// cannot index a static constexpr array at run time.
  GRADIX_HOST_DEVICE constexpr index_t extent(std::size_t i) const {
    return extent_impl(i, std::make_index_sequence<rank>{});
  }
  /// Extent of axis I; a constant expression when the extent is static.
  template <std::size_t I>
  GRADIX_HOST_DEVICE constexpr index_t extent() const {
    constexpr index_t e = static_extents[I];
    if constexpr (e != dyn) {
      return e;
    } else {
      constexpr std::size_t k = dyn_slot(I);
      return this->dyn_[k];
    }
  }
  /// Number of elements.
  GRADIX_HOST_DEVICE constexpr index_t size() const {
    index_t n = 1;
    for (std::size_t i = 0; i < rank; ++i) n *= extent(i);
    return n;
  }
  /// All extents as an array.
  GRADIX_HOST_DEVICE constexpr array<index_t, rank> extents() const {
    array<index_t, rank> a{};
    for (std::size_t i = 0; i < rank; ++i) a[i] = extent(i);
    return a;
  }
  /// Sets the extent of a dynamic axis (no effect on static axes).
  GRADIX_HOST_DEVICE constexpr void set_extent(std::size_t i, index_t n) {
    set_impl(i, n, std::make_index_sequence<rank>{});
  }

 private:
  template <std::size_t... K>
  GRADIX_HOST_DEVICE constexpr index_t extent_impl([[maybe_unused]] std::size_t i,
                                                   std::index_sequence<K...>) const {
    index_t r = 0;
    ((K == i ? (void)(r = extent<K>()) : (void)0), ...);
    return r;
  }
  template <std::size_t K>
  GRADIX_HOST_DEVICE constexpr void set_one([[maybe_unused]] index_t n) {
    constexpr index_t e = static_extents[K];
    if constexpr (e == dyn) {
      constexpr std::size_t k = dyn_slot(K);
      this->dyn_[k] = n;
    }
  }
  template <std::size_t... K>
  GRADIX_HOST_DEVICE constexpr void set_impl([[maybe_unused]] std::size_t i,
                                             [[maybe_unused]] index_t n, std::index_sequence<K...>) {
    ((K == i ? set_one<K>(n) : (void)0), ...);
  }

 public:

  /// Equal extents (static and dynamic alike).
  template <index_t... F>
  friend constexpr bool operator==(shape const& a, shape<F...> const& b) {
    if constexpr (sizeof...(F) != rank) {
      return false;
    } else {
      for (std::size_t i = 0; i < rank; ++i)
        if (a.extent(i) != b.extent(i)) return false;
      return true;
    }
  }
};

// ---------------------------------------------------------------------------------------
// Traits

template <class S>
struct is_shape : std::false_type {};
template <index_t... E>
struct is_shape<shape<E...>> : std::true_type {};
template <class S>
inline constexpr bool is_shape_v = is_shape<S>::value;

template <class S>
inline constexpr std::size_t rank_v = S::rank;

/// Static number of elements, or `dyn` if some extent is dynamic.
template <class S>
inline constexpr index_t size_v = [] {
  index_t n = 1;
  for (std::size_t i = 0; i < S::rank; ++i) {
    if (S::static_extents[i] == dyn) return dyn;
    n *= S::static_extents[i];
  }
  return n;
}();

/// Static extent of axis I of S (`dyn` when dynamic).
template <class S, std::size_t I>
inline constexpr index_t extent_v = S::static_extents[I];

template <class S>
concept static_shape = is_shape_v<S> && S::is_static;

namespace detail {

template <class Arr, std::size_t... I>
constexpr auto shape_from_array_impl(std::index_sequence<I...>) -> shape<Arr::value[I]...>;

/// shape<...> from a constexpr array holder `struct { static constexpr array value; }`.
template <class Holder>
using shape_from_array_t =
    decltype(shape_from_array_impl<Holder>(std::make_index_sequence<Holder::value.size()>{}));

template <class A, class B>
struct broadcast_info {
  static constexpr std::size_t rank = A::rank > B::rank ? A::rank : B::rank;
  static constexpr std::size_t off_a = rank - A::rank;
  static constexpr std::size_t off_b = rank - B::rank;
  // extent of A aligned at result axis k (1 where A has no such axis)
  static constexpr index_t ea(std::size_t k) {
    return k < off_a ? 1 : A::static_extents[k - off_a];
  }
  static constexpr index_t eb(std::size_t k) {
    return k < off_b ? 1 : B::static_extents[k - off_b];
  }
  static constexpr bool axis_ok(std::size_t k) {
    index_t a = ea(k), b = eb(k);
    return a == b || a == 1 || b == 1 || a == dyn || b == dyn;
  }
  static constexpr bool ok = [] {
    for (std::size_t k = 0; k < rank; ++k)
      if (!axis_ok(k)) return false;
    return true;
  }();
  static constexpr index_t result_extent(std::size_t k) {
    index_t a = ea(k), b = eb(k);
    if (a == 1) return b;  // 1 broadcasts against anything, including dyn
    if (b == 1) return a;
    if (a == dyn) return b;  // dyn must equal b (checked at run time); keep the static one
    return a;
  }
  struct holder {
    static constexpr array<index_t, rank> value = [] {
      array<index_t, rank> r{};
      for (std::size_t k = 0; k < rank; ++k) r[k] = result_extent(k);
      return r;
    }();
  };
  using type = shape_from_array_t<holder>;
  // operand axis j of A broadcasts (reads coordinate 0) in the result
  static constexpr bool a_broadcasts(std::size_t j) {
    return A::static_extents[j] == 1 && result_extent(j + off_a) != 1;
  }
  static constexpr bool b_broadcasts(std::size_t j) {
    return B::static_extents[j] == 1 && result_extent(j + off_b) != 1;
  }
};

}  // namespace detail

/// Whether static shapes A and B broadcast (numpy rules, aligned at the last axis; an axis
/// broadcasts only when its extent is statically 1; dynamic extents must match at run time).
template <class A, class B>
inline constexpr bool broadcastable_v = detail::broadcast_info<A, B>::ok;

/// The broadcast result shape of A and B (requires broadcastable_v<A, B>).
template <class A, class B>
using broadcast_shape_t = typename detail::broadcast_info<A, B>::type;

// ---------------------------------------------------------------------------------------
// Building shapes at run time: dims(3, 4) -> shape<dyn, dyn>; dims(fix<64>, n) -> shape<64, dyn>

/// A compile-time extent argument: `dims(fix<64>, n)` keeps 64 static.
template <index_t N>
struct fix_t {
  static_assert(N >= 0, "gradix::fix: an extent must be non-negative");
  static constexpr index_t value = N;
};
template <index_t N>
inline constexpr fix_t<N> fix{};

namespace detail {
template <class T>
struct dim_static : std::integral_constant<index_t, dyn> {};
template <index_t N>
struct dim_static<fix_t<N>> : std::integral_constant<index_t, N> {};
template <class T, T N>
struct dim_static<std::integral_constant<T, N>> : std::integral_constant<index_t, index_t(N)> {};
}  // namespace detail

namespace detail {
/// a * b for non-negative a, b, or -1 when the product exceeds index_t.
constexpr index_t mul_or_overflow(index_t a, index_t b) {
  if (a != 0 && b > PTRDIFF_MAX / a) return -1;
  return a * b;
}
/// The number of elements of a shape; throws gradix::error naming `op` and the extents when
/// it exceeds index_t (s.size() itself would wrap).
template <class S>
constexpr index_t checked_size(S const& s, char const* op) {
  index_t n = 1;
  for (std::size_t i = 0; i < S::rank; ++i) {
    n = mul_or_overflow(n, s.extent(i));
    if (n < 0) {
      std::string ext = "[";
      for (std::size_t k = 0; k < S::rank; ++k) {
        if (k) ext += ", ";
        ext += std::to_string(s.extent(k));
      }
      fail(op, ": the extents ", ext, "] have more than ", PTRDIFF_MAX,
           " elements (the element count overflows)");
    }
  }
  return n;
}
}  // namespace detail

/// A shape from extents: integers become dynamic extents, `fix<N>` static ones. Throws
/// gradix::error for a negative extent, an extent that does not fit index_t, or extents
/// whose product does.
template <class... D>
constexpr auto dims(D... d) {
  static_assert(((std::is_integral_v<D> || detail::dim_static<D>::value != dyn) && ...),
                "gradix::dims: every extent must be an integer or gradix::fix<N>");
  using S = shape<detail::dim_static<D>::value...>;
  S s{};
  std::size_t i = 0;
  auto put = [&](auto v) {
    using V = decltype(v);
    if constexpr (std::is_integral_v<V>) {
      if constexpr (std::is_signed_v<V>) {
        if (v < 0) detail::fail("gradix::dims: extent of axis ", i, " is negative (", v, ")");
      }
      if constexpr (sizeof(V) >= sizeof(index_t) && std::is_unsigned_v<V>) {
        if (v > V(PTRDIFF_MAX))
          detail::fail("gradix::dims: extent ", v, " of axis ", i, " exceeds the largest extent ",
                       PTRDIFF_MAX);
      }
      s.set_extent(i, index_t(v));
    }
    ++i;
  };
  (put(d), ...);
  (void)put;  // dims() (rank 0) never calls it
  detail::checked_size(s, "gradix::dims");
  return s;
}

/// Converts a shape to another shape type with the same rank, checking static extents.
/// Throws gradix::error naming `op` if an extent disagrees with a static extent of To.
template <class To, class From>
constexpr To shape_cast(From const& from, char const* op = "gradix::shape_cast") {
  static_assert(To::rank == From::rank, "gradix: shapes of different rank");
  To to{};
  for (std::size_t i = 0; i < To::rank; ++i) {
    index_t n = from.extent(i);
    if (To::static_extents[i] != dyn && To::static_extents[i] != n)
      detail::fail(op, ": extent ", n, " of axis ", i, " does not match static extent ",
                   To::static_extents[i]);
    to.set_extent(i, n);
  }
  return to;
}

namespace detail {
/// "[3, 4]" from n extents (one function for every shape type).
[[gnu::noinline, gnu::cold]] inline std::string extents_to_string(index_t const* e, std::size_t n) {
  std::string r = "[";
  for (std::size_t i = 0; i < n; ++i) {
    if (i) r += ", ";
    r += std::to_string(e[i]);
  }
  return r + "]";
}
}  // namespace detail

/// "[3, 4]" for error messages and printing.
template <class S>
std::string to_string(S const& s)
  requires is_shape_v<S>
{
  index_t e[S::rank > 0 ? S::rank : 1] = {};
  for (std::size_t i = 0; i < S::rank; ++i) e[i] = s.extent(i);
  return detail::extents_to_string(e, S::rank);
}

/// Normalizes a possibly negative axis (-1 = last) against rank R; R itself when invalid.
template <int Axis, std::size_t R>
inline constexpr std::size_t normalize_axis_v =
    (Axis < 0 ? (-Axis <= int(R) ? std::size_t(int(R) + Axis) : R)
              : (Axis < int(R) ? std::size_t(Axis) : R));

}  // namespace gradix
