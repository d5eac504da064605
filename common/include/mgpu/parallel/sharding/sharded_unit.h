/// @file sharded_unit.h
/// @brief ShardedUnit: one unit of a sharded model — its layers, its flat parameter, its
/// shard, and the collectives that move between them (FSDP's FlatParamHandle).
///
/// A unit owns, on each rank (N ranks, U = padded elements of the unit, S = U / N):
///  - `full_`      [U] in the compute dtype: the gathered parameters; every layer
///                 parameter's value is a view into it (param_views). Stages 1-2 keep it;
///                 stage 3 releases its memory after each forward and backward.
///  - `shard_`     the master shard, an fp32 nn::Parameter of [S] elements that the
///                 optimizer steps; its grad is this rank's averaged gradient (fp32,
///                 accumulated until zero_grad). With fp32 compute at stages 1-2 its value
///                 is a view of full_'s own chunk (no copy).
///  - `full_grad_` [U] in the compute dtype during backward: the layers add their
///                 gradients into views of it. Stage 1 keeps it (param.grad stays the
///                 averaged full gradient); stages 2-3 free it once reduced.
///
/// The life of a unit in one training step (what lesson 10's tasks 2-4 write):
///  1. forward: the full parameters must be current. Stage 3 gathers them every time;
///     stages 1-2 after the optimizer changed the shards. start_gather() writes the
///     master shard (cast to the compute dtype) into full_'s own chunk and all-gathers
///     full_ in place; wait_gather() waits. Meanwhile the next unit's all-gather is
///     started (prefetch), so it runs while this unit computes. Stage 3 then frees full_.
///  2. backward: stage 3 gathers again (and prefetches the unit before it); a zeroed
///     full_grad_ receives the layers' gradients; once every gradient of the unit is final
///     (its grad-ready hooks), launch_grad_reduction() divides by N and starts the
///     all-reduce (stage 1) or reduce-scatter (stages 2-3) on the communication thread.
///  3. finish_grad_reduction() (called by ShardedDataParallel once the next unit's compute
///     is under way): waits, adds this rank's chunk to shard_.grad, frees the full gradient
///     (stages 2-3).
/// start_gather/wait_gather/free_full are task 2 (lessons/10_sharding/gather.cpp),
/// on_grad_ready/launch_grad_reduction/finish_grad_reduction task 3
/// (unit_grad_reduction.cpp), forward/backward task 4 (unit_cycle.cpp); the library compiles in their reference from
/// solutions/10_sharding/. The rest is common/src/parallel/sharding/sharded_unit.cpp.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "mgpu/dist/process_group.h"
#include "mgpu/nn/module.h"
#include "mgpu/parallel/comm_log.h"
#include "mgpu/parallel/sharding/flat_param.h"
#include "mgpu/tensor.h"

namespace mgpu::parallel {

/// Where a unit's full parameters are.
enum class UnitState {
  sharded,    ///< full_ is not current (stage 3: its memory is released)
  gathering,  ///< an all-gather into full_ is in flight
  gathered,   ///< full_ holds the current parameters
};

/// One unit of ShardedDataParallel (see the file comment). Built by ShardedDataParallel.
class ShardedUnit {
 public:
  /// A unit of `layers` (in forward order; their trainable parameters become the flat
  /// parameter; frozen ones stay as they are) at ZeRO `stage` (1, 2 or 3), computing in
  /// `compute_dtype` (f32, or bf16/f16 with fp32 master shards), over `group`.
  /// `index` names the unit in messages and in `log` (not owned; may be null).
  ShardedUnit(std::size_t index, std::vector<std::shared_ptr<nn::Module>> layers,
              dist::ProcessGroup& group, int stage, DType compute_dtype, CommLog* log);
  ~ShardedUnit();
  ShardedUnit(const ShardedUnit&) = delete;
  ShardedUnit& operator=(const ShardedUnit&) = delete;

  /// The master shard's value, fp32 [S], to be registered as a parameter by the owner.
  const Tensor& master_value() const { return master_value_; }
  /// Tells the unit which nn::Parameter holds its master shard (value: master_value()).
  void attach_shard(nn::Parameter* shard);
  /// The unit whose all-gather this one starts during its forward (the next in forward
  /// order) and during its backward (the previous one); null: none. Prefetching is off
  /// when both are null.
  void set_prefetch(ShardedUnit* next_in_forward, ShardedUnit* next_in_backward);

  /// Task 4: runs the unit's layers forward on `x` (cast to the compute dtype).
  Tensor forward(const Tensor& x);
  /// Task 4: runs the unit's layers backward; the gradients' reduction is launched.
  Tensor backward(const Tensor& grad_out);

  /// Task 2: starts the all-gather of the full parameters from every rank's shard.
  void start_gather();
  /// Task 2: waits for the all-gather; full_ is current afterwards.
  void wait_gather();
  /// Task 2: releases full_'s memory (stage 3, after a forward or backward).
  void free_full();

