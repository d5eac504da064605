// im2col / col2im / transpose_inner on the CPU, and the dispatch to their CUDA twins
// (im2col.cu); and the per-image im2col/col2im of Conv2d's CPU path (im2col_image.h). The CPU's col2im scatters (cache-friendly for one core); the CUDA kernel
// gathers (no atomics); both add each pixel's terms in the same order. The CPU loops
// share rows (im2col), images (col2im) or matrices (transpose_inner) among the library's
// threads: each output is computed by one of them in a fixed order, so the thread count
// never changes a result.
#include <algorithm>
#include <type_traits>
#include <vector>

#include "dispatch.h"
#include "im2col_image.h"
#include "mgpu/nn/functional.h"
#include "parallel_for.h"
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

/// Tasks of `each` values' work per chunk: at least kGrainSize values.
std::int64_t grain_for(std::int64_t each) {
  return mgpu::detail::kGrainSize / std::max<std::int64_t>(each, 1) + 1;
}

template <typename T>
void im2col_cpu(const T* x, T* cols, const ConvGeometry& g) {
  const std::int64_t K = g.kernel, Ho = g.out_height(), Wo = g.out_width();
  const std::int64_t ncols = g.cols(), plane = g.height * g.width;
  // A task fills the Wo rows of one output line (n, oh).
  mgpu::detail::parallel_for(0, g.batch * Ho, grain_for(Wo * ncols), [&](std::int64_t l0, std::int64_t l1) {
    for (std::int64_t line = l0; line < l1; ++line) {
      const std::int64_t n = line / Ho, oh = line % Ho;
      for (std::int64_t ow = 0; ow < Wo; ++ow) {
        T* row = cols + ((n * Ho + oh) * Wo + ow) * ncols;
        // Top-left corner of the patch sits at (oh*stride - padding, ow*stride - padding).
        const std::int64_t h0 = oh * g.stride - g.padding, w0 = ow * g.stride - g.padding;
        for (std::int64_t c = 0; c < g.channels; ++c) {
          const T* image = x + (n * g.channels + c) * plane;
          for (std::int64_t kh = 0; kh < K; ++kh) {
            T* dst = row + (c * K + kh) * K;
            const std::int64_t ih = h0 + kh;
            if (ih < 0 || ih >= g.height) {
              for (std::int64_t kw = 0; kw < K; ++kw) dst[kw] = T{};
              continue;
            }
            const T* src = image + ih * g.width;
            for (std::int64_t kw = 0; kw < K; ++kw) {
              const std::int64_t iw = w0 + kw;
              dst[kw] = iw >= 0 && iw < g.width ? src[iw] : T{};
            }
          }
        }
      }
    }
  });
}

template <typename T>
void col2im_cpu(const T* cols, T* x, const ConvGeometry& g) {
  using A = mgpu::detail::compute_t<T>;
  const std::int64_t K = g.kernel, Ho = g.out_height(), Wo = g.out_width();
  const std::int64_t ncols = g.cols(), plane = g.height * g.width;
  // Scatter: walk the unrolled rows in memory order and add each entry back onto the pixel
  // it was copied from. Every pixel thus receives its terms in increasing (oh, ow) order;
  // the CUDA kernel gathers in that same order, so both give the same floats. An image's
  // pixels only receive terms from its own rows: a task folds whole images.
  mgpu::detail::parallel_for(0, g.batch, grain_for(Ho * Wo * ncols), [&](std::int64_t n0, std::int64_t n1) {
    // Accumulate straight into x when it holds the compute type; 16-bit types go through
    // a float buffer of one image (one rounding at the end, as on the GPU).
    const std::int64_t image_size = g.channels * plane;
    std::vector<A> buffer;
    if constexpr (!std::is_same_v<T, A>) buffer.resize(static_cast<std::size_t>(image_size));
    for (std::int64_t n = n0; n < n1; ++n) {
      A* acc;
      if constexpr (std::is_same_v<T, A>) {
        acc = x + n * image_size;
      } else {
        acc = buffer.data();
      }
      std::fill(acc, acc + image_size, A(0));
      for (std::int64_t oh = 0; oh < Ho; ++oh)
        for (std::int64_t ow = 0; ow < Wo; ++ow) {
          const T* row = cols + ((n * Ho + oh) * Wo + ow) * ncols;
          const std::int64_t h0 = oh * g.stride - g.padding, w0 = ow * g.stride - g.padding;
          for (std::int64_t c = 0; c < g.channels; ++c) {
            A* image = acc + c * plane;
            for (std::int64_t kh = 0; kh < K; ++kh) {
              const std::int64_t ih = h0 + kh;
              if (ih < 0 || ih >= g.height) continue;  // that entry was padding
              const T* src = row + (c * K + kh) * K;
              A* dst = image + ih * g.width;
              for (std::int64_t kw = 0; kw < K; ++kw) {
                const std::int64_t iw = w0 + kw;
                if (iw >= 0 && iw < g.width) dst[iw] += mgpu::detail::to_compute(src[kw]);
              }
            }
          }
        }
      if constexpr (!std::is_same_v<T, A>)
        for (std::int64_t i = 0; i < image_size; ++i)
          x[n * image_size + i] = mgpu::detail::from_compute<T>(acc[i]);
    }
  });
}

