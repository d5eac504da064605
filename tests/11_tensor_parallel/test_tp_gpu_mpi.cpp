// Lesson 11, task 4 on a GPU under mpirun (2 and 3 ranks): the GPU twin of "the Megatron
// MLP: logits, loss and every gradient equal the unsplit model's". The tensor-parallel
// model lives on each rank's GPU, its group is the mpi backend's (CUDA tensors staged
// through pinned host memory, so ranks may share one GPU); the reference is the unsplit
// f64 model on the CPU. Skipped where no GPU is visible.
#include "tp_test_util.h"

using namespace tp_test;

TEST_CASE("gpu: task4: the Megatron MLP on CUDA (mpi backend, ranks may share a GPU): logits, "
          "loss and every gradient equal the unsplit model's on the CPU",
          "[11_tensor_parallel][task4][points:2][gpu]") {
  const Device gpu = dist::rank_device(Device::Kind::cuda);
  static std::shared_ptr<dist::ProcessGroup> gpu_group = dist::new_group("mpi", gpu, quiet());
  dist::ProcessGroup& g = *gpu_group;
  auto full = two_block_model(41);  // the reference, on the CPU
  auto on_gpu = std::static_pointer_cast<nn::Sequential>(full->clone());
  on_gpu->to(gpu);
  auto tp = tpar::tensor_parallelize(*on_gpu, g);
  REQUIRE(tpar::count_mlp_blocks(*tp) == 2);
  const Tensor x = random_tensor({6, 5}, 42), labels = random_labels(6, 4, 43);
  // f64 on both sides: only the order of the sums differs (cuBLAS against OpenBLAS).
  const double tol = 1e-12;
  check_megatron_mlp_steps(*full, *tp, g, gpu, x, labels, tol);
  CHECK(tp->num_parameters() == tpar::parameters_per_rank(*full, g.size(), g.rank()));
}
