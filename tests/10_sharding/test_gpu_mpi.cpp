// Lesson 10, task 4 on a GPU under mpirun (2 and 3 ranks): the GPU twin of "each ZeRO stage
// trains to DDP's parameters over AdamW steps". The same steps with the model and the
// batches on each rank's GPU and the mpi backend (CUDA tensors staged through pinned host
// memory, so ranks may share one GPU), against DDP on the CPU. Skipped where no GPU is
// visible. These run every task (1-4).
#include <catch2/catch.hpp>

#include <map>
#include <memory>
#include <string>

#include "sharding_test_util.h"

using namespace shard_test;

namespace {

// The CPU runs' tolerance (a wrong average moves a parameter by about lr = 1e-2 per step),
// with room for a GPU's other order of summation in the matrix products.
constexpr double kGpuTolerance = 1e-4;

// train_sharded's steps on `device`: the batches copied there, the parameters back here.
std::map<std::string, Tensor> train_sharded_on(const Device& device,
                                               std::shared_ptr<nn::Sequential> model,
                                               const RunSpec& spec,
                                               const par::ShardingOptions& options) {
  model->to(device);
  par::ShardedDataParallel sdp(model, mgpu::testing::rank_gpu_group(), options);
  optim::AdamW opt(sdp.parameters(), spec.adamw);
  for (int s = 0; s < spec.steps; ++s) {
    opt.zero_grad();
    Tensor x, y;
    rank_batch(group().rank(), s, spec.rows, spec.features, spec.classes, x, y);
    nn::CrossEntropyLoss loss;
    loss.forward(sdp.forward(x.to(device)), y.to(device));
    sdp.backward(loss.backward());
    opt.step();
  }
  std::map<std::string, Tensor> out;
  for (auto& [name, t] : sdp.full_parameters()) out[name] = t.to(Device::cpu());
  return out;
}

}  // namespace

TEST_CASE("gpu: each ZeRO stage on CUDA (mpi backend, ranks may share a GPU) trains to "
          "DDP's parameters on the CPU", "[10_sharding][task4][points:2][gpu]") {
  const Device gpu = dist::rank_device(Device::Kind::cuda);
  RunSpec spec;
  const auto want = train_ddp(toy_mlp(11), spec);
  for (int stage : {1, 2, 3}) {
    const auto got = train_sharded_on(gpu, toy_mlp(11), spec, stage_options(stage));
    const double diff = max_over_ranks(max_param_diff(got, want));
    INFO("stage " << stage << " on " << gpu.str() << ", " << group().size()
         << " ranks: largest |sharded on CUDA - DDP on the CPU| = " << diff);
    CHECK(all_ranks(diff <= kGpuTolerance));
  }
}
