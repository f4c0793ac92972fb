// A small shared library for tests/interop/torch_roundtrip.py, loaded with ctypes: C entry
// points that import a DLPack tensor from PyTorch and export gradix tensors to it.
#include <gradix/gradix.hpp>
#include <gradix/interop/dlpack.hpp>

#include <cstdint>
#include <limits>

namespace gx = gradix;
namespace dl = gradix::dlpack;

namespace {
int exported_freed = 0;
}

extern "C" {

/// Doubles, in place, the float32 matrix that `t` (a DLTensor* of a PyTorch tensor, still
/// owned by its capsule) describes; returns the address gradix wrote through, or 0 (and
/// writes nothing) when the tensor does not fit.
std::uintptr_t gx_double_in_place(void* t) {
  try {
    auto v = gx::from_dlpack<float, gx::shape<gx::dyn, gx::dyn>>(*static_cast<dl::DLTensor*>(t));
    gx::assign(v, v * 2.0f);
    return reinterpret_cast<std::uintptr_t>(v.data());
  } catch (gx::error const&) {
    return 0;
  }
}

/// The sum of a float64 vector from PyTorch, through gradix (a fused reduction).
double gx_sum(void* t) {
  auto v = gx::from_dlpack<double, gx::shape<gx::dyn>>(*static_cast<dl::DLTensor*>(t));
  return gx::value(gx::sum(v));
}

/// The sum (in double) of a rank-1 bfloat16 (half_width 0) or float16 (1) tensor, read as
/// float by a gradix expression; NaN when the element type is refused.
double gx_sum_half(void* t, int half_width) {
  auto const& d = *static_cast<dl::DLTensor*>(t);
  try {
    if (half_width == 0) return gx::value(gx::sum(gx::cast<double>(gx::from_dlpack<gx::bfloat16, gx::shape<gx::dyn>>(d))));
    return gx::value(gx::sum(gx::cast<double>(gx::from_dlpack<gx::half, gx::shape<gx::dyn>>(d))));
  } catch (gx::error const&) {
    return std::numeric_limits<double>::quiet_NaN();
  }
}

/// A rows x cols float32 tensor 0, 1, 2, ... (column-major when col_major), exported: a
/// DLManagedTensor* whose deleter counts in gx_exported_freed().
void* gx_make(std::int64_t rows, std::int64_t cols, int col_major) {
  dl::DLManagedTensor* m = col_major ? gx::to_dlpack(gx::iota<float, gx::col_major>(gx::dims(rows, cols)))
                                     : gx::to_dlpack(gx::iota<float>(gx::dims(rows, cols)));
  // wrap the deleter to count the frees (every rank-2 export has the same deleter)
  static void (*inner)(dl::DLManagedTensor*) = nullptr;
  inner = m->deleter;
  m->deleter = [](dl::DLManagedTensor* self) {
    ++exported_freed;
    inner(self);
  };
  return m;
}
/// The address of an exported tensor's elements.
std::uintptr_t gx_data_of(void* m) { return reinterpret_cast<std::uintptr_t>(static_cast<dl::DLManagedTensor*>(m)->dl_tensor.data); }
int gx_exported_freed() { return exported_freed; }
}
