#pragma once
/// \file
/// Recurrences of run-time length (issue 34): `gx::scan(c0, xs, f)` (api/scan.hpp) runs the
/// body f(carry, x_t) once per step t along axis 0 of xs, the carry starting at c0, and its
/// value is every step's new carry, stacked: out[t] = carry after step t. The body is an
/// expression type, written once; its forward and its backward are its own fused kernels,
/// run once per step with no tape (docs/ad.md, "Loops: scan").
///
///   scan_level<L, K>         the tag of a scan's two placeholder names (expr/let.hpp,
///                            let_name): K = 0 the carry, 1 the step's input; L one more than
///                            the highest level of the lets and scans in the body, as a let's
///                            (nested lets and scans never share a name)
///   scan_node<CN, XN, C0, Xs, Body>
///                            the scan as the user built it: c0_ the initial carry (shape C),
///                            xs_ the sequence (shape [T, X...]), body_ the step (shape C,
///                            reading var_node<CN> for the carry and var_node<XN> for x_t);
///                            value shape [T, C...]. Its operands (expr/visit.hpp) are c0_,
///                            xs_ and body_.
///   scanned<CN, XN, C0, Xs, Body, Step>
///                            what the save transform (exec/save_scan.hpp, keep_scan) makes of a
///                            scan: a call keeps its value in a buffer and reads it through a
///                            saved_node<scanned<...>> (so every walk over the transformed
///                            expression sees a buffer); the scanned node holds the
///                            transformed c0_ and xs_, the body with its placeholders, the
///                            buffers of the steps (carry 0, the inputs, in a backward call
///                            the adjoints), the workspace region one step's own kept values
///                            use (scan_region), and the last step's transformed body (Step),
///                            whose plan the backward's pre-pass walks.

#include "gradix/config.hpp"
#include "gradix/core/array.hpp"
#include "gradix/core/shape.hpp"
#include "gradix/expr/let.hpp"
#include "gradix/expr/node.hpp"

#include <cstddef>
#include <type_traits>

