// Private: im2col and col2im of one image on the CPU, with the patches as columns: the
// unrolled matrix is [C*k*k, H_out*W_out], row (c, kh, kw), column (oh, ow). Conv2d's CPU
// path runs them per image between its per-image matrix products (conv2d.cpp), while the
// image is still in the cache. (The batched im2col/col2im of functional.h, patches as rows,
// are the GPU path's and have CUDA twins.)
#pragma once

#include "mgpu/nn/functional.h"
#include "mgpu/tensor.h"

namespace mgpu::nn::detail {

/// Throws unless the k x k kernel fits the padded image (stride >= 1, padding >= 0); `op`
/// names the caller in the message.
void check_conv_geometry(const char* op, const ConvGeometry& g);
/// cols [C*k*k, P] <- the patches of image x [C, H, W] (both contiguous, x's dtype).
void im2col_image(const Tensor& x, Tensor& cols, const ConvGeometry& g);
/// x [C, H, W] <- the sum, for every pixel, of the entries of cols [C*k*k, P] copied from it:
/// the adjoint of im2col_image. Each pixel adds its terms in (kh, kw, oh, ow) order.
void col2im_image(const Tensor& cols, Tensor& x, const ConvGeometry& g);

}  // namespace mgpu::nn::detail
