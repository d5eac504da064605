// train: lesson 13's program. gpt-tiny (lesson 12) split over tensor-parallel groups: the
// blocks are ParallelBlocks (attention by heads, the MLP by hidden features; with --sp the
// LayerNorm regions cut along T), the token embedding is vocabulary-parallel (the library's
// VocabParallelEmbedding: this rank's rows of the table, padded to a multiple of the ranks),
// the head tied to it computes this rank's columns of the logits, and the loss is the
// vocabulary-parallel cross-entropy (task 2), so no rank ever holds the full B·T·V logits.
// With --check (the default) every rank also trains the unsplit nn::GPT from the same seed
// on the same batches and prints both losses; in f64 they agree to 2e-15, in f32 to
// about 1e-5.
//
//   tools/mpirun -np 2 build/solutions/13_tp_sp/train --tp 2 --data synthetic --steps 20
//   tools/mpirun -np 4 build/solutions/13_tp_sp/train --tp 4 --data synthetic --steps 20 --sp
//   tools/mpirun -np 4 build/solutions/13_tp_sp/train --tp 2 --data synthetic --steps 20 --sp
//                                            (2 x 2: TP inside, data parallelism across)
//   tools/mpirun -np 2 build/solutions/13_tp_sp/train --data synthetic --steps 4 --dtype f64
//   tools/mpirun -np 4 build/solutions/13_tp_sp/train --data synthetic --steps 20 --sp --regather
//                                            (the column inputs all-gathered again in the backward)
//
// With more ranks than --tp, lesson 11's grid: TP groups of consecutive ranks, data-parallel
// groups of every tp-th; replica d reads batch s·D + d and lesson 05's DistributedDataParallel,
// over the DP group, averages the gradients in buckets while the backward runs (the
// reference reads all D batches). Under SP the replicated parameters' partial gradients are
// then summed over the TP group (task 4).
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
#include "mgpu/parallel/ddp/ddp.h"
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
  bool sp = false, regather = false, check = true;
  std::string dtype = "f32";
};

// gpt-tiny cut for this rank, under the full model's parameter names: a vocabulary-parallel
// token embedding, the position embedding and final LayerNorm replicated, ParallelBlocks,
// and the head tied to the embedding's rows. forward(ids [B, T]) gives this rank's columns
// of the logits, [B·T, Vp/P]; backward(their gradient) adds every parameter's gradient.
class TensorParallelGpt : public nn::Module {
 public:
  TensorParallelGpt(nn::GPT& full, dist::ProcessGroup& group, bool sp, bool regather)
      : group_(group), sp_(sp), regather_(regather), n_head_(full.config().n_head) {
    const auto& kids = full.children();
    wte_ = std::make_shared<tpar::VocabParallelEmbedding>(*kids.front().second, group);
    wpe_ = kids.at(1).second->clone();
    ln_f_ = kids.back().second->clone();
    register_module(kids.front().first, wte_);
    register_module(kids.at(1).first, wpe_);
    for (std::size_t i = 2; i + 1 < kids.size(); ++i) {
      blocks_.push_back(std::make_shared<tpar::ParallelBlock>(static_cast<nn::Block&>(*kids[i].second), group, sp));
      blocks_.back()->set_regather_in_backward(regather);  // throws without SP
      register_module(kids[i].first, blocks_.back());
    }
    register_module(kids.back().first, ln_f_);
  }

  Tensor forward(const Tensor& ids) override {
    const std::int64_t B = ids.size(0), T = ids.size(1);
    const Tensor& table = wte_->parameter("weight").value;  // this rank's rows [Vp/P, C]
    const std::int64_t C = table.size(1);
    // The token embedding (one all-reduce: each token's row comes from its owner) plus the
    // positions', whole on every rank; then the blocks.
    std::vector<std::int64_t> positions(static_cast<std::size_t>(T));
    for (std::int64_t t = 0; t < T; ++t) positions[static_cast<std::size_t>(t)] = t;
    Tensor x = wte_->forward(ids);
    const Tensor pos = wpe_->forward(Tensor::from_vector(positions, {T}, ids.device()));
    Tensor flat = x.reshape({B, T * C});
    add_rowwise_(flat, pos.reshape({T * C}));
    if (sp_) x = tpar::scatter_sequence(x, group_);
    kept_ = 0;  // what the blocks keep for the backward, each block's input left out (§3)
    for (auto& b : blocks_) {
      const std::size_t before = memory_stats(x.device()).allocated;
      Tensor y = b->forward(x);
      kept_ += memory_stats(x.device()).allocated - before - y.nbytes();
      x = std::move(y);
    }
    if (sp_) x = tpar::gather_sequence(x, group_);
    hidden_ = ln_f_->forward(x).reshape({B * T, C});
    shape_ = {B, T, C};
    // The head: this rank's rows of the padded table (the padding rows zero), so this
    // rank's columns of the logits; task 2's loss reads them where they are.
    return matmul(hidden_, table, false, true);
  }

