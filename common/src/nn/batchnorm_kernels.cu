// CUDA twins of batchnorm_kernels.cpp. The input is [N, C, S]; channel c's values sit at
// (n*C + c)*S + s: S contiguous values, then a jump of C*S to the next sample.
#include "mgpu/ops.h"
#include "nn/kernel_geometry.h"
#include "nn/kernels_cuda.h"
#include "ops/cuda_util.cuh"

namespace mgpu::nn::detail {

// ---- per-channel sums: several blocks per channel -------------------------------------
// The grid is (C, splits): block (c, b) takes values [b*chunk, min(count, (b+1)*chunk)) of
// channel c, numbered j = n*S + s (count = N*S; split_channels in kernel_geometry.h picks the
// chunk). Many blocks per channel keep the GPU busy when there are few channels and many
// values each (one block per channel left most SMs idle).
//
// walk_channel calls f(i) with the flat index i = (n*C + c)*S + s of each of this thread's
// values: j = begin + t, then blockDim.x further each time. (n, s) = (j / S, j % S) is found
// once per thread and then carried: a step of blockDim.x = jump_n*S + jump_s adds jump_n to n
// and jump_s to s, with one carry. No 64-bit division per element (a 64-bit div/mod is a
// long software sequence on the GPU), and it works for any S: with S = 1 (BatchNorm1d) a
// step crosses 256 samples, with S = 3000 it stays in one plane. Consecutive threads take
// consecutive s, so the reads are coalesced within each plane.
template <typename F>
__device__ __forceinline__ void walk_channel(std::int64_t begin, std::int64_t end, std::int64_t C,
                                             std::int64_t c, std::int64_t S, F f) {
  std::int64_t j = begin + threadIdx.x;
  if (j >= end) return;
  std::int64_t n = j / S, s = j - n * S;
  const std::int64_t jump_n = blockDim.x / S, jump_s = blockDim.x - jump_n * S;
  for (; j < end; j += blockDim.x) {
    f((n * C + c) * S + s);
    n += jump_n;
    s += jump_s;
    if (s >= S) {
      s -= S;
      ++n;
    }
  }
}

// The values of block (c, b): its range of channel c, and how many it holds.
struct BlockRange {
  std::int64_t begin, end;
};
__device__ __forceinline__ BlockRange block_range(std::int64_t count, std::int64_t chunk) {
  const std::int64_t begin = static_cast<std::int64_t>(blockIdx.y) * chunk;
  return {begin, begin + chunk < count ? begin + chunk : count};
}

// Mean and variance, two passes over the block's values: the sum gives the block's mean,
// then the squared deviations from it (stable for large means, unlike sum of squares). With
// one block per channel that is the channel's result. Otherwise each block leaves its sum
// and its sum of squared deviations (M2), and bn_stats_finish_kernel combines them.
template <typename T, typename A>
__global__ void bn_stats_kernel(const T* x, A* mean_out, A* var_out, A* part_sum, A* part_m2,
                                std::int64_t N, std::int64_t C, std::int64_t S,
                                std::int64_t chunk) {
  const std::int64_t c = blockIdx.x;
  const BlockRange r = block_range(N * S, chunk);
  const A held = static_cast<A>(r.end - r.begin);
  A sum = 0;
  walk_channel(r.begin, r.end, C, c, S,
               [&](std::int64_t i) { sum += static_cast<A>(to_compute(x[i])); });
  sum = block_reduce(sum, SumOp{}, A(0));
  const A mean = sum / held;
  A m2 = 0;
  walk_channel(r.begin, r.end, C, c, S, [&](std::int64_t i) {
    const A dev = static_cast<A>(to_compute(x[i])) - mean;
    m2 += dev * dev;
  });
  m2 = block_reduce(m2, SumOp{}, A(0));
  if (threadIdx.x != 0) return;
  if (gridDim.y == 1) {
    mean_out[c] = mean;
    var_out[c] = m2 / held;
  } else {
    part_sum[c * gridDim.y + blockIdx.y] = sum;
    part_m2[c * gridDim.y + blockIdx.y] = m2;
  }
}

// One thread per channel combines its blocks in order (so the result is the same on every
// run): the channel's mean from the sums, then Chan et al.'s pairwise update for M2, which
// adds to each block's M2 its count times the squared distance of its mean from the
// channel's: the exact M2 of the union, without a third pass over the data.
template <typename A>
__global__ void bn_stats_finish_kernel(const A* part_sum, const A* part_m2, A* mean_out,
                                       A* var_out, std::int64_t C, std::int64_t count,
                                       std::int64_t chunk, int splits) {
  for (std::int64_t c = grid_start(); c < C; c += grid_stride()) {
    const A* sums = part_sum + c * splits;
    const A* m2s = part_m2 + c * splits;
    A total = 0;
    for (int b = 0; b < splits; ++b) total += sums[b];
    const A mean = total / static_cast<A>(count);
    A m2 = 0;
    for (int b = 0; b < splits; ++b) {
      const std::int64_t left = count - b * chunk;
      const A held = static_cast<A>(left < chunk ? left : chunk);
      const A dev = sums[b] / held - mean;
      m2 += m2s[b] + held * dev * dev;
    }
    mean_out[c] = mean;
    var_out[c] = m2 / static_cast<A>(count);
  }
}

template <typename A>
__global__ void bn_invstd_kernel(const A* var, A* invstd, std::int64_t C, double eps) {
  for (std::int64_t c = grid_start(); c < C; c += grid_stride())
    invstd[c] = static_cast<A>(1.0 / sqrt(static_cast<double>(var[c]) + eps));
}

// Elementwise: one thread per element; its channel is (i / S) % C.
template <typename T, typename A>
__global__ void bn_apply_kernel(const T* x, const A* mean, const A* invstd, const T* weight,
                                const T* bias, T* y, std::int64_t total, std::int64_t C,
                                std::int64_t S) {
  for (std::int64_t i = grid_start(); i < total; i += grid_stride()) {
    const std::int64_t c = (i / S) % C;
    const A w = weight ? static_cast<A>(to_compute(weight[c])) : A(1);
    const A b = bias ? static_cast<A>(to_compute(bias[c])) : A(0);
    // mul_rn: the CPU's roundings exactly (nvcc would fuse xhat * w + b into one FMA).
    const A xhat = mul_rn(static_cast<A>(to_compute(x[i])) - mean[c], invstd[c]);
    y[i] = from_compute<T>(static_cast<compute_t<T>>(mul_rn(xhat, w) + b));
  }
}

// The backward's two sums, sum(dy) and sum(dy * (x - mean)), cut among blocks as in
// bn_stats_kernel; with several blocks per channel each leaves its two partial sums and
// bn_backward_finish_kernel adds them in order.
template <typename T, typename A>
__global__ void bn_backward_reduce_kernel(const T* g, const T* x, const A* mean, A* sum_dy,
                                          A* sum_dy_xmu, A* part_dy, A* part_dy_xmu,
                                          std::int64_t N, std::int64_t C, std::int64_t S,
                                          std::int64_t chunk) {
  const std::int64_t c = blockIdx.x;
  const BlockRange r = block_range(N * S, chunk);
  const A m = mean[c];
  A sdy = 0, sdyx = 0;
  walk_channel(r.begin, r.end, C, c, S, [&](std::int64_t i) {
    const A dy = static_cast<A>(to_compute(g[i]));
    sdy += dy;
    sdyx += dy * (static_cast<A>(to_compute(x[i])) - m);
  });
  sdy = block_reduce(sdy, SumOp{}, A(0));
  sdyx = block_reduce(sdyx, SumOp{}, A(0));
  if (threadIdx.x != 0) return;
  if (gridDim.y == 1) {
    sum_dy[c] = sdy;
    sum_dy_xmu[c] = sdyx;
  } else {
    part_dy[c * gridDim.y + blockIdx.y] = sdy;
    part_dy_xmu[c * gridDim.y + blockIdx.y] = sdyx;
  }
}

template <typename A>
__global__ void bn_backward_finish_kernel(const A* part_dy, const A* part_dy_xmu, A* sum_dy,
                                          A* sum_dy_xmu, std::int64_t C, int splits) {
  for (std::int64_t c = grid_start(); c < C; c += grid_stride()) {
    A sdy = 0, sdyx = 0;
    for (int b = 0; b < splits; ++b) {
      sdy += part_dy[c * splits + b];
      sdyx += part_dy_xmu[c * splits + b];
    }
    sum_dy[c] = sdy;
    sum_dy_xmu[c] = sdyx;
  }
}

template <typename T, typename A>
__global__ void bn_backward_apply_kernel(const T* g, const T* x, const A* mean, const A* invstd,
                                         const T* weight, const A* sum_dy, const A* sum_dy_xmu,
                                         A inv_count, T* dx, std::int64_t total, std::int64_t C,
                                         std::int64_t S) {
  for (std::int64_t i = grid_start(); i < total; i += grid_stride()) {
    const std::int64_t c = (i / S) % C;
    const A is = invstd[c];
    const A w = weight ? static_cast<A>(to_compute(weight[c])) : A(1);
    const A mean_dy = mul_rn(sum_dy[c], inv_count);  // feeds a subtraction: no FMA either
    const A proj = sum_dy_xmu[c] * inv_count * is * is;
    const A xmu = static_cast<A>(to_compute(x[i])) - mean[c];
    const A dy = static_cast<A>(to_compute(g[i]));
    // mul_rn keeps xmu * proj a rounding of its own, as on the CPU (no FMA into the subtraction).
    dx[i] = from_compute<T>(static_cast<compute_t<T>>((dy - mean_dy - mul_rn(xmu, proj)) * is * w));
  }
}

namespace {
/// Calls f(T, A) with T the device storage type and A the statistics type.
template <typename F>
void dispatch_bn_cuda(DType dtype, const char* op, F&& f) {
  dispatch_cuda_floating(dtype, op, [&](auto tag) {
    using T = decltype(tag);
    using A = compute_t<T>;  // float, or double for f64
    f(T{}, A{});
  });
}

template <typename T>
const T* optional_ptr(const Tensor& t) {
  return t.defined() ? device_ptr<T>(t) : nullptr;
}
}  // namespace

// Scratch for the blocks' partial results, [2, C * splits] in the statistics dtype, or an
// undefined tensor with one block per channel. From the caching allocator: it goes back to
// the cache when the launcher returns, and the stream runs the finishing kernel before
// anything queued later can reuse the block.
Tensor partials_for(const Tensor& per_channel, ChannelSplit split) {
  if (split.splits == 1) return Tensor();
  return Tensor::empty({2, per_channel.numel() * split.splits}, per_channel.dtype(),
                       per_channel.device());
}

template <typename A>
A* partial_ptr(const Tensor& partials, int row) {
  return partials.defined() ? device_ptr<A>(partials) + row * (partials.numel() / 2) : nullptr;
}

// The launch both per-channel reductions share: first(T{}, A{}, grid, stream, part0, part1,
// chunk) runs d.c x split.splits blocks; when a channel has more than one block they write
// partial sums to part0/part1 ([2, C * splits] scratch), and finish(A{}, stream, part0,
// part1, split) folds them into the outputs.
template <typename First, typename Finish>
void reduce_per_channel(const Tensor& x, const Tensor& per_channel, NCS d, const char* op,
                        First first, Finish finish) {
  const ChannelSplit split = split_channels(d.c, d.n * d.s);
  const Tensor partials = partials_for(per_channel, split);
  cudaStream_t stream = launch_stream(x.device());
  const dim3 grid(static_cast<unsigned>(d.c), static_cast<unsigned>(split.splits));
  dispatch_bn_cuda(x.dtype(), op, [&](auto tt, auto ta) {
    using A = decltype(ta);
    A* part0 = partial_ptr<A>(partials, 0);
    A* part1 = partial_ptr<A>(partials, 1);
    first(tt, ta, grid, stream, part0, part1, split.chunk);
    MGPU_CUDA_CHECK_LAUNCH();
    if (split.splits == 1) return;
    finish(ta, stream, part0, part1, split);
    MGPU_CUDA_CHECK_LAUNCH();
  });
}

void bn_stats_cuda(const Tensor& x, NCS d, Tensor& mean, Tensor& var) {
  const std::int64_t count = d.n * d.s;
  if (d.c == 0 || count == 0) return;  // a grid of zero blocks is an invalid launch
  reduce_per_channel(
      x, mean, d, "batch_norm_stats",
      [&](auto tt, auto ta, dim3 grid, cudaStream_t stream, auto* part0, auto* part1,
          std::int64_t chunk) {
        using T = decltype(tt);
        using A = decltype(ta);
        bn_stats_kernel<T, A><<<grid, kBlock, 0, stream>>>(device_ptr<T>(x), device_ptr<A>(mean),
                                                           device_ptr<A>(var), part0, part1, d.n,
                                                           d.c, d.s, chunk);
      },
      [&](auto ta, cudaStream_t stream, auto* part0, auto* part1, ChannelSplit split) {
        using A = decltype(ta);
        bn_stats_finish_kernel<A><<<grid_for(d.c), kBlock, 0, stream>>>(
            part0, part1, device_ptr<A>(mean), device_ptr<A>(var), d.c, count, split.chunk,
            static_cast<int>(split.splits));
      });
}

void bn_invstd_cuda(const Tensor& var, double eps, Tensor& invstd) {
  cudaStream_t stream = launch_stream(var.device());
  const std::int64_t C = var.numel();
  if (var.dtype() == DType::f64) {
    bn_invstd_kernel<double><<<grid_for(C), kBlock, 0, stream>>>(
        device_ptr<double>(var), device_ptr<double>(invstd), C, eps);
  } else {
    bn_invstd_kernel<float><<<grid_for(C), kBlock, 0, stream>>>(
        device_ptr<float>(var), device_ptr<float>(invstd), C, eps);
  }
  MGPU_CUDA_CHECK_LAUNCH();
}

void bn_apply_cuda(const Tensor& x, const Tensor& mean, const Tensor& invstd,
                   const Tensor& weight, const Tensor& bias, Tensor& y, NCS d) {
  cudaStream_t stream = launch_stream(x.device());
  dispatch_bn_cuda(x.dtype(), "batch_norm_apply", [&](auto tt, auto ta) {
    using T = decltype(tt);
    using A = decltype(ta);
    bn_apply_kernel<T, A><<<grid_for(y.numel()), kBlock, 0, stream>>>(
        device_ptr<T>(x), device_ptr<A>(mean), device_ptr<A>(invstd), optional_ptr<T>(weight),
        optional_ptr<T>(bias), device_ptr<T>(y), y.numel(), d.c, d.s);
    MGPU_CUDA_CHECK_LAUNCH();
  });
}

void bn_backward_reduce_cuda(const Tensor& grad_out, const Tensor& x, const Tensor& mean,
                             Tensor& sum_dy, Tensor& sum_dy_xmu, NCS d) {
  const std::int64_t count = d.n * d.s;
  if (d.c == 0) return;
  if (count == 0) {  // no values: both sums are zero, as on the CPU
    fill_(sum_dy, 0.0);
    fill_(sum_dy_xmu, 0.0);
    return;
  }
  reduce_per_channel(
      x, sum_dy, d, "batch_norm_backward_reduce",
      [&](auto tt, auto ta, dim3 grid, cudaStream_t stream, auto* part0, auto* part1,
          std::int64_t chunk) {
        using T = decltype(tt);
        using A = decltype(ta);
        bn_backward_reduce_kernel<T, A><<<grid, kBlock, 0, stream>>>(
            device_ptr<T>(grad_out), device_ptr<T>(x), device_ptr<A>(mean), device_ptr<A>(sum_dy),
            device_ptr<A>(sum_dy_xmu), part0, part1, d.n, d.c, d.s, chunk);
      },
      [&](auto ta, cudaStream_t stream, auto* part0, auto* part1, ChannelSplit split) {
        using A = decltype(ta);
        bn_backward_finish_kernel<A><<<grid_for(d.c), kBlock, 0, stream>>>(
            part0, part1, device_ptr<A>(sum_dy), device_ptr<A>(sum_dy_xmu), d.c,
            static_cast<int>(split.splits));
      });
}

void bn_backward_apply_cuda(const Tensor& grad_out, const Tensor& x, const Tensor& mean,
                            const Tensor& invstd, const Tensor& weight, const Tensor& sum_dy,
                            const Tensor& sum_dy_xmu, std::int64_t count, Tensor& grad_in,
                            NCS d) {
  cudaStream_t stream = launch_stream(x.device());
  dispatch_bn_cuda(x.dtype(), "batch_norm_backward_apply", [&](auto tt, auto ta) {
    using T = decltype(tt);
    using A = decltype(ta);
    bn_backward_apply_kernel<T, A><<<grid_for(grad_in.numel()), kBlock, 0, stream>>>(
        device_ptr<T>(grad_out), device_ptr<T>(x), device_ptr<A>(mean), device_ptr<A>(invstd),
        optional_ptr<T>(weight), device_ptr<A>(sum_dy), device_ptr<A>(sum_dy_xmu),
        A(1) / static_cast<A>(count), device_ptr<T>(grad_in), grad_in.numel(), d.c, d.s);
    MGPU_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace mgpu::nn::detail
