#pragma once
/// \file
/// A small device-safe, trivially copyable (when its elements are) tuple for plans and maps.
/// std::tuple is not trivially copyable; gradix keeps Hana algorithms out of device code.

#include "gradix/config.hpp"

#include <cstddef>
#include <utility>

namespace gradix {

namespace detail {
template <std::size_t I, class T>
struct tuple_leaf {
  T value_;
};
template <class Seq, class... T>
struct tuple_impl;
template <std::size_t... I, class... T>
struct tuple_impl<std::index_sequence<I...>, T...> : tuple_leaf<I, T>... {};
}  // namespace detail

template <class... T>
struct tuple : detail::tuple_impl<std::index_sequence_for<T...>, T...> {
  static constexpr std::size_t size = sizeof...(T);
};

template <std::size_t I, class T>
GRADIX_HOST_DEVICE constexpr T& get(detail::tuple_leaf<I, T>& t) {
  return t.value_;
}
template <std::size_t I, class T>
GRADIX_HOST_DEVICE constexpr T const& get(detail::tuple_leaf<I, T> const& t) {
  return t.value_;
}

// make_tuple and tuple_cat initialise the leaves from their values directly (aggregate
// initialisation). Value-initialising the result and assigning the elements made the
// compiler emit a store per field of every element (their index members have default
// initialisers) before the copy: in the plan of a depth-64 chain, whose use holds the whole
// chain, clang emitted 7.7 KB of such stores in each of 126 push functions.
namespace detail {
template <std::size_t... I, class... T>
constexpr tuple<T...> make_tuple_at(std::index_sequence<I...>, T const&... v) {
  return tuple<T...>{{tuple_leaf<I, T>{v}...}};
}
template <class... A, class... B, std::size_t... I, std::size_t... J>
constexpr tuple<A..., B...> tuple_cat_at(tuple<A...> const& a, tuple<B...> const& b,
                                         std::index_sequence<I...>, std::index_sequence<J...>) {
  return tuple<A..., B...>{{tuple_leaf<I, A>{get<I>(a)}..., tuple_leaf<sizeof...(A) + J, B>{get<J>(b)}...}};
}
}  // namespace detail

template <class... T>
constexpr tuple<T...> make_tuple(T const&... v) {
  return detail::make_tuple_at(std::index_sequence_for<T...>{}, v...);
}

template <class A, class B>
struct tuple_cat_result;
template <class... A, class... B>
struct tuple_cat_result<tuple<A...>, tuple<B...>> {
  using type = tuple<A..., B...>;
};
/// Concatenation of two tuples.
template <class... A, class... B>
constexpr tuple<A..., B...> tuple_cat(tuple<A...> const& a, tuple<B...> const& b) {
  return detail::tuple_cat_at(a, b, std::index_sequence_for<A...>{}, std::index_sequence_for<B...>{});
}

/// Calls f(get<0>(t)), f(get<1>(t)), ... in order.
template <class Tuple, class F>
constexpr void for_each_element(Tuple&& t, F&& f) {
  [&]<std::size_t... I>(std::index_sequence<I...>) { (f(get<I>(t)), ...); }(
      std::make_index_sequence<std::remove_cvref_t<Tuple>::size>{});
}

}  // namespace gradix
