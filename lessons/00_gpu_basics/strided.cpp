// Experiment (not graded): the same copy with two access patterns. See the README's
// section on coalescing; the program gpu_basics times it.
#include "basics.h"

#include "dispatch.h"  // MGPU_IF_CUDA

namespace mgpu::lesson00 {

void strided_copy(Tensor& dst, const Tensor& src, std::int64_t stride) {
  check_same_device("strided_copy", dst, src);
  check_same_dtype("strided_copy", dst, src);
  MGPU_CHECK(dst.numel() == src.numel() && src.dtype() == DType::f32, "strided_copy: dst ",
             dst.str(), " and src ", src.str(), " must be f32 with the same numel");
  MGPU_CHECK(stride > 0 && (stride & (stride - 1)) == 0 && src.numel() % stride == 0,
             "strided_copy: stride ", stride, " must be a power of two that divides numel of ",
             src.str());
  if (src.device().is_cuda()) {
    MGPU_IF_CUDA(strided_copy_cuda(dst, src, stride));
  } else {
    strided_copy_cpu(dst, src, stride);
  }
}

void strided_copy_cpu(Tensor& dst, const Tensor& src, std::int64_t stride) {
  const float* s = src.data<float>();
  float* d = dst.data<float>();
  const std::int64_t rows = src.numel() / stride;
  // View src as `stride` rows of `rows` floats and read it down the columns (a transpose):
  // consecutive writes d[j * stride + k] read floats `rows` apart. Writes stay consecutive.
  for (std::int64_t j = 0; j < rows; ++j)
    for (std::int64_t k = 0; k < stride; ++k) d[j * stride + k] = s[k * rows + j];
}

}  // namespace mgpu::lesson00
