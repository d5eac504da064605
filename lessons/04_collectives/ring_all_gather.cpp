// Lesson 04, task 2: ring all-gather from point-to-point messages.
//
// The p ranks form a ring: rank r sends to rank r+1 and receives from rank r-1 (modulo p).
// The data is cut into p chunks, and on entry rank r holds the finished chunk r (what the
// reduce-scatter of task 1, ring_reduce_scatter.cpp, leaves). All-gather walks the finished
// chunks once around the ring, so that after p-1 steps every rank holds every chunk. Every
// step every rank sends one chunk and receives one, so all links are busy all the time.
#include "collectives.h"

#include "mgpu/dist/work.h"

namespace mgpu::lesson04 {

void ring_all_gather(ProcessGroup& pg, const Tensor& data) {
  const int p = pg.size(), r = pg.rank();
  [[maybe_unused]] const int right = (r + 1) % p, left = (r + p - 1) % p;
  Tensor flat = data.reshape({-1});
  // What you have: chunk(flat, p, i); pg.send(t, to) and pg.recv(t, from) -> a Work; wait().
  // TODO(task2) BEGIN: the all-gather of chapter §3 in p-1 steps: every finished chunk walks
  // once around the ring, each received chunk landing straight in its place in `flat`.
  // Invariant: after step s a rank holds s+2 finished chunks; both messages of a step are
  // posted before either is waited for. (about 6 lines)
  MGPU_FAIL("TODO(task2): ring_all_gather is not written yet "
            "(lessons/04_collectives/ring_all_gather.cpp); rank ", r, " of ", p, ", data ",
            data.str());
  // TODO(task2) END
}

}  // namespace mgpu::lesson04
