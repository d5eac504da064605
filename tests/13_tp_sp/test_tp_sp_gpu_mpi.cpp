// Lesson 13 on a GPU under mpirun: the GPU twins of the split block (tasks 1 and 3). The
// block lives on each rank's GPU, its group is the mpi backend's (CUDA tensors staged
// through pinned host memory, so ranks may share one GPU); the reference is the unsplit
// f64 block on the CPU. Skipped where no GPU is visible.
#include "tp_sp_test_util.h"

using namespace tp_sp_test;

namespace {

void check_on_gpu(bool sp) {
  const Device gpu = dist::rank_device(Device::Kind::cuda);
  static std::shared_ptr<dist::ProcessGroup> gpu_group =
      dist::new_group("mpi", gpu, quiet_options(test_timeout_s()));
  dist::ProcessGroup& g = *gpu_group;
  auto full = f64_block();
  auto on_gpu = std::static_pointer_cast<nn::Block>(full->clone());
  on_gpu->to(gpu);
  tpar::ParallelBlock split(*on_gpu, g, sp);
  const Tensor x = random_tensor({kB, kT, kC}, 7), dy = random_tensor({kB, kT, kC}, 8);
  const Tensor y_full = full->forward(x);
  const Tensor dx_full = full->backward(dy);
  const int P = g.size(), r = g.rank();
  const Tensor xin = sp ? my_tokens(x, P, r) : x, dyin = sp ? my_tokens(dy, P, r) : dy;
  Tensor y, dx;
  CHECK(collectives_during(g, [&] { y = split.forward(xin.to(gpu)); }) == (sp ? 4 : 2));
  CHECK(collectives_during(g, [&] { dx = split.backward(dyin.to(gpu)); }) == (sp ? 4 : 2));
  if (sp) tpar::all_reduce_replicated_grads(split, split.replicated_parameter_names(), g);
  CHECK(y.device().is_cuda());
  CHECK(max_rel_diff(y.to(Device::cpu()), sp ? my_tokens(y_full, P, r) : y_full) < kTol);
  CHECK(max_rel_diff(dx.to(Device::cpu()), sp ? my_tokens(dx_full, P, r) : dx_full) < kTol);
  for (const auto& [name, p] : split.named_parameters()) {
    INFO("parameter " << name);
    CHECK(max_rel_diff(p->grad.to(Device::cpu()), my_part(split, name, full->parameter(name).grad)) < kTol);
  }
}

}  // namespace

TEST_CASE("gpu: task1: the tensor-parallel block on CUDA equals nn::Block on the CPU",
          "[13_tp_sp][task1][points:1][gpu]") {
  check_on_gpu(/*sp=*/false);
}

TEST_CASE("gpu: task3: the block under SP on CUDA equals nn::Block on the CPU",
          "[13_tp_sp][task3][points:1][gpu]") {
  check_on_gpu(/*sp=*/true);
}