  /// Task 3: starts reducing the unit's gradients (average over the ranks).
  void launch_grad_reduction();
  /// Task 3: waits for the reduction and adds this rank's part to the master shard's grad.
  /// Does nothing when no reduction is in flight.
  void finish_grad_reduction();
  /// Task 3: the grad-ready hook of every parameter of the unit, while armed by the
  /// unit's backward: counts the unit's gradients down and launches the reduction when the
  /// last one is final, while the layers' backward goes on (as lesson 05's buckets).
  void on_grad_ready();

  /// Before the layers' backward: a zeroed full gradient buffer (allocated at stages 2-3),
  /// every parameter's grad a view into it, the grad-ready countdown armed. (backward()
  /// calls it; public so that a test can drive the hooks by hand.)
  void begin_backward();
  /// After the layers' backward: launches the reduction if some parameter's hook did not
  /// fire (it took no part in this forward; its gradient stays zero).
  void end_backward();
  /// The optimizer changed the master shards (or a checkpoint was loaded): full_ is stale.
  void mark_stale();
  /// Where the full parameters are.
  UnitState state() const { return state_; }
  /// True while a gradient reduction is in flight (launched, not finished).
  bool reduction_in_flight() const { return reduction_launched_; }

  /// The layout of the flat parameter.
  const FlatLayout& layout() const { return layout_; }
  /// The unit's trainable parameters (the layers' own), in flat order.
  const std::vector<nn::Parameter*>& params() const { return params_; }
  /// The layers, in forward order.
  const std::vector<std::shared_ptr<nn::Module>>& layers() const { return layers_; }
  /// The dtype the layers compute in (f32 for a unit with BatchNorm statistics).
  DType compute_dtype() const { return compute_dtype_; }
  /// The ZeRO stage.
  int stage() const { return stage_; }
  /// Index in forward order.
  std::size_t index() const { return index_; }
  /// The master shard parameter (null before attach_shard).
  nn::Parameter* shard() const { return shard_; }
  /// The gathered parameters (memory released while sharded at stage 3).
  const Tensor& full() const { return full_; }
  /// One line: index, layers, elements, padding, shard size, compute dtype.
  std::string describe() const;

 private:
  // ---- helpers the lesson's methods use (common/src/parallel/sharding/sharded_unit.cpp) ----------
  /// Stage 3 always, stages 1-2 after mark_stale(): the forward must gather first.
  bool needs_gather() const { return state_ != UnitState::gathered; }
  /// x in the compute dtype (x itself when it already is, or is not floating).
  Tensor to_compute(const Tensor& x) const;
  /// The layers' forward, in order.
  Tensor run_forward(const Tensor& x);
  /// The layers' backward, in reverse order.
  Tensor run_backward(const Tensor& grad_out);
  /// This rank's chunk of a [U] tensor of the unit: a view of S elements.
  Tensor own_chunk(const Tensor& flat) const;
  /// Records a collective in the log (if any).
  void log(const char* op, const Tensor& full_buffer, const dist::Work& work);

  // ---- state the lesson's methods read and write -------------------------------------------
  std::size_t index_;                               ///< position in forward order
  std::vector<std::shared_ptr<nn::Module>> layers_; ///< the unit's layers (shared with the model)
  std::vector<nn::Parameter*> params_;              ///< trainable parameters, flat order
  dist::ProcessGroup& group_;                       ///< over every rank
  int stage_;                                       ///< 1, 2 or 3
  DType compute_dtype_;                             ///< the dtype of full_ and full_grad_
  int rank_ = 0;                                    ///< group_.rank()
  int world_ = 1;                                   ///< group_.size()
  FlatLayout layout_;                               ///< offsets, padding, shards
  Tensor full_;                                     ///< [U] gathered parameters (compute dtype)
  Tensor full_grad_;                                ///< [U] gradients being computed (compute dtype)
  Tensor reduced_;                                  ///< [S] reduce-scatter output (stages 2-3)
  Tensor master_value_;                             ///< [S] fp32 master shard (the optimizer's)
  nn::Parameter* shard_ = nullptr;                  ///< the parameter holding master_value_
  UnitState state_ = UnitState::gathered;           ///< where the full parameters are
  dist::Work gather_work_;                          ///< the all-gather in flight
  dist::Work reduce_work_;                          ///< the gradient reduction in flight
  bool reduction_launched_ = false;                 ///< launched and not yet finished
  std::size_t pending_grads_ = 0;                   ///< gradients not final in this backward
  bool armed_ = false;                              ///< between begin_backward and the launch
  ShardedUnit* prefetch_forward_ = nullptr;         ///< gathered during this unit's forward
  ShardedUnit* prefetch_backward_ = nullptr;        ///< gathered during this unit's backward
  CommLog* log_ = nullptr;                          ///< where collectives are recorded
  std::vector<std::size_t> hook_handles_;           ///< per parameter
};

}  // namespace mgpu::parallel
