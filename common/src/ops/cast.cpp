// cast / cast_: dtype conversion between any two dtypes. Core's Tensor::to(dtype),
// clone() and to_vector<T>() are built on these, so the CPU path serves every dtype.
#include "convert.h"
#include "dispatch.h"
#include "mgpu/ops.h"
#include "op_checks.h"
#include "ops_cuda.h"
#include "parallel_for.h"

namespace mgpu {

void cast_(Tensor& dst, const Tensor& src) {
  detail::check_defined_operand("cast_", "dst", dst);
  detail::check_defined_operand("cast_", "src", src);
  MGPU_CHECK(dst.device() == src.device(), "cast_: device mismatch: dst is ", dst.str(),
             ", src is ", src.str(), " (cast on one device, then copy_ across)");
  MGPU_CHECK(dst.numel() == src.numel(), "cast_: element count mismatch: dst is ", dst.str(),
             ", src is ", src.str());
  if (src.numel() == 0) return;
  if (src.device().is_cuda()) {
    MGPU_IF_CUDA(detail::cast_cuda(dst, src));
    return;
  }
  // Two nested dispatches: Src and Dst each range over all six dtypes.
  detail::dispatch_all(src.dtype(), [&](auto src_tag) {
    using Src = decltype(src_tag);
    detail::dispatch_all(dst.dtype(), [&](auto dst_tag) {
      using Dst = decltype(dst_tag);
      const Src* in = src.data<Src>();
      Dst* out = dst.data<Dst>();
      detail::parallel_for(0, src.numel(), detail::kGrainSize, [&](std::int64_t b, std::int64_t e) {
        for (std::int64_t i = b; i < e; ++i) out[i] = detail::convert<Dst>(in[i]);
      });
    });
  });
}

Tensor cast(const Tensor& src, DType dtype) {
  detail::check_defined_operand("cast", "src", src);
  Tensor out = Tensor::empty(src.shape(), dtype, src.device());
  cast_(out, src);
  return out;
}

}  // namespace mgpu
