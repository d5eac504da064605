// CUDA twins of layernorm.cpp's and gelu.cpp's CPU loops.
#include "nn/transformer_kernels_cuda.h"
#include "ops/cuda_util.cuh"

namespace mgpu::nn::detail {
namespace {

// Statistics and weight gradients are accumulated in S: double for double, float otherwise
// (the CPU accumulates in double; the tests' per-dtype tolerances cover the difference).
template <typename T> struct StatsOf { using type = float; };
template <> struct StatsOf<double> { using type = double; };
template <typename T> using stats_t = typename StatsOf<T>::type;

unsigned row_blocks(std::int64_t rows) {
  return static_cast<unsigned>(std::min<std::int64_t>(rows, 65536));
}

// ---- LayerNorm forward: one block per row ------------------------------------------------
// The block's threads stride over the row's C values; two block reductions give the mean
// and then the sum of squared deviations (two passes, as on the CPU: no cancellation).
template <typename T>
__global__ void layer_norm_kernel(const T* x, const T* weight, const T* bias, double eps, T* y,
                                  stats_t<T>* mean, stats_t<T>* rstd, std::int64_t rows,
                                  std::int64_t C) {
  using S = stats_t<T>;
  for (std::int64_t r = blockIdx.x; r < rows; r += gridDim.x) {  // same trip count per block
    const T* xr = x + r * C;
    S sum = 0;
    for (std::int64_t c = threadIdx.x; c < C; c += blockDim.x) sum += static_cast<S>(to_compute(xr[c]));
    const S mu = block_reduce(sum, SumOp{}, S(0)) / static_cast<S>(C);
    S sq = 0;
    for (std::int64_t c = threadIdx.x; c < C; c += blockDim.x) {
      const S d = static_cast<S>(to_compute(xr[c])) - mu;
      sq += d * d;
    }
    const S var = block_reduce(sq, SumOp{}, S(0)) / static_cast<S>(C);
    const S rs = static_cast<S>(1) / sqrt(var + static_cast<S>(eps));
    if (threadIdx.x == 0) {
      mean[r] = mu;
      rstd[r] = rs;
    }
    T* yr = y + r * C;
    for (std::int64_t c = threadIdx.x; c < C; c += blockDim.x) {
      S v = (static_cast<S>(to_compute(xr[c])) - mu) * rs;
      if (weight) v *= static_cast<S>(to_compute(weight[c]));
      if (bias) v += static_cast<S>(to_compute(bias[c]));
      yr[c] = from_compute<T>(static_cast<compute_t<T>>(v));
    }
  }
}

// ---- LayerNorm backward ------------------------------------------------------------------
// dL/dx: one block per row, the two row means (of g and of g·x̂) by block reductions.
template <typename T>
__global__ void layer_norm_grad_input_kernel(const T* grad_out, const T* x, const stats_t<T>* mean,
                                             const stats_t<T>* rstd, const T* weight, T* grad_in,
                                             std::int64_t rows, std::int64_t C) {
  using S = stats_t<T>;
  for (std::int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* gr = grad_out + r * C;
    const T* xr = x + r * C;
    const S mu = mean[r], rs = rstd[r];
    S sum_g = 0, sum_gx = 0;
    for (std::int64_t c = threadIdx.x; c < C; c += blockDim.x) {
      const S g = static_cast<S>(to_compute(gr[c])) * (weight ? static_cast<S>(to_compute(weight[c])) : S(1));
      sum_g += g;
      sum_gx += g * (static_cast<S>(to_compute(xr[c])) - mu) * rs;
    }
    const S mean_g = block_reduce(sum_g, SumOp{}, S(0)) / static_cast<S>(C);
    const S mean_gx = block_reduce(sum_gx, SumOp{}, S(0)) / static_cast<S>(C);
    T* dr = grad_in + r * C;
    for (std::int64_t c = threadIdx.x; c < C; c += blockDim.x) {
      const S g = static_cast<S>(to_compute(gr[c])) * (weight ? static_cast<S>(to_compute(weight[c])) : S(1));
      const S xhat = (static_cast<S>(to_compute(xr[c])) - mu) * rs;
      dr[c] = from_compute<T>(static_cast<compute_t<T>>(rs * (g - mean_g - xhat * mean_gx)));
    }
  }
}

// dL/dweight and dL/dbias: column sums over the rows, in two passes, as ops' column sums
// (reductions.cu). Pass 1: a block of 32 x 8 threads takes 32 neighbouring columns (one
// coalesced load per row) and one chunk of rows, its 8 thread rows striding over the chunk;
// shared memory adds their 8 sums in a fixed order and the block writes one partial per
// column. Pass 2: one thread per column adds the chunks' partials in chunk order. No
// atomics, so the result does not change from run to run; and with the rows cut into
// chunks the whole GPU works (one thread per column walking every row kept 1-3 blocks busy).
constexpr int kColTile = 32, kColRows = 8;

template <typename T>
__global__ void layer_norm_grad_weight_partial_kernel(const T* grad_out, const T* x,
                                                      const stats_t<T>* mean,
                                                      const stats_t<T>* rstd, stats_t<T>* dw_part,
                                                      stats_t<T>* db_part, std::int64_t rows,
                                                      std::int64_t C, std::int64_t chunk) {
  using S = stats_t<T>;
  __shared__ S dw_s[kColRows][kColTile + 1], db_s[kColRows][kColTile + 1];
  const std::int64_t tiles = (C + kColTile - 1) / kColTile;
  const std::int64_t r0 = static_cast<std::int64_t>(blockIdx.y) * chunk;
  const std::int64_t r1 = r0 + chunk < rows ? r0 + chunk : rows;
  // Every thread of the block has the same tile, so all reach the __syncthreads together.
  for (std::int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const std::int64_t c = tile * kColTile + threadIdx.x;
    S dw = 0, db = 0;
    if (c < C)
      for (std::int64_t r = r0 + threadIdx.y; r < r1; r += kColRows) {
        const S g = static_cast<S>(to_compute(grad_out[r * C + c]));
        dw += g * (static_cast<S>(to_compute(x[r * C + c])) - mean[r]) * rstd[r];
        db += g;
      }
    dw_s[threadIdx.y][threadIdx.x] = dw;
    db_s[threadIdx.y][threadIdx.x] = db;
    __syncthreads();
    if (threadIdx.y == 0 && c < C) {
      for (int k = 1; k < kColRows; ++k) {
        dw += dw_s[k][threadIdx.x];
        db += db_s[k][threadIdx.x];
      }
      dw_part[static_cast<std::int64_t>(blockIdx.y) * C + c] = dw;
      db_part[static_cast<std::int64_t>(blockIdx.y) * C + c] = db;
    }
    __syncthreads();  // the tile is refilled for the next one
  }
}

// Pass 2 (also the embedding gradient's): out[c] = the sum over k of part[k·C + c], k in order.
template <typename A>
__global__ void sum_chunks_kernel(const A* part, A* out, std::int64_t chunks, std::int64_t C) {
  for (std::int64_t c = grid_start(); c < C; c += grid_stride()) {
    A acc = 0;
    for (std::int64_t k = 0; k < chunks; ++k) acc += part[k * C + c];
    out[c] = acc;
  }
}

// ---- GELU --------------------------------------------------------------------------------
// The constants in double, each converted to the compute type where it is used: a float
// constant would put float's rounding (about 1e-8) into f64 results, which the CPU twin
// (gelu.cpp) computes with these same double constants.
constexpr double kSqrt2OverPi = 0.7978845608028654;
constexpr double kCubic = 0.044715;

template <typename A>
__device__ __forceinline__ A gelu_value(A x) {
  const A t = tanh(A(kSqrt2OverPi) * (x + A(kCubic) * x * x * x));
  return A(0.5) * x * (A(1) + t);
}

template <typename A>
__device__ __forceinline__ A gelu_slope(A x) {
  const A t = tanh(A(kSqrt2OverPi) * (x + A(kCubic) * x * x * x));
  const A d_inner = A(kSqrt2OverPi) * (A(1) + A(3 * kCubic) * x * x);
  return A(0.5) * (A(1) + t) + A(0.5) * x * (A(1) - t * t) * d_inner;
}

template <typename T>
__global__ void gelu_kernel(const T* x, T* y, std::int64_t n) {
  for (std::int64_t i = grid_start(); i < n; i += grid_stride())
    y[i] = from_compute<T>(gelu_value(to_compute(x[i])));
}

template <typename T>
__global__ void gelu_backward_kernel(const T* grad_out, const T* x, T* grad_in, std::int64_t n) {
  for (std::int64_t i = grid_start(); i < n; i += grid_stride())
    grad_in[i] = from_compute<T>(to_compute(grad_out[i]) * gelu_slope(to_compute(x[i])));
}

template <typename T>
const T* optional_ptr(const Tensor& t) {
  return t.defined() ? device_ptr<T>(t) : nullptr;
}

}  // namespace

void layer_norm_cuda(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps,
                     Tensor& y, Tensor& mean, Tensor& rstd, std::int64_t rows, std::int64_t C) {
  cudaStream_t stream = launch_stream(x.device());
  dispatch_cuda_floating(x.dtype(), "layer_norm", [&](auto tag) {
    using T = decltype(tag);
    using S = stats_t<T>;
    layer_norm_kernel<T><<<row_blocks(rows), kBlock, 0, stream>>>(
        device_ptr<T>(x), optional_ptr<T>(weight), optional_ptr<T>(bias), eps, device_ptr<T>(y),
        device_ptr<S>(mean), device_ptr<S>(rstd), rows, C);
    MGPU_CUDA_CHECK_LAUNCH();
  });
}

void layer_norm_backward_cuda(const Tensor& grad_out, const Tensor& x, const Tensor& mean,
                              const Tensor& rstd, const Tensor& weight, Tensor& grad_in,
                              Tensor& grad_weight, Tensor& grad_bias, std::int64_t rows,
                              std::int64_t C) {
  cudaStream_t stream = launch_stream(x.device());
  dispatch_cuda_floating(x.dtype(), "layer_norm_backward", [&](auto tag) {
    using T = decltype(tag);
    using S = stats_t<T>;
    if (grad_in.defined()) {
      layer_norm_grad_input_kernel<T><<<row_blocks(rows), kBlock, 0, stream>>>(
          device_ptr<T>(grad_out), device_ptr<T>(x), device_ptr<S>(mean), device_ptr<S>(rstd),
          optional_ptr<T>(weight), device_ptr<T>(grad_in), rows, C);
      MGPU_CUDA_CHECK_LAUNCH();
    }
    if ((grad_weight.defined() || grad_bias.defined()) && C > 0) {
      // Chunks of rows: about 1024 blocks in all, at least 128 rows (16 per thread row) each.
      const std::int64_t tiles = (C + kColTile - 1) / kColTile;
      const std::int64_t by_gpu = (1024 + tiles - 1) / tiles, by_rows = (rows + 127) / 128;
      std::int64_t chunks = std::max<std::int64_t>(1, std::min(by_gpu, by_rows));
      const std::int64_t chunk = rows > 0 ? (rows + chunks - 1) / chunks : 0;
      if (rows > 0) chunks = (rows + chunk - 1) / chunk;  // no chunk left empty
      // The partials ([dw | db] x chunks x C) in a scratch tensor of the caching allocator:
      // freed here, reused only by work queued after this on the same stream.
      Tensor part = Tensor::empty({2, chunks, C}, dtype_of<S>::value, x.device());
      S* dw_part = device_ptr<S>(part);
      S* db_part = dw_part + chunks * C;
      const unsigned grid_x = static_cast<unsigned>(std::min<std::int64_t>(tiles, 1 << 20));
      layer_norm_grad_weight_partial_kernel<T>
          <<<dim3(grid_x, static_cast<unsigned>(chunks)), dim3(kColTile, kColRows), 0, stream>>>(
              device_ptr<T>(grad_out), device_ptr<T>(x), device_ptr<S>(mean), device_ptr<S>(rstd),
              dw_part, db_part, rows, C, chunk);
      MGPU_CUDA_CHECK_LAUNCH();
      if (grad_weight.defined()) {
        sum_chunks_kernel<S><<<grid_for(C), kBlock, 0, stream>>>(dw_part, device_ptr<S>(grad_weight),
                                                                 chunks, C);
        MGPU_CUDA_CHECK_LAUNCH();
      }
      if (grad_bias.defined()) {
        sum_chunks_kernel<S><<<grid_for(C), kBlock, 0, stream>>>(db_part, device_ptr<S>(grad_bias),
                                                                 chunks, C);
        MGPU_CUDA_CHECK_LAUNCH();
      }
    }
  });
}

void gelu_cuda(const Tensor& x, Tensor& y) {
  launch_grid_stride("gelu", x, [](auto tag) { return gelu_kernel<decltype(tag)>; }, x, y);
}

void gelu_backward_cuda(const Tensor& grad_out, const Tensor& x, Tensor& grad_in) {
  launch_grid_stride("gelu_backward", x,
                     [](auto tag) { return gelu_backward_kernel<decltype(tag)>; }, grad_out, x,
                     grad_in);
}

}  // namespace mgpu::nn::detail
