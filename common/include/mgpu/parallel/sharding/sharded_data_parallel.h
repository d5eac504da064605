/// @file sharded_data_parallel.h
/// @brief ShardedDataParallel: data parallelism with the optimizer state (ZeRO-1), the
/// gradients too (ZeRO-2) or the parameters too (ZeRO-3, "fully sharded") split across
/// the ranks (Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training Trillion
/// Parameter Models", 2020).
///
/// DDP keeps everything on every rank: with AdamW 16 bytes per parameter (fp32 weight,
/// gradient and two moments). Here each rank keeps 1/N of the optimizer state and steps
/// only that shard; stage 2 also keeps only its 1/N of the averaged gradient
/// (reduce-scatter instead of all-reduce); stage 3 also keeps only its 1/N of the
/// parameters and all-gathers a unit's full parameters just before the unit computes,
/// freeing them right after. The optimizer sees the shards: parameters() of this module
/// are the units' flat fp32 master shards (as FSDP's flat parameters).
///
///     auto model = nn::make_model("mlp");  model->to(device);
///     parallel::ShardingOptions o;  o.stage = 3;
///     parallel::ShardedDataParallel sdp(model, group, o);
///     optim::AdamW opt(sdp.parameters(), {});       // this rank's shards only
///     Tensor logits = sdp.forward(x);               // units gather, compute, free
///     loss.forward(logits, y);
///     sdp.backward(loss.backward());                // gradients reduce-scattered
///     opt.step();  opt.zero_grad();                 // the next forward gathers the new values
///
/// Units: the model must be an nn::Sequential; its layers are grouped in order into units
/// of at least unit_cap_bytes of parameters (0: one unit per layer with parameters; a
/// parameterless layer joins the unit before it). The unit is what is gathered at once
/// (stage 3) and the bucket of the gradient reduction (every stage).
///
/// How it maps onto PyTorch: stage 1 is DDP with torch.distributed.optim.
/// ZeroRedundancyOptimizer (an all-reduce, then each rank updates its shard, then the
/// parameters travel); stage 3 is FSDP's ShardingStrategy.FULL_SHARD (use_orig_params=False:
/// the optimizer sees flat parameters); stage 2 is the paper's ZeRO-2, which keeps the full
/// parameters between steps (FSDP's SHARD_GRAD_OP frees them after backward and gathers
/// them again before the next forward). Differences: there is no autograd, so backward()
/// is a method; stages 1-2 all-gather the updated parameters at the next forward, unit by
/// unit, overlapped with the forward; the next unit's all-gather is started explicitly
/// (a CPU does not run ahead of its own compute as a CPU driving a GPU does); buffers
/// (BatchNorm statistics) are broadcast from rank 0 at construction and by sync_buffers().
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "mgpu/dist/process_group.h"
#include "mgpu/nn/module.h"
#include "mgpu/parallel/sharding/sharded_unit.h"
#include "mgpu/parallel/sharding/sharding_model.h"

namespace mgpu::parallel {

/// How ShardedDataParallel shards and computes.
struct ShardingOptions {
  /// 1: optimizer state; 2: + gradients; 3: + parameters (fully sharded).
  int stage = 3;
  /// Layers are grouped into units of at least this many bytes of parameters (fp32);
  /// 0: one unit per layer with parameters; SIZE_MAX: the whole model is one unit.
  std::size_t unit_cap_bytes = 0;
  /// f32, or bf16/f16: the parameters are gathered and the layers compute in this dtype,
  /// gradients are reduced in it; master shards, their gradients and AdamW's moments stay
  /// fp32. A unit with BatchNorm statistics computes in f32 (its input is cast).
  DType compute_dtype = DType::f32;
  /// Start the next unit's all-gather before computing this one (stage 3, and stages 1-2
  /// after a step), so communication overlaps compute.
  bool prefetch = true;
};

/// The layer indices of each unit: `layers` grouped as ShardingOptions::unit_cap_bytes says
/// (see the file comment). Throws when no layer has a trainable parameter.
std::vector<std::vector<std::size_t>> group_into_units(nn::Sequential& model,
                                                       std::size_t unit_cap_bytes);

/// Wraps a Sequential model so that its training state is sharded across the ranks.
class ShardedDataParallel : public nn::Module {
 public:
  /// Wraps `model` (on this rank's device). A collective: every rank constructs it at the
  /// same point. Checks that the ranks built the same model and starts from rank 0's
  /// values. Throws for a stage outside 1-3 or a compute dtype other than f32/bf16/f16.
  ShardedDataParallel(std::shared_ptr<nn::Sequential> model, dist::ProcessGroup& group,
                      ShardingOptions options = {});
  ~ShardedDataParallel() override;

  /// The units' forward in order (each gathers what it needs); the output in f32.
  Tensor forward(const Tensor& x) override;
  /// The units' backward in reverse order; returns once every unit's gradient reduction
  /// has finished and the master shards' grads hold this rank's averaged gradient.
  Tensor backward(const Tensor& grad_out) override;
  std::shared_ptr<nn::Module> clone() const override;
  std::string describe() const override;

  /// The wrapped model (its parameters are views of the units' gathered buffers; at stage
  /// 3 their memory is released outside a unit's forward and backward).
  nn::Sequential& module() { return *model_; }
  /// The options it was built with.
  const ShardingOptions& options() const { return options_; }
  /// Number of units.
  std::size_t num_units() const { return units_.size(); }
  /// Unit i (forward order).
  ShardedUnit& unit(std::size_t i) { return *units_.at(i); }
  /// Unit i (forward order), to read.
  const ShardedUnit& unit(std::size_t i) const { return *units_.at(i); }
  /// The group the shards live on.
  dist::ProcessGroup& process_group() const { return group_; }
  /// One line per unit (ShardedUnit::describe).
  std::string unit_summary() const;
  /// The collectives issued since the last call (after a step: every one has finished).
  std::vector<CommRecord> take_comm_log() { return log_.take(); }
  /// What the memory formula predicts for this model's units (sharding_model.h).
  MemoryPrediction predicted_memory() const;

  /// The optimizer changed the master shards behind the units' back (after loading a
  /// sharded state): the next forward gathers every unit again. backward() does this
  /// itself for the step that follows it.
  void mark_parameters_stale();
  /// Buffers (BatchNorm statistics) <- rank 0's. A collective.
  void sync_buffers();

  /// Every trainable parameter, whole, by the wrapped model's names ("3.weight"), fp32,
  /// gathered from the master shards. A collective; every rank gets the full values.
  std::map<std::string, Tensor> full_parameters();
  /// Writes `values` (full fp32 parameters by name, e.g. a checkpoint's) into the master
  /// shards: each rank keeps its part. Throws, naming it, for a missing parameter or a
  /// wrong shape. No communication; the next forward gathers.
  void load_full_parameters(const std::map<std::string, Tensor>& values);

 private:
  std::shared_ptr<nn::Sequential> model_;
  dist::ProcessGroup& group_;
  ShardingOptions options_;
  CommLog log_;
  std::vector<std::unique_ptr<ShardedUnit>> units_;
};

}  // namespace mgpu::parallel
