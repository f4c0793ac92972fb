#pragma once
/// \file
/// How a reshape maps coordinates: the operand coordinate of each output coordinate,
/// unravel_in(ravel_out(c)) in logical row-major order, computed without the ravel where
/// the extents allow (made once per node or map from the run-time extents).
///
/// Most reshapes split axes and merge neighbouring ones: (B, T, D) -> (B, T, H, D/H) splits
/// D, (B, H, T, E) -> (B H, T, E) merges B and H. Then the axes fall into consecutive groups,
/// each one operand axis and one or more output axes (a split: the operand coordinate is
/// their weighted sum, no division) or one output axis and several operand axes (a merge:
/// one division per operand axis). Other reshapes ((6) -> (4, 3) from (3, 4)...) keep the
/// general ravel and unravel.

#include "gradix/config.hpp"
#include "gradix/core/array.hpp"

#include <cstdint>

namespace gradix {

template <std::size_t RO, std::size_t RI>
struct reshape_plan {
  /// The general ravel / unravel (the extents form no groups).
  bool general_ = true;
  array<index_t, RO> out_ext_{};
  array<index_t, RI> in_ext_{};
  /// Grouped: operand coordinate j = ((sum over output axes k in [lo_j, hi_j) of c[k] w[k])
  /// / div_j) % mod_j (mod_j 0: none).
  array<std::uint8_t, RI> lo_{};
  array<std::uint8_t, RI> hi_{};
  array<index_t, RO> w_{};
  array<index_t, RI> div_{};
  array<index_t, RI> mod_{};

  constexpr reshape_plan() = default;
  constexpr reshape_plan(array<index_t, RO> const& out, array<index_t, RI> const& in) : out_ext_(out), in_ext_(in) {
    for (std::size_t k = 0; k != RO; ++k)
      if (out[k] <= 0) return;  // empty: nothing is evaluated; keep the general form
    std::size_t i = 0, j = 0;
    for (std::size_t q = 0; q != RI; ++q) {
      lo_[q] = hi_[q] = 0;
      div_[q] = 1;
      mod_[q] = 0;
    }
    for (;;) {
      // axes of extent 1 belong to no group: an output one adds 0, an operand one reads 0
      while (i != RO && out[i] == 1) w_[i++] = 0;
      while (j != RI && in[j] == 1) ++j;
      if (i == RO || j == RI) break;
      if (out[i] == in[j]) {
        lo_[j] = std::uint8_t(i);
        hi_[j] = std::uint8_t(i + 1);
        w_[i] = 1;
        ++i;
        ++j;
      } else if (out[i] < in[j]) {  // a split: output axes i.. make operand axis j
        std::size_t const s = i;
        index_t p = 1;
        while (i != RO && p < in[j]) p *= out[i++];
        if (p != in[j]) return;
        index_t wk = 1;
        for (std::size_t k = i; k-- > s;) {
          w_[k] = wk;
          wk *= out[k];
        }
        lo_[j] = std::uint8_t(s);
        hi_[j] = std::uint8_t(i);
        ++j;
      } else {  // a merge: operand axes j.. make output axis i
        std::size_t const s = j;
        index_t p = 1;
        while (j != RI && p < out[i]) p *= in[j++];
        if (p != out[i]) return;
        index_t d = 1;
        for (std::size_t q = j; q-- > s;) {
          lo_[q] = std::uint8_t(i);
          hi_[q] = std::uint8_t(i + 1);
          div_[q] = d;
          mod_[q] = q == s ? 0 : in[q];
          d *= in[q];
        }
        w_[i] = 1;
        ++i;
      }
    }
    // what is left on the other side must be axes of extent 1 too
    for (; i != RO; ++i)
      if (out[i] != 1) return;
    for (; j != RI; ++j)
      if (in[j] != 1) return;
    general_ = false;
  }

  /// The operand coordinate of output coordinate c.
  GRADIX_HOST_DEVICE constexpr array<index_t, RI> operator()(array<index_t, RO> const& c) const {
    array<index_t, RI> a{};
    if (general_) {
      index_t lin = 0;
      for (std::size_t k = 0; k != RO; ++k) lin = lin * out_ext_[k] + c[k];
      for (std::size_t j = RI; j-- > 0;) {
        a[j] = lin % in_ext_[j];
        lin /= in_ext_[j];
      }
      return a;
    }
    for (std::size_t j = 0; j != RI; ++j) {
      index_t s = 0;
      for (std::size_t k = lo_[j]; k < hi_[j]; ++k) s += c[k] * w_[k];
      if (div_[j] != 1) s /= div_[j];
      if (mod_[j] != 0) s %= mod_[j];
      a[j] = s;
    }
    return a;
  }
  /// Whether walking the last output axis walks the last operand axis with step 1 (a row of
  /// the output is a piece of one row of the operand).
  GRADIX_HOST_DEVICE constexpr bool last_axis_contiguous() const {
    if constexpr (RO == 0 || RI == 0) {
      return false;
    } else {
      if (general_)
        return out_ext_[RO - 1] > 0 && out_ext_[RO - 1] <= in_ext_[RI - 1] && in_ext_[RI - 1] % out_ext_[RO - 1] == 0;
      return lo_[RI - 1] <= RO - 1 && RO - 1 < hi_[RI - 1] && w_[RO - 1] == 1 && div_[RI - 1] == 1 &&
             mod_[RI - 1] == 0;
    }
  }
};

}  // namespace gradix
