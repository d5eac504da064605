// Task 5: DeepSpeed-Ulysses. Each rank holds its positions of the sequence for every head;
// one all-to-all per tensor trades them for the whole sequence of H/P heads, attention runs
// unchanged on those heads, and one all-to-all takes the output back to its positions. The
// backward mirrors it: dO in, the gradients of Q, K and V back.
#include "mgpu/ops.h"
#include "mgpu/parallel/cp/ulysses.h"

namespace mgpu::parallel::cp {

std::int64_t heads_per_rank(std::int64_t heads, int P) {
  MGPU_CHECK(P >= 1, "heads_per_rank: P = ", P);
  std::int64_t per_rank = 0;
  // What you have: heads (H), P; MGPU_CHECK(condition, message parts...) throws mgpu::Error.
  // TODO(task5) BEGIN: chapter §7, task 5: per_rank = H/P, the whole heads a rank attends
  // to. Invariant: a head is never cut between ranks. An H that P does not divide (H < 1
  // too) is refused with one error that starts "Ulysses: H = <H> heads do not split over
  // P = <P> ranks" and names the fixes (an H that is a multiple of P, under tensor
  // parallelism of TP·P; a P that divides H; or ring attention). Stuck: tools/hint 14 5
  // (about 3 lines).
  MGPU_CHECK(heads >= 1 && heads % P == 0, "Ulysses: H = ", heads,
             " heads do not split over P = ", P,
             " ranks (a rank attends to H/P whole heads): choose H a multiple of P (under "
             "tensor parallelism a multiple of TP·P), run on a P that divides H, or use ring "
             "attention");
  per_rank = heads / P;
  // TODO(task5) END
  return per_rank;
}

Tensor sequence_to_heads(const Tensor& x, std::int64_t heads, dist::ProcessGroup& group) {
  MGPU_CHECK(x.ndim() == 3 && heads >= 1 && x.size(0) % heads == 0,
             "sequence_to_heads: x must be [B·H, T/P, D] with H = ", heads, ", got ", x.str());
  const int P = group.size();
  Tensor out;
  // What you have: x [B·H, T/P, D] (row b·H + h: head h of batch b at this rank's T/P
  // positions); heads (H), P, r = group.rank(); heads_per_rank(H, P) (above);
  // x.reshape(shape) (the same values, another shape); permute(t, dims) (a copy with its
  // dimensions reordered, as PyTorch's t.permute(dims).contiguous()); Tensor::empty(shape,
  // dtype, device); group.all_to_all(output, input) -> a dist::Work (wait() it): input cut
  // along dimension 0 into P equal pieces, piece j to rank j; output's piece j from rank j.
  // TODO(task5) BEGIN: chapter §7, task 5: out = the head-sharded [B·H/P, T, D]: row
  // b·(H/P) + i is head r·(H/P) + i of batch b, its T positions rank 0's T/P, then rank
  // 1's, and so on. Invariants: exactly one all_to_all, its pieces equal (each the B·(H/P)
  // heads of one rank at this rank's positions), no send; refused (heads_per_rank) before
  // any traffic; out keeps x's dtype and device; exact (values only move). Stuck:
  // tools/hint 14 5 (about 8 lines).
  const std::int64_t hp = heads_per_rank(heads, P);
  const std::int64_t B = x.size(0) / heads, Tl = x.size(1), D = x.size(2);
  // Piece j, for rank j, is heads j·hp.. of every batch: [B, P, hp, Tl, D] -> [P, B, hp, Tl, D].
  const Tensor send = permute(x.reshape({B, P, hp, Tl, D}), {1, 0, 2, 3, 4});
  Tensor recv = Tensor::empty(send.shape(), x.dtype(), x.device());
  group.all_to_all(recv, send).wait();
  // Piece j holds rank j's positions of this rank's heads: [P, B, hp, Tl, D] -> [B, hp, P, Tl, D].
  out = permute(recv, {1, 2, 0, 3, 4}).reshape({B * hp, P * Tl, D});
  // TODO(task5) END
  return out;
}

Tensor heads_to_sequence(const Tensor& y, std::int64_t heads, dist::ProcessGroup& group) {
  const int P = group.size();
  MGPU_CHECK(y.ndim() == 3 && y.size(1) % P == 0,
             "heads_to_sequence: y must be [B·H/P, T, D] with P = ", P, " dividing T, got ",
             y.str());
  Tensor out;
  // What you have: y [B·H/P, T, D] (head-sharded, as sequence_to_heads returns it); heads
  // (H), P; heads_per_rank(H, P); y.reshape(shape); permute(t, dims); Tensor::empty(shape,
  // dtype, device); group.all_to_all(output, input) -> a dist::Work.
  // TODO(task5) BEGIN: chapter §7, task 5: out = the sequence-sharded [B·H, T/P, D] (row
  // b·H + h: head h of batch b at this rank's positions), sequence_to_heads undone:
  // heads_to_sequence(sequence_to_heads(x)) == x exactly. Invariants: exactly one
  // all_to_all of equal pieces, no send; refused (heads_per_rank) before any traffic; out
  // keeps y's dtype and device. Stuck: tools/hint 14 5 (about 8 lines).
  const std::int64_t hp = heads_per_rank(heads, P);
  MGPU_CHECK(y.size(0) % hp == 0, "heads_to_sequence: ", y.str(), " does not hold ", hp,
             " heads per batch");
  const std::int64_t B = y.size(0) / hp, Tl = y.size(1) / P, D = y.size(2);
  // Piece j, for rank j, is rank j's positions of the heads here:
  // [B, hp, P, Tl, D] -> [P, B, hp, Tl, D].
  const Tensor send = permute(y.reshape({B, hp, P, Tl, D}), {2, 0, 1, 3, 4});
  Tensor recv = Tensor::empty(send.shape(), y.dtype(), y.device());
  group.all_to_all(recv, send).wait();
  // Piece j holds heads j·hp.. at this rank's positions: [P, B, hp, Tl, D] -> [B, P, hp, Tl, D].
  out = permute(recv, {1, 0, 2, 3, 4}).reshape({B * heads, Tl, D});
  // TODO(task5) END
  return out;
}

UlyssesForward ulysses_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v,
                                         std::int64_t heads, Split split, bool causal,
                                         dist::ProcessGroup& group) {
  check_cp_operands("ulysses_attention_forward", q, k, v);
  const int P = group.size();
  const std::int64_t T = q.size(1) * P;
  const std::vector<std::int64_t> pos = ulysses_positions(T, P, split);
  UlyssesForward f;
  // What you have: q, k, v (this rank's rows, [B·H, T/P, D]); heads (H); causal; pos (the
  // positions of a head-sharded tensor's T rows, in order); sequence_to_heads and
  // heads_to_sequence (above); block_attention(q, k, v, q_pos, k_pos, causal, chunk,
  // &f.work) -> a PartialAttention (f64, host; chunk 0: the block is one chunk); t.to(dtype),
  // t.to(device).
  // TODO(task5) BEGIN: chapter §7, task 5: f.q, f.k, f.v = the head-sharded q, k, v (kept
  // for the backward); f.result = their attention over the whole sequence; f.out = its
  // output, sequence-sharded, in q's dtype and on q's device; f.work = the score entries
  // computed. Invariants: exactly 4 all_to_alls (3 in, 1 out), no send; equal to full
  // attention's rows at 1e-12 in f64, causal or not, plain or zigzag. Stuck: tools/hint 14
  // 5 (about 6 lines).
  f.q = sequence_to_heads(q, heads, group);
  f.k = sequence_to_heads(k, heads, group);
  f.v = sequence_to_heads(v, heads, group);
  f.result = block_attention(f.q, f.k, f.v, pos, pos, causal, 0, &f.work);
  f.out = heads_to_sequence(f.result.out.to(q.dtype()).to(q.device()), heads, group);
  // TODO(task5) END
  return f;
}

