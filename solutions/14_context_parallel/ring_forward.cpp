// Task 3: ring attention's forward. Each rank keeps its queries; the blocks of keys and
// values go round the ring r -> r+1, and each rank folds every block it is handed into its
// running result with the online softmax. The next block is already on its way while the
// block in hand is computed.
#include "mgpu/parallel/cp/ring_attention.h"

namespace mgpu::parallel::cp {

CpForward ring_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v,
                                 Split split, bool causal, dist::ProcessGroup& group) {
  check_cp_operands("ring_attention_forward", q, k, v);
  const int P = group.size(), r = group.rank();
  const std::int64_t T = q.size(1) * P;
  const std::vector<std::int64_t> q_pos = sequence_positions(T, P, r, split);
  CpForward f;
  f.result = empty_partial(q.size(0), q.size(1), q.size(2));
  // What you have: q, k, v (this rank's rows, [BH, T/P, D]); P, r; q_pos; f.result (empty:
  // lse -inf, out 0); f.work. Library: block_attention(q, k_j, v_j, q_pos, k_pos, causal,
  // chunk, &f.work) -> a PartialAttention (a skipped block counts nothing);
  // block_skipped(q_pos, k_pos, causal); chunk_rows(T, P, split) (the rows of a chunk);
  // dist::wait_all(works); group.batch_isend_irecv({dist::P2POp::isend(t, dst, tag),
  // dist::P2POp::irecv(t, src, tag), ...}) -> a dist::Work (wait() it; the tensors sent
  // must not change before); merge_partial(acc, part) (task 1); sequence_positions(T, P,
  // j, split) (rank j's positions: those of the block rank j owns); Tensor::empty(shape,
  // dtype, device); tags kTagK and kTagV.
  // TODO(task3) BEGIN: chapter §3, task 3: f.result = this rank's queries over every block
  // of the sequence, merged; f.work = the score entries computed. Invariants: after P
  // steps every block has visited every rank exactly once; exactly 2(P-1) sends per rank
  // (K and V to rank r+1, tags kTagK and kTagV), each posted before the compute of the
  // block in hand; a block wholly in the future costs no compute (block_attention skips
  // it and counts nothing); equal to full attention at 1e-12 in f64. Stuck:
  // tools/hint 14 3 (about 16 lines).
  const std::int64_t chunk = chunk_rows(T, P, split);
  Tensor k_cur = k, v_cur = v;
  const int next = (r + 1) % P, prev = (r - 1 + P) % P;
  for (int s = 0; s < P; ++s) {
    const int owner = (r - s + P) % P;  // the block in hand started on rank r - s
    Tensor k_next, v_next;
    dist::Work moving;
    if (s + 1 < P) {
      k_next = Tensor::empty(k.shape(), k.dtype(), k.device());
      v_next = Tensor::empty(v.shape(), v.dtype(), v.device());
      moving = group.batch_isend_irecv(
          {dist::P2POp::isend(k_cur, next, kTagK), dist::P2POp::isend(v_cur, next, kTagV),
           dist::P2POp::irecv(k_next, prev, kTagK), dist::P2POp::irecv(v_next, prev, kTagV)});
    }
    merge_partial(f.result, block_attention(q, k_cur, v_cur, q_pos,
                                            sequence_positions(T, P, owner, split), causal,
                                            chunk, &f.work));
    if (s + 1 < P) {
      moving.wait();
      k_cur = k_next;
      v_cur = v_next;
    }
  }
  // TODO(task3) END
  f.out = f.result.out.to(q.dtype()).to(q.device());
  return f;
}

}  // namespace mgpu::parallel::cp
