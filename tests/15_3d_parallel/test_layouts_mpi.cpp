// Lesson 15, tasks 1 and 2 under mpirun (4 and 8 ranks; any world size runs): every layout
// of the world's ranks as DP x TP x PP trains a small f64 GPT for three SGD steps and
// matches one process training the unsplit model on all DP replicas' batches: the loss of
// every step and every gradient this rank holds (its TP part of the full gradient) to 1e-12,
// and the weights after the last step. Task 1's cases run GPipe and 1F1B (the grid's groups
// are task 1's); task 2's run the interleaved schedule (its order is task 2's).
#include "layouts_test_util.h"

using namespace layouts_test;

TEST_CASE("task1: every DP x TP x PP layout of the ranks (GPipe, 1F1B) trains as one process: "
          "loss, gradients and weights for 3 steps", "[15_3d_parallel][task1][points:6]") {
  for (const Layout& l : layouts(dist::world_size(), false)) check_layout(l);
}

TEST_CASE("task2: layouts under the interleaved schedule (v chunks per rank) train as one "
          "process: loss, gradients and weights for 3 steps", "[15_3d_parallel][task2][points:4]") {
  for (const Layout& l : layouts(dist::world_size(), true)) check_layout(l);
}
