// softmax and its backward on CUDA: one block per row, the row's threads striding over it;
// block reductions give the row's maximum and sum (forward) or Σ dL/dy · y (backward).
#include "cuda_util.cuh"
#include "ops/softmax_cuda.h"

namespace mgpu::detail {
namespace {

unsigned row_blocks(std::int64_t rows) {
  return static_cast<unsigned>(std::min<std::int64_t>(rows, 65536));
}

template <typename T>
__global__ void softmax_kernel(const T* x, T* y, std::int64_t rows, std::int64_t n, bool causal) {
  using A = compute_t<T>;
  for (std::int64_t r = blockIdx.x; r < rows; r += gridDim.x) {  // uniform in the block
    const std::int64_t seen = causal ? r % n + 1 : n;  // query t = r % T sees keys 0..t
    const T* xr = x + r * n;
    A peak = -INFINITY;
    for (std::int64_t j = threadIdx.x; j < seen; j += blockDim.x) peak = max(peak, A(to_compute(xr[j])));
    peak = block_reduce(peak, MaxOp{}, A(-INFINITY));
    A sum = 0;
    for (std::int64_t j = threadIdx.x; j < seen; j += blockDim.x) sum += exp(A(to_compute(xr[j])) - peak);
    sum = block_reduce(sum, SumOp{}, A(0));
    for (std::int64_t j = threadIdx.x; j < n; j += blockDim.x)
      y[r * n + j] = from_compute<T>(j < seen ? A(exp(A(to_compute(xr[j])) - peak) / sum) : A(0));
  }
}

template <typename T>
__global__ void softmax_backward_kernel(const T* grad_out, const T* y, T* grad_in,
                                        std::int64_t rows, std::int64_t n) {
  using A = compute_t<T>;
  for (std::int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    A dot = 0;
    for (std::int64_t j = threadIdx.x; j < n; j += blockDim.x)
      dot += A(to_compute(grad_out[r * n + j])) * A(to_compute(y[r * n + j]));
    dot = block_reduce(dot, SumOp{}, A(0));
    for (std::int64_t j = threadIdx.x; j < n; j += blockDim.x)
      grad_in[r * n + j] =
          from_compute<T>(A(to_compute(y[r * n + j])) * (A(to_compute(grad_out[r * n + j])) - dot));
  }
}

}  // namespace

void softmax_cuda(const Tensor& x, Tensor& y, std::int64_t rows, std::int64_t n, bool causal) {
  cudaStream_t stream = launch_stream(x.device());
  dispatch_cuda_floating(x.dtype(), "softmax", [&](auto tag) {
    using T = decltype(tag);
    softmax_kernel<T><<<row_blocks(rows), kBlock, 0, stream>>>(device_ptr<T>(x), device_ptr<T>(y),
                                                               rows, n, causal);
    MGPU_CUDA_CHECK_LAUNCH();
  });
}

void softmax_backward_cuda(const Tensor& grad_out, const Tensor& y, Tensor& grad_in,
                           std::int64_t rows, std::int64_t n) {
  cudaStream_t stream = launch_stream(y.device());
  dispatch_cuda_floating(y.dtype(), "softmax_backward", [&](auto tag) {
    using T = decltype(tag);
    softmax_backward_kernel<T><<<row_blocks(rows), kBlock, 0, stream>>>(
        device_ptr<T>(grad_out), device_ptr<T>(y), device_ptr<T>(grad_in), rows, n);
    MGPU_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace mgpu::detail
