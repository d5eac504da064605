// Helpers of lesson 10's tests: the CPU group, the toy models, data and comparison runs
// of tests/support (shared with the library's sharding tests), and checks that every rank
// reports the same.
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "error_measures.h"
#include "groups.h"
#include "mgpu/allocator.h"
#include "mgpu/copy.h"
#include "mgpu/dist/dist.h"
#include "mgpu/nn/all.h"
#include "mgpu/ops.h"
#include "mgpu/optim/adamw.h"
#include "mgpu/parallel/all.h"
#include "mgpu/tensor.h"
#include "sharding_runs.h"

namespace shard_test {

using namespace mgpu;  // Device, DType, Shape, Tensor, nn, dist
namespace optim = mgpu::optim;
namespace par = mgpu::parallel;

using namespace mgpu::testing;  // group(), all_ranks(), the runs, the error measures

// Sharded training against DDP's, parameter by parameter. AdamW divides by sqrt(v): a
// gradient that differs from DDP's in its last bits moves a parameter by about
// lr * (relative difference), far below this; a wrong average, a missing rank or a stale
// shard moves it by about lr = 1e-2 per step.
constexpr double kTolerance = 1e-5;

}  // namespace shard_test
