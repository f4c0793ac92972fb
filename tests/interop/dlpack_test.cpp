// DLPack import and export (include/gradix/interop/dlpack.hpp) within C++: a round trip keeps
// the data pointer (no copy), strides and byte offsets are honoured, every mismatch is an
// error naming the field, and deleters run exactly once. The round trip with PyTorch is
// torch_roundtrip.py (through dlpack_ctypes.cpp).
#include <gradix/gradix.hpp>
#include <gradix/interop/dlpack.hpp>

#include "testing.hpp"

#include <doctest/doctest.h>

#include <cstdint>
#include <string>

namespace gx = gradix;
namespace dl = gradix::dlpack;
using gx::dyn;

namespace {
using gx::testing::error_of;
int freed = 0;
void count_free(dl::DLManagedTensor*) { ++freed; }
}  // namespace

TEST_CASE("dlpack: a tensor exported and imported again is the same memory, row- and column-major") {
  auto t = gx::iota<float>(gx::dims(3, 4));
  float const* const p = t.data();
  dl::DLManagedTensor* m = gx::to_dlpack(std::move(t));
  REQUIRE(m != nullptr);
  CHECK(m->dl_tensor.data == p);  // moved in: the heap storage stays where it was
  CHECK(m->dl_tensor.ndim == 2);
  CHECK(m->dl_tensor.dtype.code == dl::kDLFloat);
  CHECK(m->dl_tensor.dtype.bits == 32);
  CHECK(m->dl_tensor.device.device_type == dl::kDLCPU);
  CHECK(m->dl_tensor.strides[0] == 4);
  CHECK(m->dl_tensor.strides[1] == 1);
  {
    auto imp = gx::dlpack_import<float, gx::shape<dyn, 4>>(m);  // takes m; its deleter runs at the end
    auto const& v = imp.view();
    CHECK(v.data() == p);
    CHECK(v.shape().extent(0) == 3);
    CHECK(v(2, 3) == 11.0f);
    CHECK(gx::value(gx::sum(v)) == 66.0f);
  }
  // column-major: strides (1, 3)
  auto c = gx::iota<double, gx::col_major>(gx::dims(3, 2));
  auto const cv = c.view();
  dl::DLManagedTensor* mc = gx::to_dlpack(cv);
  CHECK(mc->dl_tensor.strides[0] == 1);
  CHECK(mc->dl_tensor.strides[1] == 3);
  auto const back = gx::from_dlpack<double, gx::shape<dyn, dyn>>(mc->dl_tensor);
  for (gx::index_t i = 0; i < 3; ++i)
    for (gx::index_t j = 0; j < 2; ++j) CHECK(back(i, j) == c(i, j));
  mc->deleter(mc);
}

TEST_CASE("dlpack: bfloat16 is kDLBfloat and half kDLFloat, 16 bits; neither imports as the other") {
  gx::tensor<gx::bfloat16, gx::shape<dyn>> b(gx::dims(5));
  gx::tensor<gx::half, gx::shape<dyn>> h(gx::dims(5));
  auto const r = gx::iota<float>(gx::dims(5));
  b = r * 0.5f;
  h = r * 0.25f;
  dl::DLManagedTensor* mb = gx::to_dlpack(b.view());
  dl::DLManagedTensor* mh = gx::to_dlpack(h.view());
  CHECK(mb->dl_tensor.dtype.code == dl::kDLBfloat);
  CHECK(mb->dl_tensor.dtype.bits == 16);
  CHECK(mh->dl_tensor.dtype.code == dl::kDLFloat);
  CHECK(mh->dl_tensor.dtype.bits == 16);
  auto const vb = gx::from_dlpack<gx::bfloat16, gx::shape<dyn>>(mb->dl_tensor);
  CHECK(vb.data() == b.data());
  CHECK(gx::value(gx::sum(vb)) == 5.0f);  // read as float: 0 + 0.5 + 1 + 1.5 + 2
  CHECK(error_of([&] { (void)gx::from_dlpack<gx::half, gx::shape<dyn>>(mb->dl_tensor); })
            .find("the elements are bfloat16 x 1 lanes, the view's float16") != std::string::npos);
  CHECK(error_of([&] { (void)gx::from_dlpack<float, gx::shape<dyn>>(mh->dl_tensor); })
            .find("the elements are float16 x 1 lanes, the view's float32") != std::string::npos);
  mb->deleter(mb);
  mh->deleter(mh);
}

