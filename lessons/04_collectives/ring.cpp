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
  // TODO(task1) BEGIN: for s = 0 .. p-2: post pg.send(chunk(flat, p, r - s - 1), right) and
  // pg.recv(buf, left) where buf = incoming.slice(0, n) with n the element count of
  // chunk(flat, p, r - s - 2); wait for both Works (post both BEFORE waiting on either);
  // then add_into(that chunk, buf). (about 10 lines)
  throw Error("TODO(task1): ring_reduce_scatter is not written yet (lessons/04_collectives/ring.cpp)");
  // TODO(task1) END
}

void ring_all_gather(ProcessGroup& pg, const Tensor& data) {
  const int p = pg.size(), r = pg.rank();
  [[maybe_unused]] const int right = (r + 1) % p, left = (r + p - 1) % p;
  Tensor flat = data.reshape({-1});
  // TODO(task2) BEGIN: for s = 0 .. p-2: send chunk(flat, p, r - s) to the right and
  // receive chunk(flat, p, r - s - 1) from the left, straight into place; post both, then
  // wait for both. (about 6 lines)
  throw Error("TODO(task2): ring_all_gather is not written yet (lessons/04_collectives/ring.cpp)");
  // TODO(task2) END
}

void ring_all_reduce(ProcessGroup& pg, const Tensor& data) {
  // TODO(task3) BEGIN: reduce-scatter, then all-gather, on the same tensor; nothing to do
  // for an empty tensor or a world of one. (about 3 lines)
  (void)pg, (void)data;
  throw Error("TODO(task3): ring_all_reduce is not written yet (lessons/04_collectives/ring.cpp)");
  // TODO(task3) END
}

}  // namespace mgpu::lesson04
