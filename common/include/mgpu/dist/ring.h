/// @file ring.h
/// @brief The ring collectives built from send and recv alone: lesson 04 defines
/// ring_reduce_scatter, ring_all_gather and ring_all_reduce (lessons/04_collectives/, the
/// file of each below) and the library compiles their reference (solutions/04_collectives/);
/// the chunk helpers are the library's (ring.cpp).
///
///   task 1  ring_reduce_scatter  (ring_reduce_scatter.cpp)  p-1 steps: pass a chunk right, add the one from the left
///   task 2  ring_all_gather      (ring_all_gather.cpp)      p-1 steps: pass the finished chunks around
///   task 3  ring_all_reduce      (ring_all_reduce.cpp)      the two, one after the other
///
/// The ring functions use only ProcessGroup::send and ProcessGroup::recv (lesson 04's tests
/// hand them a group that counts the messages and refuses every collective). The library's
/// own all_reduce is the backend's (MPI_Allreduce, ncclAllReduce); these are the same
/// algorithm written out, for reading and for measuring against it.
#pragma once

#include <cstdint>

#include "mgpu/dist/process_group.h"
#include "mgpu/dist/work.h"
#include "mgpu/tensor.h"

namespace mgpu::dist {

/// The elements [begin, end) of one chunk of a flat tensor cut into p chunks.
struct ChunkRange {
  std::int64_t begin = 0;  ///< first element
  std::int64_t end = 0;    ///< one past the last element
  /// end - begin.
  std::int64_t size() const { return end - begin; }
};

/// Chunk i of n elements cut into p chunks: the first n % p chunks get one element more, so
/// sizes differ by at most one and chunk 0 is never smaller than another. Example: n = 10,
/// p = 4 -> [0,3) [3,6) [6,8) [8,10). Throws mgpu::Error unless 0 <= i < p.
ChunkRange chunk_range(std::int64_t n, int p, int i);

/// Chunk i of `flat` (a 1-D tensor) as a view: writing into it writes into `flat`.
/// i is taken modulo p, so chunk(flat, p, rank - 1) is fine for rank 0 too.
Tensor chunk(const Tensor& flat, int p, int i);

/// dst += src, elementwise, for same-shaped tensors of any dtype on the CPU (floating
/// dtypes also on CUDA). The reduction step of the ring.
void add_into(const Tensor& dst, const Tensor& src);

/// Lesson 04, task 1. In place. On entry every rank holds its own `data` (same shape and
/// dtype on every rank); on return, chunk r (chunk_range(data.numel(), p, r)) of rank r's
/// data holds the sum of all ranks' chunk r. The other chunks hold partial sums
/// (unspecified). Each rank sends exactly p-1 chunks: at step s it sends chunk r-s-1 to rank
/// r+1 and adds the chunk r-s-2 it receives from rank r-1 (all indices modulo p).
void ring_reduce_scatter(ProcessGroup& pg, const Tensor& data);

/// Lesson 04, task 2. In place. On entry chunk r of rank r's data is final; on return every
/// chunk of every rank's data is (each rank's chunk r copied everywhere). Each rank sends
/// exactly p-1 chunks: at step s it sends chunk r-s and receives chunk r-s-1.
void ring_all_gather(ProcessGroup& pg, const Tensor& data);

/// Lesson 04, task 3. In place: every rank's data becomes the elementwise sum over all
/// ranks, with 2(p-1) chunks sent per rank: reduce-scatter, then all-gather.
void ring_all_reduce(ProcessGroup& pg, const Tensor& data);

}  // namespace mgpu::dist
