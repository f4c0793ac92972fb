#pragma once
/// \file
/// DLPack: exchanging tensors with PyTorch, JAX, NumPy and others without copying.
///
/// The structs below are DLPack's published C ABI (dlpack.h, the `DLManagedTensor` form that
/// every framework reads and writes, capsule name "dltensor"), declared here with the same
/// members in the same order, so no header of DLPack's is needed.
///
/// - Import, not owning: `from_dlpack<float, shape<dyn, dyn>>(const DLTensor&)` is a strided
///   view of the other framework's memory (byte_offset applied; absent strides mean compact
///   row-major). The rank, element type, static extents and device are checked: a mismatch is
///   a gradix::error naming the field, the value found and the one expected.
/// - Import, owning: `dlpack_import<float, shape<dyn, dyn>>(DLManagedTensor*)` takes the
///   producer's tensor and calls its deleter when it goes (also when the checks fail).
/// - Export: `to_dlpack(std::move(tensor))` gives a DLManagedTensor* that owns the tensor; the
///   consumer calls its deleter. `to_dlpack(view)` exports
///   a view whose memory the caller keeps alive until the deleter runs.
/// Host memory is kDLCPU (kDLCUDAHost is accepted on import); cuda_space is kDLCUDA.
/// gx::bfloat16 is kDLBfloat and gx::half kDLFloat, both 16 bits (torch.bfloat16, torch.float16).

#include "gradix/config.hpp"
#include "gradix/core/error.hpp"
#include "gradix/core/layout.hpp"
#include "gradix/core/shape.hpp"
#include "gradix/core/tensor.hpp"
#include "gradix/core/view.hpp"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <type_traits>
#include <utility>

namespace gradix::dlpack {

/// Device kinds (DLDeviceType; the ones gradix uses, with DLPack's numbers).
enum device_type : std::int32_t { kDLCPU = 1, kDLCUDA = 2, kDLCUDAHost = 3, kDLCUDAManaged = 13 };
/// Element kinds (DLDataTypeCode).
enum type_code : std::uint8_t { kDLInt = 0, kDLUInt = 1, kDLFloat = 2, kDLOpaqueHandle = 3, kDLBfloat = 4, kDLComplex = 5, kDLBool = 6 };

struct DLDevice {
  std::int32_t device_type;  // a device_type
  std::int32_t device_id;
};
struct DLDataType {
  std::uint8_t code;  // a type_code
  std::uint8_t bits;
  std::uint16_t lanes;
};
struct DLTensor {
  void* data;
  DLDevice device;
  std::int32_t ndim;
  DLDataType dtype;
  std::int64_t* shape;
  std::int64_t* strides;  // in elements; null: compact row-major
  std::uint64_t byte_offset;
};
struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(DLManagedTensor* self);
};

static_assert(sizeof(DLDevice) == 8 && sizeof(DLDataType) == 4, "gradix::dlpack: DLPack's ABI sizes");
static_assert(offsetof(DLTensor, shape) == 24 && offsetof(DLTensor, byte_offset) == 40 && sizeof(DLTensor) == 48,
              "gradix::dlpack: DLTensor must have DLPack's layout (64-bit platforms)");
static_assert(offsetof(DLManagedTensor, deleter) == 56, "gradix::dlpack: DLManagedTensor must have DLPack's layout");

/// The DLPack element type of T.
template <class T>
constexpr DLDataType dtype_of() {
  using U = std::remove_const_t<T>;
  static_assert(storage_element<U>,
                "gradix::dlpack: only arithmetic element types other than bool, gx::bfloat16 and gx::half are exchanged");
  if constexpr (std::is_same_v<U, bfloat16>) return {std::uint8_t(kDLBfloat), 16, 1};
  else if constexpr (std::is_same_v<U, half>) return {std::uint8_t(kDLFloat), 16, 1};
  else
    return {std::uint8_t(std::is_floating_point_v<U> ? kDLFloat : std::is_signed_v<U> ? kDLInt : kDLUInt),
            std::uint8_t(sizeof(U) * 8), 1};
}

