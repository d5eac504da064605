// Softmax cross-entropy on CUDA. Forward: one block per row, three block-wide steps
// (max, sum of exponentials, loss) so each row is read from memory a few times but the
// logits never round-trip through a [N, C] temporary. Backward: an elementwise kernel.
#include <cmath>

#include "cuda_util.cuh"
#include "mgpu/host_reads.h"
#include "ops_cuda.h"

namespace mgpu::detail {

// exp and log in the compute type: expf/logf for float, exp/log for double.
__device__ __forceinline__ float exp_compute(float x) { return expf(x); }
__device__ __forceinline__ double exp_compute(double x) { return exp(x); }
__device__ __forceinline__ float log_compute(float x) { return logf(x); }
__device__ __forceinline__ double log_compute(double x) { return log(x); }

// Block r handles row r; its threads stride over the row's C classes.
// `bad` (2 words, zeroed before launch) records the first out-of-range label: bad[0] =
// row + 1 (claimed with atomicCAS, so only one block writes), bad[1] = the label.
template <typename T, typename L>
__global__ void softmax_xent_kernel(const T* logits, const L* labels, std::int64_t classes,
                                    compute_t<T>* row_loss, T* probs, unsigned long long* bad) {
  using A = compute_t<T>;
  const std::int64_t r = blockIdx.x;
  const T* row = logits + r * classes;

  // Step 1) m = max_c x_c, so that every exponent below is <= 0 and cannot overflow.
  A m = -INFINITY;
  for (std::int64_t c = threadIdx.x; c < classes; c += blockDim.x)
    m = MaxOp{}(m, to_compute(row[c]));
  m = block_reduce(m, MaxOp{}, A(-INFINITY));

  // Step 2) s = sum_c exp(x_c - m); s >= 1 since the max itself contributes exp(0).
  A s = 0;
  for (std::int64_t c = threadIdx.x; c < classes; c += blockDim.x)
    s += exp_compute(to_compute(row[c]) - m);
  s = block_reduce(s, SumOp{}, A(0));

  // Step 3) loss_r = log(s) + m - x_y: one thread reads the label and writes the loss.
  if (threadIdx.x == 0) {
    const std::int64_t y = labels[r];
    if (y < 0 || y >= classes) {
      if (atomicCAS(&bad[0], 0ull, static_cast<unsigned long long>(r + 1)) == 0ull)
        bad[1] = static_cast<unsigned long long>(y);
      row_loss[r] = A(NAN);
    } else {
      row_loss[r] = log_compute(s) + m - to_compute(row[y]);
    }
  }

  // Step 4) the probabilities, if asked for: exp(x_c - m) / s.
  if (probs != nullptr)
    for (std::int64_t c = threadIdx.x; c < classes; c += blockDim.x)
      probs[r * classes + c] = from_compute<T>(exp_compute(to_compute(row[c]) - m) / s);
}

void softmax_xent_rows_cuda(Tensor& row_loss, Tensor* probs, const Tensor& logits,
                            const Tensor& labels, bool check_labels) {
  const std::int64_t rows = logits.size(0), classes = logits.size(1);
  MGPU_CHECK(rows <= 2147483647, "softmax_cross_entropy: too many rows for one launch: ",
             logits.str());
  // A warp per 32 classes, at most 8 warps: 10-class rows then use one warp, not eight idle.
  const int threads = static_cast<int>(std::min<std::int64_t>(kBlock, std::max<std::int64_t>(32, (classes + 31) / 32 * 32)));
  cudaStream_t stream = launch_stream(logits.device());
  Tensor bad = Tensor::empty({2}, DType::i64, logits.device());
  MGPU_CUDA_CHECK(cudaMemsetAsync(bad.raw_data(), 0, bad.nbytes(), stream));
  auto* bad_ptr = static_cast<unsigned long long*>(bad.raw_data());

  dispatch_cuda_floating(logits.dtype(), "softmax_cross_entropy", [&](auto tag) {
    using T = decltype(tag);
    T* probs_ptr = probs ? device_ptr<T>(*probs) : nullptr;
    if (labels.dtype() == DType::i32) {
      softmax_xent_kernel<T, std::int32_t><<<static_cast<unsigned>(rows), threads, 0, stream>>>(
          device_ptr<T>(logits), device_ptr<std::int32_t>(labels), classes,
          device_ptr<compute_t<T>>(row_loss), probs_ptr, bad_ptr);
    } else {
      softmax_xent_kernel<T, std::int64_t><<<static_cast<unsigned>(rows), threads, 0, stream>>>(
          device_ptr<T>(logits), device_ptr<std::int64_t>(labels), classes,
          device_ptr<compute_t<T>>(row_loss), probs_ptr, bad_ptr);
    }
    MGPU_CUDA_CHECK_LAUNCH();
  });

  // The host can only learn about a bad label by reading the flag back, which waits for
  // the kernel: a host read. A caller that checked the labels itself skips it.
  if (!check_labels) return;
  note_host_read();
  unsigned long long flag[2] = {0, 0};
  MGPU_CUDA_CHECK(cudaMemcpyAsync(flag, bad_ptr, sizeof flag, cudaMemcpyDeviceToHost, stream));
  MGPU_CUDA_CHECK(cudaStreamSynchronize(stream));
  MGPU_CHECK(flag[0] == 0, "softmax_cross_entropy: label ", static_cast<long long>(flag[1]),
             " at row ", flag[0] - 1, " is outside [0, ", classes, ") for labels ", labels.str(),
             " (logits ", logits.str(), ")");
}

// grad[r, c] = (p[r, c] - [c == y_r]) * scale, one thread per element (grid-stride).
template <typename T, typename L>
__global__ void softmax_xent_backward_kernel(T* grad, const T* probs, const L* labels,
                                             std::int64_t n, std::int64_t classes,
                                             compute_t<T> scale) {
  for (std::int64_t i = grid_start(); i < n; i += grid_stride()) {
    const std::int64_t r = i / classes;  // row-major: element i is (i / C, i % C)
    const std::int64_t c = i % classes;
    const compute_t<T> onehot = c == static_cast<std::int64_t>(labels[r]) ? 1 : 0;
    grad[i] = from_compute<T>((to_compute(probs[i]) - onehot) * scale);
  }
}

void softmax_xent_backward_cuda(Tensor& grad, const Tensor& probs, const Tensor& labels,
                                double scale) {
  const std::int64_t n = probs.numel(), classes = probs.size(1);
  cudaStream_t stream = launch_stream(probs.device());
  dispatch_cuda_floating(probs.dtype(), "softmax_cross_entropy_backward", [&](auto tag) {
    using T = decltype(tag);
    const compute_t<T> s = static_cast<compute_t<T>>(scale);
    if (labels.dtype() == DType::i32) {
      softmax_xent_backward_kernel<T, std::int32_t><<<grid_for(n), kBlock, 0, stream>>>(
          device_ptr<T>(grad), device_ptr<T>(probs), device_ptr<std::int32_t>(labels), n, classes, s);
    } else {
      softmax_xent_backward_kernel<T, std::int64_t><<<grid_for(n), kBlock, 0, stream>>>(
          device_ptr<T>(grad), device_ptr<T>(probs), device_ptr<std::int64_t>(labels), n, classes, s);
    }
    MGPU_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace mgpu::detail
