// A toy training run full of traps for a checkpoint, for the bit-identical resume tests of
// the library and of lesson 07: BatchNorm buffers (num_batches_tracked too), a Dropout RNG
// stream, a frozen parameter, momentum or Adam moments and step, a learning rate that
// changes every step, a shuffled DistributedSampler, DDP across the ranks of a group (or no
// wrapper at all in a world of 1), and short epochs (9, 5, 3 steps on 1, 2, 3 ranks) so that
// resumes fall mid-epoch and at epoch ends.
//
//   ToyTraining a(group, kind);  a.run_until(12);         // uninterrupted
//   ToyTraining b(group, kind);  b.run_until(7);  save b's state
//   ToyTraining c(group, kind);  restore into c;  c.run_until(12);   // a "restarted process"
//   then c's parameters and buffers are bit-identical to a's.
#pragma once

#include <cmath>
#include <functional>
#include <memory>

#include "mgpu/data/dataloader.h"
#include "mgpu/data/dataset.h"
#include "mgpu/io/checkpoint.h"
#include "mgpu/nn/all.h"
#include "mgpu/optim/all.h"
#include "mgpu/parallel/ddp/ddp.h"
#include "mgpu/parallel/ddp/distributed_sampler.h"

namespace mgpu::testing {

/// Which optimizer the toy run uses.
enum class ToyOptimizer { sgd_momentum, adamw };

/// Captures a run's state / restores it (the library's functions or a lesson's).
using CaptureFn = std::function<io::TrainingState(nn::Module&, const optim::Optimizer&,
                                                  const io::TrainingProgress&)>;
using RestoreFn = std::function<io::TrainingProgress(const io::TrainingState&, nn::Module&,
                                                     optim::Optimizer&)>;

class ToyTraining {
 public:
  static constexpr std::int64_t kBatch = 4;        // per rank
  // 35 samples: padded for 2 and 3 ranks, and no rank ever gets a last batch of 1 (which
  // BatchNorm cannot train on).
  static constexpr std::int64_t kSamples = 35;
  static constexpr std::int64_t kTotalSteps = 12;  // the cosine schedule's length
  static constexpr std::uint64_t kSeed = 5;

