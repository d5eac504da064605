// Lesson 15 on a GPU under mpirun: the GPU twins of the layout tests (tasks 1 and 2). The
// pipeline's model and batches live on each rank's GPU, its grid's groups are the mpi
// backend's (CUDA tensors staged through pinned host memory, so ranks may share one GPU);
// the reference is the unsplit f64 model on the CPU. The first layout of each kind at this
// world size. Skipped where no GPU is visible.
#include "layouts_test_util.h"

using namespace layouts_test;

TEST_CASE("gpu: task1: a DP x TP x PP layout (1F1B or GPipe) on CUDA trains as one process "
          "on the CPU", "[15_3d_parallel][task1][points:1][gpu]") {
  check_layout(layouts(dist::world_size(), false).front(), dist::rank_device(Device::Kind::cuda));
}

TEST_CASE("gpu: task2: a layout under the interleaved schedule on CUDA trains as one process "
          "on the CPU", "[15_3d_parallel][task2][points:1][gpu]") {
  const auto l = layouts(dist::world_size(), true);
  if (!l.empty()) check_layout(l.front(), dist::rank_device(Device::Kind::cuda));
}
