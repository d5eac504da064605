// Private: the CPU ops' loops over threads. ops/threads.cpp runs them on the library's pool
// (ops/thread_pool.cpp); the matrix products are such loops too, of single-threaded BLAS
// calls.
//
//   parallel_for(0, n, kGrainSize, [&](std::int64_t begin, std::int64_t end) {
//     for (std::int64_t i = begin; i < end; ++i) out[i] = f(in[i]);
//   });
//
// Small loops stay on the calling thread: handing work to a second thread costs a
// microsecond or more, so a chunk must hold at least `grain` iterations' worth of work. Split only loops whose
// outputs are computed each on its own (a sum per output, in a fixed order): then the
// thread count never changes a result.
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

/// Makes OpenBLAS run every call on the calling thread (done once per process): matmul
/// splits the products among the threads above instead (ops/matmul.cpp).
void blas_single_threaded();

/// Number of blocks of `block` iterations that cover n (the last one may be shorter).
inline std::int64_t num_blocks(std::int64_t n, std::int64_t block) { return (n + block - 1) / block; }

}  // namespace mgpu::detail
