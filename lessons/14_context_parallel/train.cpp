// train: lesson 14's program. gpt-tiny (lesson 12) with its sequence split over the ranks
// of a group of --cp ranks: context parallelism. Every rank holds the whole model and its
// own positions of every window (plain blocks or, with --split zigzag, a head chunk and a
// tail chunk); everything but attention is token-wise and runs on those positions alone;
// attention is ring attention (tasks 1-4), or with --allgather the all-gather-K/V baseline.
// Each rank's gradients cover its tokens only, so they must be combined over the CP group.
// With more ranks than --cp, CP groups of consecutive ranks and data parallelism across
// them: replica d reads batch s·D + d. CP and DP reduce together (as Megatron-LM does):
// lesson 05's DistributedDataParallel over the group of ranks that hold the same
// parameters (every CP rank of every replica) averages the gradients in buckets while the
// backward runs; the average of the P·D ranks' per-token means is the mean over all
// D·B·T tokens. With --tp N each CP rank is itself N ranks of lesson 13's tensor
// parallelism (TP inside, CP across): the projections and the MLP split by heads and
// features over the TP group, ring attention on this TP rank's heads over the CP group;
// DDP's group is then the CP x DP ranks of one TP position. With --check (the default)
// every rank also trains the unsplit nn::GPT on the same batches and prints both losses;
// in f64 they agree to about 1e-15, in f32 to about 1e-7.
//
//   tools/mpirun -np 2 build/solutions/14_context_parallel/train --cp 2 --steps 10
//   tools/mpirun -np 4 build/solutions/14_context_parallel/train --cp 2 --steps 10
//                                     (2 x 2: CP inside, data parallelism across)
//   tools/mpirun -np 8 build/solutions/14_context_parallel/train --tp 2 --cp 2 --steps 10
//                                     (2 TP x 2 CP x 2 DP)
//   tools/mpirun -np 4 build/solutions/14_context_parallel/train --seq 1024 --batch-size 1
//                                     --steps 3 --no-check      (a long context)
//
// Memory per rank: the blocks keep 15·N_r·C + 4·N_r values per block (N_r = B·T/P tokens,
// §6), plus the ring's merged result in f64, N_r·C + B·H·T/P values; never the B·H·T²
// probabilities of lesson 12's attention.
#include <time.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "mgpu/allocator.h"
#include "mgpu/app/app.h"
#include "mgpu/app/clock.h"
#include "mgpu/copy.h"
#include "mgpu/data/text.h"
#include "mgpu/dist/dist.h"
#include "mgpu/nn/gpt.h"
#include "mgpu/nn/init.h"
#include "mgpu/ops.h"
#include "mgpu/optim/adamw.h"
#include "mgpu/parallel/cp/ring_attention.h"
#include "mgpu/parallel/ddp/ddp.h"
#include "mgpu/parallel/tp/parallel_block.h"

namespace {

using namespace mgpu;
namespace cp = mgpu::parallel::cp;
namespace tpar = mgpu::parallel::tp;

struct Flags {
  std::string data = "synthetic";
  std::int64_t steps = 10, batch = 4, seq = 64;
  double lr = 1e-3;
  std::uint64_t seed = 1337;
  std::string split = "zigzag";
  int cp = 0;  // 0: every rank (no data parallelism)
  int tp = 1;  // tensor-parallel ranks inside each CP rank
  bool allgather = false, check = true;
  std::string dtype = "f32";
};

// Columns `pos` of a [B, T] tensor of token ids: [B, pos.size()].
Tensor take_columns(const Tensor& ids, const std::vector<std::int64_t>& pos) {
  const std::int64_t B = ids.size(0), T = ids.size(1), n = static_cast<std::int64_t>(pos.size());
  const std::vector<std::int64_t> all = ids.to_vector<std::int64_t>();
  std::vector<std::int64_t> out(static_cast<std::size_t>(B * n));
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t i = 0; i < n; ++i) out[b * n + i] = all[b * T + pos[i]];
  return Tensor::from_vector(out, {B, n});
}

