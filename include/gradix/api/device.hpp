#pragma once
/// \file
/// How gx::backward, backward_only, grad, eval and value reach the device backend. An
/// expression whose leaves are in cuda_space is handed to `detail::device_entry<N>`, which is
/// declared here and defined by the device backend (gradix/device.hpp, through
/// api/device_entry.hpp). The host API does not include the device backend, and a
/// translation unit that runs a device expression without it gets one message at the call.
///
/// The launcher (and so the stream) of a call is the launcher of the expression's first
/// device parameter (grid::param). Without a device parameter, a CUDA translation unit uses
/// gradix::cuda::default_launcher() (cudaStreamPerThread); elsewhere that is a compile error
/// that names grid::eval / grid::value, which take a launcher.

#include "gradix/exec/checks.hpp"
#include "gradix/expr/let.hpp"
#include "gradix/expr/visit.hpp"

#include <type_traits>

namespace gradix::detail {

/// Defined by api/device_entry.hpp: static backward(e), backward_only(e),
/// grad(e, params...), eval(e), value(e) for a prepared device expression of type N.
template <class N>
struct device_entry;

template <class N>
concept device_entry_defined = requires { sizeof(device_entry<N>); };

template <class N>
inline constexpr bool reads_cuda_memory_v = std::is_same_v<space_of_t<N>, cuda_space>;

/// The launcher type of the first device parameter leaf of N (std::type_identity<void> when
/// there is none), found over the same node members as for_each_leaf.
template <class A, class B>
constexpr auto first_of(A a, B b) {
  if constexpr (std::is_void_v<typename A::type>) return b;
  else return a;
}
constexpr auto first_of_all() { return std::type_identity<void>{}; }
template <class A, class... B>
constexpr auto first_of_all(A a, B... b) {
  if constexpr (sizeof...(B) == 0) return a;
  else return first_of(a, first_of_all(b...));
}
template <class N>
constexpr auto device_launcher_probe() {
  using D = std::remove_cvref_t<N>;
  if constexpr (is_device_param_node<D>::value) {
    return std::type_identity<std::remove_cvref_t<decltype(std::declval<D const&>().grad_->launcher())>>{};
  } else {  // the first operand (expr/visit.hpp's order) that has one
    return []<class... C>(tuple<C...> const*) {
      return first_of_all(device_launcher_probe<C>()...);
    }(static_cast<operand_types_t<D> const*>(nullptr));
  }
}
template <class N>
using device_launcher_t = typename decltype(device_launcher_probe<N>())::type;

/// Whether a gx:: call on the device expression N has a launcher: its first device parameter's,
/// or in a CUDA translation unit gradix::cuda::default_launcher().
template <class N>
constexpr bool device_launcher_available() {
#if defined(__CUDACC__)
  return true;
#else
  return !std::is_void_v<device_launcher_t<N>>;
#endif
}

/// True when the device backend is there and the call has a launcher; else one static_assert
/// at the call's instantiation (the gx:: functions call this in an `if constexpr` condition,
/// which both compilers instantiate at the user's line).
template <class N>
constexpr bool check_device_entry(char const* = nullptr) {
  static_assert(device_entry_defined<N>,
                "gradix: this expression reads CUDA device memory; include <gradix/device.hpp> "
                "(the device backend) in this translation unit");
  if constexpr (device_entry_defined<N>) {
    static_assert(device_launcher_available<N>(),
                  "gradix: this device expression has no device parameter (grid::param), so there "
                  "is no launcher to run it with outside a CUDA translation unit; call "
                  "grid::eval(l, e), grid::value(l, e) or grid::assign(l, dst, e) with a launcher");
    return device_launcher_available<N>();
  } else {
    return false;
  }
}

/// The launcher of the first device parameter leaf of e whose launcher has type L.
template <class L, class N>
L& device_launcher_of(N const& e) {
  L* l = nullptr;
  for_each_leaf(e, [&](auto const& leaf, bool) {
    using Leaf = std::remove_cvref_t<decltype(leaf)>;
    if constexpr (is_device_param_node<Leaf>::value) {
      using LL = std::remove_cvref_t<decltype(leaf.grad_->launcher())>;
      if constexpr (std::is_same_v<LL, L>)
        if (l == nullptr) l = &leaf.grad_->launcher();
    }
  });
  return *l;  // device_launcher_t<N> is L, so a leaf of that type exists
}

}  // namespace gradix::detail
