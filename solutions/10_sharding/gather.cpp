// Lesson 10, task 2: the parameter all-gather. After the optimizer stepped each rank's
// shard, and before a unit computes, every rank needs every rank's shard: the unit's full
// parameters (mgpu/parallel/sharding/sharded_unit.h). Everything the methods call is in
// common/src/parallel/sharding/sharded_unit.cpp.
#include "mgpu/ops.h"  // cast_(dst, src): copy with dtype conversion
#include "mgpu/parallel/sharding/sharded_unit.h"

namespace mgpu::parallel {

// Starts the all-gather of full_ from every rank's master shard; returns at once.
void ShardedUnit::start_gather() {
  MGPU_CHECK(state_ != UnitState::gathering, "unit ", index_, ": an all-gather is already in flight");
  // What you have: members: full_ [U] (compute dtype), gather_work_, shard_->value (the
  // fp32 [S] master shard), state_ (UnitState). Functions: cast_(dst, src) (copy with dtype
  // conversion); full_.storage(): holds_memory(), reallocate(), release();
  // group_.all_gather(out, in) -> dist::Work (out gets every rank's in, rank 0's first; in
  // may be out's own chunk); log(op, buffer, work); own_chunk(t) (this rank's [S] view of a
  // [U] tensor); t.shares_storage(u).
  // TODO(task2) BEGIN: START chapter §4's all-gather and return without waiting for it:
  // once it completes, full_, in memory of its own again if stage 3 released it, holds
  // every rank's master shard in the compute dtype, rank r's in chunk r, and every
  // parameter's view sees it. This rank's chunk is written only when it is not the master
  // shard itself (fp32 at stages 1-2 share it). Logged as "all-gather"; state_ says it is
  // in flight. Stuck: tools/hint 10 2 (about 8 lines).
  if (!full_.storage()->holds_memory()) full_.storage()->reallocate();
  Tensor mine = own_chunk(full_);
  if (!shard_->value.shares_storage(full_)) cast_(mine, shard_->value);
  gather_work_ = group_.all_gather(full_, mine);
  log("all-gather", full_, gather_work_);
  state_ = UnitState::gathering;
  // TODO(task2) END
}

// Blocks until the all-gather is done: full_ (and every parameter's view of it) is current.
void ShardedUnit::wait_gather() {
  MGPU_CHECK(state_ == UnitState::gathering, "unit ", index_, ": wait_gather without start_gather");
  // What you have: gather_work_ (a dist::Work: wait()); state_.
  // TODO(task2) BEGIN: afterwards the all-gather is complete and state_ says so. Stuck:
  // tools/hint 10 2 (2 lines).
  gather_work_.wait();
  state_ = UnitState::gathered;
  // TODO(task2) END
}

// Stage 3, right after a forward or backward of the unit: only the shard stays.
void ShardedUnit::free_full() {
  MGPU_CHECK(state_ != UnitState::gathering, "unit ", index_, ": free_full while gathering");
  // What you have: full_.storage()->release() (frees the memory, keeps the Storage object
  // and so every view of it); state_.
  // TODO(task2) BEGIN: chapter §4's "free": full_'s memory goes back to the allocator while
  // the views the layers' saved contexts hold stay valid objects; state_ says the unit is
  // sharded. Stuck: tools/hint 10 2 (2 lines).
  full_.storage()->release();
  state_ = UnitState::sharded;
  // TODO(task2) END
}

}  // namespace mgpu::parallel
