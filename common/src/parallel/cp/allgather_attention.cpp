// The all-gather baseline of context parallelism (the approach "The Llama 3 Herd of Models"
// describes): every rank gathers the whole K and V and computes its own queries against
// them; the backward reduce-scatters the whole dK and dV to their owners.
#include "mgpu/parallel/cp/ring_attention.h"

namespace mgpu::parallel::cp {

namespace {

// The whole K (or V) of the group: [P, BH, T/P, D], rank r's block at index r.
Tensor gather_blocks(const Tensor& x, dist::ProcessGroup& group) {
  Tensor all = Tensor::empty({group.size(), x.size(0), x.size(1), x.size(2)}, x.dtype(), x.device());
  group.all_gather(all, x.clone()).wait();
  return all;
}

Tensor block_of(const Tensor& all, int r) {
  const std::int64_t n = all.size(1) * all.size(2) * all.size(3);
  return all.view(r * n, {all.size(1), all.size(2), all.size(3)});
}

}  // namespace

CpForward allgather_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v,
                                      Split split, bool causal, dist::ProcessGroup& group) {
  check_cp_operands("allgather_attention_forward", q, k, v);
  const int P = group.size(), r = group.rank();
  const std::int64_t T = q.size(1) * P, chunk = chunk_rows(T, P, split);
  const auto q_pos = sequence_positions(T, P, r, split);
  const Tensor k_all = gather_blocks(k, group), v_all = gather_blocks(v, group);
  CpForward f;
  f.result = empty_partial(q.size(0), q.size(1), q.size(2));
  for (int j = 0; j < P; ++j)
    merge_partial(f.result, block_attention(q, block_of(k_all, j), block_of(v_all, j), q_pos,
                                            sequence_positions(T, P, j, split), causal, chunk,
                                            &f.work));
  f.out = f.result.out.to(q.dtype()).to(q.device());
  return f;
}

nn::AttentionGrads allgather_attention_backward(const Tensor& dout, const Tensor& q,
                                                const Tensor& k, const Tensor& v,
                                                const CpForward& fwd, Split split, bool causal,
                                                dist::ProcessGroup& group) {
  check_cp_operands("allgather_attention_backward", q, k, v);
  const int P = group.size(), r = group.rank();
  const std::int64_t T = q.size(1) * P, chunk = chunk_rows(T, P, split);
  const auto q_pos = sequence_positions(T, P, r, split);
  const Tensor k_all = gather_blocks(k, group), v_all = gather_blocks(v, group);
  Tensor dq = zeros_f64(q);
  Tensor dk_all = Tensor::zeros(k_all.shape(), DType::f64);
  Tensor dv_all = Tensor::zeros(v_all.shape(), DType::f64);
  for (int j = 0; j < P; ++j) {
    Tensor dk_j = block_of(dk_all, j), dv_j = block_of(dv_all, j);
    block_attention_backward(dout, q, block_of(k_all, j), block_of(v_all, j), q_pos,
                             sequence_positions(T, P, j, split), fwd.result, causal, chunk, dq,
                             dk_j, dv_j);
  }
  const Device dev = q.device();
  Tensor dk = Tensor::empty(k.shape(), DType::f64, dev), dv = Tensor::empty(v.shape(), DType::f64, dev);
  group.reduce_scatter(dk, dk_all.to(dev), dist::ReduceOp::sum).wait();
  group.reduce_scatter(dv, dv_all.to(dev), dist::ReduceOp::sum).wait();
  return {dq.to(q.dtype()).to(dev), dk.to(k.dtype()), dv.to(v.dtype())};
}

}  // namespace mgpu::parallel::cp
