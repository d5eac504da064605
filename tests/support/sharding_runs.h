// Sharded training against DDP, shared by the library's ShardedDataParallel tests and
// lesson 10's graded tests: a toy MLP whose parameter counts do not divide by 2 or 3,
// per-rank data, a DDP reference run and a sharded run of the same steps, and the memory
// a sharded step holds.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "groups.h"
#include "mgpu/allocator.h"
#include "mgpu/copy.h"
#include "mgpu/dist/dist.h"
#include "mgpu/nn/all.h"
#include "mgpu/ops.h"
#include "mgpu/optim/adamw.h"
#include "mgpu/parallel/all.h"
#include "mgpu/tensor.h"
#include "reference_models.h"

namespace mgpu::testing {

/// Flatten, Linear 7->5, ReLU, Linear 5->4, ReLU, Linear 4->3: 40 + 24 + 15 = 79 parameters,
/// units of 40, 24 and 15 elements: odd sizes, so 2 and 3 ranks both need padding.
inline std::shared_ptr<nn::Sequential> toy_mlp(std::uint64_t seed) {
  nn::manual_seed(seed);
  auto m = std::make_shared<nn::Sequential>();
  m->add(std::make_shared<nn::Flatten>());
  m->add(std::make_shared<nn::Linear>(7, 5));
  m->add(std::make_shared<nn::ReLU>());
  m->add(std::make_shared<nn::Linear>(5, 4));
  m->add(std::make_shared<nn::ReLU>());
  m->add(std::make_shared<nn::Linear>(4, 3));
  return m;
}

/// `layers` Linear(width, width) with ReLU between: equal units for the memory checks.
inline std::shared_ptr<nn::Sequential> square_mlp(std::int64_t width, int layers, std::uint64_t seed) {
  return mlp(std::vector<std::int64_t>(static_cast<std::size_t>(layers) + 1, width), seed);
}

/// Step `step`'s batch of rank `rank`: `rows` samples of `features` features and labels in
/// [0, classes), different on every rank and step, reproducible.
inline void rank_batch(int rank, int step, std::int64_t rows, std::int64_t features,
                       std::int64_t classes, Tensor& x, Tensor& y) {
  x = Tensor::empty({rows, features});
  normal_(x, 1000 + 97 * static_cast<std::uint64_t>(step) + static_cast<std::uint64_t>(rank));
  std::vector<std::int64_t> labels;
  for (std::int64_t i = 0; i < rows; ++i) labels.push_back((i * 7 + step * 3 + rank) % classes);
  y = Tensor::from_vector(labels, {rows});
}

/// Sharding at `stage` with units of at most `cap` bytes (0: a unit per layer).
inline parallel::ShardingOptions stage_options(int stage, std::size_t cap = 0, bool prefetch = true) {
  parallel::ShardingOptions o;
  o.stage = stage;
  o.unit_cap_bytes = cap;
  o.prefetch = prefetch;
  return o;
}

/// Options of the comparison runs.
struct RunSpec {
  int steps = 4;
  std::int64_t rows = 5;  ///< per rank per step
  std::int64_t features = 7;
  std::int64_t classes = 3;
  optim::AdamWOptions adamw{1e-2, 0.9, 0.999, 1e-8, 1e-2};
};

/// One forward/backward of a model on this rank's batch of `step`.
inline void forward_backward(nn::Module& m, const RunSpec& spec, int step) {
  Tensor x, y;
  rank_batch(group().rank(), step, spec.rows, spec.features, spec.classes, x, y);
  nn::CrossEntropyLoss loss;
  loss.forward(m.forward(x), y);
  m.backward(loss.backward());
}

/// The parameters after spec.steps AdamW steps under the library's DDP.
inline std::map<std::string, Tensor> train_ddp(std::shared_ptr<nn::Sequential> model,
                                               const RunSpec& spec) {
  parallel::DistributedDataParallel ddp(model, group());
  optim::AdamW opt(ddp.parameters(), spec.adamw);
  for (int s = 0; s < spec.steps; ++s) {
    opt.zero_grad();
    forward_backward(ddp, spec, s);
    opt.step();
  }
  std::map<std::string, Tensor> out;
  for (auto& [name, p] : model->named_parameters()) out[name] = p->value.clone();
  return out;
}

/// The parameters after spec.steps AdamW steps sharded with `options`.
inline std::map<std::string, Tensor> train_sharded(std::shared_ptr<nn::Sequential> model,
                                                   const RunSpec& spec,
                                                   const parallel::ShardingOptions& options) {
  parallel::ShardedDataParallel sdp(model, group(), options);
  optim::AdamW opt(sdp.parameters(), spec.adamw);
  for (int s = 0; s < spec.steps; ++s) {
    opt.zero_grad();
    forward_backward(sdp, spec, s);
    opt.step();
  }
  return sdp.full_parameters();
}

/// Bytes allocated on the CPU now.
inline double allocated_bytes() {
  return static_cast<double>(memory_stats(Device::cpu()).allocated);
}

/// What a sharded run holds per rank, measured, beside the formula.
struct MemoryMeasurement {
  double persistent = 0;         ///< bytes still allocated after the step
  double peak = 0;               ///< most bytes allocated during the step
  parallel::MemoryPrediction formula; ///< ShardedDataParallel::predicted_memory()
};

/// Three AdamW steps of four equal units of 128*128 + 128 elements on batches of 2 rows
/// (activations are a few KiB against about a MiB of parameters, gradients and moments);
/// the last step measured from the allocator's counters, relative to before the model.
inline MemoryMeasurement measure_memory(int stage, DType compute) {
  MemoryMeasurement m;
  const double before = allocated_bytes();
  auto model = square_mlp(128, 4, 21);
  parallel::ShardingOptions o;
  o.stage = stage;
  o.compute_dtype = compute;
  parallel::ShardedDataParallel sdp(model, group(), o);
  optim::AdamW opt(sdp.parameters(), {});
  RunSpec spec;
  spec.rows = 2;
  spec.features = 128;
  spec.classes = 128;
  for (int step = 0; step < 3; ++step) {
    reset_peak_memory(Device::cpu());
    opt.zero_grad();
    forward_backward(sdp, spec, step);
    opt.step();
    m.persistent = allocated_bytes() - before;
    m.peak = static_cast<double>(memory_stats(Device::cpu()).peak_allocated) - before;
  }
  m.formula = sdp.predicted_memory();
  return m;
}

}  // namespace mgpu::testing
