// Conv2d: im2col, then the matrix products. On the CPU, per image: its patches as columns,
// and one product that writes the image's output straight in NCHW; on the GPU one im2col
// and one product for the whole batch and a transpose back to NCHW (one cuBLAS call beats
// hundreds of small ones there). Backward the same in reverse. Inside an amp::Autocast region the GEMMs run in f16/bf16 (autocast.h).
#include "mgpu/nn/conv2d.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "dispatch.h"
#include "im2col_image.h"
#include "layer_util.h"
#include "mgpu/nn/autocast.h"
#include "mgpu/nn/init.h"
#include "mgpu/ops.h"
#include "parallel_for.h"

namespace mgpu::nn {

namespace {

/// Images whose weight-gradient terms are added into one partial sum: the batch is cut
/// into groups of this many images whatever the thread count, so the sums are too.
constexpr std::int64_t kImagesPerPartial = 16;

/// Image n's block of a batched tensor, as a [rows, cols] matrix (a view).
Tensor image_block(const Tensor& t, std::int64_t n, std::int64_t rows, std::int64_t cols) {
  return t.view(n * rows * cols, {rows, cols});
}

/// Images per task, so that a task holds about a BLAS block's work (parallel_for.h).
std::int64_t images_per_task(std::int64_t multiply_adds_per_image) {
  return (std::int64_t{1} << 22) / std::max<std::int64_t>(multiply_adds_per_image, 1) + 1;
}

/// y[c, p] += bias[c] for one image's [C, P] output (the GEMM's rows are channels here).
void add_channel_bias(Tensor& y, const Tensor& bias) {
  mgpu::detail::dispatch_floating(y.dtype(), "Conv2d bias", [&](auto tag) {
    using T = decltype(tag);
    const std::int64_t channels = y.size(0), positions = y.size(1);
    T* py = y.data<T>();
    const T* pb = bias.data<T>();
    for (std::int64_t c = 0; c < channels; ++c) {
      const auto b = mgpu::detail::to_compute(pb[c]);
      T* row = py + c * positions;
      for (std::int64_t p = 0; p < positions; ++p)
        row[p] = mgpu::detail::from_compute<T>(mgpu::detail::to_compute(row[p]) + b);
    }
  });
}

}  // namespace

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
  // The precision policy (nn/autocast.h): f32 here, f16/bf16 inside an Autocast region.
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

  const Tensor wc = amp::cast_weight(w, compute).reshape({out_ch_, g.cols()});
  const Tensor xc = amp::cast_operand(x, compute);
  Tensor cols, y;
  if (x.device().is_cuda()) {
    // Step 1) unroll: one row per output position, one column per weight of a filter (in the
    // compute dtype: casting x first casts 1/(k*k) as many elements as casting the columns).
    cols = im2col(xc, g);
    // Step 2) every filter against every row at once: [N*P, CKK] x [CKK, C_out], accumulated
    // and returned in the parameters' dtype.
    Tensor out = matmul(cols, wc, false, /*trans_b=*/true, w.dtype());
    if (has_bias_) add_rowwise_(out, bias().value);
    // Step 3) rows are (n, position) with channels last (NHWC); put channels before positions.
    y = transpose_inner(out.reshape({g.batch, positions, out_ch_}))
            .reshape({g.batch, out_ch_, g.out_height(), g.out_width()});
  } else {
    // Per image, while it is in the cache: Step 1) unroll it, one column per output position
    // ([CKK, P]); Step 2) y_n [C_out, P] = W [C_out, CKK] x cols_n [CKK, P], which is the
    // image's output in NCHW already. Images are shared among the threads.
    detail::check_conv_geometry("im2col", g);
    cols = Tensor::empty({g.batch, g.cols(), positions}, compute, x.device());
    y = Tensor::empty({g.batch, out_ch_, g.out_height(), g.out_width()}, w.dtype(), x.device());
    const Tensor b = has_bias_ ? bias().value : Tensor();
    const std::int64_t image = in_ch_ * g.height * g.width;
    const std::int64_t per_task = images_per_task(out_ch_ * positions * g.cols());
    mgpu::detail::parallel_for(0, g.batch, per_task, [&](std::int64_t n0, std::int64_t n1) {
      for (std::int64_t n = n0; n < n1; ++n) {
        Tensor cols_n = image_block(cols, n, g.cols(), positions);
        detail::im2col_image(xc.view(n * image, {in_ch_, g.height, g.width}), cols_n, g);
        Tensor y_n = image_block(y, n, out_ch_, positions);
        matmul_out(y_n, wc, cols_n, false, false);
        if (has_bias_) add_channel_bias(y_n, b);
      }
    });
  }
  if (is_training()) saved_.push(describe(), Saved{cols, wc, g});
  return y;
}

Tensor Conv2d::backward(const Tensor& grad_out) {
  Saved s = saved_.pop(describe());
  const ConvGeometry& g = s.geometry;
  MGPU_CHECK(grad_out.shape() == Shape({g.batch, out_ch_, g.out_height(), g.out_width()}),
             describe(), ": grad_out is ", grad_out.str(), ", expected [", g.batch, ", ",
             out_ch_, ", ", g.out_height(), ", ", g.out_width(), "]");
  return grad_out.device().is_cuda() ? backward_batched(s, grad_out) : backward_per_image(s, grad_out);
}

