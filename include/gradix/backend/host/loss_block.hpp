#pragma once
/// \file
/// One block of gradix's summation scheme (eval/reduce.hpp) computed by a host gradient kernel
/// as it walks the block: the kernels that carry the loss value (multi_use.hpp,
/// carrying.hpp; docs/ad.md, "The loss value in the first kernel") add the values of the
/// reduction's operand into the reduction's own lanes, padding and tree, so the block's sum
/// has the bits of the reduction's block. SIMD builds only (GRADIX_HAS_VECTOR_EXT).

#include "gradix/config.hpp"
#include "gradix/core/simd.hpp"
#include "gradix/eval/reduce.hpp"

namespace gradix::host {

namespace detail {
#if defined(GRADIX_HAS_VECTOR_EXT)
/// One block [i0, i1) of a sum in gradix's summation scheme (eval/reduce.hpp), computed by a
/// gradient kernel that also writes the adjoints of those elements (the loss value carried
/// by a kernel, docs/ad.md): pack_step(j) handles elements j .. j + W - 1 and returns their
/// values, scalar_step(j) element j. The lanes, padding and tree are the reduction's, so
/// the block's sum has the bits of the reduction's block.
/// Cheap: the lanes' packs stay in registers, pack_step is copied once per accumulator
/// pack; otherwise pack_step has one call site (an expensive body, eval/cost.hpp: a deep
/// chain copied NP times made its kernel NP times larger, and g++'s compile time grows
/// faster than the function's size) and the packs are indexed at run time: the same
/// additions in the same order.
template <class T, bool Cheap, class PS, class SS>
GRADIX_ALWAYS_INLINE T loss_block(index_t i0, index_t i1, PS&& pack_step, SS&& scalar_step) {
  using Op = op::sum_of;
  constexpr int L = ev::lanes_v<T>;
  constexpr int W = simd::width<T>;
  static_assert(L % W == 0, "gradix internal: SIMD packs wider than the summation lanes");
  constexpr int NP = L / W;  // lane q*W + w is lane w of pack q
  using X = simd::pack<T, W>;
  X acc[NP];
  GRADIX_UNROLL(16)
  for (int q = 0; q < NP; ++q) acc[q] = simd::splat<T, W>(Op::template identity<T>());
  index_t i = i0;
  int q = 0;  // the accumulator pack of the pack at i
  if constexpr (Cheap) {
    for (; i + L <= i1; i += L) {
      GRADIX_UNROLL(16)
      for (int k = 0; k < NP; ++k) acc[k] = Op::combine(acc[k], X(pack_step(i + k * W)));
    }
  }
  GRADIX_NO_UNROLL
  for (; i + W <= i1; i += W) {
    acc[q] = Op::combine(acc[q], X(pack_step(i)));
    q = q + 1 == NP ? 0 : q + 1;
  }
  if (i < i1) {  // the reduction's partial pack: padded, its elements from the scalar path
    X t = simd::splat<T, W>(Op::template pad<T>());
    for (index_t w = 0; w < i1 - i; ++w) t[w] = T(scalar_step(i + w));
    acc[q] = Op::combine(acc[q], t);
  }
  ev::lanes<Op, T> l;
  GRADIX_UNROLL(16)
  for (int q = 0; q < NP; ++q) simd::store<T, W>(l.v_ + q * W, acc[q]);
  return l.result();
}
#endif
}  // namespace detail

}  // namespace gradix::host