// CPU seconds of the calling thread: unlike the wall clock, not stretched by other
// processes sharing the cores.
double thread_cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// The highest allocation seen before the last reset_peak_memory of a step (the attention
// core resets the peak to measure its own).
std::size_t g_carried_peak = 0;

// Sums `t` over `g` in place (nothing to do on one rank).
void all_reduce_sum(Tensor& t, dist::ProcessGroup& g) {
  if (g.size() > 1) g.all_reduce(t, dist::ReduceOp::sum).wait();
}

// Self-attention over this rank's tokens [B, T/P, C] whose keys and values are the whole
// sequence's: the core is ring attention (or the all-gather baseline) over the CP group.
// The projections are lesson 13's tensor-parallel ones over the TP group (this TP rank's
// heads: c_attn column-parallel, c_proj row-parallel, one all-reduce each way; with one TP
// rank they are the full layer's and nothing is reduced).
class ContextParallelAttention : public nn::Module {
 public:
  ContextParallelAttention(nn::CausalSelfAttention& full, dist::ProcessGroup& group,
                           dist::ProcessGroup& tp_group, cp::Split split, bool allgather)
      : group_(group), tp_group_(tp_group), split_(split), allgather_(allgather) {
    tpar::ParallelSelfAttention heads(full, tp_group);  // throws unless TP divides the heads
    heads_ = heads.local_heads();
    register_module("c_attn", heads.children().at(0).second);
    register_module("c_proj", heads.children().at(1).second);
  }
  Tensor forward(const Tensor& x) override {
    const std::int64_t B = x.size(0), T = x.size(1), C = x.size(2), H = heads_;
    const std::int64_t D = child_at(0)->parameter("weight").value.size(0) / (3 * H);
    const Tensor qkv = child_at(0)->forward(x.reshape({B * T, C}));
    auto [q, k, v] = nn::split_heads(qkv, B, T, H, D);
    // The core's own peak: what it allocates beyond its inputs while it runs (blocks in
    // flight, or the gathered K and V), its result included.
    const Device dev = x.device();
    g_carried_peak = std::max(g_carried_peak, memory_stats(dev).peak_allocated);
    const std::size_t before = memory_stats(dev).allocated;
    reset_peak_memory(dev);
    const double c0 = thread_cpu_s();
    cp::CpForward f = allgather_ ? cp::allgather_attention_forward(q, k, v, split_, true, group_)
                                 : cp::ring_attention_forward(q, k, v, split_, true, group_);
    core_cpu_s_ += thread_cpu_s() - c0;
    core_peak_ = std::max(core_peak_, memory_stats(dev).peak_allocated - before);
    const Tensor merged = nn::merge_heads(f.out, B, T, H, D);
    work_ = f.work;
    f.out = Tensor();  // merge_heads copied it; the backward needs the f64 result only
    saved_.push_back({q, k, v, std::move(f), B, T});
    Tensor y = child_at(1)->forward(merged);  // this TP rank's partial sum, no bias
    all_reduce_sum(y, tp_group_);
    add_rowwise_(y, child_at(1)->parameter("bias").value);
    return y.reshape({B, T, C});
  }
  Tensor backward(const Tensor& grad_out) override {
    Saved s = std::move(saved_.back());
    saved_.pop_back();
    const std::int64_t B = s.B, T = s.T, C = grad_out.size(2), H = heads_, D = s.q.size(2);
    const Tensor dy = grad_out.reshape({B * T, C});
    nn::Parameter& bias = child_at(1)->parameter("bias");
    add_(bias.grad, sum(dy, 0));  // the bias added after the sum
    bias.notify_grad_ready();     // final for this backward (DDP's hooks, lesson 05)
    const Tensor d_merged = child_at(1)->backward(dy);
    const Tensor d_core = nn::merge_heads_backward(d_merged, B, T, H, D);
    const double c0 = thread_cpu_s();
    const nn::AttentionGrads g =
        allgather_ ? cp::allgather_attention_backward(d_core, s.q, s.k, s.v, s.f, split_, true, group_)
                   : cp::ring_attention_backward(d_core, s.q, s.k, s.v, s.f, split_, true, group_);
    core_cpu_s_ += thread_cpu_s() - c0;
    const Tensor d_qkv = nn::split_heads_backward(g, B, T, H, D, grad_out.dtype());
    Tensor dx = child_at(0)->backward(d_qkv);  // this TP rank's heads' share
    all_reduce_sum(dx, tp_group_);
    return dx.reshape({B, T, C});
  }
  std::shared_ptr<nn::Module> clone() const override { MGPU_FAIL("ContextParallelAttention: not cloned"); }
  std::string describe() const override { return "ContextParallelAttention"; }
  std::int64_t work() const { return work_; }  // score entries of the last forward
  std::size_t core_peak() const { return core_peak_; }  // the largest core_peak of a forward
  double core_cpu_s() const { return core_cpu_s_; }  // CPU seconds in the core so far

