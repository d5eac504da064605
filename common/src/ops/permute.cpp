// permute: the checks, the CPU loop over the output's elements, the dispatch to permute.cu.
#include <algorithm>
#include <vector>

#include "dispatch.h"
#include "mgpu/ops.h"
#include "op_checks.h"
#include "ops/permute_cuda.h"
#include "parallel_for.h"

namespace mgpu {

Tensor permute(const Tensor& x, const std::vector<int>& dims) {
  detail::check_defined_operand("permute", "x", x);
  const int n = x.ndim();
  MGPU_CHECK(n <= detail::PermuteGeometry::kMaxDims, "permute: x is ", x.str(), "; at most ",
             detail::PermuteGeometry::kMaxDims, " dimensions");
  MGPU_CHECK(static_cast<int>(dims.size()) == n, "permute: ", dims.size(), " dims for ", x.str(),
             "; give one per dimension");
  std::vector<bool> used(static_cast<std::size_t>(n), false);
  for (int d : dims) {
    MGPU_CHECK(d >= 0 && d < n && !used[static_cast<std::size_t>(d)], "permute: dims must list "
               "each of 0..", n - 1, " once, got dimension ", d, " for ", x.str());
    used[static_cast<std::size_t>(d)] = true;
  }
  // Row-major strides of x, then the output's view of them.
  std::vector<std::int64_t> stride(static_cast<std::size_t>(n), 1);
  for (int d = n - 2; d >= 0; --d) stride[static_cast<std::size_t>(d)] = stride[static_cast<std::size_t>(d) + 1] * x.size(d + 1);
  detail::PermuteGeometry g;
  g.ndim = n;
  Shape out_shape(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    g.out_size[i] = x.size(dims[static_cast<std::size_t>(i)]);
    g.in_stride[i] = stride[static_cast<std::size_t>(dims[static_cast<std::size_t>(i)])];
    out_shape[static_cast<std::size_t>(i)] = g.out_size[i];
  }
  Tensor y = Tensor::empty(out_shape, x.dtype(), x.device());
  if (y.numel() == 0) return y;
  if (x.device().is_cuda()) {
    MGPU_IF_CUDA(detail::permute_cuda(x, y, g));
    return y;
  }
  // When the last dimension stays last (attention's permutes), each run of out_size[n-1]
  // elements is contiguous in both tensors: the index arithmetic is paid once per run.
  const std::int64_t run = g.in_stride[n - 1] == 1 ? g.out_size[n - 1] : 1;
  const int outer = run > 1 ? n - 1 : n;
  detail::dispatch_all(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* px = x.data<T>();
    T* py = y.data<T>();
    const std::int64_t runs = y.numel() / run;
    detail::parallel_for(0, runs, std::max<std::int64_t>(1, detail::kGrainSize / run),
                         [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t r = begin; r < end; ++r) {
        // Run r's coordinates in the output, last dimension fastest, mapped to x's offset.
        std::int64_t rest = r, offset = 0;
        for (int i = outer - 1; i >= 0; --i) {
          offset += (rest % g.out_size[i]) * g.in_stride[i];
          rest /= g.out_size[i];
        }
        std::copy(px + offset, px + offset + run, py + r * run);
      }
    });
  });
  return y;
}

}  // namespace mgpu
