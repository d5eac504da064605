// Lesson 04, task 1: ring reduce-scatter from point-to-point messages (mgpu/dist/ring.h).
//
// The p ranks form a ring: rank r sends to rank r+1 and receives from rank r-1 (modulo p).
// The data is cut into p chunks. Reduce-scatter walks each chunk once around the ring,
// every rank adding its own piece on the way, so that after p-1 steps rank r holds the
// finished sum of chunk r. Every step every rank sends one chunk and receives one, so all
// links are busy all the time. The all-gather (task 2, ring_all_gather.cpp) then walks the
// finished chunks around once more.
#include "mgpu/dist/ring.h"
#include "mgpu/dist/work.h"

namespace mgpu::dist {

void ring_reduce_scatter(ProcessGroup& pg, const Tensor& data) {
  const int p = pg.size(), r = pg.rank();
  [[maybe_unused]] const int right = (r + 1) % p, left = (r + p - 1) % p;
  Tensor flat = data.reshape({-1});  // chunks are ranges of the flattened tensor
  // Where a received chunk lands before it is added (chunk 0 is the largest chunk).
  Tensor incoming = Tensor::empty({chunk_range(flat.numel(), p, 0).size()}, data.dtype(),
                                  data.device());
  // What you have: add_into(dst, src): dst += src, elementwise; chunk(flat, p, i) -> chunk i
  // (mod p) of flat, a view; chunk_range(n, p, i) -> its [begin, end); flat, incoming, left,
  // right (above); pg.recv(t, from) and pg.send(t, to) -> a Work at once, whose wait() blocks
  // until the message is through; t.slice(0, n) -> the first n elements of a 1-D tensor, a view.
  // TODO(task1) BEGIN: chapter §3's ring reduce-scatter, in place, in p-1 steps: on return
  // chunk r of rank r's data holds the sum over all ranks of chunk r (the other chunks hold
  // partial sums, unspecified). Each rank sends exactly p-1 chunks and receives p-1, empty
  // chunks included, through pg.send and pg.recv only. Invariants: every receive is exactly
  // as long as the send it matches (chunks differ in length by one); no rank waits for a
  // message before both of its step's messages are posted (§3: the ring would deadlock).
  // Tested on integers (exact sums), on lengths p does not divide and on lengths below p.
  // Stuck: tools/hint 04 1 (about 10 lines).
  for (int s = 0; s < p - 1; ++s) {
    Tensor outgoing = chunk(flat, p, r - s - 1);
    Tensor target = chunk(flat, p, r - s - 2);
    Tensor buf = incoming.slice(0, target.numel());
    // Both in flight before either is waited for: every rank sends and receives at once,
    // and a send that waited for its receiver first would wait forever around the ring.
    dist::Work sent = pg.send(outgoing, right);
    dist::Work received = pg.recv(buf, left);
    sent.wait();
    received.wait();
    add_into(target, buf);
  }
  // TODO(task1) END
}

}  // namespace mgpu::dist
