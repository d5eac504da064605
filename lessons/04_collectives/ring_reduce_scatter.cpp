// Lesson 04, task 1: ring reduce-scatter from point-to-point messages.
//
// The p ranks form a ring: rank r sends to rank r+1 and receives from rank r-1 (modulo p).
// The data is cut into p chunks. Reduce-scatter walks each chunk once around the ring,
// every rank adding its own piece on the way, so that after p-1 steps rank r holds the
// finished sum of chunk r. Every step every rank sends one chunk and receives one, so all
// links are busy all the time. The all-gather (task 2, ring_all_gather.cpp) then walks the
// finished chunks around once more.
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
  // What you have: chunk(flat, p, i) -> chunk i (mod p) of flat, a view; t.slice(0, n) -> the
  // first n elements of a 1-D tensor, a view; pg.send(t, to) and pg.recv(t, from) -> a Work,
  // whose wait() blocks until the message is through; add_into(dst, src): dst += src.
  // TODO(task1) BEGIN: the reduce-scatter of chapter §3 in p-1 steps: every step each rank
  // passes one chunk to its right and adds the chunk from its left into its own copy (the
  // received chunk lands in `incoming` first). Invariants: the chunk sent at step s is the
  // one added at step s-1, so it carries s+1 ranks' shares, and after the last step chunk r
  // holds all p; a rank never waits for a message before its own are posted (the ring would
  // deadlock). (about 10 lines)
  MGPU_FAIL("TODO(task1): ring_reduce_scatter is not written yet "
            "(lessons/04_collectives/ring_reduce_scatter.cpp); rank ", r, " of ", p, ", data ",
            data.str());
  // TODO(task1) END
}

}  // namespace mgpu::lesson04
