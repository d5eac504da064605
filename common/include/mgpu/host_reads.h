/// @file host_reads.h
/// @brief How often host code has read tensor data: the GPU's speed rule, counted on every
/// device. On a GPU each read waits for every kernel queued before it, so a training step
/// should read the host about as often as it logs; the same count on the CPU build shows
/// where a GPU would wait, without a GPU.
///
/// A read is a Tensor::to_vector or Tensor::item (on any device), or a copy_ from a GPU
/// into host memory (a to_vector of a GPU tensor is one read, not two). Copies queued on a
/// stream (copy_async) and the communication backends' staging are not reads.
///
///     const std::int64_t before = mgpu::host_reads();
///     model.train_step(ids, targets);
///     std::printf("host reads %lld\n", (long long)(mgpu::host_reads() - before));
#pragma once

#include <cstdint>

namespace mgpu {

/// Host reads of tensor data in this process so far (all threads).
std::int64_t host_reads();

namespace detail {
/// Counts one host read (the library calls it where data reaches host code).
void note_host_read();
}  // namespace detail

}  // namespace mgpu
