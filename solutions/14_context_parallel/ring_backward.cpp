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
  const int next = (r + 1) % P, prev = (r - 1 + P) % P;
  const std::int64_t chunk = chunk_rows(T, P, split);
  const Device dev = q.device();
  Tensor k_cur = k, v_cur = v;
  Tensor dk_out, dv_out;  // the last step's running sums, sent on with this step's batch
  for (int s = 0; s < P; ++s) {
    const int owner = (r - s + P) % P;
    std::vector<dist::P2POp> ops;
    Tensor k_next, v_next, dk_in, dv_in;
    if (s + 1 < P) {
      k_next = Tensor::empty(k.shape(), k.dtype(), k.device());
      v_next = Tensor::empty(v.shape(), v.dtype(), v.device());
      ops = {dist::P2POp::isend(k_cur, next, kTagK), dist::P2POp::isend(v_cur, next, kTagV),
             dist::P2POp::irecv(k_next, prev, kTagK), dist::P2POp::irecv(v_next, prev, kTagV)};
    }
    if (dk_out.defined()) {  // step s-1's sums to rank r+1, in the same batch as the receives
      ops.push_back(dist::P2POp::isend(dk_out, next, kTagDK));
      ops.push_back(dist::P2POp::isend(dv_out, next, kTagDV));
    }
    if (s >= 2) {  // block owner's running dK, dV from rank r-1, which held it at step s-1
      dk_in = Tensor::empty(k.shape(), DType::f64, dev);
      dv_in = Tensor::empty(v.shape(), DType::f64, dev);
      ops.push_back(dist::P2POp::irecv(dk_in, prev, kTagDK));
      ops.push_back(dist::P2POp::irecv(dv_in, prev, kTagDV));
    }
    dist::Work moving = ops.empty() ? dist::Work() : group.batch_isend_irecv(ops);
    Tensor dk_s = s == 0 ? dk : zeros_f64(k), dv_s = s == 0 ? dv : zeros_f64(v);
    block_attention_backward(dout, q, k_cur, v_cur, q_pos, sequence_positions(T, P, owner, split),
                             fwd.result, causal, chunk, dq, dk_s, dv_s);
    moving.wait();  // its sends too: dk_out, dv_out may be replaced now
    if (s >= 1) {  // block owner's sum so far, to pass on to rank r+1 (at the last step, home)
      if (s >= 2) {
        add_(dk_s, dk_in.to(Device::cpu()));
        add_(dv_s, dv_in.to(Device::cpu()));
      }
      dk_out = dk_s.to(dev);
      dv_out = dv_s.to(dev);
    }
    if (s + 1 < P) {
      k_cur = k_next;
      v_cur = v_next;
    }
  }
  if (P > 1) {  // the last sums go home, and this rank's own block comes home from rank r-1
    Tensor dk_home = Tensor::empty(k.shape(), DType::f64, dev);
    Tensor dv_home = Tensor::empty(v.shape(), DType::f64, dev);
    group.batch_isend_irecv({dist::P2POp::isend(dk_out, next, kTagDK),
                             dist::P2POp::isend(dv_out, next, kTagDV),
                             dist::P2POp::irecv(dk_home, prev, kTagDK),
                             dist::P2POp::irecv(dv_home, prev, kTagDV)}).wait();
    add_(dk, dk_home.to(Device::cpu()));
    add_(dv, dv_home.to(Device::cpu()));
  }
  // TODO(task4) END
  return {dq.to(q.dtype()).to(q.device()), dk.to(k.dtype()).to(k.device()),
          dv.to(v.dtype()).to(v.device())};
}

}  // namespace mgpu::parallel::cp
