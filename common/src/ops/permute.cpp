// permute: the checks, the CPU loop over the output's elements, the dispatch to permute.cu.
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
  detail::dispatch_all(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* px = x.data<T>();
    T* py = y.data<T>();
    detail::parallel_for(0, y.numel(), detail::kGrainSize, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t o = begin; o < end; ++o) {
        // Output element o's coordinates, last dimension fastest, mapped to x's offset.
        std::int64_t rest = o, offset = 0;
        for (int i = n - 1; i >= 0; --i) {
          offset += (rest % g.out_size[i]) * g.in_stride[i];
          rest /= g.out_size[i];
        }
        py[o] = px[offset];
      }
    });
  });
  return y;
}

}  // namespace mgpu
