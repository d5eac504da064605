// GradScaler's kernels on the CPU (the CUDA twin is scaling_kernels.cu) and the scale update rule.
#include "mgpu/amp/scaling.h"

#include <cmath>

#include "amp_cuda.h"
#include "dispatch.h"

namespace mgpu::amp {

float inverse_scale(float scale) {
  return static_cast<float>(1.0 / static_cast<double>(scale));
}

namespace {

// The arithmetic type of a gradient element: float for f32/f16/bf16, double for f64
// (PyTorch's "opmath" type), so the multiply below rounds exactly as the CUDA kernel's.
template <typename T>
void check_and_unscale_cpu(Tensor& grad, float* found_inf, float inv_scale) {
  using C = mgpu::detail::compute_t<T>;
  T* g = grad.data<T>();
  const C inv = static_cast<C>(inv_scale);
  bool found = false;
  for (std::int64_t i = 0; i < grad.numel(); ++i) {
    const C v = mgpu::detail::to_compute(g[i]);
    // Step 1) check the scaled value: one inf or NaN anywhere means this step is skipped.
    if (!std::isfinite(v)) found = true;
    // Step 2) unscale in place (a multiply by 1 would change nothing: skip it).
    if (inv_scale != 1.f) g[i] = mgpu::detail::from_compute<T>(v * inv);
  }
  if (found) *found_inf = 1.f;
}

}  // namespace

void non_finite_check_and_unscale_(const std::vector<Tensor>& grads, Tensor& found_inf,
                                   float inv_scale) {
  check_defined("non_finite_check_and_unscale_", found_inf, "found_inf");
  MGPU_CHECK(found_inf.dtype() == DType::f32 && found_inf.numel() == 1,
             "non_finite_check_and_unscale_: found_inf is ", found_inf.str(),
             ", expected a one-element f32 tensor");
  for (const Tensor& g : grads) {
    check_defined("non_finite_check_and_unscale_", g, "gradient");
    MGPU_CHECK(is_floating(g.dtype()), "non_finite_check_and_unscale_: gradient ", g.str(),
               " is not floating point");
    MGPU_CHECK(g.device() == found_inf.device(), "non_finite_check_and_unscale_: gradient ",
               g.str(), " and found_inf ", found_inf.str(),
               " are on different devices (one found_inf per device)");
  }
  for (const Tensor& g : grads) {
    if (g.numel() == 0) continue;
    Tensor grad = g;  // a handle: the elements are changed in place
    if (grad.device().is_cuda()) {
      MGPU_IF_CUDA(detail::non_finite_check_and_unscale_cuda(grad, found_inf, inv_scale));
      continue;
    }
    mgpu::detail::dispatch_floating(grad.dtype(), "non_finite_check_and_unscale_", [&](auto tag) {
      check_and_unscale_cpu<decltype(tag)>(grad, found_inf.data<float>(), inv_scale);
    });
  }
}

}  // namespace mgpu::amp
