// Conv2d: im2col, one GEMM, and a transpose back to NCHW; backward the same in reverse.
// Inside an amp::Autocast region the GEMMs run in f16/bf16 (autocast.h).
#include "mgpu/nn/conv2d.h"

#include <cmath>
#include <sstream>

#include "layer_util.h"
#include "mgpu/amp/autocast.h"
#include "mgpu/nn/init.h"
#include "mgpu/ops.h"

namespace mgpu::nn {

Conv2d::Conv2d(std::int64_t in_channels, std::int64_t out_channels, std::int64_t kernel_size,
               std::int64_t stride, std::int64_t padding, bool bias)
    : in_ch_(in_channels),
      out_ch_(out_channels),
      kernel_(kernel_size),
      stride_(stride),
      padding_(padding),
      has_bias_(bias) {
  MGPU_CHECK(in_ch_ > 0 && out_ch_ > 0 && kernel_ > 0 && stride_ > 0 && padding_ >= 0,
             "Conv2d(", in_ch_, ", ", out_ch_, ", kernel ", kernel_, ", stride ", stride_,
             ", padding ", padding_, "): channels, kernel and stride must be positive");
  // PyTorch's default: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) with fan_in = C_in * k * k.
  const double bound = 1.0 / std::sqrt(static_cast<double>(in_ch_ * kernel_ * kernel_));
  Tensor w = Tensor::empty({out_ch_, in_ch_, kernel_, kernel_});
  uniform_init_(w, bound);
  weight_ = register_parameter("weight", w);
  if (has_bias_) {
    Tensor b = Tensor::empty({out_ch_});
    uniform_init_(b, bound);
    bias_ = register_parameter("bias", b);
  }
}

Parameter& Conv2d::bias() {
  MGPU_CHECK(has_bias_, describe(), ": this layer was built without a bias");
  return parameter_at(bias_);
}

std::string Conv2d::describe() const {
  std::ostringstream os;
  os << "Conv2d(in=" << in_ch_ << ", out=" << out_ch_ << ", kernel=" << kernel_
     << ", stride=" << stride_ << ", padding=" << padding_
     << ", bias=" << (has_bias_ ? "true" : "false") << ")";
  return os.str();
}

Tensor Conv2d::forward(const Tensor& x) {
  const Tensor& w = weight().value;
  // The precision policy (amp/autocast.h): f32 here, f16/bf16 inside an Autocast region.
  const DType compute = amp::gemm_dtype(w);
  amp::check_gemm_input(describe(), "input", x, w, compute);
  MGPU_CHECK(x.ndim() == 4 && x.size(1) == in_ch_, describe(), ": input is ", x.str(),
             ", expected [N, ", in_ch_, ", H, W]");
  ConvGeometry g;
  g.batch = x.size(0);
  g.channels = in_ch_;
  g.height = x.size(2);
  g.width = x.size(3);
  g.kernel = kernel_;
  g.stride = stride_;
  g.padding = padding_;
  const std::int64_t positions = g.out_height() * g.out_width();

  // Step 1) unroll: one row per output position, one column per weight of a filter (in the
  // compute dtype: casting x first casts 1/(k*k) as many elements as casting the columns).
  Tensor cols = im2col(amp::cast_operand(x, compute), g);
  // Step 2) every filter against every row at once: [N*P, CKK] x [CKK, C_out], accumulated
  // and returned in the parameters' dtype.
  const Tensor wc = amp::cast_weight(w, compute).reshape({out_ch_, g.cols()});
  Tensor out = matmul(cols, wc, false, /*trans_b=*/true, w.dtype());
  if (has_bias_) add_rowwise_(out, bias().value);
  // Step 3) rows are (n, position) with channels last (NHWC); put channels before positions.
  Tensor y = transpose_inner(out.reshape({g.batch, positions, out_ch_}))
                 .reshape({g.batch, out_ch_, g.out_height(), g.out_width()});
  if (is_training()) saved_.push(describe(), Saved{cols, wc, g});
  return y;
}

Tensor Conv2d::backward(const Tensor& grad_out) {
  Saved s = saved_.pop(describe());
  const ConvGeometry& g = s.geometry;
  const std::int64_t positions = g.out_height() * g.out_width();
  MGPU_CHECK(grad_out.shape() == Shape({g.batch, out_ch_, g.out_height(), g.out_width()}),
             describe(), ": grad_out is ", grad_out.str(), ", expected [", g.batch, ", ",
             out_ch_, ", ", g.out_height(), ", ", g.out_width(), "]");
  // Back to the GEMM's layout: [N, C_out, P] -> [N, P, C_out] -> [N*P, C_out].
  Tensor grad_rows =
      transpose_inner(grad_out.reshape({g.batch, out_ch_, positions})).reshape({g.rows(), out_ch_});
  Parameter& w = weight();
  // The GEMMs run in the forward's dtype: the incoming gradient is cast to it too.
  const Tensor gc = amp::cast_operand(grad_rows, s.cols.dtype());
  // dL/dW = grad_rows^T cols: [C_out, N*P] x [N*P, CKK], added into the gradient.
  if (w.requires_grad()) {
    Tensor grad_w = w.grad.reshape({out_ch_, g.cols()});
    matmul_out(grad_w, gc, s.cols, /*trans_a=*/true, false, 1.0, 1.0);
    w.notify_grad_ready();
  }
  if (has_bias_) detail::accumulate_grad(bias(), sum(grad_rows, 0));
  // dL/dcols = grad_rows W, then fold the patches back onto the image.
  Tensor grad_cols = matmul(gc, s.w, false, false, w.value.dtype());
  return col2im(grad_cols, g);
}

std::shared_ptr<Module> Conv2d::clone() const {
  auto copy = std::shared_ptr<Conv2d>(new Conv2d(*this));
  copy->saved_.clear();
  return copy;
}

}  // namespace mgpu::nn
