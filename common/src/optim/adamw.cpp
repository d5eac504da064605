// AdamW: the state bookkeeping, and the fused update's CPU loop (adamw.cu is its twin).
#include "mgpu/optim/adamw.h"

#include <cmath>
#include <sstream>

#include "dispatch.h"
#include "mgpu/ops.h"
#ifdef MGPU_WITH_CUDA
#include "optim/adamw_cuda.h"
#endif

namespace mgpu::optim {

AdamW::AdamW(std::vector<nn::Parameter*> params, AdamWOptions options)
    : Optimizer(std::move(params), options.lr), options_(options) {
  MGPU_CHECK(options.beta1 >= 0 && options.beta1 < 1 && options.beta2 >= 0 &&
                 options.beta2 < 1 && options.eps > 0 && options.weight_decay >= 0,
             describe(), ": need 0 <= beta < 1, eps > 0, weight_decay >= 0");
}

std::string AdamW::describe() const {
  std::ostringstream os;
  os << "AdamW(lr=" << lr() << ", betas=(" << options_.beta1 << ", " << options_.beta2
     << "), eps=" << options_.eps << ", weight_decay=" << options_.weight_decay << ")";
  return os.str();
}

std::vector<std::string> AdamW::state_keys() const { return {"exp_avg", "exp_avg_sq", "step"}; }

void AdamW::step() {
  for (nn::Parameter* p : params()) {
    if (!p->requires_grad()) continue;
    Tensor* m = find_state(*p, "exp_avg");
    if (m == nullptr) {
      const Tensor& v = p->value;
      set_state(*p, "exp_avg", Tensor::zeros(v.shape(), v.dtype(), v.device()));
      set_state(*p, "exp_avg_sq", Tensor::zeros(v.shape(), v.dtype(), v.device()));
      set_state(*p, "step", Tensor::zeros({}, DType::i64));
      m = find_state(*p, "exp_avg");
    }
    Tensor* v = find_state(*p, "exp_avg_sq");
    Tensor* t = find_state(*p, "step");
    MGPU_CHECK(v != nullptr && t != nullptr, describe(), ": state of '", p->name(),
               "' is incomplete (exp_avg without exp_avg_sq or step)");
    const std::int64_t step = ++t->data<std::int64_t>()[0];
    const double bc1 = 1.0 - std::pow(options_.beta1, static_cast<double>(step));
    const double bc2 = 1.0 - std::pow(options_.beta2, static_cast<double>(step));
    adamw_update_(p->value, p->grad, *m, *v, lr(), options_.beta1, options_.beta2, options_.eps,
                  options_.weight_decay, bc1, bc2);
  }
}

void adamw_update_(Tensor& p, const Tensor& g, Tensor& m, Tensor& v, double lr, double beta1,
                   double beta2, double eps, double weight_decay, double bias_correction1,
                   double bias_correction2) {
  const char* op = "adamw_update_";
  check_defined(op, p, "param");
  for (const Tensor* t : {&g, static_cast<const Tensor*>(&m), static_cast<const Tensor*>(&v)}) {
    check_same_shape(op, p, *t);
    check_same_dtype(op, p, *t);
    check_same_device(op, p, *t);
  }
  if (p.numel() == 0) return;
  if (p.device().is_cuda()) {
    MGPU_IF_CUDA(detail::adamw_update_cuda(p, g, m, v, lr, beta1, beta2, eps, weight_decay,
                                           bias_correction1, bias_correction2));
    return;
  }
  mgpu::detail::dispatch_floating(p.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    using A = mgpu::detail::compute_t<T>;
    T* pp = p.data<T>();
    const T* pg = g.data<T>();
    T* pm = m.data<T>();
    T* pv = v.data<T>();
    const A step_size = static_cast<A>(lr / bias_correction1);
    const A sqrt_bc2 = static_cast<A>(std::sqrt(bias_correction2));
    const A decay = static_cast<A>(1.0 - lr * weight_decay);
    const A b1 = static_cast<A>(beta1), b2 = static_cast<A>(beta2);
    for (std::int64_t i = 0; i < p.numel(); ++i) {
      const A gi = mgpu::detail::to_compute(pg[i]);
      const A mi = b1 * mgpu::detail::to_compute(pm[i]) + (A(1) - b1) * gi;
      const A vi = b2 * mgpu::detail::to_compute(pv[i]) + (A(1) - b2) * gi * gi;
      const A denom = std::sqrt(vi) / sqrt_bc2 + static_cast<A>(eps);
      const A pi = mgpu::detail::to_compute(pp[i]) * decay - step_size * mi / denom;
      pm[i] = mgpu::detail::from_compute<T>(mi);
      pv[i] = mgpu::detail::from_compute<T>(vi);
      pp[i] = mgpu::detail::from_compute<T>(pi);
    }
  });
}

}  // namespace mgpu::optim
