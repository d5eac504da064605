// CUDA twins of layernorm.cpp's, gelu.cpp's and embedding.cpp's CPU loops.
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

// ---- Embedding ---------------------------------------------------------------------------
// The lookup: one thread per output element, consecutive threads on consecutive columns.
template <typename T>
__global__ void embedding_kernel(const std::int64_t* ids, const T* weight, T* out,
                                 std::int64_t C, std::int64_t total) {
  for (std::int64_t i = grid_start(); i < total; i += grid_stride())
    out[i] = weight[ids[i / C] * C + i % C];
}

// The gradient, deterministic without atomics (PyTorch's CUDA embedding backward sorts the
// ids for the same reason). The host groups the positions by the row they update (in
// position order within a row) and cuts each row's list into segments of at most kSegment
// positions. Pass 1: each segment's sum per column. Pass 2: each touched row adds its
// segments' sums in order, in the compute type, then once into the table's gradient.
constexpr std::int64_t kSegment = 32;
constexpr int kColumnThreads = 128;

template <typename T>
__global__ void embedding_segment_sums_kernel(const std::int64_t* order,
                                              const std::int64_t* seg_begin, const T* grad_out,
                                              compute_t<T>* part, std::int64_t segments,
                                              std::int64_t C) {
  for (std::int64_t seg = blockIdx.y; seg < segments; seg += gridDim.y)
    for (std::int64_t c = grid_start(); c < C; c += grid_stride()) {
      compute_t<T> acc = 0;
      for (std::int64_t p = seg_begin[seg]; p < seg_begin[seg + 1]; ++p)
        acc += to_compute(grad_out[order[p] * C + c]);
      part[seg * C + c] = acc;
    }
}

template <typename T>
__global__ void embedding_row_sums_kernel(const std::int64_t* touched, const std::int64_t* row_seg,
                                          const compute_t<T>* part, T* grad_weight,
                                          std::int64_t n_touched, std::int64_t C) {
  for (std::int64_t u = blockIdx.y; u < n_touched; u += gridDim.y)
    for (std::int64_t c = grid_start(); c < C; c += grid_stride()) {
      compute_t<T> acc = 0;
      for (std::int64_t s = row_seg[u]; s < row_seg[u + 1]; ++s) acc += part[s * C + c];
      T& dst = grad_weight[touched[u] * C + c];
      dst = from_compute<T>(to_compute(dst) + acc);
    }
}

// The host's plan for the two passes, in one i64 array (one copy to the GPU):
// [order: N positions by row][seg_begin: S + 1 offsets into order][touched: U rows]
// [row_seg: U + 1 offsets into the segments].
struct SegmentPlan {
  std::vector<std::int64_t> packed;
  std::int64_t n = 0, segments = 0, touched = 0;
};

SegmentPlan plan_segments(const std::vector<std::int64_t>& ids, std::int64_t V) {
  const auto N = static_cast<std::int64_t>(ids.size());
  std::vector<std::int64_t> start(static_cast<std::size_t>(V + 1), 0);
  for (std::int64_t id : ids) ++start[static_cast<std::size_t>(id + 1)];
  for (std::int64_t v = 0; v < V; ++v) start[static_cast<std::size_t>(v + 1)] += start[static_cast<std::size_t>(v)];
  std::vector<std::int64_t> order(static_cast<std::size_t>(N)), cursor(start.begin(), start.end() - 1);
  for (std::int64_t n = 0; n < N; ++n) order[static_cast<std::size_t>(cursor[static_cast<std::size_t>(ids[static_cast<std::size_t>(n)])]++)] = n;
  std::vector<std::int64_t> seg_begin, touched, row_seg;
  for (std::int64_t v = 0; v < V; ++v) {
    const std::int64_t b = start[static_cast<std::size_t>(v)], e = start[static_cast<std::size_t>(v + 1)];
    if (b == e) continue;
    touched.push_back(v);
    row_seg.push_back(static_cast<std::int64_t>(seg_begin.size()));
    for (std::int64_t p = b; p < e; p += kSegment) seg_begin.push_back(p);
  }
  row_seg.push_back(static_cast<std::int64_t>(seg_begin.size()));
  SegmentPlan plan;
  plan.n = N;
  plan.segments = static_cast<std::int64_t>(seg_begin.size());
  plan.touched = static_cast<std::int64_t>(touched.size());
  seg_begin.push_back(N);
  plan.packed = std::move(order);
  for (const auto* part : {&seg_begin, &touched, &row_seg})
    plan.packed.insert(plan.packed.end(), part->begin(), part->end());
  return plan;
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

void embedding_cuda(const Tensor& ids, const Tensor& weight, Tensor& out, std::int64_t C) {
  cudaStream_t stream = launch_stream(weight.device());
  const std::int64_t total = out.numel();
  dispatch_cuda_floating(weight.dtype(), "embedding", [&](auto tag) {
    using T = decltype(tag);
    embedding_kernel<T><<<grid_for(total), kBlock, 0, stream>>>(
        device_ptr<std::int64_t>(ids), device_ptr<T>(weight), device_ptr<T>(out), C, total);
    MGPU_CUDA_CHECK_LAUNCH();
  });
}

void embedding_backward_cuda(const std::vector<std::int64_t>& ids, const Tensor& grad_out,
                             Tensor& grad_weight, std::int64_t V, std::int64_t C) {
  if (ids.empty() || C == 0) return;
  cudaStream_t stream = launch_stream(grad_weight.device());
  const SegmentPlan plan = plan_segments(ids, V);
  const Tensor routes = Tensor::from_vector(plan.packed, {static_cast<std::int64_t>(plan.packed.size())},
                                            grad_weight.device());
  const std::int64_t* order = device_ptr<std::int64_t>(routes);
  const std::int64_t* seg_begin = order + plan.n;
  const std::int64_t* touched = seg_begin + plan.segments + 1;
  const std::int64_t* row_seg = touched + plan.touched;
  const unsigned grid_x = static_cast<unsigned>(std::min<std::int64_t>((C + kColumnThreads - 1) / kColumnThreads, 64));
  dispatch_cuda_floating(grad_weight.dtype(), "embedding_backward_", [&](auto tag) {
    using T = decltype(tag);
    using A = compute_t<T>;
    Tensor part = Tensor::empty({plan.segments, C}, dtype_of<A>::value, grad_weight.device());
    embedding_segment_sums_kernel<T>
        <<<dim3(grid_x, static_cast<unsigned>(std::min<std::int64_t>(plan.segments, 65535))),
           kColumnThreads, 0, stream>>>(order, seg_begin, device_ptr<T>(grad_out),
                                        device_ptr<A>(part), plan.segments, C);
    MGPU_CUDA_CHECK_LAUNCH();
    embedding_row_sums_kernel<T>
        <<<dim3(grid_x, static_cast<unsigned>(std::min<std::int64_t>(plan.touched, 65535))),
           kColumnThreads, 0, stream>>>(touched, row_seg, device_ptr<A>(part),
                                        device_ptr<T>(grad_weight), plan.touched, C);
    MGPU_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace mgpu::nn::detail
