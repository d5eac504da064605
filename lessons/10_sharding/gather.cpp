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
  // TODO(task2) BEGIN: give full_ its memory back if stage 3 released it (full_.storage());
  // write this rank's master shard (shard_->value, fp32) into full_'s own chunk
  // (own_chunk(full_)), cast to the compute dtype, unless that chunk already is the master
  // shard (they share storage at fp32 stages 1-2); start the all-gather of full_ in place
  // (group_.all_gather, its input the own chunk), log("all-gather", ...) it, remember its
  // Work in gather_work_ and set state_ (about 8 lines).
  MGPU_FAIL("TODO(task2): ShardedUnit::start_gather is not written yet "
            "(lessons/10_sharding/gather.cpp); called for unit ", index_);
  // TODO(task2) END
}

// Blocks until the all-gather is done: full_ (and every parameter's view of it) is current.
void ShardedUnit::wait_gather() {
  MGPU_CHECK(state_ == UnitState::gathering, "unit ", index_, ": wait_gather without start_gather");
  // TODO(task2) BEGIN: wait for gather_work_ and set state_ (2 lines).
  MGPU_FAIL("TODO(task2): ShardedUnit::wait_gather is not written yet "
            "(lessons/10_sharding/gather.cpp); called for unit ", index_);
  // TODO(task2) END
}

// Stage 3, right after a forward or backward of the unit: only the shard stays.
void ShardedUnit::free_full() {
  MGPU_CHECK(state_ != UnitState::gathering, "unit ", index_, ": free_full while gathering");
  // TODO(task2) BEGIN: release full_'s memory (the layers' saved views keep the Storage
  // object, not its memory) and set state_ (2 lines).
  MGPU_FAIL("TODO(task2): ShardedUnit::free_full is not written yet "
            "(lessons/10_sharding/gather.cpp); called for unit ", index_);
  // TODO(task2) END
}

}  // namespace mgpu::parallel