template <typename T>
void transpose_inner_cpu(const T* x, T* y, std::int64_t B, std::int64_t M, std::int64_t K) {
  mgpu::detail::parallel_for(0, B, grain_for(M * K), [&](std::int64_t b0, std::int64_t b1) {
    for (std::int64_t b = b0; b < b1; ++b) {
      const T* src = x + b * M * K;
      T* dst = y + b * M * K;
      for (std::int64_t m = 0; m < M; ++m)
        for (std::int64_t k = 0; k < K; ++k) dst[k * M + m] = src[m * K + k];
    }
  });
}

/// The output columns ow whose input column ow*stride - padding + kw falls inside the
/// image: [lo, hi). Those on either side read the zero padding.
struct ValidColumns {
  std::int64_t lo, hi;
};
ValidColumns valid_columns(const ConvGeometry& g, std::int64_t kw) {
  const std::int64_t Wo = g.out_width();
  // iw >= 0  <=>  ow >= (padding - kw) / stride, rounded up.
  const std::int64_t first = g.padding - kw;
  std::int64_t lo = first <= 0 ? 0 : (first + g.stride - 1) / g.stride;
  // iw <= W - 1  <=>  ow <= (W - 1 + padding - kw) / stride, rounded down.
  const std::int64_t last = g.width - 1 + g.padding - kw;
  std::int64_t hi = last < 0 ? 0 : last / g.stride + 1;
  lo = std::min(lo, Wo);
  hi = std::clamp(hi, lo, Wo);
  return {lo, hi};
}

template <typename T>
void im2col_image_cpu(const T* x, T* cols, const ConvGeometry& g) {
  const std::int64_t K = g.kernel, Ho = g.out_height(), Wo = g.out_width();
  for (std::int64_t c = 0; c < g.channels; ++c)
    for (std::int64_t kh = 0; kh < K; ++kh)
      for (std::int64_t kw = 0; kw < K; ++kw) {
        // Row (c, kh, kw): the weight's tap at (kh, kw) sees pixel (oh*s - p + kh, ow*s - p + kw).
        T* row = cols + ((c * K + kh) * K + kw) * Ho * Wo;
        const ValidColumns v = valid_columns(g, kw);
        for (std::int64_t oh = 0; oh < Ho; ++oh) {
          T* dst = row + oh * Wo;
          const std::int64_t ih = oh * g.stride - g.padding + kh;
          if (ih < 0 || ih >= g.height) {
            std::fill(dst, dst + Wo, T{});
            continue;
          }
          const T* line = x + (c * g.height + ih) * g.width;
          const std::int64_t shift = kw - g.padding;  // iw = ow * stride + shift
          std::fill(dst, dst + v.lo, T{});
          for (std::int64_t ow = v.lo; ow < v.hi; ++ow) dst[ow] = line[ow * g.stride + shift];
          std::fill(dst + v.hi, dst + Wo, T{});
        }
      }
}

