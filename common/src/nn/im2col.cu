// CUDA twins of im2col.cpp: im2col, col2im, transpose_inner.
#include "nn/kernel_geometry.h"
#include "nn/kernels_cuda.h"
#include "ops/cuda_util.cuh"

namespace mgpu::nn::detail {

// One thread per element of the unrolled matrix cols [rows, C*K*K]. Consecutive threads
// write consecutive columns of a row, so the writes are coalesced; the reads hit the
// K consecutive pixels of a patch row, which the cache serves well.
template <typename T>
__global__ void im2col_kernel(const T* x, T* cols, ConvGeometry g, std::int64_t total) {
  const std::int64_t K = g.kernel, Ho = g.out_height(), Wo = g.out_width();
  const std::int64_t ncols = g.channels * K * K;
  for (std::int64_t i = grid_start(); i < total; i += grid_stride()) {
    // Split the flat index: row = (n, oh, ow) of the output, col = (c, kh, kw) of the patch.
    const std::int64_t row = i / ncols, col = i % ncols;
    const std::int64_t ow = row % Wo, oh = (row / Wo) % Ho, n = row / (Wo * Ho);
    const std::int64_t kw = col % K, kh = (col / K) % K, c = col / (K * K);
    const std::int64_t ih = oh * g.stride - g.padding + kh;
    const std::int64_t iw = ow * g.stride - g.padding + kw;
    const bool inside = ih >= 0 && ih < g.height && iw >= 0 && iw < g.width;
    cols[i] = inside ? x[((n * g.channels + c) * g.height + ih) * g.width + iw]
                     : from_compute<T>(compute_t<T>(0));
  }
}

// One thread per image element: it sums the patch entries that were copied from it.
// Gathering needs no atomics and is deterministic. kh and kw run downwards so that the
// output positions (oh, ow) come upwards: the order in which the CPU's scatter adds them.
template <typename T>
__global__ void col2im_kernel(const T* cols, T* x, ConvGeometry g, std::int64_t total) {
  const std::int64_t K = g.kernel, Ho = g.out_height(), Wo = g.out_width();
  const std::int64_t ncols = g.channels * K * K;
  for (std::int64_t i = grid_start(); i < total; i += grid_stride()) {
    const std::int64_t w = i % g.width, h = (i / g.width) % g.height;
    const std::int64_t c = (i / (g.width * g.height)) % g.channels;
    const std::int64_t n = i / (g.width * g.height * g.channels);
    compute_t<T> acc = 0;
    for (std::int64_t kh = K - 1; kh >= 0; --kh) {
      // (h, w) is entry (kh, kw) of the patch of output (oh, ow) iff oh*stride - pad + kh == h.
      const std::int64_t th = h + g.padding - kh;
      if (th < 0 || th % g.stride != 0 || th / g.stride >= Ho) continue;
      const std::int64_t oh = th / g.stride;
      for (std::int64_t kw = K - 1; kw >= 0; --kw) {
        const std::int64_t tw = w + g.padding - kw;
        if (tw < 0 || tw % g.stride != 0 || tw / g.stride >= Wo) continue;
        const std::int64_t ow = tw / g.stride;
        acc += to_compute(cols[((n * Ho + oh) * Wo + ow) * ncols + (c * K + kh) * K + kw]);
      }
    }
    x[i] = from_compute<T>(acc);
  }
}

// [B, M, K] -> [B, K, M] through a 32x32 tile in shared memory: a warp reads 32
// consecutive k of one row m (coalesced) and later writes 32 consecutive m of one row k
// (coalesced). The +1 column of padding puts the 32 elements of a tile column in 32
// different shared-memory banks, so the transposed read has no bank conflicts.
constexpr int kTile = 32;
constexpr int kTileRows = 8;  // a 32x8 block walks the tile in 4 steps

template <typename T>
__global__ void transpose_inner_kernel(const T* x, T* y, std::int64_t B, std::int64_t M,
                                       std::int64_t K) {
  __shared__ T tile[kTile][kTile + 1];
  const std::int64_t k0 = static_cast<std::int64_t>(blockIdx.x) * kTile;
  const std::int64_t m0 = static_cast<std::int64_t>(blockIdx.y) * kTile;
  for (std::int64_t b = blockIdx.z; b < B; b += gridDim.z) {
    const T* src = x + b * M * K;
    T* dst = y + b * M * K;
    for (int r = threadIdx.y; r < kTile; r += kTileRows) {
      const std::int64_t m = m0 + r, k = k0 + threadIdx.x;
      if (m < M && k < K) tile[r][threadIdx.x] = src[m * K + k];
    }
    __syncthreads();
    for (int r = threadIdx.y; r < kTile; r += kTileRows) {
      const std::int64_t k = k0 + r, m = m0 + threadIdx.x;
      if (m < M && k < K) dst[k * M + m] = tile[threadIdx.x][r];
    }
    __syncthreads();  // the tile is refilled for the next b
  }
}

// One thread per element of the output (cols for im2col, x for col2im): x and cols share
// a device and a dtype.
void im2col_cuda(const Tensor& x, Tensor& cols, const ConvGeometry& g) {
  launch_grid_stride("im2col", cols, [](auto tag) { return im2col_kernel<decltype(tag)>; }, x,
                     cols, g);
}

void col2im_cuda(const Tensor& cols, Tensor& x, const ConvGeometry& g) {
  launch_grid_stride("col2im", x, [](auto tag) { return col2im_kernel<decltype(tag)>; }, cols,
                     x, g);
}

void transpose_inner_cuda(const Tensor& x, Tensor& y, std::int64_t batch, std::int64_t m,
                          std::int64_t k) {
  cudaStream_t stream = launch_stream(x.device());
  const dim3 block(kTile, kTileRows);
  // Checked in 64 bits before the narrowing to unsigned (kernel_geometry.h).
  const TransposeGrid tiles = transpose_grid(batch, m, k, x.str());
  const dim3 grid(tiles.x, tiles.y, tiles.z);
  dispatch_cuda_floating(x.dtype(), "transpose_inner", [&](auto tag) {
    using T = decltype(tag);
    transpose_inner_kernel<T><<<grid, block, 0, stream>>>(device_ptr<T>(x), device_ptr<T>(y),
                                                          batch, m, k);
    MGPU_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace mgpu::nn::detail