nn::AttentionGrads ulysses_attention_backward(const Tensor& dout, const UlyssesForward& fwd,
                                              std::int64_t heads, Split split, bool causal,
                                              dist::ProcessGroup& group) {
  check_cp_operands("ulysses_attention_backward", fwd.q, fwd.k, fwd.v);
  const int P = group.size();
  const std::int64_t T = fwd.q.size(1);
  MGPU_CHECK(dout.ndim() == 3 && dout.size(1) * P == T && dout.size(2) == fwd.q.size(2),
             "ulysses_attention_backward: dout must be [B·H, T/P, D] with T = ", T, ", got ",
             dout.str());
  const std::vector<std::int64_t> pos = ulysses_positions(T, P, split);
  nn::AttentionGrads g;
  // What you have: dout (dL/d(output) of this rank's rows, [B·H, T/P, D]); fwd.q, fwd.k,
  // fwd.v, fwd.result (head-sharded, kept by the forward); heads (H); causal; pos;
  // sequence_to_heads, heads_to_sequence; block_attention_backward(dout, q, k, v, q_pos,
  // k_pos, fwd.result, causal, chunk, dq, dk, dv) (adds to the f64 host tensors dq, dk, dv);
  // zeros_f64(like); t.to(dtype), t.to(device).
  // TODO(task5) BEGIN: chapter §7, task 5: g.dq, g.dk, g.dv = dL/dq, dL/dk, dL/dv of this
  // rank's rows, sequence-sharded [B·H, T/P, D], in fwd.q's dtype and on its device.
  // Invariants: exactly 4 all_to_alls (dO in, dQ, dK, dV out), no send, no all-to-all of
  // Q, K or V again; equal to full attention's gradients at 1e-12 in f64, causal or not.
  // Stuck: tools/hint 14 5 (about 8 lines).
  const Tensor dout_h = sequence_to_heads(dout, heads, group);
  Tensor dq = zeros_f64(fwd.q), dk = zeros_f64(fwd.k), dv = zeros_f64(fwd.v);
  block_attention_backward(dout_h, fwd.q, fwd.k, fwd.v, pos, pos, fwd.result, causal, 0, dq, dk,
                           dv);
  const DType dtype = fwd.q.dtype();
  const Device dev = fwd.q.device();
  g.dq = heads_to_sequence(dq.to(dtype).to(dev), heads, group);
  g.dk = heads_to_sequence(dk.to(dtype).to(dev), heads, group);
  g.dv = heads_to_sequence(dv.to(dtype).to(dev), heads, group);
  // TODO(task5) END
  return g;
}

}  // namespace mgpu::parallel::cp
