#pragma once
/// \file
/// Reverse mode on the host: backward, backward_only, grad, zero_grad.
///
/// backward runs in two phases. First a serial pre-pass reserves gradient slots (sparse
/// storage) or marks touched slices (dense storage) for every update kernel; this is the
/// only place storage may grow. Then the kernels run, in a fixed order (the order of the
/// parameter uses in the expression, left to right), adding into the storage; they never
/// allocate. Index operands were validated when the expression was built, so nothing can
/// fail half-way.

#include "gradix/ad/plan.hpp"
#include "gradix/api/eval.hpp"
#include "gradix/api/param.hpp"
#include "gradix/backend/host/update.hpp"
#include "gradix/config.hpp"
#include "gradix/core/tuple.hpp"

#include <memory>
#include <tuple>
#include <type_traits>

namespace gradix {

namespace detail {
template <class Plan>
constexpr void run_plan(Plan const& p) {
  for_each_element(p, [](auto const& u) { host::prepare(u); });
  if (std::is_constant_evaluated())
    for_each_element(p, [](auto const& u) { host::run_serial(u); });
  else
    for_each_element(p, [](auto const& u) { host::run(u); });
}
/// Calls f on each plain use of a plan element (both parts of a fused pair).
template <class U, class F>
constexpr void for_each_use(U& u, F&& f) {
  if constexpr (ad::is_fused<U>::value) {
    f(u.first_);
    f(u.second_);
  } else {
    f(u);
  }
}
}  // namespace detail

/// Evaluates the rank-0 expression e, adds d e / d p into the gradient of every parameter p
/// that e reads, and returns the value.
template <operand E>
constexpr auto backward(E const& e_in) {
  auto e = detail::as_node(e_in);
  auto v = host::value(e);
  detail::run_plan(ad::plan(e));
  return v;
}

/// Like backward(e), without computing the value.
template <operand E>
constexpr void backward_only(E const& e_in) {
  detail::run_plan(ad::plan(detail::as_node(e_in)));
}

/// Adds seed-weighted gradients of a non-scalar e: d <seed, e> / d p. The seed is a tensor
/// or view of e's shape (gradix::error otherwise).
template <operand E, operand S>
constexpr void backward(E const& e_in, S const& seed_in) {
  auto e = detail::as_node(e_in);
  auto seed = detail::as_node(seed_in);
  static_assert(shape_of_t<decltype(seed)>::rank == shape_of_t<decltype(e)>::rank,
                "gradix::backward: the seed must have the expression's rank");
  if (!(seed.shape() == e.shape()))
    detail::fail("gradix::backward: seed shape ", to_string(seed.shape()),
                 " differs from expression shape ", to_string(e.shape()));
  using ES = shape_of_t<decltype(e)>;
  if constexpr (std::is_same_v<shape_of_t<decltype(seed)>, ES>) {
    detail::run_plan(ad::plan(e, seed));
  } else {  // same extents (checked above), another shape type: view it with e's
    detail::run_plan(ad::plan(e, broadcast_node<decltype(seed), ES>{seed, e.shape()}));
  }
}

/// Gradients of the rank-0 expression e with respect to the given parameters, returned as
/// new gradient storage objects (of each parameter's kind); the parameters' own gradients
/// are untouched. A parameter that e does not read gets an empty (zero) gradient. One
/// parameter: its gradient; several: a std::tuple of them.
template <operand E, parameter_object... P>
constexpr auto grad(E const& e_in, P const&... params) {
  auto e = detail::as_node(e_in);
  {
    void const* addr[] = {static_cast<void const*>(&params.grad())...};
    for (std::size_t a = 0; a < sizeof...(P); ++a)
      for (std::size_t b = a + 1; b < sizeof...(P); ++b)
        if (addr[a] == addr[b])
          detail::fail("gradix::grad: parameter ", a, " and parameter ", b,
                       " are the same parameter; give each parameter once");
  }
  std::tuple<typename P::storage_type...> out(typename P::storage_type(params.shape())...);
  auto p = ad::plan(e);
  for_each_element(p, [&](auto& pu) { detail::for_each_use(pu, [&](auto& u) {
    using G = typename std::remove_cvref_t<decltype(u)>::storage_type;
    G* redirected = nullptr;
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      (([&] {
         using GI = std::tuple_element_t<I, std::tuple<typename P::storage_type...>>;
         if constexpr (std::is_same_v<G, GI>) {
           auto const& param = std::get<I>(std::forward_as_tuple(params...));
           if (u.target_ == &param.grad()) redirected = &std::get<I>(out);
         }
       }()),
       ...);
    }(std::index_sequence_for<P...>{});
    u.target_ = redirected;  // uses of other parameters are skipped
  }); });
  detail::run_plan(p);
  if constexpr (sizeof...(P) == 1) return std::move(std::get<0>(out));
  else return out;
}

/// Clears the gradients of the given parameters (only what backward wrote).
template <parameter_object... P>
constexpr void zero_grad(P&... params) {
  (params.grad().zero(), ...);
}

}  // namespace gradix
