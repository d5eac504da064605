// Lesson 04, task 2: ring all-gather from point-to-point messages (mgpu/dist/ring.h).
//
// The p ranks form a ring: rank r sends to rank r+1 and receives from rank r-1 (modulo p).
// The data is cut into p chunks, and on entry rank r holds the finished chunk r (what the
// reduce-scatter of task 1, ring_reduce_scatter.cpp, leaves). All-gather walks the finished
// chunks once around the ring, so that after p-1 steps every rank holds every chunk. Every
// step every rank sends one chunk and receives one, so all links are busy all the time.
#include "mgpu/dist/ring.h"
#include "mgpu/dist/work.h"

namespace mgpu::dist {

void ring_all_gather(ProcessGroup& pg, const Tensor& data) {
  const int p = pg.size(), r = pg.rank();
  [[maybe_unused]] const int right = (r + 1) % p, left = (r + p - 1) % p;
  Tensor flat = data.reshape({-1});
  // What you have: chunk(flat, p, i) -> chunk i (mod p) of flat, a view; flat, left, right
  // (above); pg.recv(t, from) and pg.send(t, to) -> a Work at once; Work's wait().
  // TODO(task2) BEGIN: chapter §3's ring all-gather, in place, in p-1 steps: on entry chunk r
  // of rank r's data is final (the other chunks are junk); on return every chunk of every
  // rank's data is final. Each rank sends exactly p-1 chunks, empty ones included, through
  // pg.send and pg.recv only, and receives each chunk straight into its place in `flat` (an
  // arriving chunk is final: no scratch copy). Invariants: after step s a rank holds s+2
  // final chunks; no rank waits for a message before both of its step's messages are
  // posted. Stuck: tools/hint 04 2 (about 6 lines).
  MGPU_FAIL("TODO(task2): ring_all_gather is not written yet "
            "(lessons/04_collectives/ring_all_gather.cpp); rank ", r, " of ", p, ", data ",
            data.str());
  // TODO(task2) END
}

}  // namespace mgpu::dist
