/// @file all.h
/// @brief Everything of mgpu::parallel: DDP, its Reducer and buckets, comm hooks, samplers,
/// SyncBatchNorm, ShardedDataParallel.
///
/// One folder per system: ddp/ (DistributedDataParallel, the Reducer, buckets, comm hooks,
/// DistributedSampler), sync_bn/ (SyncBatchNorm), sharding/ (ShardedDataParallel, ZeRO
/// stages 1-3); what they share is here.
#pragma once

#include "mgpu/parallel/ddp/bucket_assignment.h"
#include "mgpu/parallel/ddp/comm_hook.h"
#include "mgpu/parallel/ddp/ddp.h"
#include "mgpu/parallel/ddp/distributed_sampler.h"
#include "mgpu/parallel/ddp/reducer.h"
#include "mgpu/parallel/module_sync.h"
#include "mgpu/parallel/sharding/flat_param.h"
#include "mgpu/parallel/sharding/sharded_data_parallel.h"
#include "mgpu/parallel/sharding/sharded_unit.h"
#include "mgpu/parallel/sharding/sharding_model.h"
#include "mgpu/parallel/sync_bn/sync_batchnorm.h"
#include "mgpu/parallel/sync_bn/sync_batchnorm_steps.h"