 private:
  struct Saved {
    Tensor q, k, v;
    cp::CpForward f;
    std::int64_t B = 0, T = 0;
  };
  dist::ProcessGroup& group_;
  dist::ProcessGroup& tp_group_;
  cp::Split split_;
  bool allgather_;
  std::int64_t heads_ = 0, work_ = 0;
  std::size_t core_peak_ = 0;
  double core_cpu_s_ = 0.0;
  std::vector<Saved> saved_;
};

// Lesson 13's tensor-parallel MLP on this rank's tokens: the partial sums all-reduced over
// the TP group, then the bias (one all-reduce each way; none with one TP rank).
class TensorParallelMlp : public nn::Module {
 public:
  TensorParallelMlp(nn::MLP& full, dist::ProcessGroup& tp_group) : tp_group_(tp_group) {
    register_module("mlp", std::make_shared<tpar::ParallelMLP>(full, tp_group));
  }
  Tensor forward(const Tensor& x) override {
    const std::int64_t B = x.size(0), T = x.size(1), C = x.size(2);
    Tensor y = child_at(0)->forward(x).reshape({B * T, C});
    all_reduce_sum(y, tp_group_);
    add_rowwise_(y, c_proj_bias().value);
    return y.reshape({B, T, C});
  }
  Tensor backward(const Tensor& grad_out) override {
    const std::int64_t C = grad_out.size(2);
    add_(c_proj_bias().grad, sum(grad_out.reshape({grad_out.numel() / C, C}), 0));
    c_proj_bias().notify_grad_ready();  // final for this backward (DDP's hooks, lesson 05)
    Tensor dx = child_at(0)->backward(grad_out);
    all_reduce_sum(dx, tp_group_);
    return dx;
  }
  std::shared_ptr<nn::Module> clone() const override { MGPU_FAIL("TensorParallelMlp: not cloned"); }
  std::string describe() const override { return "TensorParallelMlp"; }

 private:
  nn::Parameter& c_proj_bias() { return static_cast<tpar::ParallelMLP&>(*child_at(0)).c_proj().bias(); }
  dist::ProcessGroup& tp_group_;
};