  Tensor backward(const Tensor& grad_r) override {
    // The hidden state's gradient is a sum over the vocabulary slices (the head is
    // column-parallel: one all-reduce); the head's share of the table's gradient falls on
    // this rank's rows, added before the embedding's backward declares it final.
    nn::Parameter& table = wte_->parameter("weight");
    Tensor d_hidden = matmul(grad_r, table.value);
    group_.all_reduce(d_hidden, dist::ReduceOp::sum).wait();
    add_(table.grad, matmul(grad_r, hidden_, true, false));
    hidden_ = Tensor();
    Tensor dx = ln_f_->backward(d_hidden.reshape(shape_));
    if (sp_) dx = tpar::scatter_sequence(dx, group_);  // every rank holds the same whole dx
    for (std::size_t l = blocks_.size(); l-- > 0;) dx = blocks_[l]->backward(dx);
    if (sp_) dx = tpar::gather_sequence(dx, group_);
    const std::int64_t B = shape_[0], T = shape_[1], C = shape_[2];
    wpe_->backward(sum(dx.reshape({B, T * C}), 0).reshape({T, C}));
    wte_->backward(dx);
    return Tensor();  // ids have no gradient
  }

  // Under SP the LayerNorms' and row biases' gradients are partial sums over the TP group:
  // sum them (task 4), after any data-parallel averaging (both are sums; they commute).
  void reduce_replicated_grads() {
    if (!sp_) return;
    for (auto& b : blocks_) tpar::all_reduce_replicated_grads(*b, b->replicated_parameter_names(), group_);
  }

  // Bytes the blocks' last training forward kept for the backward on this rank.
  std::size_t kept_bytes() const { return kept_; }
  // §3's formula for the same, per rank: TP 3NC + 4N + (12NC + B·H·T²)/P values per
  // block, TP+SP 2NC + (13NC + 4N + B·H·T²)/P, with the re-gather (15NC + 4N + B·H·T²)/P.
  double kept_formula(std::int64_t B, std::int64_t T, std::size_t value_bytes) const {
    const double N = static_cast<double>(B * T), C = static_cast<double>(shape_.back()),
                 H = static_cast<double>(n_head_), P = group_.size(), att = B * H * T * T;
    const double per_block = regather_ ? (15 * N * C + 4 * N + att) / P
                             : sp_     ? 2 * N * C + (13 * N * C + 4 * N + att) / P
                                       : 3 * N * C + 4 * N + (12 * N * C + att) / P;
    return per_block * static_cast<double>(blocks_.size() * value_bytes);
  }
  // The vocabulary: the real one and this rank's rows of the padded one.
  std::int64_t vocab() const { return wte_->vocab(); }
  tpar::ShardRange rows() const { return wte_->rows(); }

  std::shared_ptr<nn::Module> clone() const override { MGPU_FAIL("TensorParallelGpt: not cloned"); }
  std::string describe() const override { return "TensorParallelGpt"; }

