// A plan applied to nn::GPT: this rank's parts (the embeddings, its chunks of blocks, the
// final LayerNorm and the tied head), what it reports of them, and the step's entry (the
// pieces the step runs are in gpt_pieces.cpp, the step itself in gpt_step.cpp).
#include "mgpu/parallel/gpt/parallel_gpt.h"

#include <algorithm>

#include "mgpu/copy.h"
#include "mgpu/error.h"
#include "mgpu/nn/embedding.h"
#include "mgpu/ops.h"
#include "mgpu/parallel/gpt/moe_gpt.h"
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
                                       const grid::ProcessGrid& g, std::int64_t n_head,
                                       std::vector<std::shared_ptr<cp::RingAttentionCore>>& cores,
                                       const cp::HybridGroups& hybrid) {
  const grid::GridShape& s = plan.shape;
  if (s.tp == 1 && plan.attention == Attention::local && !plan.sequence_parallel) {
    std::shared_ptr<nn::Module> block = full.clone();
    place_experts(*block, g);  // this rank's experts, under EP
    return block;
  }
  auto block = std::make_shared<tp::ParallelBlock>(static_cast<nn::Block&>(full),
                                                   g.group(grid::Axis::tp), plan.sequence_parallel);
  place_experts(*block, g);  // an MoE runs whole on every TP rank: this rank's experts, under EP
  if (plan.regather) block->set_regather_in_backward(true);
  if (plan.attention != Attention::local) {
    const cp::CoreKind kind = plan.attention == Attention::allgather ? cp::CoreKind::allgather
                              : plan.attention == Attention::ulysses ? cp::CoreKind::ulysses
                              : plan.attention == Attention::hybrid  ? cp::CoreKind::hybrid
                                                                     : cp::CoreKind::ring;
    auto core = std::make_shared<cp::RingAttentionCore>(
        g.group(grid::Axis::cp), plan.split, kind,
        n_head / s.tp, hybrid);
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
  MGPU_CHECK(s.ep == grid.shape().ep, "ParallelGpt: the plan is for ", s.str(), " but the grid "
             "is ", grid.shape().str());
  plan.check(full.config());
  const std::vector<moe::MoE*> full_moes = parallel::gpt::moe_layers(full);
  plan.check_experts(static_cast<std::int64_t>(full_moes.size()),
                     full_moes.empty() ? 0 : full_moes.front()->config().experts);
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
  // The hybrid's Ulysses and ring groups within every CP group (collective over the world,
  // so made here, once, on every rank, before any block).
  cp::HybridGroups& hybrid = I.hybrid;
  if (plan.attention == Attention::hybrid) {
    const dist::ProcessGroup& cpg = grid.group(grid::Axis::cp);
    dist::GroupOptions quiet;
    quiet.announce = false;
    hybrid = cp::new_hybrid_groups(grid::axis_groups(s, grid::Axis::cp),
                                   plan.ulysses_size_for(I.cfg), cpg.backend_name(),
                                   cpg.device(), quiet);
  }
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
      I.chunks.back().push_back(make_block(*block, plan, grid, I.cfg.n_head, I.cores, hybrid));
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
  // With experts: lesson 16's rule for this data rank, and which gradients each reduction
  // takes (the experts' join the dense ones where EP is 1: the rule's groups are the same).
  I.moes = parallel::gpt::moe_layers(*I.parts);
  if (!I.moes.empty()) {
    const dist::ProcessGroup& data = I.data_group();
    // The MoE layer exchanges its counts and sums its load as i64 CPU tensors (moe_layer.h).
    MGPU_CHECK(data.backend_name() != "nccl", "ParallelGpt: the MoE layers exchange their "
               "token counts and sum their load as CPU tensors, which NCCL does not move; run "
               "the grid on the mpi backend (--backend mpi)");
    I.expert_rule = moe::expert_grad_groups(data.size(), s.ep, data.rank());
    for (const auto& [name, param] : I.parts->named_parameters())
      (s.ep > 1 && is_expert_parameter(name) ? I.expert_names : I.dense_names).push_back(name);
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
    total.kept += s.kept;
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

std::vector<moe::MoE*> ParallelGpt::moe_layers() const { return impl_->moes; }

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

}  // namespace mgpu::parallel::gpt
