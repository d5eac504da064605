// CUDA twins of embedding.cpp's CPU loops: the lookup and its gradient.
#include <algorithm>
#include <vector>

#include "nn/embedding_kernels_cuda.h"
#include "ops/cuda_util.cuh"

namespace mgpu::nn::detail {
namespace {

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

}  // namespace

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
