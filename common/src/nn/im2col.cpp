// im2col / col2im / transpose_inner on the CPU, and the dispatch to their CUDA twins
// (im2col.cu). col2im gathers (each image element sums the patch entries that copied it)
// rather than scatters, exactly as the CUDA kernel does, so both add in the same order.
#include <vector>

#include "dispatch.h"
#include "mgpu/nn/functional.h"
#ifdef MGPU_WITH_CUDA
#include "nn/kernels_cuda.h"
#endif

namespace mgpu::nn {

namespace {

void check_geometry(const char* op, const ConvGeometry& g) {
  MGPU_CHECK(g.kernel >= 1 && g.stride >= 1 && g.padding >= 0, op, ": kernel ", g.kernel,
             ", stride ", g.stride, ", padding ", g.padding,
             " (need kernel >= 1, stride >= 1, padding >= 0)");
  MGPU_CHECK(g.height + 2 * g.padding >= g.kernel && g.width + 2 * g.padding >= g.kernel, op,
             ": the ", g.kernel, "x", g.kernel, " kernel does not fit the padded ", g.height,
             "x", g.width, " image (padding ", g.padding, ")");
}

template <typename T>
void im2col_cpu(const T* x, T* cols, const ConvGeometry& g) {
  const std::int64_t K = g.kernel, Ho = g.out_height(), Wo = g.out_width();
  const std::int64_t ncols = g.cols();
  for (std::int64_t n = 0; n < g.batch; ++n)
    for (std::int64_t oh = 0; oh < Ho; ++oh)
      for (std::int64_t ow = 0; ow < Wo; ++ow) {
        T* row = cols + ((n * Ho + oh) * Wo + ow) * ncols;
        for (std::int64_t c = 0; c < g.channels; ++c)
          for (std::int64_t kh = 0; kh < K; ++kh) {
            // Top-left corner of the patch sits at (oh*stride - padding, ow*stride - padding).
            const std::int64_t ih = oh * g.stride - g.padding + kh;
            for (std::int64_t kw = 0; kw < K; ++kw) {
              const std::int64_t iw = ow * g.stride - g.padding + kw;
              const bool inside = ih >= 0 && ih < g.height && iw >= 0 && iw < g.width;
              row[(c * K + kh) * K + kw] =
                  inside ? x[((n * g.channels + c) * g.height + ih) * g.width + iw] : T{};
            }
          }
      }
}

template <typename T>
void col2im_cpu(const T* cols, T* x, const ConvGeometry& g) {
  using A = typename mgpu::detail::compute_type<T>::type;
  const std::int64_t K = g.kernel, Ho = g.out_height(), Wo = g.out_width();
  const std::int64_t ncols = g.cols();
  for (std::int64_t n = 0; n < g.batch; ++n)
    for (std::int64_t c = 0; c < g.channels; ++c)
      for (std::int64_t h = 0; h < g.height; ++h)
        for (std::int64_t w = 0; w < g.width; ++w) {
          // Element (h, w) sits at kernel offset (kh, kw) of the patch of output (oh, ow)
          // when oh*stride - padding + kh == h: walk kh and keep the oh that are whole.
          A acc = 0;
          for (std::int64_t kh = 0; kh < K; ++kh) {
            const std::int64_t th = h + g.padding - kh;
            if (th < 0 || th % g.stride != 0 || th / g.stride >= Ho) continue;
            const std::int64_t oh = th / g.stride;
            for (std::int64_t kw = 0; kw < K; ++kw) {
              const std::int64_t tw = w + g.padding - kw;
              if (tw < 0 || tw % g.stride != 0 || tw / g.stride >= Wo) continue;
              const std::int64_t ow = tw / g.stride;
              acc += mgpu::detail::to_compute(
                  cols[((n * Ho + oh) * Wo + ow) * ncols + (c * K + kh) * K + kw]);
            }
          }
          x[((n * g.channels + c) * g.height + h) * g.width + w] =
              mgpu::detail::from_compute<T>(acc);
        }
}

template <typename T>
void transpose_inner_cpu(const T* x, T* y, std::int64_t B, std::int64_t M, std::int64_t K) {
  for (std::int64_t b = 0; b < B; ++b) {
    const T* src = x + b * M * K;
    T* dst = y + b * M * K;
    for (std::int64_t m = 0; m < M; ++m)
      for (std::int64_t k = 0; k < K; ++k) dst[k * M + m] = src[m * K + k];
  }
}

}  // namespace

Tensor im2col(const Tensor& x, const ConvGeometry& g) {
  check_defined("im2col", x, "input");
  check_geometry("im2col", g);
  MGPU_CHECK(x.shape() == Shape({g.batch, g.channels, g.height, g.width}), "im2col: input is ",
             x.str(), " but the geometry says [", g.batch, ", ", g.channels, ", ", g.height,
             ", ", g.width, "]");
  Tensor cols = Tensor::empty({g.rows(), g.cols()}, x.dtype(), x.device());
  if (cols.numel() == 0) return cols;
  if (x.device().is_cuda()) {
    MGPU_IF_CUDA(detail::im2col_cuda(x, cols, g));
  } else {
    mgpu::detail::dispatch_floating(x.dtype(), "im2col", [&](auto tag) {
      using T = decltype(tag);
      im2col_cpu<T>(x.data<T>(), cols.data<T>(), g);
    });
  }
  return cols;
}

Tensor col2im(const Tensor& cols, const ConvGeometry& g) {
  check_defined("col2im", cols, "cols");
  check_geometry("col2im", g);
  MGPU_CHECK(cols.shape() == Shape({g.rows(), g.cols()}), "col2im: cols is ", cols.str(),
             " but the geometry needs [", g.rows(), ", ", g.cols(), "]");
  Tensor x = Tensor::empty({g.batch, g.channels, g.height, g.width}, cols.dtype(), cols.device());
  if (x.numel() == 0) return x;
  if (cols.device().is_cuda()) {
    MGPU_IF_CUDA(detail::col2im_cuda(cols, x, g));
  } else {
    mgpu::detail::dispatch_floating(cols.dtype(), "col2im", [&](auto tag) {
      using T = decltype(tag);
      col2im_cpu<T>(cols.data<T>(), x.data<T>(), g);
    });
  }
  return x;
}

Tensor transpose_inner(const Tensor& x) {
  check_defined("transpose_inner", x, "input");
  MGPU_CHECK(x.ndim() == 3, "transpose_inner: input is ", x.str(), ", expected [B, M, K]");
  const std::int64_t B = x.size(0), M = x.size(1), K = x.size(2);
  Tensor y = Tensor::empty({B, K, M}, x.dtype(), x.device());
  if (y.numel() == 0) return y;
  if (x.device().is_cuda()) {
    MGPU_IF_CUDA(detail::transpose_inner_cuda(x, y, B, M, K));
  } else {
    mgpu::detail::dispatch_floating(x.dtype(), "transpose_inner", [&](auto tag) {
      using T = decltype(tag);
      transpose_inner_cpu<T>(x.data<T>(), y.data<T>(), B, M, K);
    });
  }
  return y;
}

}  // namespace mgpu::nn