namespace detail {
inline char const* type_name(DLDataType t) {
  switch (t.code) {
    case kDLInt: return "int";
    case kDLUInt: return "uint";
    case kDLFloat: return "float";
    case kDLBfloat: return "bfloat";
    case kDLComplex: return "complex";
    case kDLBool: return "bool";
    default: return "opaque";
  }
}
template <class Space>
constexpr bool device_fits(std::int32_t d) {
  if constexpr (std::is_same_v<Space, cuda_space>) return d == kDLCUDA || d == kDLCUDAManaged;
  else return d == kDLCPU || d == kDLCUDAHost;
}
template <class Space>
constexpr char const* space_name() {
  return std::is_same_v<Space, cuda_space> ? "cuda_space (kDLCUDA or kDLCUDAManaged)" : "host_space (kDLCPU or kDLCUDAHost)";
}

/// What an exported tensor keeps: its extents and strides, and the tensor when it owns one.
template <std::size_t R>
struct export_ctx {
  DLManagedTensor m{};
  std::int64_t shape[R > 0 ? R : 1]{};
  std::int64_t strides[R > 0 ? R : 1]{};
  std::shared_ptr<void> owner;  // null for an exported view
};
template <std::size_t R>
void delete_export(DLManagedTensor* self) {
  delete static_cast<export_ctx<R>*>(self->manager_ctx);
}
}  // namespace detail
}  // namespace gradix::dlpack

namespace gradix {

/// A strided view of t's memory, as T elements with shape Shape in Space (not owning: t's
/// producer keeps the memory). A gradix::error names what does not match.
template <class T, class Shape, class Space = host_space>
tensor_view<T, Shape, strided, Space> from_dlpack(dlpack::DLTensor const& t) {
  constexpr char const* op = "gradix::from_dlpack";
  constexpr std::size_t R = Shape::rank;
  if (t.ndim != std::int32_t(R)) ::gradix::detail::fail(op, ": the tensor has rank ", t.ndim, ", the view rank ", R);
  constexpr dlpack::DLDataType want = dlpack::dtype_of<T>();
  if (t.dtype.code != want.code || t.dtype.bits != want.bits || t.dtype.lanes != want.lanes)
    ::gradix::detail::fail(op, ": the elements are ", dlpack::detail::type_name(t.dtype), int(t.dtype.bits), " x ",
                           int(t.dtype.lanes), " lanes, the view's ", dlpack::detail::type_name(want), int(want.bits));
  if (!dlpack::detail::device_fits<Space>(t.device.device_type))
    ::gradix::detail::fail(op, ": the tensor is on device type ", t.device.device_type, ", the view in ",
                           dlpack::detail::space_name<Space>());
  if (t.byte_offset % sizeof(T) != 0)
    ::gradix::detail::fail(op, ": byte_offset ", t.byte_offset, " is not a multiple of the element size ", sizeof(T));
  Shape s{};
  array<index_t, R> st{};
  index_t compact = 1;
  for (std::size_t k = R; k-- > 0;) {
    std::int64_t const e = t.shape[k];
    if (e < 0) ::gradix::detail::fail(op, ": axis ", k, " has extent ", e);
    if (Shape::static_extents[k] != dyn && Shape::static_extents[k] != e)
      ::gradix::detail::fail(op, ": axis ", k, " has extent ", e, ", the view's static extent is ", Shape::static_extents[k]);
    s.set_extent(k, index_t(e));
    st[k] = t.strides ? index_t(t.strides[k]) : compact;
    compact *= index_t(e);
  }
  auto* const base = reinterpret_cast<T*>(static_cast<unsigned char*>(t.data) + t.byte_offset);
  return tensor_view<T, Shape, strided, Space>(base, s, st);
}

/// A DLPack tensor taken from its producer: view() reads it; the producer's deleter runs when
/// this goes. Move-only.
template <class T, class Shape, class Space = host_space>
class dlpack_tensor {
 public:
  explicit dlpack_tensor(dlpack::DLManagedTensor* m) : m_(m) {
    if (!m_) ::gradix::detail::fail("gradix::dlpack_import: a null DLManagedTensor");
    try {
      v_ = from_dlpack<T, Shape, Space>(m_->dl_tensor);
    } catch (...) {
      release();  // (taken: the producer's memory goes back even when the checks fail)
      throw;
    }
  }
  dlpack_tensor(dlpack_tensor&& o) noexcept : m_(std::exchange(o.m_, nullptr)), v_(o.v_) {}
  dlpack_tensor& operator=(dlpack_tensor&& o) noexcept {
    if (this != &o) {
      release();
      m_ = std::exchange(o.m_, nullptr);
      v_ = o.v_;
    }
    return *this;
  }
  dlpack_tensor(dlpack_tensor const&) = delete;
  dlpack_tensor& operator=(dlpack_tensor const&) = delete;
  ~dlpack_tensor() { release(); }
  tensor_view<T, Shape, strided, Space> const& view() const { return v_; }

