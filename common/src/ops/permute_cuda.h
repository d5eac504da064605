// Private: the CUDA half of permute.cpp.
#pragma once

#include <cstdint>

#include "mgpu/tensor.h"

namespace mgpu::detail {

/// The geometry of a permuted copy: for each output dimension its size and the stride (in
/// elements) of the input dimension it comes from.
struct PermuteGeometry {
  static constexpr int kMaxDims = 6;
  int ndim = 0;
  std::int64_t out_size[kMaxDims] = {};
  std::int64_t in_stride[kMaxDims] = {};
};

void permute_cuda(const Tensor& x, Tensor& y, const PermuteGeometry& g);

}  // namespace mgpu::detail
