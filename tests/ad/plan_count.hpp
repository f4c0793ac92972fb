#pragma once
// Counting plan elements by kind, through the plans that products, staged uses, lets and
// softmax uses build where they run (types only): the tests' static facts about plans.
#include <gradix/gradix.hpp>

#include <type_traits>

namespace gradix::testing {

/// The number of plan elements of kind Is (a trait over element types) in plan element or
/// plan U, counting inside the nested plans.
template <template <class> class Is, class U>
struct count_in : std::integral_constant<int, Is<U>::value ? 1 : 0> {};
template <template <class> class Is, class... E>
struct count_in<Is, tuple<E...>> : std::integral_constant<int, (count_in<Is, E>::value + ... + 0)> {};
template <template <class> class Is, class P0, class PA, class PB, class SN>
struct count_in<Is, ad::product_use<P0, PA, PB, SN>>
    : std::integral_constant<int, (Is<ad::product_use<P0, PA, PB, SN>>::value ? 1 : 0) + count_in<Is, PA>::value +
                                      count_in<Is, PB>::value> {};
template <template <class> class Is, class PB, class PZ, class... R>
struct count_in<Is, ad::let_use<PB, PZ, R...>>
    : std::integral_constant<int, (Is<ad::let_use<PB, PZ, R...>>::value ? 1 : 0) + count_in<Is, PB>::value +
                                      count_in<Is, PZ>::value> {};
template <template <class> class Is, class P0, class PE, class SN>
struct count_in<Is, ad::staged_use<P0, PE, SN>>
    : std::integral_constant<int, (Is<ad::staged_use<P0, PE, SN>>::value ? 1 : 0) + count_in<Is, PE>::value> {};
template <template <class> class Is, class G, class PX, class SN>
struct count_in<Is, ad::row_use<G, PX, SN>>
    : std::integral_constant<int, (Is<ad::row_use<G, PX, SN>>::value ? 1 : 0) + count_in<Is, PX>::value> {};

/// Matrix products, lets and softmaxes in a plan.
template <class P>
inline constexpr int products_in_v = count_in<ad::is_product, P>::value;
template <class P>
inline constexpr int lets_in_v = count_in<ad::is_let_use, P>::value;
template <class P>
inline constexpr int rows_in_v = count_in<ad::is_row_use, P>::value;

}  // namespace gradix::testing
