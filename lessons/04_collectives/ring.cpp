// Lesson 04, tasks 1-3: ring all-reduce from point-to-point messages.
//
// The p ranks form a ring: rank r sends to rank r+1 and receives from rank r-1 (modulo p).
// The data is cut into p chunks. Reduce-scatter walks each chunk once around the ring,
// every rank adding its own piece on the way, so that after p-1 steps rank r holds the
// finished sum of chunk r. All-gather walks the finished chunks around once more. Every
// step every rank sends one chunk and receives one, so all links are busy all the time.
#include "collectives.h"

#include "mgpu/dist/work.h"

namespace mgpu::lesson04 {

void ring_reduce_scatter(ProcessGroup& pg, const Tensor& data) {
  const int p = pg.size(), r = pg.rank();
  [[maybe_unused]] const int right = (r + 1) % p, left = (r + p - 1) % p;
  Tensor flat = data.reshape({-1});  // chunks are ranges of the flattened tensor
  // Where a received chunk lands before it is added (chunk 0 is the largest chunk).
  Tensor incoming = Tensor::empty({chunk_range(flat.numel(), p, 0).size()}, data.dtype(),
                                  data.device());
  // TODO(task1) BEGIN: p-1 steps. At each, send one chunk to the right, receive the chunk
  // that arrives from the left into the front of `incoming` (exactly as many elements as
  // that chunk has), and add it into your own copy of that chunk; README section 3 gives
  // which chunk at step s. Post the send and the receive before waiting on either.
  // Invariant: the chunk sent at step s is the one added at step s-1, so it carries s+1
  // ranks' shares; after the last step chunk r holds all p. (about 10 lines)
  MGPU_FAIL("TODO(task1): ring_reduce_scatter is not written yet "
            "(lessons/04_collectives/ring.cpp); rank ", r, " of ", p, ", data ", data.str());
  // TODO(task1) END
}

void ring_all_gather(ProcessGroup& pg, const Tensor& data) {
  const int p = pg.size(), r = pg.rank();
  [[maybe_unused]] const int right = (r + 1) % p, left = (r + p - 1) % p;
  Tensor flat = data.reshape({-1});
  // TODO(task2) BEGIN: p-1 steps. At each, send a finished chunk to the right (your own
  // first, then the one you just received) and receive the next finished chunk from the
  // left straight into its place in `flat` (README section 3); post both, then wait for
  // both. Invariant: after step s you hold s+2 finished chunks. (about 6 lines)
  MGPU_FAIL("TODO(task2): ring_all_gather is not written yet "
            "(lessons/04_collectives/ring.cpp); rank ", r, " of ", p, ", data ", data.str());
  // TODO(task2) END
}

void ring_all_reduce(ProcessGroup& pg, const Tensor& data) {
  // TODO(task3) BEGIN: reduce-scatter, then all-gather, on the same tensor; nothing to do
  // for an empty tensor or a world of one. (about 3 lines)
  MGPU_FAIL("TODO(task3): ring_all_reduce is not written yet "
            "(lessons/04_collectives/ring.cpp); rank ", pg.rank(), " of ", pg.size(), ", data ",
            data.str());
  // TODO(task3) END
}

}  // namespace mgpu::lesson04
