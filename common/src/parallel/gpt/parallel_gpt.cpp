// A plan applied to nn::GPT: this rank's parts (the embeddings, its chunks of blocks, the
// final LayerNorm and the tied head) and the pieces of a step that run them.
#include "mgpu/parallel/gpt/parallel_gpt.h"

#include <algorithm>

#include "mgpu/copy.h"
#include "mgpu/error.h"
#include "mgpu/nn/embedding.h"
#include "mgpu/ops.h"
#include "mgpu/parallel/tp/parallel_block.h"
#include "mgpu/parallel/tp/vocab_parallel_embedding.h"
#include "parallel_gpt_impl.h"

namespace mgpu::parallel::gpt {

tp::ShardRange stage_blocks(std::int64_t n_layer, int stages, int stage) {
  MGPU_CHECK(stages >= 1 && n_layer >= stages, "the pipeline cuts ", n_layer, " block(s) into ",
             stages, " virtual stage(s) (PP x virtual): every stage needs a block");
  return tp::shard_range(n_layer, stages, stage);
}

// ---- construction ---------------------------------------------------------------------------

namespace {

// One block of the full model as this rank holds it.
std::shared_ptr<nn::Module> make_block(nn::Module& full, const GptPlan& plan,
                                       const grid::ProcessGrid& g,
                                       std::vector<std::shared_ptr<cp::RingAttentionCore>>& cores) {
  const grid::GridShape& s = plan.shape;
  if (s.tp == 1 && plan.attention == Attention::local && !plan.sequence_parallel) return full.clone();
  auto block = std::make_shared<tp::ParallelBlock>(static_cast<nn::Block&>(full),
                                                   g.group(grid::Axis::tp), plan.sequence_parallel);
  if (plan.regather) block->set_regather_in_backward(true);
  if (plan.attention != Attention::local) {
    auto core = std::make_shared<cp::RingAttentionCore>(g.group(grid::Axis::cp), plan.split,
                                                        plan.attention == Attention::allgather);
    block->set_attention_core(core);
    cores.push_back(core);
  }
  return block;
}

// The token table as the plan holds it: whole, or this TP rank's rows.
std::shared_ptr<nn::Module> make_table(nn::Module& full, const GptPlan& plan, const grid::ProcessGrid& g) {
  if (plan.embedding == Vocab::split)
    return std::make_shared<tp::VocabParallelEmbedding>(full, g.group(grid::Axis::tp));
  return full.clone();
}

}  // namespace

ParallelGpt::ParallelGpt(nn::GPT& full, const GptPlan& plan, const grid::ProcessGrid& grid)
    : impl_(std::make_unique<Impl>()) {
  Impl& I = *impl_;
  const grid::GridShape& s = plan.shape;
  MGPU_CHECK(s.dp == grid.shape().dp && s.tp == grid.shape().tp && s.pp == grid.shape().pp &&
                 s.cp == grid.shape().cp,
             "ParallelGpt: the plan is for ", s.str(), " but the grid is ", grid.shape().str());
  plan.check(full.config());
  I.plan = plan;
  I.grid = &grid;
  I.cfg = full.config();
  I.p = s.pp;
  I.v = plan.virtual_stages;
  I.m = plan.micro_batches;
  I.S = I.p * I.v;
  I.pp_rank = grid.coords().pp;
  MGPU_CHECK(2 * I.m * I.S < 32767, "ParallelGpt: ", I.m, " micro-batches through ", I.S,
             " virtual stages need more message tags than a send has (2·m·S < 32767)");
  I.order = pp::schedule_order(plan.schedule, I.p, I.v, I.m, I.pp_rank);
  I.vocab = I.cfg.vocab_size;
  I.C = I.cfg.n_embd;
  I.padded = tp::padded_vocab(I.vocab, s.tp);
  I.rows = tp::shard_range(I.padded, s.tp, grid.coords().tp);
  I.parts = std::make_shared<Parts>(I);
  const auto& kids = full.children();  // wte, wpe, h.0 ... h.{L-1}, ln_f
  I.first = I.pp_rank == 0;
  I.last = I.pp_rank == I.p - 1;
  if (I.first) {
    I.wte = make_table(*kids.front().second, plan, grid);
    I.wpe = kids.at(1).second->clone();
    I.parts->add(kids.front().first, I.wte);
    I.parts->add(kids.at(1).first, I.wpe);
  }
  for (int c = 0; c < I.v; ++c) {
    const tp::ShardRange r = stage_blocks(I.cfg.n_layer, I.S, pp::virtual_stage(I.p, I.pp_rank, c));
    I.chunk_ranges.push_back(r);
    I.chunks.emplace_back();
    for (std::int64_t b = r.begin; b < r.end; ++b) {
      const auto& [name, block] = kids.at(static_cast<std::size_t>(2 + b));
      I.chunks.back().push_back(make_block(*block, plan, grid, I.cores));
      I.parts->add(name, I.chunks.back().back());
    }
  }
  if (I.last) {
    I.ln_f = kids.back().second->clone();
    I.parts->add(kids.back().first, I.ln_f);
    if (I.first) {
      I.head = I.wte;
    } else {
      I.head = make_table(*kids.front().second, plan, grid);  // the tied table's copy
      I.parts->add("lm_head", I.head);
    }
  }
  // Lesson 05's DDP over the ranks that hold the same parameters (construction copies rank
  // 0's weights, collectively over them).
  if (plan.grad_sync == GradSync::ddp && I.data_group().size() > 1)
    I.ddp = std::make_unique<DistributedDataParallel>(I.parts, I.data_group());
}

ParallelGpt::~ParallelGpt() = default;

std::vector<std::pair<std::string, nn::Parameter*>> ParallelGpt::named_parameters() {
  return impl_->parts->named_parameters();
}
std::vector<nn::Parameter*> ParallelGpt::parameters() { return impl_->parts->parameters(); }
std::int64_t ParallelGpt::num_parameters() { return impl_->parts->num_parameters(); }
const GptPlan& ParallelGpt::plan() const { return impl_->plan; }
const grid::ProcessGrid& ParallelGpt::grid() const { return *impl_->grid; }
const nn::GPTConfig& ParallelGpt::config() const { return impl_->cfg; }
std::vector<tp::ShardRange> ParallelGpt::chunk_blocks() const { return impl_->chunk_ranges; }
const std::vector<pp::PipeOp>& ParallelGpt::order() const { return impl_->order; }
tp::ShardRange ParallelGpt::vocab_rows() const { return impl_->rows; }

cp::CoreStats ParallelGpt::attention_stats() const {
  cp::CoreStats total;
  for (const auto& core : impl_->cores) {
    const cp::CoreStats& s = core->stats();
    total.work += s.work;
    total.cpu_s += s.cpu_s;
    total.peak = std::max(total.peak, s.peak);
    total.carried_peak = std::max(total.carried_peak, s.carried_peak);
  }
  return total;
}

std::vector<cp::CoreStats> ParallelGpt::attention_stats_by_cp_rank() const {
  dist::ProcessGroup& group = impl_->cp_group();
  const int P = group.size(), me = group.rank();
  const cp::CoreStats mine = attention_stats();
  std::vector<std::int64_t> work(static_cast<std::size_t>(P), 0);
  std::vector<double> cpu(static_cast<std::size_t>(P), 0.0);
  work[static_cast<std::size_t>(me)] = mine.work;
  cpu[static_cast<std::size_t>(me)] = mine.cpu_s;
  Tensor w = Tensor::from_vector(work, {P}, group.device());
  Tensor c = Tensor::from_vector(cpu, {P}, group.device());
  group.all_reduce(w, dist::ReduceOp::sum).wait();
  group.all_reduce(c, dist::ReduceOp::sum).wait();
  work = w.to_vector<std::int64_t>();
  cpu = c.to_vector<double>();
  std::vector<cp::CoreStats> out(static_cast<std::size_t>(P), mine);
  for (int r = 0; r < P; ++r) {
    out[static_cast<std::size_t>(r)].work = work[static_cast<std::size_t>(r)];
    out[static_cast<std::size_t>(r)].cpu_s = cpu[static_cast<std::size_t>(r)];
  }
  return out;
}

std::vector<std::size_t> ParallelGpt::ddp_bucket_bytes() const {
  std::vector<std::size_t> out;
  if (!impl_->ddp) return out;
  const auto& reducer = impl_->ddp->reducer();
  for (std::size_t b = 0; b < reducer.num_buckets(); ++b) out.push_back(reducer.bucket_bytes(b));
  return out;
}

StepReport ParallelGpt::train_step(const Tensor& ids, const Tensor& targets) {
  MGPU_CHECK(ids.shape() == targets.shape(), "ParallelGpt::train_step: ids ", ids.str(),
             " and targets ", targets.str(), " must have the same shape [B, T]");
  return impl_->step(HostIds::read(ids), HostIds::read(targets));
}

StepReport ParallelGpt::train_step(const data::TextBatch& batch) {
  const auto size = static_cast<std::size_t>(batch.inputs.numel());
  if (batch.input_ids.size() != size || batch.target_ids.size() != size)  // tensors alone
    return train_step(batch.inputs, batch.targets);
  MGPU_CHECK(batch.inputs.ndim() == 2 && batch.targets.shape() == batch.inputs.shape(),
             "ParallelGpt::train_step: inputs ", batch.inputs.str(), " and targets ",
             batch.targets.str(), " must have the same shape [B, T]");
  const std::int64_t B = batch.inputs.size(0), T = batch.inputs.size(1);
  return impl_->step({batch.input_ids, B, T}, {batch.target_ids, B, T});
}

StepReport ParallelGpt::Impl::step(const HostIds& ids, const HostIds& targets) {
  MGPU_CHECK(ids.B % m == 0, "ParallelGpt::train_step: a batch of ", ids.B,
             " windows does not split into the ", m, " micro-batches; make B a multiple of ", m);
  // Checked here, where the host holds them: the tables and the loss then need no check on
  // the device (a wait for it on a GPU).
  for (const HostIds* batch : {&ids, &targets})
    for (std::size_t n = 0; n < batch->values.size(); ++n)
      MGPU_CHECK(batch->values[n] >= 0 && batch->values[n] < vocab, "ParallelGpt::train_step: ",
                 batch == &ids ? "input" : "target", " token ", batch->values[n], " at position ", n,
                 " is outside the vocabulary [0, ", vocab, ") (is the corpus the model's?)");
  return plan.grad_sync == GradSync::ddp ? ddp_step(ids, targets) : pipeline_step(ids, targets);
}

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