// A GPT block on this rank's tokens: the full block's LayerNorms, the attention and the
// MLP above. The residual sums as nn::Block's.
class ContextParallelBlock : public nn::Module {
 public:
  ContextParallelBlock(nn::Block& full, dist::ProcessGroup& group, dist::ProcessGroup& tp_group,
                       cp::Split split, bool allgather) {
    const auto& kids = full.children();
    register_module("ln_1", kids.at(0).second->clone());
    register_module("attn", std::make_shared<ContextParallelAttention>(
                                static_cast<nn::CausalSelfAttention&>(*kids.at(1).second), group,
                                tp_group, split, allgather));
    register_module("ln_2", kids.at(2).second->clone());
    register_module("mlp", std::make_shared<TensorParallelMlp>(static_cast<nn::MLP&>(*kids.at(3).second),
                                                               tp_group));
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = add(x, child_at(1)->forward(child_at(0)->forward(x)));
    return add(h, child_at(3)->forward(child_at(2)->forward(h)));
  }
  Tensor backward(const Tensor& grad_out) override {
    Tensor dh = grad_out.clone();
    add_(dh, child_at(2)->backward(child_at(3)->backward(grad_out)));
    Tensor dx = dh.clone();
    add_(dx, child_at(0)->backward(child_at(1)->backward(dh)));
    return dx;
  }
  std::shared_ptr<nn::Module> clone() const override { MGPU_FAIL("ContextParallelBlock: not cloned"); }
  std::string describe() const override { return "ContextParallelBlock"; }
  std::int64_t work() const { return attn().work(); }
  std::size_t core_peak() const { return attn().core_peak(); }
  double core_cpu_s() const { return attn().core_cpu_s(); }

 private:
  ContextParallelAttention& attn() const {
    return static_cast<ContextParallelAttention&>(*children().at(1).second);
  }
};

// gpt-tiny on this rank's positions of each window: the embeddings, the blocks above, the
// final LayerNorm and the tied head, all replicated. forward(ids_r [B, T/P]) gives the
// logits of this rank's tokens [B·T/P, V].
class ContextParallelGpt : public nn::Module {
 public:
  ContextParallelGpt(nn::GPT& full, dist::ProcessGroup& group, dist::ProcessGroup& tp_group,
                     cp::Split split, bool allgather)
      : n_head_(full.config().n_head) {
    const auto& kids = full.children();
    register_module(kids.front().first, kids.front().second->clone());
    register_module(kids.at(1).first, kids.at(1).second->clone());
    for (std::size_t i = 2; i + 1 < kids.size(); ++i) {
      blocks_.push_back(std::make_shared<ContextParallelBlock>(static_cast<nn::Block&>(*kids[i].second),
                                                               group, tp_group, split, allgather));
      register_module(kids[i].first, blocks_.back());
    }
    register_module(kids.back().first, kids.back().second->clone());
  }

  // positions: the global positions of ids_r's columns.
  void set_positions(std::vector<std::int64_t> positions) { positions_ = std::move(positions); }

  Tensor forward(const Tensor& ids) override {
    const std::int64_t B = ids.size(0), T = ids.size(1);
    nn::Parameter& table = child_at(0)->parameter("weight");
    const std::int64_t C = table.value.size(1);
    Tensor x = child_at(0)->forward(ids);
    const Tensor pos = child_at(1)->forward(Tensor::from_vector(positions_, {T}, ids.device()));
    Tensor flat = x.reshape({B, T * C});
    add_rowwise_(flat, pos.reshape({T * C}));
    kept_ = 0;  // what the blocks keep for the backward, each block's input left out
    for (auto& b : blocks_) {
      const std::size_t before = memory_stats(x.device()).allocated;
      Tensor y = b->forward(x);
      kept_ += memory_stats(x.device()).allocated - before - y.nbytes();
      x = std::move(y);
    }
    hidden_ = child_at(num_children() - 1)->forward(x).reshape({B * T, C});
    shape_ = {B, T, C};
    return matmul(hidden_, table.value, false, true);
  }

