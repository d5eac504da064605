// train: lesson 13's program. gpt-tiny (lesson 12) split over every rank as one
// tensor-parallel group: the blocks are ParallelBlocks (attention by heads, the MLP by hidden
// features; with --sp the LayerNorm regions cut along T), the head is split by vocabulary
// (the tied table's rows, padded to a multiple of the ranks) and the loss is the
// vocabulary-parallel cross-entropy (task 2), so the logits are never gathered. With --check
// (the default) every rank also trains the unsplit nn::GPT from the same seed on the same
// batches and prints both losses; in f64 they agree to about 1e-12, in f32 to about 1e-5.
//
//   tools/mpirun -np 2 build/solutions/13_tp_sp/train --tp 2 --data synthetic --steps 20
//   tools/mpirun -np 4 build/solutions/13_tp_sp/train --tp 4 --data synthetic --steps 20 --sp
//   tools/mpirun -np 4 build/solutions/13_tp_sp/train --tp 2 --data synthetic --steps 20 --sp
//                                            (2 x 2: TP inside, data parallelism across)
//   tools/mpirun -np 2 build/solutions/13_tp_sp/train --data synthetic --steps 4 --dtype f64
//
// The embedding tables stay whole on every rank of a TP group (their gradients come out
// identical); the head's share of the tied table's gradient, computed for this rank's
// vocabulary rows, is summed over the group in one all-reduce. With more ranks than --tp,
// lesson 11's grid: TP groups of consecutive ranks, data-parallel groups of every tp-th;
// replica d reads batch s·D + d and the gradients are averaged over the DP group in one
// all-reduce (the reference reads all D batches).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "mgpu/allocator.h"
#include "mgpu/app/app.h"
#include "mgpu/copy.h"
#include "mgpu/data/text.h"
#include "mgpu/dist/dist.h"
#include "mgpu/nn/gpt.h"
#include "mgpu/nn/init.h"
#include "mgpu/ops.h"
#include "mgpu/optim/adamw.h"
#include "mgpu/parallel/tp/parallel_block.h"

namespace {

using namespace mgpu;
namespace tpar = mgpu::parallel::tp;

struct Flags {
  std::string data = "synthetic";
  std::int64_t steps = 20, batch = 4, seq = 64;
  double lr = 1e-3;
  std::uint64_t seed = 1337;
  int tp = 0;  // 0: every rank (no data parallelism)
  bool sp = false, check = true;
  std::string dtype = "f32";
};

// The split model's parts under the full model's names (what the optimizer sees).
class Parts : public nn::Module {
 public:
  void add(const std::string& name, std::shared_ptr<nn::Module> child) { register_module(name, std::move(child)); }
  Tensor forward(const Tensor&) override { MGPU_FAIL("Parts: call TensorParallelGpt::step"); }
  Tensor backward(const Tensor&) override { MGPU_FAIL("Parts: call TensorParallelGpt::step"); }
  std::shared_ptr<nn::Module> clone() const override { MGPU_FAIL("Parts: not cloned"); }
  std::string describe() const override { return "TensorParallelGpt"; }
};

// gpt-tiny cut for this rank: replicated embeddings and final LayerNorm, ParallelBlocks, and
// a head over this rank's rows of the (padded) vocabulary.
class TensorParallelGpt {
 public:
  TensorParallelGpt(nn::GPT& full, dist::ProcessGroup& group, bool sp)
      : group_(group), sp_(sp), vocab_(full.config().vocab_size),
        padded_(tpar::padded_vocab(full.config().vocab_size, group.size())),
        rows_(tpar::shard_range(padded_, group.size(), group.rank())) {
    const auto& kids = full.children();
    wte_ = kids.front().second->clone();
    wpe_ = kids.at(1).second->clone();
    ln_f_ = kids.back().second->clone();
    parts_.add(kids.front().first, wte_);
    parts_.add(kids.at(1).first, wpe_);
    for (std::size_t i = 2; i + 1 < kids.size(); ++i) {
      blocks_.push_back(std::make_shared<tpar::ParallelBlock>(static_cast<nn::Block&>(*kids[i].second), group, sp));
      parts_.add(kids[i].first, blocks_.back());
    }
    parts_.add(kids.back().first, ln_f_);
  }