template <typename T>
void col2im_image_cpu(const T* cols, T* x, const ConvGeometry& g) {
  using A = mgpu::detail::compute_t<T>;
  const std::int64_t K = g.kernel, Ho = g.out_height(), Wo = g.out_width();
  const std::int64_t image_size = g.channels * g.height * g.width;
  // Accumulate straight into x when it holds the compute type; 16-bit types go through a
  // float buffer (one rounding at the end).
  std::vector<A> buffer;
  A* acc;
  if constexpr (std::is_same_v<T, A>) {
    acc = x;
  } else {
    buffer.resize(static_cast<std::size_t>(image_size));
    acc = buffer.data();
  }
  std::fill(acc, acc + image_size, A(0));
  for (std::int64_t c = 0; c < g.channels; ++c)
    for (std::int64_t kh = 0; kh < K; ++kh)
      for (std::int64_t kw = 0; kw < K; ++kw) {
        const T* row = cols + ((c * K + kh) * K + kw) * Ho * Wo;
        const ValidColumns v = valid_columns(g, kw);
        for (std::int64_t oh = 0; oh < Ho; ++oh) {
          const std::int64_t ih = oh * g.stride - g.padding + kh;
          if (ih < 0 || ih >= g.height) continue;  // those entries were padding
          const T* src = row + oh * Wo;
          A* line = acc + (c * g.height + ih) * g.width;
          const std::int64_t shift = kw - g.padding;  // iw = ow * stride + shift
          for (std::int64_t ow = v.lo; ow < v.hi; ++ow)
            line[ow * g.stride + shift] += mgpu::detail::to_compute(src[ow]);
        }
      }
  if constexpr (!std::is_same_v<T, A>)
    for (std::int64_t i = 0; i < image_size; ++i) x[i] = mgpu::detail::from_compute<T>(acc[i]);
}

}  // namespace

namespace detail {

void check_conv_geometry(const char* op, const ConvGeometry& g) { check_geometry(op, g); }

void im2col_image(const Tensor& x, Tensor& cols, const ConvGeometry& g) {
  mgpu::detail::dispatch_floating(x.dtype(), "im2col_image", [&](auto tag) {
    using T = decltype(tag);
    im2col_image_cpu<T>(x.data<T>(), cols.data<T>(), g);
  });
}

void col2im_image(const Tensor& cols, Tensor& x, const ConvGeometry& g) {
  mgpu::detail::dispatch_floating(cols.dtype(), "col2im_image", [&](auto tag) {
    using T = decltype(tag);
    col2im_image_cpu<T>(cols.data<T>(), x.data<T>(), g);
  });
}

}  // namespace detail

Tensor im2col(const Tensor& x, const ConvGeometry& g) {
  check_defined("im2col", x, "input");
  check_geometry("im2col", g);
  MGPU_CHECK(x.shape() == Shape({g.batch, g.channels, g.height, g.width}), "im2col: input is ",
             x.str(), " but the geometry says [", g.batch, ", ", g.channels, ", ", g.height,
             ", ", g.width, "]");
  Tensor cols = Tensor::empty({g.rows(), g.cols()}, x.dtype(), x.device());
  if (cols.numel() == 0) return cols;
  mgpu::detail::cpu_or_cuda(
      x, "im2col", [&] { MGPU_IF_CUDA(detail::im2col_cuda(x, cols, g)); },
      [&](auto tag) {
        using T = decltype(tag);
        im2col_cpu<T>(x.data<T>(), cols.data<T>(), g);
      });
  return cols;
}

Tensor col2im(const Tensor& cols, const ConvGeometry& g) {
  check_defined("col2im", cols, "cols");
  check_geometry("col2im", g);
  MGPU_CHECK(cols.shape() == Shape({g.rows(), g.cols()}), "col2im: cols is ", cols.str(),
             " but the geometry needs [", g.rows(), ", ", g.cols(), "]");
  Tensor x = Tensor::empty({g.batch, g.channels, g.height, g.width}, cols.dtype(), cols.device());
  if (x.numel() == 0) return x;
  mgpu::detail::cpu_or_cuda(
      cols, "col2im", [&] { MGPU_IF_CUDA(detail::col2im_cuda(cols, x, g)); },
      [&](auto tag) {
        using T = decltype(tag);
        col2im_cpu<T>(cols.data<T>(), x.data<T>(), g);
      });
  return x;
}

Tensor transpose_inner(const Tensor& x) {
  check_defined("transpose_inner", x, "input");
  MGPU_CHECK(x.ndim() == 3, "transpose_inner: input is ", x.str(), ", expected [B, M, K]");
  const std::int64_t B = x.size(0), M = x.size(1), K = x.size(2);
  Tensor y = Tensor::empty({B, K, M}, x.dtype(), x.device());
  if (y.numel() == 0) return y;
  mgpu::detail::cpu_or_cuda(
      x, "transpose_inner", [&] { MGPU_IF_CUDA(detail::transpose_inner_cuda(x, y, B, M, K)); },
      [&](auto tag) {
        using T = decltype(tag);
        transpose_inner_cpu<T>(x.data<T>(), y.data<T>(), B, M, K);
      });
  return y;
}

}  // namespace mgpu::nn