namespace gradix {

/// The tag of a scan's placeholder names: level L (as a let's), K = 0 carry, 1 input.
template <int L, int K>
struct scan_level {};
template <int L, int K, class T, class S, class Sp, bool R>
struct let_level_of<let_name<scan_level<L, K>, T, S, Sp, R>> : std::integral_constant<int, L> {};

namespace detail {
/// Shape S with a leading axis of run-time extent (the steps) inserted.
template <class S>
struct stepped_shape {
  struct holder {
    static constexpr array<index_t, S::rank + 1> value = [] {
      array<index_t, S::rank + 1> r{};
      r[0] = dyn;
      for (std::size_t j = 0; j < S::rank; ++j) r[j + 1] = S::static_extents[j];
      return r;
    }();
  };
  using type = shape_from_array_t<holder>;
};
/// Shape S without its leading axis (one step of a sequence).
template <class S>
struct step_shape {
  static_assert(S::rank >= 1, "gradix::scan: the sequence needs an axis of steps (rank >= 1)");
  struct holder {
    static constexpr array<index_t, S::rank - 1> value = [] {
      array<index_t, S::rank - 1> r{};
      for (std::size_t j = 1; j < S::rank; ++j) r[j - 1] = S::static_extents[j];
      return r;
    }();
  };
  using type = shape_from_array_t<holder>;
};
template <class S>
constexpr typename stepped_shape<S>::type stepped(index_t steps, S const& s) {
  typename stepped_shape<S>::type r{};
  r.set_extent(0, steps);
  for (std::size_t j = 0; j < S::rank; ++j) r.set_extent(j + 1, s.extent(j));
  return r;
}
template <class S>
constexpr typename step_shape<S>::type one_step(S const& s) {
  typename step_shape<S>::type r{};
  for (std::size_t j = 1; j < S::rank; ++j) r.set_extent(j - 1, s.extent(j));
  return r;
}
}  // namespace detail

/// A scan's options (api/scan.hpp): Recompute (gx::recompute_steps: a backward call keeps
/// only the carries and computes each step's own kept values again in the reverse sweep;
/// otherwise it keeps every step's), the lengths of the batch's sequences (gx::lengths: a
/// view of integers, one per carry row along axis 0; no_lengths: every sequence runs every
/// step) and a stop condition (gx::stop_when: a host predicate of the carry and the step,
/// asked after each step; no_stop).
struct no_lengths {};
struct no_stop {};
template <bool Recompute = false, class Len = no_lengths, class Stop = no_stop>
struct scan_opts {
  static constexpr bool recompute = Recompute;
  static constexpr bool has_lengths = !std::is_same_v<Len, no_lengths>;
  static constexpr bool has_stop = !std::is_same_v<Stop, no_stop>;
  using lengths_type = Len;
  [[no_unique_address]] Len len_{};
  [[no_unique_address]] Stop stop_{};
};

/// out[t] = the carry after step t: carry(-1) = c0_, carry(t) = body_(carry(t - 1), xs_[t]);
/// with lengths, row b of the carry stops changing after step len[b] - 1; with a stop
/// condition, every row stops after the step where it first holds. Opt: scan_opts.
template <class CN, class XN, class C0, class Xs, class Body, class Opt = scan_opts<>>
struct scan_node {
  using is_gradix_expression = void;
  using value_type = typename CN::value_type;
  using shape_type = typename detail::stepped_shape<typename CN::shape_type>::type;
  using layout_type = row_major;
  using space_type = typename CN::space_type;
  using carry_name = CN;
  using input_name = XN;
  using options = Opt;
  static constexpr bool recompute = Opt::recompute;
  C0 c0_;
  Xs xs_;
  Body body_;
  shape_type shape_;
  [[no_unique_address]] Opt opt_{};
  GRADIX_HOST_DEVICE constexpr shape_type const& shape() const { return shape_; }
  constexpr index_t steps() const { return shape_.extent(0); }
};

/// The workspace the steps' own kept values use (exec/save.hpp): per kind, the base of the
/// values (every step's one after the other, or one step's reused when the scan recomputes
/// them) and one step's count; the adjoint buffers, one set that every step shares.
struct scan_region {
  float* f = nullptr;
  double* d = nullptr;
  long double* l = nullptr;
  index_t* i = nullptr;
  float* fa = nullptr;
  double* da = nullptr;
  long double* la = nullptr;
  std::size_t nf = 0, nd = 0, nl = 0, ni = 0;  // one step's values
  std::size_t af = 0, ad = 0, al = 0;          // the adjoint buffers
  // copies of a step's values (the number of steps when every step's are kept, else 1),
  // laid out buffer by buffer: a step's k-th buffer of n elements is the t-th of `copies`
  // consecutive ones (so a buffer over all steps is one evenly strided array)
  std::size_t copies = 1;
};

/// A scan after the save transform (held by the call, read through a saved_node).
template <class CN, class XN, class C0, class Xs, class Body, class Step>
struct scanned {
  using is_gradix_expression = void;
  using value_type = typename CN::value_type;
  using shape_type = typename detail::stepped_shape<typename CN::shape_type>::type;
  using layout_type = row_major;
  using space_type = typename CN::space_type;
  using carry_name = CN;
  using input_name = XN;
  using step_type = Step;
  using T = value_type;
  C0 c0_;      // transformed: its own kept values in the call's buffers
  Xs xs_;      // transformed
  Body body_;  // the step, reading the two placeholders
  shape_type shape_;
  T const* h_ = nullptr;      // the carries, [steps, C...] row-major (the value)
  T const* c_init_ = nullptr;  // carry -1 (c0's value), C row-major
  T const* x_ = nullptr;       // the inputs, [steps, X...] row-major
  // in a backward call: the adjoint of the value (the reverse sweep accumulates the carries'
  // adjoints in it, in place), the initial carry's adjoint, the inputs' adjoint (null when
  // no gradient reaches xs)
  T* gout_ = nullptr;
  T* ga_ = nullptr;
  T* gxs_ = nullptr;
  scan_region region_{};       // the steps' own kept values
  Step const* last_ = nullptr;  // the last step's transformed body (its nodes kept by the call)
  Step const* const* steps_ = nullptr;  // every step's, when the call keeps them (else null)
  index_t const* len_ = nullptr;  // with lengths or a stop condition: each row's steps run (host)
  index_t ran_ = 0;               // the steps the forward ran (the rest copy the carry)
  var_node<CN> const* vc_ = nullptr;  // the placeholders (kept by the call: the steps' saved
  var_node<XN> const* vx_ = nullptr;  // nodes point at them)
  GRADIX_HOST_DEVICE constexpr shape_type const& shape() const { return shape_; }
  constexpr index_t steps() const { return shape_.extent(0); }
};

template <class N>
struct is_scan_node : std::false_type {};
template <class CN, class XN, class C0, class Xs, class B, class O>
struct is_scan_node<scan_node<CN, XN, C0, Xs, B, O>> : std::true_type {};
template <class N>
struct is_scanned : std::false_type {};
template <class CN, class XN, class C0, class Xs, class B, class St>
struct is_scanned<scanned<CN, XN, C0, Xs, B, St>> : std::true_type {};

}  // namespace gradix