TEST_CASE("dlpack: a producer's tensor with absent strides, explicit strides and a byte offset") {
  std::int32_t data[2 + 12] = {};
  for (int k = 0; k < 14; ++k) data[k] = k;
  std::int64_t shape[2] = {3, 4};
  dl::DLTensor t{data, {dl::kDLCPU, 0}, 2, {dl::kDLInt, 32, 1}, shape, nullptr, 2 * sizeof(std::int32_t)};
  auto v = gx::from_dlpack<std::int32_t, gx::shape<3, 4>>(t);  // compact row-major, after 2 elements
  CHECK(v(0, 0) == 2);
  CHECK(v(2, 3) == 13);
  // a transposed producer view: extents (4, 3), strides (1, 4)
  std::int64_t tshape[2] = {4, 3}, tstrides[2] = {1, 4};
  dl::DLTensor tt{data, {dl::kDLCPU, 0}, 2, {dl::kDLInt, 32, 1}, tshape, tstrides, 2 * sizeof(std::int32_t)};
  auto tv = gx::from_dlpack<std::int32_t, gx::shape<dyn, dyn>>(tt);
  CHECK(tv(3, 2) == v(2, 3));
  CHECK(tv(1, 0) == v(0, 1));
  // written through the view: the producer's memory
  gx::assign(tv, tv * 2);
  CHECK(data[2 + 11] == 26);
  // rank 0
  double one = 4.5;
  dl::DLTensor s0{&one, {dl::kDLCPU, 0}, 0, {dl::kDLFloat, 64, 1}, nullptr, nullptr, 0};
  CHECK(gx::value(gx::from_dlpack<double, gx::shape<>>(s0)) == 4.5);
}

TEST_CASE("dlpack: mismatches are errors that name the field, the value and what was expected") {
  float data[6] = {};
  std::int64_t shape[2] = {2, 3};
  dl::DLTensor t{data, {dl::kDLCPU, 0}, 2, {dl::kDLFloat, 32, 1}, shape, nullptr, 0};
  CHECK(error_of([&] { (void)gx::from_dlpack<float, gx::shape<dyn>>(t); }) ==
        "gradix::from_dlpack: the tensor has rank 2, the view rank 1");
  CHECK(error_of([&] { (void)gx::from_dlpack<double, gx::shape<dyn, dyn>>(t); }) ==
        "gradix::from_dlpack: the elements are float32 x 1 lanes, the view's float64");
  CHECK(error_of([&] { (void)gx::from_dlpack<float, gx::shape<dyn, 4>>(t); }) ==
        "gradix::from_dlpack: axis 1 has extent 3, the view's static extent is 4");
  CHECK(error_of([&] { (void)gx::from_dlpack<float, gx::shape<dyn, dyn>, gx::cuda_space>(t); }) ==
        "gradix::from_dlpack: the tensor is on device type 1, the view in cuda_space (kDLCUDA or kDLCUDAManaged)");
  dl::DLTensor dev = t;
  dev.device = {dl::kDLCUDA, 0};
  CHECK(error_of([&] { (void)gx::from_dlpack<float, gx::shape<dyn, dyn>>(dev); }) ==
        "gradix::from_dlpack: the tensor is on device type 2, the view in host_space (kDLCPU or kDLCUDAHost)");
  dl::DLTensor odd = t;
  odd.byte_offset = 2;
  CHECK(error_of([&] { (void)gx::from_dlpack<float, gx::shape<dyn, dyn>>(odd); }) ==
        "gradix::from_dlpack: byte_offset 2 is not a multiple of the element size 4");
  dl::DLTensor vec = t;
  vec.dtype.lanes = 4;
  CHECK(error_of([&] { (void)gx::from_dlpack<float, gx::shape<dyn, dyn>>(vec); }) ==
        "gradix::from_dlpack: the elements are float32 x 4 lanes, the view's float32");

  // an owning import that does not fit gives the producer's memory back at once, once
  freed = 0;
  dl::DLManagedTensor m{t, nullptr, &count_free};
  CHECK(error_of([&] { (void)gx::dlpack_import<float, gx::shape<dyn>>(&m); }) ==
        "gradix::from_dlpack: the tensor has rank 2, the view rank 1");
  CHECK(freed == 1);
  {
    auto a = gx::dlpack_import<float, gx::shape<dyn, dyn>>(&m);
    auto b = std::move(a);  // moved: still one deleter call
    CHECK(b.view().data() == data);
  }
  CHECK(freed == 2);
}

TEST_CASE("dlpack: device memory is kDLCUDA with its device id, both ways") {
  // (addresses only: nothing here reads device memory)
  alignas(16) static float fake[8];
  auto dv = gx::view<gx::row_major, gx::cuda_space>(fake, gx::dims(2, 4));
  dl::DLManagedTensor* m = gx::to_dlpack(dv, 1);
  CHECK(m->dl_tensor.device.device_type == dl::kDLCUDA);
  CHECK(m->dl_tensor.device.device_id == 1);
  auto back = gx::from_dlpack<float, gx::shape<2, 4>, gx::cuda_space>(m->dl_tensor);
  CHECK(back.data() == fake);
  CHECK(error_of([&] { (void)gx::from_dlpack<float, gx::shape<2, 4>>(m->dl_tensor); }) ==
        "gradix::from_dlpack: the tensor is on device type 2, the view in host_space (kDLCPU or kDLCUDAHost)");
  m->deleter(m);
}
