// The pieces a ParallelGpt's step runs (parallel_gpt_impl.h): this rank's positions and
// columns, the embedding, the chunks of blocks, ln_f and the tied head with its loss, the
// replicated gradients under SP, and the module DDP wraps for a one-stage plan.
#include <algorithm>

#include "mgpu/copy.h"
#include "mgpu/nn/embedding.h"
#include "mgpu/ops.h"
#include "mgpu/parallel/tp/parallel_block.h"
#include "parallel_gpt_impl.h"

namespace mgpu::parallel::gpt {

// ---- the pieces -----------------------------------------------------------------------------

const std::vector<std::int64_t>& ParallelGpt::Impl::positions_of(std::int64_t T) {
  if (T != positions_T) {
    if (plan.attention != Attention::local) {  // refused here, on every rank, when T does not split
      positions = cp::sequence_positions(T, plan.shape.cp, grid->coords().cp, plan.split);
    } else {
      positions.resize(static_cast<std::size_t>(T));
      for (std::int64_t t = 0; t < T; ++t) positions[static_cast<std::size_t>(t)] = t;
    }
    positions_T = T;
  }
  return positions;
}

HostIds ParallelGpt::Impl::local_columns(const HostIds& ids) {
  if (plan.attention == Attention::local) return ids;
  return ids.columns(positions_of(ids.T));
}

std::int64_t ParallelGpt::Impl::activation_T(std::int64_t T_local) const {
  return plan.sequence_parallel ? T_local / plan.shape.tp : T_local;
}

Tensor ParallelGpt::Impl::embed(const HostIds& ids) {
  const std::int64_t B = ids.B, T = ids.T;
  // Without CP the window's positions are 0..T-1; under CP this rank's (the ids are its
  // columns already, so the window's T is T·CP).
  const std::vector<std::int64_t>& pos = positions_of(T * plan.shape.cp);
  // The ids and the positions are known on the host: the tables are read at them directly
  // (no round trip through the device, and so no host read).
  Tensor x = dynamic_cast<nn::TokenTable&>(*wte).lookup(ids.values, {B, T});
  const Tensor p_emb = nn::embedding(pos, {T}, wpe->parameter("weight").value);
  Tensor flat = x.reshape({B, T * C});
  add_rowwise_(flat, p_emb.reshape({T * C}));
  if (plan.sequence_parallel) x = tp::scatter_sequence(x, tp_group());
  return x;
}

void ParallelGpt::Impl::embed_backward(const Tensor& grad) {
  const Tensor dx = plan.sequence_parallel ? tp::gather_sequence(grad, tp_group()) : grad;
  const std::int64_t B = dx.size(0), T = dx.size(1);
  nn::Parameter& w = wpe->parameter("weight");
  if (w.requires_grad()) {
    nn::embedding_backward_(w.grad, positions_of(T * plan.shape.cp), {T},
                            sum(dx.reshape({B, T * C}), 0).reshape({T, C}));
    w.notify_grad_ready();
  }
  wte->backward(dx);
}

Tensor ParallelGpt::Impl::chunk_forward(int chunk, Tensor x) {
  for (auto& block : chunks.at(static_cast<std::size_t>(chunk))) {
    // What a block keeps for its backward: what it allocated and still holds, its output
    // left out (the next block's input).
    const std::size_t before = measure_kept ? memory_stats(x.device()).allocated : 0;
    Tensor y = block->forward(x);
    if (measure_kept) kept += memory_stats(x.device()).allocated - before - y.nbytes();
    x = std::move(y);
  }
  return x;
}

Tensor ParallelGpt::Impl::chunk_backward(int chunk, Tensor dx) {
  auto& blocks = chunks.at(static_cast<std::size_t>(chunk));
  for (std::size_t l = blocks.size(); l-- > 0;) dx = blocks[l]->backward(dx);
  return dx;
}

Tensor ParallelGpt::Impl::head_rows() {
  Tensor& table = head->parameter("weight").value;
  Tensor w_r = Tensor::zeros({rows.size(), C}, table.dtype(), table.device());
  const std::int64_t real_end = std::min(rows.end, vocab);
  if (real_end > rows.begin) {
    Tensor dst = w_r.slice(0, real_end - rows.begin);
    copy_(dst, table.slice(rows.begin, real_end));
  }
  return w_r;
}

Tensor ParallelGpt::Impl::head_forward(int micro, const Tensor& x_in) {
  const Tensor x = plan.sequence_parallel ? tp::gather_sequence(x_in, tp_group()) : x_in;
  const std::int64_t B = x.size(0), T = x.size(1);
  HeadSaved saved{ln_f->forward(x).reshape({B * T, C}), Tensor(), x.shape()};
  Tensor logits;
  if (plan.head == Vocab::replicated)
    logits = matmul(saved.hidden, head->parameter("weight").value, false, true);
  else if (plan.embedding == Vocab::split)  // the head's rows are the table's own rows here
    logits = matmul(saved.hidden, head->parameter("weight").value, false, true);
  else
    logits = matmul(saved.hidden, head_rows(), false, true);
  head_saved[micro] = std::move(saved);
  return logits;
}

Tensor ParallelGpt::Impl::loss(int micro, const Tensor& logits, const Tensor& targets) {
  HeadSaved& s = head_saved.at(micro);
  const std::int64_t N = logits.size(0);
  Tensor value;
  if (plan.head == Vocab::replicated) {
    Tensor probs;
    value = cast(softmax_cross_entropy(logits, targets.reshape({N}), &probs, LabelCheck::by_caller),
                 DType::f64).reshape({1});
    s.grad = softmax_cross_entropy_backward(probs, targets.reshape({N}));
  } else {
    const double v = tp::vocab_parallel_cross_entropy(logits, targets.reshape({N}), rows, vocab, tp_group(), &s.grad);
    value = Tensor::from_vector(std::vector<double>{v}, {1}, logits.device());
  }
  if (m > 1) scale_(s.grad, 1.0 / m);  // the step's loss is the mean of the m micro-batches'
  return value;
}

Tensor ParallelGpt::Impl::head_backward(int micro, const Tensor& grad_logits) {
  // A copy first: the caller may pass the saved gradient itself, which the erase frees.
  Tensor g = grad_logits;
  HeadSaved s = std::move(head_saved.at(micro));
  head_saved.erase(micro);
  if (!g.defined()) g = s.grad;
  nn::Parameter& table = head->parameter("weight");
  Tensor d_hidden;
  if (plan.head == Vocab::replicated) {  // the whole table, the whole logits
    matmul_out(table.grad, g, s.hidden, true, false, 1.0, 1.0);
    d_hidden = matmul(g, table.value);
  } else if (plan.embedding == Vocab::split) {
    // This rank's columns of the logits come from its own rows of the table: their share of
    // the table's gradient lands on those rows, before the lookup's backward declares it
    // final; the hidden state's gradient is a sum over the vocabulary slices.
    d_hidden = matmul(g, table.value);
    tp_group().all_reduce(d_hidden, dist::ReduceOp::sum).wait();
    add_(table.grad, matmul(g, s.hidden, true, false));
  } else {
    // A whole table split for the head only: this rank's rows' gradient, summed over the
    // group into the whole table's.
    const Tensor w_r = head_rows();
    d_hidden = matmul(g, w_r);
    tp_group().all_reduce(d_hidden, dist::ReduceOp::sum).wait();
    Tensor head_grad = Tensor::zeros({padded, C}, table.value.dtype(), table.value.device());
    Tensor mine = head_grad.slice(rows.begin, rows.end);
    copy_(mine, matmul(g, s.hidden, true, false));
    tp_group().all_reduce(head_grad, dist::ReduceOp::sum).wait();
    add_(table.grad, head_grad.slice(0, vocab));
  }
  s.hidden = Tensor();  // freed before ln_f's backward allocates its own
  Tensor dx = ln_f->backward(d_hidden.reshape(s.shape));
  return plan.sequence_parallel ? tp::scatter_sequence(dx, tp_group()) : dx;
}

void ParallelGpt::Impl::reduce_replicated_grads() {
  if (!plan.sequence_parallel) return;
  for (auto& chunk : chunks)
    for (auto& block : chunk) {
      auto& b = static_cast<tp::ParallelBlock&>(*block);
      tp::all_reduce_replicated_grads(b, b.replicated_parameter_names(), tp_group());
    }
}

// ---- the module DDP wraps ---------------------------------------------------------------------

Tensor Parts::forward(const Tensor& ids) {
  ParallelGpt::Impl& I = *impl_;
  Tensor x = I.step_ids ? I.embed(*I.step_ids) : I.embed(HostIds::read(ids));
  I.kept = 0;
  I.measure_kept = true;
  x = I.chunk_forward(0, x);
  I.measure_kept = false;
  return I.head_forward(0, x);
}

Tensor Parts::backward(const Tensor& grad_logits) {
  ParallelGpt::Impl& I = *impl_;
  I.embed_backward(I.chunk_backward(0, I.head_backward(0, grad_logits)));
  return Tensor();  // ids have no gradient
}

}  // namespace mgpu::parallel::gpt