  Tensor backward(const Tensor& grad) override {
    nn::Parameter& table = child_at(0)->parameter("weight");
    matmul_out(table.grad, grad, hidden_, true, false, 1.0, 1.0);
    Tensor dx = matmul(grad, table.value).reshape(shape_);
    hidden_ = Tensor();
    dx = child_at(num_children() - 1)->backward(dx);
    for (std::size_t l = blocks_.size(); l-- > 0;) dx = blocks_[l]->backward(dx);
    const std::int64_t B = shape_[0], T = shape_[1], C = shape_[2];
    child_at(1)->backward(sum(dx.reshape({B, T * C}), 0).reshape({T, C}));
    child_at(0)->backward(dx);
    return Tensor();
  }

  std::size_t kept_bytes() const { return kept_; }
  // The formula for the same: per block 15·N_r·C + 4·N_r values, and the ring's merged
  // result in f64, N_r·C + B·H·T_r values (N_r = B·T_r tokens of this rank).
  double kept_formula(std::int64_t B, std::int64_t Tr, std::size_t value_bytes) const {
    const double N = static_cast<double>(B * Tr), C = static_cast<double>(shape_.back());
    const double per_block = (15 * N * C + 4 * N) * static_cast<double>(value_bytes) +
                             (N * C + static_cast<double>(B * n_head_ * Tr)) * 8.0;
    return per_block * static_cast<double>(blocks_.size());
  }
  // The attention core's largest transient allocation in a forward, over the layers.
  std::size_t core_peak() const {
    std::size_t p = 0;
    for (const auto& b : blocks_) p = std::max(p, b->core_peak());
    return p;
  }
  // CPU seconds this rank spent in the attention core (forward and backward) so far.
  double core_cpu_s() const {
    double t = 0;
    for (const auto& b : blocks_) t += b->core_cpu_s();
    return t;
  }
  std::int64_t work() const {
    std::int64_t w = 0;
    for (const auto& b : blocks_) w += b->work();
    return w;
  }

  std::shared_ptr<nn::Module> clone() const override { MGPU_FAIL("ContextParallelGpt: not cloned"); }
  std::string describe() const override { return "ContextParallelGpt"; }

 private:
  std::int64_t n_head_;
  std::vector<std::shared_ptr<ContextParallelBlock>> blocks_;
  std::vector<std::int64_t> positions_;
  Tensor hidden_;
  Shape shape_;
  std::size_t kept_ = 0;
};


