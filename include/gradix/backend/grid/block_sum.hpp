#pragma once
/// \file
/// Device kernels of distributed training (gradix/dist/nccl.hpp): the sum of per-block
/// partial gradients in block order, and an elementwise add, written against the launch
/// abstraction (launch.hpp) so that the tests run them through the grid emulator.

#include "gradix/backend/grid/launch.hpp"
#include "gradix/config.hpp"

namespace gradix::grid {

/// out[x] = (((T(0) + in[x]) + in[s + x]) + in[2s + x]) + ... for x < width, over `blocks`
/// rows `s` (the stride) elements apart (add_: out[x] += that sum): one thread per element
/// adds the rows in their order, so every launch shape gives the bits of the host loop that
/// does the same. (Also a scan sweep's bias gradient over its steps: grid::executor's
/// add_row_sums.)
template <class T>
struct ordered_block_sum_kernel {
  static constexpr bool uses_barriers = false;
  T const* in_;
  T* out_;
  index_t blocks_, width_, stride_;
  bool add_ = false;
  GRADIX_KERNEL_BODY
  template <class Ctx>
  GRADIX_HOST_DEVICE void operator()(Ctx const& c) const {
    for (index_t x = grid_first(c); x < width_; x += grid_step(c)) {
      T s = T(0);
      for (index_t b = 0; b < blocks_; ++b) s += in_[b * stride_ + x];
      out_[x] = add_ ? out_[x] + s : s;
    }
  }
};

/// dst[x] += src[x] for x < n.
template <class T>
struct add_into_kernel {
  static constexpr bool uses_barriers = false;
  T* dst_;
  T const* src_;
  index_t n_;
  GRADIX_KERNEL_BODY
  template <class Ctx>
  GRADIX_HOST_DEVICE void operator()(Ctx const& c) const {
    for (index_t x = grid_first(c); x < n_; x += grid_step(c)) dst_[x] += src_[x];
  }
};

/// Enqueues out = the block-ordered sum of `blocks` rows of `width` elements at `in` (device
/// memory of launcher l), row b starting at in + b * stride.
template <class T, class L>
void ordered_block_sum(L& l, T const* in, T* out, index_t blocks, index_t width, index_t stride,
                       launch_options o = {}) {
  if (width <= 0) return;
  l.launch(shape_for(width, o, l.max_threads()), ordered_block_sum_kernel<T>{in, out, blocks, width, stride});
}

/// Enqueues dst += src over n elements.
template <class T, class L>
void add_into(L& l, T* dst, T const* src, index_t n, launch_options o = {}) {
  if (n <= 0) return;
  l.launch(shape_for(n, o, l.max_threads()), add_into_kernel<T>{dst, src, n});
}

}  // namespace gradix::grid
