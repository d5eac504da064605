// CUDA twin of sync_batchnorm_kernels.cpp: merging the ranks' [mean | invstd | count] rows
// into the world's statistics. Row r of `gathered` starts at r * (2C + 1); channel c's
// mean is at c, its invstd at C + c, and the rank's count at 2C.
#include "ops/cuda_util.cuh"
#include "parallel/sync_bn/sync_batchnorm_cuda.h"

namespace mgpu::parallel::detail {

// One thread per channel: W is small (the number of ranks), so each thread walks the ranks
// in order, which also makes the result independent of the launch geometry. Thread c reads
// element c of every row: consecutive threads read consecutive addresses (coalesced).
template <typename A>
__global__ void merge_batch_stats_kernel(const A* gathered, A* mean, A* var, A* invstd,
                                         std::int64_t W, std::int64_t C, double eps) {
  const std::int64_t width = 2 * C + 1;
  for (std::int64_t c = grid_start(); c < C; c += grid_stride()) {
    A n = 0, avg = 0, m2 = 0;  // m2: sum of squared deviations from avg so far
    for (std::int64_t r = 0; r < W; ++r) {
      const A* row = gathered + r * width;
      const A n_r = row[2 * C];
      if (n_r < A(1)) continue;  // an empty batch: nothing to merge
      const A is = row[C + c];
      const A var_r = A(1) / (is * is) - static_cast<A>(eps);  // the rank's biased variance
      // Chan et al.'s pairwise update, as in the CPU loop.
      const A delta = row[c] - avg, total = n + n_r;
      m2 += var_r * n_r + delta * delta * n * n_r / total;
      avg += delta * n_r / total;
      n = total;
    }
    const A v = n > A(0) ? m2 / n : A(0);
    mean[c] = avg;
    var[c] = v;
    invstd[c] = static_cast<A>(1.0 / sqrt(static_cast<double>(v) + eps));
  }
}

void merge_batch_stats_cuda(const Tensor& gathered, double eps, Tensor& mean, Tensor& var,
                            Tensor& invstd, std::int64_t W, std::int64_t C) {
  cudaStream_t stream = launch_stream(gathered.device());
  if (gathered.dtype() == DType::f64) {
    merge_batch_stats_kernel<double><<<grid_for(C), kBlock, 0, stream>>>(
        device_ptr<double>(gathered), device_ptr<double>(mean), device_ptr<double>(var),
        device_ptr<double>(invstd), W, C, eps);
  } else {
    merge_batch_stats_kernel<float><<<grid_for(C), kBlock, 0, stream>>>(
        device_ptr<float>(gathered), device_ptr<float>(mean), device_ptr<float>(var),
        device_ptr<float>(invstd), W, C, eps);
  }
  MGPU_CUDA_CHECK_LAUNCH();
}

}  // namespace mgpu::parallel::detail