  /// Everything built as a program would build it from its flags (the same on a restart).
  /// `group` null: a world of 1 without DDP.
  ToyTraining(dist::ProcessGroup* group, ToyOptimizer kind) : group_(group) {
    const int world = group ? group->size() : 1, rank = group ? group->rank() : 0;
    nn::manual_seed(kSeed);
    model_ = std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
        std::make_shared<nn::Linear>(6, 16), std::make_shared<nn::BatchNorm1d>(16),
        std::make_shared<nn::ReLU>(), std::make_shared<nn::Dropout>(0.25),
        std::make_shared<nn::Linear>(16, 16), std::make_shared<nn::ReLU>(),
        std::make_shared<nn::Linear>(16, 3)});
    model_->parameter("4.bias").set_requires_grad(false);  // frozen: saved, never updated
    nn::Module* trained = model_.get();
    if (group_) {
      ddp_ = std::make_unique<parallel::DistributedDataParallel>(model_, *group_);
      trained = ddp_.get();
    }
    if (kind == ToyOptimizer::sgd_momentum)
      optimizer_ = std::make_unique<optim::SGD>(trained->parameters(), optim::SGDOptions{0.1, 0.9, 1e-3});
    else
      optimizer_ = std::make_unique<optim::AdamW>(trained->parameters(), optim::AdamWOptions{1e-2});
    auto data = std::make_shared<data::SyntheticDataset>(kSamples, Shape{6}, 3, kSeed);
    sampler_ = std::make_shared<parallel::DistributedSampler>(kSamples, world, rank, true, kSeed);
    data::DataLoaderOptions lo;
    lo.batch_size = kBatch;
    lo.seed = kSeed;
    loader_ = std::make_unique<data::DataLoader>(data, lo, sampler_);
    progress_.world_size = world;
    progress_.batch_size = kBatch;
    progress_.data_seed = kSeed;
  }

  /// Trains until global_step == target (continuing from progress()).
  void run_until(std::int64_t target) {
    const std::int64_t world = progress_.world_size;
    nn::CrossEntropyLoss loss;
    nn::Module& trained = ddp_ ? static_cast<nn::Module&>(*ddp_) : *model_;
    while (progress_.global_step < target) {
      // Step 1) at the start of an epoch, or of a resumed run: the epoch's order, from the
      // saved position.
      if (!epoch_open_) {
        sampler_->set_epoch(progress_.epoch);
        loader_->start_epoch(progress_.epoch, progress_.step_in_epoch);
        epoch_open_ = true;
      }
      data::Batch b;
      if (!loader_->next(b)) {  // the epoch is over
        ++progress_.epoch;
        progress_.step_in_epoch = progress_.samples_in_epoch = 0;
        epoch_open_ = false;
        continue;
      }
      // Step 2) this step's learning rate: a cosine over the whole run, per step.
      const double pi = std::acos(-1.0);
      optimizer_->set_lr(base_lr() * 0.5 *
                         (1 + std::cos(pi * static_cast<double>(progress_.global_step) / kTotalSteps)));
      // Step 3) forward, backward (DDP averages the gradients), update.
      optimizer_->zero_grad();
      const Tensor logits = trained.forward(b.inputs);
      loss.forward(logits, b.labels);
      trained.backward(loss.backward());
      optimizer_->step();
      // Step 4) where we are now.
      ++progress_.step_in_epoch;
      ++progress_.global_step;
      progress_.samples_in_epoch += kBatch * world;
    }
  }

  /// The unwrapped model (what a checkpoint saves).
  nn::Sequential& model() { return *model_; }
  /// The optimizer (over the wrapper's parameters when there is one).
  optim::Optimizer& optimizer() { return *optimizer_; }
  /// Where the run stands.
  const io::TrainingProgress& progress() const { return progress_; }
  /// Adopts a restored position: the next run_until starts the epoch at it.
  void resume_at(const io::TrainingProgress& p) {
    progress_ = p;
    epoch_open_ = false;
  }
  /// Parameters and buffers, cloned.
  io::StateDict snapshot() {
    io::StateDict out;
    for (auto& [name, t] : io::module_state_dict(*model_)) out[name] = t.clone();
    return out;
  }

 private:
  double base_lr() const { return dynamic_cast<optim::SGD*>(optimizer_.get()) ? 0.1 : 1e-2; }

  dist::ProcessGroup* group_;
  std::shared_ptr<nn::Sequential> model_;
  std::unique_ptr<parallel::DistributedDataParallel> ddp_;
  std::unique_ptr<optim::Optimizer> optimizer_;
  std::shared_ptr<parallel::DistributedSampler> sampler_;
  std::unique_ptr<data::DataLoader> loader_;
  io::TrainingProgress progress_;
  bool epoch_open_ = false;
};

/// The checkpoint round trip of a resume: state -> safetensors bytes -> state, as a file
/// on disk would make it (every rank serializes and parses its own copy here).
inline io::TrainingState through_bytes(const io::TrainingState& s) {
  const io::SafetensorsFile f = io::to_checkpoint_file(s);
  return io::from_checkpoint_file(
      io::parse_safetensors(io::serialize_safetensors(f.tensors, f.metadata), "checkpoint"),
      "checkpoint");
}

/// The resume experiment: an uninterrupted run to `total` steps, and a run saved at `at`,
/// "restarted" (everything rebuilt from the same flags), restored and continued to `total`.
/// Returns the two runs' final parameters and buffers.
inline std::pair<io::StateDict, io::StateDict> resume_experiment(
    dist::ProcessGroup* group, ToyOptimizer kind, std::int64_t at, std::int64_t total,
    const CaptureFn& capture, const RestoreFn& restore) {
  ToyTraining straight(group, kind);
  straight.run_until(total);
  io::TrainingState saved;
  {
    ToyTraining first(group, kind);
    first.run_until(at);
    saved = through_bytes(capture(first.model(), first.optimizer(), first.progress()));
  }  // the first process is gone
  ToyTraining resumed(group, kind);
  resumed.resume_at(restore(saved, resumed.model(), resumed.optimizer()));
  resumed.run_until(total);
  return {straight.snapshot(), resumed.snapshot()};
}

}  // namespace mgpu::testing