 private:
  void release() {
    if (m_ && m_->deleter) m_->deleter(m_);
    m_ = nullptr;
  }
  dlpack::DLManagedTensor* m_;
  tensor_view<T, Shape, strided, Space> v_{};
};
/// Takes m (its producer's deleter runs when the result goes, or at once if m does not fit).
template <class T, class Shape, class Space = host_space>
dlpack_tensor<T, Shape, Space> dlpack_import(dlpack::DLManagedTensor* m) {
  return dlpack_tensor<T, Shape, Space>(m);
}

namespace detail {
template <class T, class S, class L, class Sp>
dlpack::DLManagedTensor* export_view(tensor_view<T, S, L, Sp> const& v, std::shared_ptr<void> owner) {
  constexpr std::size_t R = S::rank;
  auto ctx = std::make_unique<dlpack::detail::export_ctx<R>>();
  for (std::size_t k = 0; k < R; ++k) {
    ctx->shape[k] = std::int64_t(v.shape().extent(k));
    ctx->strides[k] = std::int64_t(v.stride(k));
  }
  ctx->owner = std::move(owner);
  dlpack::DLTensor& t = ctx->m.dl_tensor;
  t.data = const_cast<std::remove_const_t<T>*>(v.data());
  t.device = {std::is_same_v<Sp, cuda_space> ? dlpack::kDLCUDA : dlpack::kDLCPU, 0};
  t.ndim = std::int32_t(R);
  t.dtype = dlpack::dtype_of<T>();
  t.shape = ctx->shape;
  t.strides = ctx->strides;
  t.byte_offset = 0;
  ctx->m.manager_ctx = ctx.get();
  ctx->m.deleter = &dlpack::detail::delete_export<R>;
  return &ctx.release()->m;
}
}  // namespace detail

/// Exports a view (its memory, not a copy): the caller keeps the memory alive until the
/// consumer calls the deleter. A cuda_space view is on device 0 unless `device_id` says.
template <class T, class S, class L, class Sp>
dlpack::DLManagedTensor* to_dlpack(tensor_view<T, S, L, Sp> const& v, std::int32_t device_id = 0) {
  dlpack::DLManagedTensor* m = detail::export_view(v, nullptr);
  m->dl_tensor.device.device_id = device_id;
  return m;
}
/// Exports a host tensor, moved in: the DLManagedTensor owns it until the consumer calls the
/// deleter (a tensor with heap storage keeps its element address; an inline one moves).
template <class T, class S, class L>
dlpack::DLManagedTensor* to_dlpack(tensor<T, S, L>&& t) {
  auto owned = std::make_shared<tensor<T, S, L>>(std::move(t));
  return detail::export_view(owned->view(), owned);
}
template <class T, class S, class L>
dlpack::DLManagedTensor* to_dlpack(tensor<T, S, L> const&) = delete;  // (move it in, or export its view())

}  // namespace gradix