int train(const Flags& f) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  std::shared_ptr<dist::ProcessGroup> world = app::quiet_cpu_group();
  const int W = world->size(), TP = f.tp;
  MGPU_CHECK(TP >= 1 && W % TP == 0, "--tp ", TP, " does not divide the ", W, " rank(s)");
  const int P = f.cp == 0 ? W / TP : f.cp;
  MGPU_CHECK(P >= 1 && W % (P * TP) == 0, "--cp ", P, " x --tp ", TP, " does not divide the ", W,
             " rank(s); start a multiple of their product (tools/mpirun -np N)");
  // The grid, TP fastest: world rank = (d·P + c)·TP + t for replica d, CP rank c, TP rank t.
  const int D = W / (P * TP), me = world->rank();
  const int t_me = me % TP, c_me = (me / TP) % P, replica = me / (TP * P);
  dist::GroupOptions quiet;
  quiet.announce = false;
  // new_group is collective: every rank creates every group, in the same order.
  std::shared_ptr<dist::ProcessGroup> group, tp_group, grad_group;  // CP, TP, same-shard groups
  for (int d = 0; d < D; ++d)
    for (int c = 0; c < P; ++c) {
      std::vector<int> ranks;
      for (int t = 0; t < TP; ++t) ranks.push_back((d * P + c) * TP + t);
      if (auto g = dist::new_group(ranks, "mpi", Device::cpu(), quiet)) tp_group = g;
    }
  for (int d = 0; d < D; ++d)
    for (int t = 0; t < TP; ++t) {
      std::vector<int> ranks;
      for (int c = 0; c < P; ++c) ranks.push_back((d * P + c) * TP + t);
      if (auto g = dist::new_group(ranks, "mpi", Device::cpu(), quiet)) group = g;
    }
  for (int t = 0; t < TP; ++t) {  // the same TP shard: every CP rank, every replica (DDP's group)
    std::vector<int> ranks;
    for (int r = t; r < W; r += TP) ranks.push_back(r);
    if (auto g = dist::new_group(ranks, "mpi", Device::cpu(), quiet)) grad_group = g;
  }
  MGPU_CHECK(group && tp_group && grad_group, "rank ", me, " found no group of its own");
  const int rank = group->rank();  // within the CP group
  MGPU_CHECK(rank == c_me && tp_group->rank() == t_me, "rank ", me, ": the grid's groups disagree");
  const cp::Split split = f.split == "plain" ? cp::Split::plain : cp::Split::zigzag;
  const DType dtype = f.dtype == "f64" ? DType::f64 : DType::f32;
  const data::TextCorpus corpus = f.data == "synthetic" ? data::TextCorpus::synthetic(200000, f.seed)
                                  : f.data == "shakespeare" ? data::TextCorpus::load(data::TextCorpus::kDefaultPath)
                                                            : data::TextCorpus::load(f.data);
  const data::TextLoader loader(corpus.train, f.batch, f.seq, f.seed);
  nn::GPTConfig config = nn::GPTConfig::tiny(corpus.tokenizer.vocab_size());
  config.block_size = std::max(config.block_size, f.seq);  // a long context: a longer position table
  // This rank's positions: refused here, on every rank, when --seq does not split.
  const std::vector<std::int64_t> positions = cp::sequence_positions(f.seq, P, rank, split);
  const std::int64_t Tr = static_cast<std::int64_t>(positions.size());
  nn::manual_seed(f.seed);
  nn::GPT full(config);
  full.to(dtype);
  auto model = std::make_shared<ContextParallelGpt>(full, *group, *tp_group, split, f.allgather);
  model->set_positions(positions);
  // CP and DP reduce together: lesson 05's DDP over the ranks that hold the same
  // parameters (the CP x DP ranks of this TP position), its buckets all-reduced while the
  // backward runs. It averages over those P·D ranks.
  std::unique_ptr<parallel::DistributedDataParallel> ddp;
  if (grad_group->size() > 1) ddp = std::make_unique<parallel::DistributedDataParallel>(model, *grad_group);
  nn::Module& trained = ddp ? static_cast<nn::Module&>(*ddp) : *model;
  optim::AdamWOptions adam;
  adam.lr = f.lr;
  optim::AdamW optimizer(model->parameters(), adam);
  optim::AdamW full_optimizer(full.parameters(), adam);
  if (world->rank() == 0)
    std::printf("lesson 14: gpt-tiny (%s) over %d rank(s): %d-way tensor parallel x %d-way "
                "context parallel x %d data-parallel replica(s); T = %lld cut %s into %lld "
                "positions per rank, attention %s%s, %s, %s\n",
                config.str().c_str(), W, TP, P, D, static_cast<long long>(f.seq), cp::split_name(split),
                static_cast<long long>(Tr), f.allgather ? "all-gather K/V" : "ring",
                ddp ? ", gradients by DDP over each CP x DP group" : "", f.dtype.c_str(), corpus.source.c_str());
  const std::size_t value_bytes = dtype == DType::f64 ? 8 : 4;
  double worst = 0.0, loss = 0.0, ref = 0.0, step_s = 0.0;
  for (std::int64_t s = 0; s < f.steps; ++s) {
    // Replica d reads batch s·D + d: D batches per step, as one process reading them all.
    const data::TextBatch batch = loader.batch(s * D + replica);
    const Tensor ids_r = take_columns(batch.inputs, positions);
    const Tensor targets_r = take_columns(batch.targets, positions);
    const std::int64_t N = ids_r.numel();
    model->zero_grad();
    reset_peak_memory(Device::cpu());
    g_carried_peak = 0;
    const std::size_t base = memory_stats(Device::cpu()).allocated;
    const std::int64_t cp_before = group->collectives_issued(), tp_before = tp_group->collectives_issued(),
                       grad_before = grad_group->collectives_issued();
    const double t0 = app::now_s();
    const Tensor logits = trained.forward(ids_r);
    Tensor probs;
    const double local = softmax_cross_entropy(logits, targets_r.reshape({N}), &probs).to_vector<double>()[0];
    // The mean over all D·B·T tokens: each rank's mean weighs 1/(P·D) (every rank has
    // B·T/P of its replica's B·T), which is DDP's average over the P·D ranks holding the
    // same TP shard (the whole world without TP). The TP ranks of one CP rank compute the
    // same loss from the same tokens.
    const Tensor grad = softmax_cross_entropy_backward(probs, targets_r.reshape({N}));
    trained.backward(grad);  // under DDP: the gradients averaged over the CP x DP group
    const std::size_t peak = std::max(g_carried_peak, memory_stats(Device::cpu()).peak_allocated) - base;
    const std::int64_t cp_collectives = group->collectives_issued() - cp_before;
    const std::int64_t tp_collectives = tp_group->collectives_issued() - tp_before;
    const std::int64_t grad_collectives = grad_group->collectives_issued() - grad_before;
    Tensor l = Tensor::from_vector(std::vector<double>{local / (P * D)}, {1});
    all_reduce_sum(l, *grad_group);
    loss = l.to_vector<double>()[0];
    optimizer.step();
    const double dt = app::now_s() - t0;
    if (s > 0 || f.steps == 1) step_s += dt;  // the first step warms the caches
    if (f.check) {
      full.zero_grad();  // the unsplit model on all D batches, their gradients averaged
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
    // The score entries each rank computed (per batch row and head, every layer): the
    // causal mask's load balance, plain against zigzag.
    std::vector<std::int64_t> work(static_cast<std::size_t>(P), 0);
    work[static_cast<std::size_t>(rank)] = model->work();
    Tensor w = Tensor::from_vector(work, {P});
    group->all_reduce(w, dist::ReduceOp::sum).wait();
    work = w.to_vector<std::int64_t>();
    if (world->rank() == 0) {
      if (s == 0) {
        char formula[64] = "not derived under TP";
        if (TP == 1)
          std::snprintf(formula, sizeof formula, "%.1f KiB",
                        model->kept_formula(f.batch, Tr, value_bytes) / 1024.0);
        std::printf("memory per rank (rank 0): activations the blocks keep %.1f KiB (formula "
                    "%s); the attention core's peak in a forward %.1f KiB\n",
                    static_cast<double>(model->kept_bytes()) / 1024.0, formula,
                    static_cast<double>(model->core_peak()) / 1024.0);
        std::printf("attention score entries per rank (per row and head, %lld layers):",
                    static_cast<long long>(config.n_layer));
        for (int r = 0; r < P; ++r)
          std::printf(" %lld (causal_work x layers %lld)", static_cast<long long>(work[r]),
                      static_cast<long long>(cp::causal_work(f.seq, P, r, split) * config.n_layer));
        std::printf("; largest / mean %.3f\n",
                    static_cast<double>(*std::max_element(work.begin(), work.end())) * P /
                        static_cast<double>(std::max<std::int64_t>(1, [&] {
                          std::int64_t t = 0;
                          for (auto x : work) t += x;
                          return t;
                        }())));
      }
      std::printf("step %lld loss %.6f", static_cast<long long>(s), loss);
      if (f.check) std::printf(" one process %.6f |diff| %.2e", ref, std::abs(loss - ref));
      std::printf(" collectives CP %lld TP %lld DDP %lld", static_cast<long long>(cp_collectives),
                  static_cast<long long>(tp_collectives), static_cast<long long>(grad_collectives));
      std::printf(" step %.3f s, %.0f tokens/s, peak step memory %.1f KiB (rank 0)\n", dt,
                  static_cast<double>(D * f.batch * f.seq) / dt, static_cast<double>(peak) / 1024.0);
    }
  }
  if (ddp && world->rank() == 0) {  // the buckets after the rebuild (every parameter of this rank's shard)
    std::printf("DDP over each CP x DP group (%d ranks): %zu bucket(s):", grad_group->size(),
                ddp->reducer().num_buckets());
    for (std::size_t b = 0; b < ddp->reducer().num_buckets(); ++b)
      std::printf(" %.3f MiB", static_cast<double>(ddp->reducer().bucket_bytes(b)) / (1024.0 * 1024.0));
    std::printf("\n");
  }
  {  // the attention core's CPU seconds per rank of this CP group: the load balance in time
    std::vector<double> cpu(static_cast<std::size_t>(P), 0.0);
    cpu[static_cast<std::size_t>(rank)] = model->core_cpu_s();
    Tensor c = Tensor::from_vector(cpu, {P});
    group->all_reduce(c, dist::ReduceOp::sum).wait();
    cpu = c.to_vector<double>();
    if (world->rank() == 0) {
      std::printf("attention core CPU seconds per rank, all steps, forward and backward:");
      for (double x : cpu) std::printf(" %.3f", x);
      std::printf("\n");
    }
  }
  if (world->rank() == 0) {
    const std::int64_t timed = f.steps > 1 ? f.steps - 1 : 1;
    std::printf("tokens/s over steps 1..%lld: %.0f\n", static_cast<long long>(timed),
                static_cast<double>(D * f.batch * f.seq * timed) / std::max(step_s, 1e-9));
    std::printf("final: loss %.6f", loss);
    if (f.check) std::printf(" one process %.6f largest |diff| %.2e", ref, worst);
    std::printf("\n");
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  CLI::App cli{"Lesson 14: train gpt-tiny with its sequence split over groups of --cp ranks "
               "(context parallelism: ring attention) and data parallelism across them (start "
               "it with tools/mpirun -np N), beside the unsplit model."};
  cli.add_option("--data", f.data, "synthetic, shakespeare or a text file")->capture_default_str();
  cli.add_option("--steps", f.steps, "optimizer steps")->capture_default_str();
  cli.add_option("--batch-size", f.batch, "windows per step")->capture_default_str();
  cli.add_option("--seq", f.seq, "tokens per window (T): a multiple of the ranks (plain) or of "
                 "twice the ranks (zigzag); beyond 128 the position table grows")->capture_default_str();
  cli.add_option("--lr", f.lr, "AdamW's learning rate")->capture_default_str();
  cli.add_option("--seed", f.seed, "weights and batches")->capture_default_str();
  cli.add_option("--cp", f.cp, "ranks of each context-parallel group (consecutive ranks); it must "
                 "divide the ranks started, the rest are data-parallel replicas (0: every rank, "
                 "one group)")->capture_default_str();
  cli.add_option("--tp", f.tp, "tensor-parallel ranks inside each CP rank (consecutive ranks; "
                 "they must divide the 4 heads): lesson 13's split of the projections and the "
                 "MLP, ring attention on this TP rank's heads")->capture_default_str();
  cli.add_option("--split", f.split, "plain or zigzag")->check(CLI::IsMember({"plain", "zigzag"}))->capture_default_str();
  cli.add_flag("--allgather,!--ring", f.allgather, "attention by all-gathering K and V (the "
               "baseline) instead of the ring");
  cli.add_flag("--check,!--no-check", f.check, "also train the unsplit model and print its loss");
  cli.add_option("--dtype", f.dtype, "f32 or f64")->check(CLI::IsMember({"f32", "f64"}))->capture_default_str();
  MGPU_PARSE_FLAGS(cli, argc, argv);
  return app::run_distributed(&argc, &argv, [&] { return train(f); });
}