  // Every parameter this rank holds (what its optimizer updates).
  std::vector<nn::Parameter*> parameters() { return parts_.parameters(); }
  std::vector<std::pair<std::string, nn::Parameter*>> named_parameters() { return parts_.named_parameters(); }
  nn::Module& parts() { return parts_; }
  void zero_grad() { parts_.zero_grad(); }
  std::int64_t num_parameters() { return parts_.num_parameters(); }

  // The mean loss of one batch, forward and backward; gradients added to the parameters.
  double step(const Tensor& ids, const Tensor& targets) {
    const std::int64_t B = ids.size(0), T = ids.size(1);
    Tensor& table = wte_->parameter("weight").value;
    const std::int64_t C = table.size(1);
    // The token and position embeddings (whole on every rank), then the blocks.
    std::vector<std::int64_t> positions(static_cast<std::size_t>(T));
    for (std::int64_t t = 0; t < T; ++t) positions[static_cast<std::size_t>(t)] = t;
    Tensor x = wte_->forward(ids);
    const Tensor pos = wpe_->forward(Tensor::from_vector(positions, {T}, ids.device()));
    Tensor flat = x.reshape({B, T * C});
    add_rowwise_(flat, pos.reshape({T * C}));
    if (sp_) x = tpar::scatter_sequence(x, group_);
    for (auto& b : blocks_) x = b->forward(x);
    if (sp_) x = tpar::gather_sequence(x, group_);
    const Tensor hidden = ln_f_->forward(x).reshape({B * T, C});
    // The head: this rank's rows of the padded table (the padding rows zero).
    Tensor w_r = Tensor::zeros({rows_.size(), C}, table.dtype(), table.device());
    const std::int64_t real_end = std::min(rows_.end, vocab_);
    if (real_end > rows_.begin) {
      Tensor dst = w_r.slice(0, real_end - rows_.begin);
      copy_(dst, table.slice(rows_.begin, real_end));
    }
    const Tensor logits_r = matmul(hidden, w_r, false, true);
    Tensor grad_r;
    const double loss = tpar::vocab_parallel_cross_entropy(logits_r, targets.reshape({B * T}), rows_,
                                                           vocab_, group_, &grad_r);
    // Backward: the hidden state's gradient is a sum over the vocabulary slices (the head
    // is column-parallel: one all-reduce), the head's table rows are this rank's.
    Tensor d_hidden = matmul(grad_r, w_r);
    group_.all_reduce(d_hidden, dist::ReduceOp::sum).wait();
    Tensor head_grad = Tensor::zeros({padded_, C}, table.dtype(), table.device());
    Tensor mine = head_grad.slice(rows_.begin, rows_.end);
    copy_(mine, matmul(grad_r, hidden, true, false));
    group_.all_reduce(head_grad, dist::ReduceOp::sum).wait();
    add_(wte_->parameter("weight").grad, head_grad.slice(0, vocab_));
    Tensor dx = ln_f_->backward(d_hidden.reshape({B, T, C}));
    if (sp_) dx = tpar::scatter_sequence(dx, group_);  // every rank holds the same whole dx
    for (std::size_t l = blocks_.size(); l-- > 0;) dx = blocks_[l]->backward(dx);
    if (sp_) {
      dx = tpar::gather_sequence(dx, group_);
      for (auto& b : blocks_) tpar::all_reduce_replicated_grads(*b, b->replicated_parameter_names(), group_);
    }
    wpe_->backward(sum(dx.reshape({B, T * C}), 0).reshape({T, C}));
    wte_->backward(dx);
    return loss;
  }

