// Private: the CPU ops' loops over threads. ops/threads.cpp runs them with OpenMP.
//
//   parallel_for(0, n, kGrainSize, [&](std::int64_t begin, std::int64_t end) {
//     for (std::int64_t i = begin; i < end; ++i) out[i] = f(in[i]);
//   });
//
// Small loops stay on the calling thread: waking a second thread costs microseconds, so a
// chunk must hold at least `grain` iterations' worth of work. For reductions,
// parallel_for_blocks hands out fixed blocks (bounds from the size alone, never from the
// thread count) so that the caller can add the blocks' results in block order and get the
// same bits with any number of threads.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>

namespace mgpu::detail {

/// Iterations of a cheap elementwise loop (a few flops per element) per chunk: below
/// 2 * kGrainSize a loop runs on one thread (PyTorch's CPU ops use the same size).
constexpr std::int64_t kGrainSize = 32768;

/// A chunk body as a plain function pointer and its context (no allocation, no virtuals).
using RangeFn = void (*)(void* body, std::int64_t begin, std::int64_t end);

/// Runs fn(body, b, e) over chunks of [begin, end) of at least `grain` iterations on the
/// library's threads; rethrows the first exception a chunk threw, after all finished.
void run_parallel(std::int64_t begin, std::int64_t end, std::int64_t grain, RangeFn fn, void* body);

/// body(b, e) for consecutive chunks [b, e) that together cover [begin, end) once.
template <typename F>
void parallel_for(std::int64_t begin, std::int64_t end, std::int64_t grain, F&& body) {
  if (end - begin <= 0) return;
  if (end - begin < 2 * std::max<std::int64_t>(grain, 1)) {  // too small to share
    body(begin, end);
    return;
  }
  using Body = std::remove_reference_t<F>;
  run_parallel(begin, end, grain,
               [](void* b, std::int64_t lo, std::int64_t hi) { (*static_cast<Body*>(b))(lo, hi); },
               const_cast<void*>(static_cast<const void*>(&body)));
}

/// Number of blocks of `block` iterations that cover n (the last one may be shorter).
inline std::int64_t num_blocks(std::int64_t n, std::int64_t block) { return (n + block - 1) / block; }

/// body(k, b, e) for every block k = 0, 1, ... of [0, n): b = k * block, e = min(b + block, n).
/// The blocks are the same whatever the thread count; `blocks_per_chunk` of them go to a
/// thread at a time (1 when each block is a lot of work).
template <typename F>
void parallel_for_blocks(std::int64_t n, std::int64_t block, std::int64_t blocks_per_chunk,
                         F&& body) {
  parallel_for(0, num_blocks(n, block), blocks_per_chunk, [&](std::int64_t k0, std::int64_t k1) {
    for (std::int64_t k = k0; k < k1; ++k) body(k, k * block, std::min(n, (k + 1) * block));
  });
}

}  // namespace mgpu::detail
