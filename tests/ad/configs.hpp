#pragma once
// Parameter configurations the AD tests run over: static and dynamic shapes, row- and
// column-major layouts, dense and sparse gradient storage along either axis.
#include <gradix/gradix.hpp>

#include <cstdint>
#include <string>

namespace gradix::testing {

/// A 5 x 3 parameter configuration: shape type S (shape<5, 3> or shape<dyn, 3>), layout L,
/// gradient storage spec G.
template <class S, class L, class G>
struct cfg {
  using shape_type = S;
  using layout = L;
  using spec = G;
  static S shape53() {
    if constexpr (S::static_extents[0] == dyn)
      return S(dims(5, fix<3>));
    else
      return S{};
  }
  /// Values uniform in [lo, hi).
  static tensor<double, S, L> values(std::uint64_t seed, double lo = -1.0, double hi = 1.0) {
    return uniform<double, L>(shape53(), seed, lo, hi);
  }
  static auto make(std::uint64_t seed, double lo = -1.0, double hi = 1.0) {
    return param(values(seed, lo, hi), G{});
  }
};

using cfg_static_row_dense0 = cfg<shape<5, 3>, row_major, dense_grad_t<0>>;
using cfg_dyn_row_sparse0 = cfg<shape<dyn, 3>, row_major, sparse_grad_t<0>>;
using cfg_static_col_sparse1 = cfg<shape<5, 3>, col_major, sparse_grad_t<1>>;
using cfg_dyn_col_dense1 = cfg<shape<dyn, 3>, col_major, dense_grad_t<1>>;

}  // namespace gradix::testing

// The four configurations together cover: static / dynamic first extent, row / column major,
// dense / sparse storage, storage axis 0 / 1.
#define GRADIX_AD_CONFIGS                                                       \
  gradix::testing::cfg_static_row_dense0, gradix::testing::cfg_dyn_row_sparse0, \
      gradix::testing::cfg_static_col_sparse1, gradix::testing::cfg_dyn_col_dense1
