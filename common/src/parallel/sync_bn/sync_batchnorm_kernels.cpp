// The merge of the ranks' batch statistics on the CPU (in double: it is the reference the
// CUDA kernel in sync_batchnorm_kernels.cu is compared with), and the dispatch to it.
#include <cmath>
#include <vector>

#include "dispatch.h"  // MGPU_IF_CUDA
#include "mgpu/parallel/sync_bn/sync_batchnorm_steps.h"
#ifdef MGPU_WITH_CUDA
#include "parallel/sync_bn/sync_batchnorm_cuda.h"
#endif

namespace mgpu::parallel {

namespace {

/// Rounds a count sent as a floating-point value back to an integer.
std::int64_t count_of(double v) { return static_cast<std::int64_t>(std::llround(v)); }

}  // namespace

void merge_batch_stats(const Tensor& gathered, double eps, Tensor& mean, Tensor& var,
                       Tensor& invstd, std::int64_t& count) {
  const char* op = "merge_batch_stats";
  check_defined(op, gathered, "gathered");
  MGPU_CHECK(gathered.ndim() == 2 && gathered.size(1) % 2 == 1 && gathered.size(1) >= 3 &&
                 (gathered.dtype() == DType::f32 || gathered.dtype() == DType::f64),
             op, ": gathered is ", gathered.str(),
             ", expected f32 or f64 [W, 2C+1] (rows of mean, invstd, count)");
  const std::int64_t W = gathered.size(0), C = (gathered.size(1) - 1) / 2, width = 2 * C + 1;
  mean = Tensor::empty({C}, gathered.dtype(), gathered.device());
  var = Tensor::empty({C}, gathered.dtype(), gathered.device());
  invstd = Tensor::empty({C}, gathered.dtype(), gathered.device());
  // The world's count, on the host: the caller checks it and the backward divides by it.
  // (For CUDA this waits for the gathered rows; PyTorch synchronises here too.)
  const std::vector<double> rows = gathered.to(Device::cpu()).to_vector<double>();
  count = 0;
  for (std::int64_t r = 0; r < W; ++r) count += count_of(rows[r * width + 2 * C]);

  if (gathered.device().is_cuda()) {
    MGPU_IF_CUDA(detail::merge_batch_stats_cuda(gathered, eps, mean, var, invstd, W, C));
    return;
  }
  // Writes v into element c of a per-channel result in its dtype (f32 or f64).
  const auto put = [](Tensor& t, std::int64_t c, double v) {
    if (t.dtype() == DType::f64) {
      t.data<double>()[c] = v;
    } else {
      t.data<float>()[c] = static_cast<float>(v);
    }
  };
  for (std::int64_t c = 0; c < C; ++c) {
    double n = 0, avg = 0, m2 = 0;  // m2: sum of squared deviations from avg so far
    for (std::int64_t r = 0; r < W; ++r) {
      const double* row = rows.data() + r * width;
      const double n_r = row[2 * C];
      if (n_r < 1) continue;  // an empty batch: nothing to merge (PyTorch masks it out)
      const double is = row[C + c];
      const double var_r = 1.0 / (is * is) - eps;  // the rank's biased variance
      // Chan et al.'s pairwise update: the two groups' squared deviations, plus the
      // spread between their means weighted by n * n_r / (n + n_r).
      const double delta = row[c] - avg, total = n + n_r;
      m2 += var_r * n_r + delta * delta * n * n_r / total;
      avg += delta * n_r / total;
      n = total;
    }
    const double v = n > 0 ? m2 / n : 0.0;
    put(mean, c, avg);
    put(var, c, v);
    put(invstd, c, 1.0 / std::sqrt(v + eps));
  }
}

}  // namespace mgpu::parallel
