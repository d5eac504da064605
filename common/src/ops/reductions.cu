// Reductions on CUDA. Three shapes of work, three kernels:
//  * the whole tensor: many blocks each reduce a slice, then one block reduces the blocks'
//    partial sums (two passes);
//  * along the last axis (and max/argmax): one warp per row, combined with shuffles;
//  * along any other axis: tiles of 32 columns, the rows cut into chunks among blocks.
// 16-bit inputs accumulate in float, f64 in double.
#include "argmax_rule.h"
#include "cuda_util.cuh"
#include "ops_cuda.h"

namespace mgpu::detail {

// ---- whole tensor ---------------------------------------------------------------------
// Why two passes rather than atomicAdd of each block's partial into the result: float
// addition is not associative, and atomics land in whatever order the blocks finish, so
// the last bits would change from run to run. Writing partials[blockIdx.x] and summing
// them in a fixed order keeps the result bit-reproducible, at the cost of one more tiny
// launch. The number of blocks is capped, so pass 2 fits in a single block.
constexpr int kMaxPartials = 1024;

// Pass 1: each thread sums its grid-stride elements (coalesced reads), then the block
// combines its threads' sums (warp shuffles + shared memory) into one partial.
template <typename T, typename A>
__global__ void sum_partials_kernel(const T* x, std::int64_t n, A* partials) {
  A acc = 0;
  for (std::int64_t i = grid_start(); i < n; i += grid_stride()) acc += to_compute(x[i]);
  acc = block_reduce(acc, SumOp{}, A(0));
  if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

// Pass 2: one block sums the partials and, for mean, divides by the element count.
template <typename A>
__global__ void sum_finish_kernel(const A* partials, int num_partials, std::int64_t n,
                                  bool mean, A* out) {
  A acc = 0;
  for (int i = threadIdx.x; i < num_partials; i += blockDim.x) acc += partials[i];
  acc = block_reduce(acc, SumOp{}, A(0));
  if (threadIdx.x == 0) *out = mean ? acc / static_cast<A>(n) : acc;
}

void sum_all_cuda(Tensor& out, const Tensor& x, bool mean) {
  const std::int64_t n = x.numel();
  const int blocks = static_cast<int>(std::min<std::int64_t>(grid_for(n), kMaxPartials));
  // The partials live in a scratch tensor from the caching allocator: it returns to the
  // cache when this function ends, and the stream runs pass 2 before anything queued
  // after it on the same stream can reuse the block.
  Tensor partials = Tensor::empty({blocks}, out.dtype(), x.device());
  cudaStream_t stream = launch_stream(x.device());
  dispatch_cuda_floating(x.dtype(), "sum", [&](auto tag) {
    using T = decltype(tag);
    using A = compute_t<T>;
    sum_partials_kernel<T, A><<<blocks, kBlock, 0, stream>>>(device_ptr<T>(x), n,
                                                             device_ptr<A>(partials));
    MGPU_CUDA_CHECK_LAUNCH();
    sum_finish_kernel<A><<<1, kBlock, 0, stream>>>(device_ptr<A>(partials), blocks, n, mean,
                                                   device_ptr<A>(out));
    MGPU_CUDA_CHECK_LAUNCH();
  });
}

// ---- along the last axis: one warp per row ----------------------------------------------
// Warp w of the grid takes rows w, w + W, ... (W = warps in the grid). Its 32 lanes read
// the row in strides of 32, so each step is one coalesced 32-element load; a shuffle
// reduction then combines the lanes. Good for the many short rows of a batch of logits;
// a single very long row would be better served by a whole block.
__device__ __forceinline__ std::int64_t warp_start() { return grid_start() / 32; }
__device__ __forceinline__ std::int64_t warp_stride() { return grid_stride() / 32; }

template <typename T>
__global__ void sum_rows_kernel(T* out, const T* x, std::int64_t rows, std::int64_t n,
                                bool mean) {
  const int lane = threadIdx.x % 32;
  // Every lane of a warp has the same r, so the whole warp stays in the loop together,
  // as the full-mask shuffles in warp_reduce require.
  for (std::int64_t r = warp_start(); r < rows; r += warp_stride()) {
    const T* row = x + r * n;
    compute_t<T> acc = 0;
    for (std::int64_t j = lane; j < n; j += 32) acc += to_compute(row[j]);
    acc = warp_reduce(acc, SumOp{});
    if (lane == 0) out[r] = from_compute<T>(mean ? acc / static_cast<compute_t<T>>(n) : acc);
  }
}

// ---- along another axis: tiles of 32 columns -------------------------------------------
// x viewed as [outer, n, inner]; output (o, k) sums x[o, j, k] over j. A block of 32 x 8
// threads takes 32 neighbouring columns k of one o (threadIdx.x is the column, so each row's
// 32 values are one coalesced load) and a chunk of rows j, shared by its 8 rows of threads
// (threadIdx.y takes j = j0 + y, j0 + y + 8, ...); shared memory then adds the 8 partial
// sums of each column in a fixed order. With few columns and many rows (a bias gradient sums
// N*P rows of C_out columns), one block per tile would leave the GPU idle, so the rows are
// also cut into chunks along blockIdx.y: each chunk writes a partial sum per column, and a
// second launch of the same kernel adds the chunks in order (deterministic, no atomics).
// Out is T for the final result, or the accumulation type A for the partial sums.
constexpr int kColTile = 32, kColRows = 8;

template <typename T, typename Out>
__global__ void sum_columns_kernel(Out* out, const T* x, std::int64_t outer, std::int64_t n,
                                   std::int64_t inner, std::int64_t chunk, bool mean,
                                   std::int64_t mean_of) {
  using A = compute_t<T>;
  __shared__ A partial[kColRows][kColTile + 1];  // +1: no bank conflicts on the column read
  const std::int64_t tiles = (inner + kColTile - 1) / kColTile;
  const std::int64_t j0 = static_cast<std::int64_t>(blockIdx.y) * chunk;
  const std::int64_t j1 = j0 + chunk < n ? j0 + chunk : n;
  // Every thread of the block has the same p, so all reach the __syncthreads together.
  for (std::int64_t p = blockIdx.x; p < outer * tiles; p += gridDim.x) {
    const std::int64_t o = p / tiles, k = (p % tiles) * kColTile + threadIdx.x;
    A acc = 0;
    if (k < inner) {
      const T* column = x + o * n * inner + k;  // x[o, 0, k]; the next j is `inner` further
      for (std::int64_t j = j0 + threadIdx.y; j < j1; j += kColRows)
        acc += to_compute(column[j * inner]);
    }
    partial[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && k < inner) {
      A total = partial[0][threadIdx.x];
      for (int r = 1; r < kColRows; ++r) total += partial[r][threadIdx.x];
      // n == 0 gives 0 for sum and 0/0 = NaN for mean, as on the CPU.
      if (mean) total /= static_cast<A>(mean_of);
      out[static_cast<std::int64_t>(blockIdx.y) * outer * inner + o * inner + k] =
          from_compute<Out>(static_cast<compute_t<Out>>(total));
    }
    __syncthreads();  // the tile is refilled for the next p
  }
}

void sum_axis_cuda(Tensor& out, const Tensor& x, std::int64_t outer, std::int64_t n,
                   std::int64_t inner, bool mean) {
  cudaStream_t stream = launch_stream(x.device());
  dispatch_cuda_floating(x.dtype(), mean ? "mean" : "sum", [&](auto tag) {
    using T = decltype(tag);
    using A = compute_t<T>;
    if (inner == 1) {
      sum_rows_kernel<T><<<grid_for(outer * 32), kBlock, 0, stream>>>(
          device_ptr<T>(out), device_ptr<T>(x), outer, n, mean);
      MGPU_CUDA_CHECK_LAUNCH();
      return;
    }
    // Chunks of rows: about 1024 blocks in all, at least 256 rows (32 per thread) each.
    const std::int64_t tiles = outer * ((inner + kColTile - 1) / kColTile);
    const unsigned grid_x = static_cast<unsigned>(std::min<std::int64_t>(tiles, 1 << 20));
    const std::int64_t by_gpu = (1024 + tiles - 1) / tiles, by_rows = (n + 255) / 256;
    std::int64_t chunks = std::max<std::int64_t>(1, std::min(by_gpu, by_rows));
    const std::int64_t chunk = n > 0 ? (n + chunks - 1) / chunks : 0;
    if (n > 0) chunks = (n + chunk - 1) / chunk;  // no chunk left empty
    const dim3 block(kColTile, kColRows);
    if (chunks == 1) {
      sum_columns_kernel<T, T><<<dim3(grid_x, 1), block, 0, stream>>>(
          device_ptr<T>(out), device_ptr<T>(x), outer, n, inner, chunk, mean, n);
      MGPU_CUDA_CHECK_LAUNCH();
      return;
    }
    // Pass 1: partial sums per chunk, [chunks, outer * inner] in A. Pass 2: the same kernel
    // adds them along the chunks, as a sum over axis 1 of [1, chunks, outer * inner].
    Tensor partials = Tensor::empty({chunks, outer * inner}, dtype_of<A>::value, x.device());
    sum_columns_kernel<T, A><<<dim3(grid_x, static_cast<unsigned>(chunks)), block, 0, stream>>>(
        device_ptr<A>(partials), device_ptr<T>(x), outer, n, inner, chunk, false, n);
    MGPU_CUDA_CHECK_LAUNCH();
    const std::int64_t columns = outer * inner;
    const unsigned grid2 = static_cast<unsigned>(
        std::min<std::int64_t>((columns + kColTile - 1) / kColTile, 1 << 20));
    sum_columns_kernel<A, T><<<dim3(grid2, 1), block, 0, stream>>>(
        device_ptr<T>(out), device_ptr<A>(partials), 1, chunks, columns, chunks, mean, n);
    MGPU_CUDA_CHECK_LAUNCH();
  });
}

// ---- max / argmax along the last axis ----------------------------------------------------
// One warp per row, as sum_rows_kernel. Each lane keeps the best (value, index) of its
// strided elements; the butterfly then exchanges both halves of the pair and keeps the
// better one by argmax_better, a total order, so every lane ends with the row's winner.
template <typename T>
__global__ void max_rows_kernel(T* max_out, std::int64_t* arg_out, const T* x,
                                std::int64_t rows, std::int64_t n) {
  const int lane = threadIdx.x % 32;
  for (std::int64_t r = warp_start(); r < rows; r += warp_stride()) {
    const T* row = x + r * n;
    // Lanes with no element (n < 32) start from element 0, which is a valid candidate.
    std::int64_t best = lane < n ? lane : 0;
    compute_t<T> best_v = to_compute(row[best]);
    for (std::int64_t j = lane + 32; j < n; j += 32) {
      const compute_t<T> v = to_compute(row[j]);
      if (argmax_better(v, j, best_v, best)) {
        best_v = v;
        best = j;
      }
    }
    for (int o = 16; o > 0; o >>= 1) {
      const compute_t<T> other_v = __shfl_xor_sync(0xffffffffu, best_v, o);
      const std::int64_t other = __shfl_xor_sync(0xffffffffu, best, o);
      if (argmax_better(other_v, other, best_v, best)) {
        best_v = other_v;
        best = other;
      }
    }
    if (lane == 0) {
      if (max_out) max_out[r] = row[best];  // the element itself: exact in every dtype
      if (arg_out) arg_out[r] = best;
    }
  }
}

void max_last_cuda(Tensor* max_out, Tensor* argmax_out, const Tensor& x, std::int64_t rows,
                   std::int64_t n) {
  cudaStream_t stream = launch_stream(x.device());
  dispatch_cuda_floating(x.dtype(), "max_last", [&](auto tag) {
    using T = decltype(tag);
    max_rows_kernel<T><<<grid_for(rows * 32), kBlock, 0, stream>>>(
        max_out ? device_ptr<T>(*max_out) : nullptr,
        argmax_out ? device_ptr<std::int64_t>(*argmax_out) : nullptr, device_ptr<T>(x), rows,
        n);
    MGPU_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace mgpu::detail
