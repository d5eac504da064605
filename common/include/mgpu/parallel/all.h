/// @file all.h
/// @brief Everything of mgpu::parallel: DDP, its Reducer and buckets, comm hooks, samplers,
/// SyncBatchNorm, ShardedDataParallel.
#pragma once

#include "mgpu/parallel/bucket_assignment.h"
#include "mgpu/parallel/comm_hook.h"
#include "mgpu/parallel/ddp.h"
#include "mgpu/parallel/distributed_sampler.h"
#include "mgpu/parallel/flat_param.h"
#include "mgpu/parallel/module_sync.h"
#include "mgpu/parallel/reducer.h"
#include "mgpu/parallel/sharded_data_parallel.h"
#include "mgpu/parallel/sharded_unit.h"
#include "mgpu/parallel/sharding_model.h"
#include "mgpu/parallel/sync_batchnorm.h"
#include "mgpu/parallel/sync_batchnorm_steps.h"
