// Task 4: ring attention's backward. The keys and values go round the ring again; each
// rank adds its queries' part of every block's dK and dV to a running sum that follows the
// block round the ring one step behind and ends on the block's owner.
#include "mgpu/ops.h"
#include "mgpu/parallel/cp/ring_attention.h"

namespace mgpu::parallel::cp {

nn::AttentionGrads ring_attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k,
                                           const Tensor& v, const CpForward& fwd, Split split,
                                           bool causal, dist::ProcessGroup& group) {
  check_cp_operands("ring_attention_backward", q, k, v);
  check_same_shape("ring_attention_backward", dout, q);
  const int P = group.size(), r = group.rank();
  const std::int64_t T = q.size(1) * P;
  const std::vector<std::int64_t> q_pos = sequence_positions(T, P, r, split);
  Tensor dq = zeros_f64(q), dk = zeros_f64(k), dv = zeros_f64(v);
  // What you have: dout, q, k, v (this rank's, [BH, T/P, D]); fwd.result (the forward's
  // merged result); P, r, q_pos. Library: add_(a, b); block_attention_backward(dout, q,
  // k_j, v_j, q_pos, k_pos, fwd.result, causal, chunk, dq, dk_j, dv_j) (adds to the f64
  // host tensors dq, dk_j, dv_j); chunk_rows(T, P, split); dist::wait_all(works);
  // group.batch_isend_irecv({dist::P2POp::isend/irecv(t, peer, tag)...}) -> dist::Work;
  // sequence_positions(T, P, j, split); t.to(device); Tensor::empty(shape, dtype, device);
  // zeros_f64(like); tags kTagK, kTagV, kTagDK, kTagDV.
  // dq, dk, dv: this rank's gradients, f64 on the host (converted below).
  // TODO(task4) BEGIN: chapter §3, task 4: dq = Σ over blocks of this rank's queries' part;
  // dk, dv = the parts of every rank's queries for this rank's keys and values. Invariants:
  // the keys and values make the forward's trip again (2(P-1) sends, posted before each
  // block's compute); the gradients of block j follow it one step behind, from rank j+1 to
  // rank j-1 and then home (2(P-1) sends: dK and dV, f64, on q's device); each send goes
  // in one batch with receives, never in a batch of sends alone (NCCL starts a batch's
  // sends only with the peer's matching receives: a ring of send-only batches can wait
  // forever); nothing is sent a second time; a tensor sent is not changed before its send
  // completes; equal to full attention's gradients at 1e-12 in f64, causal or not. Stuck:
  // tools/hint 14 4 (about 35 lines).
  MGPU_FAIL("TODO(task4): ring_attention_backward is not written yet (lessons/14_context_parallel/ring_backward.cpp); ",
            q.str(), " over ", P, " rank(s), ", causal ? "causal" : "not causal",
            ", the forward's output ", fwd.out.str());
  // TODO(task4) END
  return {dq.to(q.dtype()).to(q.device()), dk.to(k.dtype()).to(k.device()),
          dv.to(v.dtype()).to(v.device())};
}

}  // namespace mgpu::parallel::cp