 private:
  dist::ProcessGroup& group_;
  bool sp_;
  std::int64_t vocab_, padded_;
  tpar::ShardRange rows_;
  std::shared_ptr<nn::Module> wte_, wpe_, ln_f_;
  std::vector<std::shared_ptr<tpar::ParallelBlock>> blocks_;
  Parts parts_;
};

// The unsplit model's mean loss of one batch, forward and backward.
double full_step(nn::GPT& model, const Tensor& ids, const Tensor& targets) {
  const Tensor logits = model.forward(ids);
  const std::int64_t V = logits.size(2), N = logits.numel() / V;
  Tensor probs;
  const double loss = softmax_cross_entropy(logits.reshape({N, V}), targets.reshape({N}), &probs)
                          .to_vector<double>()[0];
  model.backward(softmax_cross_entropy_backward(probs, targets.reshape({N})).reshape(logits.shape()));
  return loss;
}

int train(const Flags& f) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  std::shared_ptr<dist::ProcessGroup> world = app::quiet_cpu_group();
  const int W = world->size(), rank = world->rank(), P = f.tp == 0 ? W : f.tp;
  MGPU_CHECK(P >= 1 && W % P == 0, "--tp ", P, " does not divide the ", W,
             " rank(s); start a multiple of --tp ranks (tools/mpirun -np N)");
  const int D = W / P;  // data-parallel replicas (lesson 11's grid: TP groups of consecutive ranks)
  const tpar::GridPosition me = tpar::grid_position(W, P, rank);
  dist::GroupOptions quiet;
  quiet.announce = false;
  std::shared_ptr<dist::ProcessGroup> group, dp_group;  // this rank's TP and DP groups
  for (int first = 0; first < W; first += P)  // new_group is collective: every rank, every group
    if (auto g = dist::new_group(tpar::grid_position(W, P, first).tp_group, "mpi", Device::cpu(), quiet)) group = g;
  for (int t = 0; t < P; ++t)
    if (auto g = dist::new_group(tpar::grid_position(W, P, t).dp_group, "mpi", Device::cpu(), quiet)) dp_group = g;
  MGPU_CHECK(group && dp_group, "rank ", rank, " found no group of its own");
  const DType dtype = f.dtype == "f64" ? DType::f64 : DType::f32;
  const data::TextCorpus corpus = f.data == "synthetic" ? data::TextCorpus::synthetic(200000, f.seed)
                                  : f.data == "shakespeare" ? data::TextCorpus::load(data::TextCorpus::kDefaultPath)
                                                            : data::TextCorpus::load(f.data);
  const data::TextLoader loader(corpus.train, f.batch, f.seq, f.seed);
  nn::GPTConfig config = nn::GPTConfig::tiny(corpus.tokenizer.vocab_size());
  MGPU_CHECK(f.seq <= config.block_size, "--seq ", f.seq, " exceeds gpt-tiny's block_size ", config.block_size);
  MGPU_CHECK(!f.sp || f.seq % P == 0, "--sp cuts T = ", f.seq, " over ", P, " ranks: it must divide it");
  nn::manual_seed(f.seed);
  nn::GPT full(config);
  full.to(dtype);
  TensorParallelGpt model(full, *group, f.sp);  // throws when P does not divide the 4 heads
  optim::AdamWOptions adam;
  adam.lr = f.lr;
  optim::AdamW optimizer(model.parameters(), adam);
  optim::AdamW full_optimizer(full.parameters(), adam);
  const std::int64_t Vp = tpar::padded_vocab(config.vocab_size, P);
  if (rank == 0) {
    std::printf("lesson 13: gpt-tiny (%s) over %d rank(s): %d-way tensor parallel%s x %d "
                "data-parallel replica(s), %s, %s\n",
                config.str().c_str(), W, P, f.sp ? " + sequence parallel" : "", D,
                f.dtype.c_str(), corpus.source.c_str());
    std::printf("vocabulary %lld padded to %lld (%lld padding row(s)), %lld rows per rank; "
                "parameters per rank %lld of %lld\n",
                static_cast<long long>(config.vocab_size), static_cast<long long>(Vp),
                static_cast<long long>(Vp - config.vocab_size), static_cast<long long>(Vp / P),
                static_cast<long long>(model.num_parameters()), static_cast<long long>(full.num_parameters()));
  }
  double worst = 0.0, loss = 0.0, ref = 0.0;
  std::vector<std::string> names;  // every parameter: DP averages them all
  for (const auto& [name, p] : model.named_parameters()) names.push_back(name);
  for (std::int64_t s = 0; s < f.steps; ++s) {
    // Replica d reads batch s·D + d: D batches per step, as one process reading them all.
    const data::TextBatch batch = loader.batch(s * D + me.dp_rank);
    model.zero_grad();
    reset_peak_memory(Device::cpu());
    const std::size_t base = memory_stats(Device::cpu()).allocated;
    const std::int64_t before = group->collectives_issued() + dp_group->collectives_issued();
    loss = model.step(batch.inputs, batch.targets);
    const std::size_t peak = memory_stats(Device::cpu()).peak_allocated - base;
    if (D > 1) {  // data parallelism: the mean gradient and loss over the replicas
      tpar::all_reduce_replicated_grads(model.parts(), names, *dp_group);  // one all-reduce
      for (nn::Parameter* p : model.parameters()) scale_(p->grad, 1.0 / D);
      Tensor l = Tensor::from_vector(std::vector<double>{loss / D}, {1});
      dp_group->all_reduce(l, dist::ReduceOp::sum).wait();
      loss = l.to_vector<double>()[0];
    }
    const std::int64_t collectives =
        group->collectives_issued() + dp_group->collectives_issued() - before;
    optimizer.step();
    if (f.check) {  // the unsplit model on all D batches, their gradients averaged
      full.zero_grad();
      ref = 0.0;
      for (int d = 0; d < D; ++d) {
        const data::TextBatch b = loader.batch(s * D + d);
        ref += full_step(full, b.inputs, b.targets) / D;
      }
      if (D > 1)
        for (nn::Parameter* p : full.parameters()) scale_(p->grad, 1.0 / D);
      full_optimizer.step();
      worst = std::max(worst, std::abs(loss - ref));
    }
    if (rank == 0) {
      std::printf("step %lld loss %.6f", static_cast<long long>(s), loss);
      if (f.check) std::printf(" one process %.6f |diff| %.2e", ref, std::abs(loss - ref));
      std::printf(" collectives %lld peak step memory %.1f KiB (rank 0; the unsplit model's "
                  "step not included)\n",
                  static_cast<long long>(collectives), static_cast<double>(peak) / 1024.0);
    }
  }
  if (rank == 0) {
    std::printf("final: loss %.6f", loss);
    if (f.check) std::printf(" one process %.6f largest |diff| %.2e", ref, worst);
    std::printf("\n");
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  CLI::App cli{"Lesson 13: train gpt-tiny with tensor parallelism inside groups of --tp ranks "
               "(it must divide the 4 heads), optionally with sequence parallelism, and data "
               "parallelism across them (start it with tools/mpirun -np N), beside the unsplit "
               "model."};
  cli.add_option("--data", f.data, "synthetic, shakespeare or a text file")->capture_default_str();
  cli.add_option("--steps", f.steps, "optimizer steps")->capture_default_str();
  cli.add_option("--batch-size", f.batch, "windows per step")->capture_default_str();
  cli.add_option("--seq", f.seq, "tokens per window (T); a multiple of the ranks with --sp")->capture_default_str();
  cli.add_option("--lr", f.lr, "AdamW's learning rate")->capture_default_str();
  cli.add_option("--seed", f.seed, "weights and batches")->capture_default_str();
  cli.add_option("--tp", f.tp, "ranks of each tensor-parallel group (consecutive ranks); it must "
                 "divide the ranks started, the rest are data-parallel replicas (0: every rank, "
                 "one group)")->capture_default_str();
  cli.add_flag("--sp,!--no-sp", f.sp, "sequence parallelism in the LayerNorm regions");
  cli.add_flag("--check,!--no-check", f.check, "also train the unsplit model and print its loss");
  cli.add_option("--dtype", f.dtype, "f32 or f64")->check(CLI::IsMember({"f32", "f64"}))->capture_default_str();
  MGPU_PARSE_FLAGS(cli, argc, argv);
  return app::run_distributed(&argc, &argv, [&] { return train(f); });
}