// The GPU: back to the GEMM's layout, then one product per gradient for the whole batch.
Tensor Conv2d::backward_batched(const Saved& s, const Tensor& grad_out) {
  const ConvGeometry& g = s.geometry;
  const std::int64_t positions = g.out_height() * g.out_width();
  // [N, C_out, P] -> [N, P, C_out] -> [N*P, C_out].
  Tensor grad_rows =
      transpose_inner(grad_out.reshape({g.batch, out_ch_, positions})).reshape({g.rows(), out_ch_});
  Parameter& w = weight();
  // The GEMMs run in the forward's dtype: the incoming gradient is cast to it too.
  const Tensor gc = amp::cast_operand(grad_rows, s.cols.dtype());
  // dL/dW = grad_rows^T cols: [C_out, N*P] x [N*P, CKK], added into the gradient.
  // The bias's gradient is announced before the weight's, in PyTorch's order (DDP's rebuilt
  // buckets follow the order gradients arrive in).
  if (has_bias_) detail::accumulate_grad(bias(), sum(grad_rows, 0));
  if (w.requires_grad()) {
    Tensor grad_w = w.grad.reshape({out_ch_, g.cols()});
    matmul_out(grad_w, gc, s.cols, /*trans_a=*/true, false, 1.0, 1.0);
    w.notify_grad_ready();
  }
  if (!input_requires_grad()) return Tensor();  // x is data: no gradient for it
  // dL/dcols = grad_rows W, then fold the patches back onto the image.
  Tensor grad_cols = matmul(gc, s.w, false, false, w.value.dtype());
  return col2im(grad_cols, g);
}

// The CPU: grad_out is already each image's [C_out, P] matrix; per image, the products and
// the fold back onto the image (col2im) while that image's columns are in the cache.
Tensor Conv2d::backward_per_image(const Saved& s, const Tensor& grad_out) {
  const ConvGeometry& g = s.geometry;
  const std::int64_t positions = g.out_height() * g.out_width(), ckk = g.cols();
  const std::int64_t image = in_ch_ * g.height * g.width;
  Parameter& w = weight();
  // The GEMMs run in the forward's dtype: the incoming gradient is cast to it too.
  const Tensor gc = amp::cast_operand(grad_out, s.cols.dtype());
  const bool weight_grad = w.requires_grad();
  // dL/dW = sum over images of grad_n [C_out, P] x cols_n^T [P, CKK]. Each group of
  // kImagesPerPartial images adds its terms into a partial sum of its own, in image order;
  // the partial sums are then added in group order. Fixed groups: the same bits on any
  // number of threads.
  const std::int64_t groups = mgpu::detail::num_blocks(g.batch, kImagesPerPartial);
  Tensor partials = weight_grad ? Tensor::empty({groups, out_ch_ * ckk}, w.grad.dtype(), w.grad.device())
                                : Tensor();
  const bool input_grad = input_requires_grad();  // false when x is data
  Tensor grad_x = input_grad ? Tensor::empty({g.batch, in_ch_, g.height, g.width}, w.value.dtype(),
                                             grad_out.device())
                             : Tensor();
  const std::int64_t per_task = images_per_task(2 * out_ch_ * positions * ckk);
  mgpu::detail::parallel_for(0, groups, std::max<std::int64_t>(1, per_task / kImagesPerPartial),
                             [&](std::int64_t g0, std::int64_t g1) {
    // dL/dcols_n = W^T [CKK, C_out] x grad_n [C_out, P]: one image's at a time, then folded.
    Tensor grad_cols =
        input_grad ? Tensor::empty({ckk, positions}, w.value.dtype(), grad_out.device()) : Tensor();
    for (std::int64_t group = g0; group < g1; ++group) {
      Tensor partial = weight_grad ? image_block(partials, group, out_ch_, ckk) : Tensor();
      const std::int64_t first = group * kImagesPerPartial;
      for (std::int64_t n = first; n < std::min(g.batch, first + kImagesPerPartial); ++n) {
        const Tensor grad_n = image_block(gc, n, out_ch_, positions);
        if (weight_grad)
          matmul_out(partial, grad_n, image_block(s.cols, n, ckk, positions), false,
                     /*trans_b=*/true, 1.0, n == first ? 0.0 : 1.0);
        if (!input_grad) continue;
        matmul_out(grad_cols, s.w, grad_n, /*trans_a=*/true, false);
        Tensor grad_x_n = grad_x.view(n * image, {in_ch_, g.height, g.width});
        detail::col2im_image(grad_cols, grad_x_n, g);
      }
    }
  });
  if (has_bias_) {  // the bias first, in PyTorch's order
    // Per channel: over each image's positions (contiguous rows), then over the images.
    const Tensor per_image = sum(grad_out.reshape({g.batch, out_ch_, positions}), 2);
    detail::accumulate_grad(bias(), sum(per_image, 0));
  }
  if (weight_grad) detail::accumulate_grad(w, sum(partials, 0).reshape(w.grad.shape()));
  return grad_x;
}

}  // namespace mgpu::nn
