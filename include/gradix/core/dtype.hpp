#pragma once
/// \file
/// Element types and the promotion rules of mixed expressions.
///
/// - Two expressions: the result has `std::common_type_t` of both element types
///   (int32 + float -> float, float + double -> double, int32 + int64 -> int64).
/// - An expression and a C++ scalar: the expression's element type wins
///   (`x_float * 2.0` stays float), except that a floating-point scalar with an integer
///   expression gives the scalar's type (`idx * 0.5` is double, not a truncated integer).

#include "gradix/core/half.hpp"

#include <type_traits>

namespace gradix {

/// Element types gradix computes with: arithmetic types other than bool.
template <class T>
concept element = std::is_arithmetic_v<T> && !std::is_same_v<std::remove_cv_t<T>, bool>;
/// Element types a tensor can store: the computing ones and the half-width storage types
/// gx::bfloat16 and gx::half (core/half.hpp), which expressions read as float.
template <class T>
concept storage_element = element<T> || is_half_width_v<T>;

template <class A, class B>
using promote_t = std::common_type_t<A, B>;

/// Element type of `expression<E> op scalar<S>`.
template <class E, class S>
using scalar_promote_t =
    std::conditional_t<std::is_integral_v<E> && std::is_floating_point_v<S>, S, E>;

}  // namespace gradix