 private:
  dist::ProcessGroup& group_;
  bool sp_, regather_;
  std::int64_t n_head_;
  std::shared_ptr<tpar::VocabParallelEmbedding> wte_;
  std::shared_ptr<nn::Module> wpe_, ln_f_;
  std::vector<std::shared_ptr<tpar::ParallelBlock>> blocks_;
  Tensor hidden_;
  Shape shape_;
  std::size_t kept_ = 0;
};


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
  auto model = std::make_shared<TensorParallelGpt>(full, *group, f.sp, f.regather);  // throws when P does not divide the 4 heads
  // Data parallelism across the TP groups: lesson 05's DDP over this rank's DP group (the
  // replicas of the same shard), its buckets all-reduced while the backward runs.
  std::unique_ptr<parallel::DistributedDataParallel> ddp;
  if (D > 1) ddp = std::make_unique<parallel::DistributedDataParallel>(model, *dp_group);
  nn::Module& trained = ddp ? static_cast<nn::Module&>(*ddp) : *model;
  optim::AdamWOptions adam;
  adam.lr = f.lr;
  optim::AdamW optimizer(model->parameters(), adam);
  optim::AdamW full_optimizer(full.parameters(), adam);
  const std::int64_t Vp = tpar::padded_vocab(config.vocab_size, P);
  if (rank == 0) {
    std::printf("lesson 13: gpt-tiny (%s) over %d rank(s): %d-way tensor parallel%s x %d "
                "data-parallel replica(s)%s, %s, %s\n",
                config.str().c_str(), W, P,
                f.regather ? " + sequence parallel (inputs re-gathered in the backward)"
                : f.sp     ? " + sequence parallel" : "", D,
                D > 1 ? " (DDP over each DP group)" : "", f.dtype.c_str(), corpus.source.c_str());
    std::printf("vocabulary %lld padded to %lld (%lld padding row(s)), %lld rows per rank "
                "(embedding and head); parameters per rank %lld of %lld\n",
                static_cast<long long>(config.vocab_size), static_cast<long long>(Vp),
                static_cast<long long>(Vp - config.vocab_size), static_cast<long long>(Vp / P),
                static_cast<long long>(model->num_parameters()), static_cast<long long>(full.num_parameters()));
  }
  const std::size_t value_bytes = dtype == DType::f64 ? 8 : 4;
  const tpar::ShardRange rows = model->rows();
  double worst = 0.0, loss = 0.0, ref = 0.0;
  for (std::int64_t s = 0; s < f.steps; ++s) {
    // Replica d reads batch s·D + d: D batches per step, as one process reading them all.
    const data::TextBatch batch = loader.batch(s * D + me.dp_rank);
    const std::int64_t N = batch.inputs.numel();
    model->zero_grad();
    reset_peak_memory(Device::cpu());
    const std::size_t base = memory_stats(Device::cpu()).allocated;
    const std::int64_t tp_before = group->collectives_issued(), dp_before = dp_group->collectives_issued();
    // This rank's columns of the logits, [N, Vp/P], and task 2's loss over the TP group.
    const Tensor logits_r = trained.forward(batch.inputs);
    const std::size_t logits_bytes = logits_r.nbytes();
    Tensor grad_r;
    loss = tpar::vocab_parallel_cross_entropy(logits_r, batch.targets.reshape({N}), rows,
                                              model->vocab(), *group, &grad_r);
    trained.backward(grad_r);  // under DDP: the gradients averaged over the DP group
    const std::size_t peak = memory_stats(Device::cpu()).peak_allocated - base;
    model->reduce_replicated_grads();
    if (D > 1) {  // the mean loss over the replicas (for printing)
      Tensor l = Tensor::from_vector(std::vector<double>{loss / D}, {1});
      dp_group->all_reduce(l, dist::ReduceOp::sum).wait();
      loss = l.to_vector<double>()[0];
    }
    const std::int64_t tp_collectives = group->collectives_issued() - tp_before;
    const std::int64_t dp_collectives = dp_group->collectives_issued() - dp_before;
    optimizer.step();
    if (f.check) {  // the unsplit model on all D batches, their gradients averaged
      full.zero_grad();
      ref = 0.0;
      for (int d = 0; d < D; ++d) {
        const data::TextBatch b = loader.batch(s * D + d);
        ref += nn::gpt_loss_step(full, b.inputs, b.targets) / D;
      }
      if (D > 1)
        for (nn::Parameter* p : full.parameters()) scale_(p->grad, 1.0 / D);
      full_optimizer.step();
      worst = std::max(worst, std::abs(loss - ref));
    }
    if (rank == 0) {
      if (s == 0)
        std::printf("memory per rank (rank 0): logits %.1f KiB (N·Vp/P values; the full N·V "
                    "would be %.1f KiB), activations the blocks keep %.1f KiB (formula %.1f KiB)\n",
                    static_cast<double>(logits_bytes) / 1024.0,
                    static_cast<double>(N * config.vocab_size * static_cast<std::int64_t>(value_bytes)) / 1024.0,
                    static_cast<double>(model->kept_bytes()) / 1024.0,
                    model->kept_formula(batch.inputs.size(0), batch.inputs.size(1), value_bytes) / 1024.0);
      std::printf("step %lld loss %.6f", static_cast<long long>(s), loss);
      if (f.check) std::printf(" one process %.6f |diff| %.2e", ref, std::abs(loss - ref));
      std::printf(" collectives TP %lld", static_cast<long long>(tp_collectives));
      if (D > 1) std::printf(" DP %lld", static_cast<long long>(dp_collectives));
      std::printf(" peak step memory %.1f KiB (rank 0; the unsplit model's step not included)\n",
                  static_cast<double>(peak) / 1024.0);
    }
  }
  if (ddp && rank == 0) {  // the buckets after the rebuild (every parameter of this rank's shard)
    std::printf("DDP over each DP group: %zu bucket(s):", ddp->reducer().num_buckets());
    for (std::size_t b = 0; b < ddp->reducer().num_buckets(); ++b)
      std::printf(" %.3f MiB", static_cast<double>(ddp->reducer().bucket_bytes(b)) / (1024.0 * 1024.0));
    std::printf("\n");
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
  cli.add_flag("--regather", f.regather, "with --sp: keep only this rank's tokens of the column "
               "products' inputs and all-gather them again in the backward (Megatron-LM's)");
  cli.add_flag("--check,!--no-check", f.check, "also train the unsplit model and print its loss");
  cli.add_option("--dtype", f.dtype, "f32 or f64")->check(CLI::IsMember({"f32", "f64"}))->capture_default_str();
  MGPU_PARSE_FLAGS(cli, argc, argv);
  return app::run_distributed(&argc, &argv, [&] { return train(f); });
}
