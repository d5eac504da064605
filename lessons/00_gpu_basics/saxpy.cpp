// Task 1, CPU side: the SAXPY dispatcher and its CPU twin.
// The CUDA kernel it dispatches to is in saxpy.cu; read the two side by side.
#include "basics.h"

#include "dispatch.h"  // MGPU_IF_CUDA: the CUDA branch, or a clear error in a CPU-only build

namespace mgpu::lesson00 {

void saxpy_(float a, const Tensor& x, Tensor& y) {
  check_defined("saxpy_", x, "x");
  check_defined("saxpy_", y, "y");
  check_same_device("saxpy_", x, y);
  check_same_dtype("saxpy_", x, y);
  check_same_shape("saxpy_", x, y);
  MGPU_CHECK(y.dtype() == DType::f32, "saxpy_: lesson 00 works on f32 tensors, got ", y.str(),
             " (convert with .to(mgpu::DType::f32))");
  if (y.device().is_cuda()) {
    MGPU_IF_CUDA(saxpy_cuda(a, x, y));
  } else {
    saxpy_cpu(a, x, y);
  }
}

void saxpy_cpu(float a, const Tensor& x, Tensor& y) {
  // What you have: a; x and y (contiguous f32 tensors of one shape, checked by saxpy_);
  // t.data<float>() -> a pointer to t's first float; t.numel().
  // TODO(task1) BEGIN: SAXPY on the host (chapter §3, task 1): y becomes a·x + y element by
  // element, x is left unchanged; any shape, any size from 0 up. Stuck: tools/hint 00 1
  // (about 4 lines).
  MGPU_FAIL("TODO(task1): saxpy_cpu is not written yet (lessons/00_gpu_basics/saxpy.cpp); "
            "called with a = ", a, ", x ", x.str(), ", y ", y.str());
  // TODO(task1) END
}

}  // namespace mgpu::lesson00
