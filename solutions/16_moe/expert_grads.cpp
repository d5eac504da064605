// Task 5: which ranks a gradient is summed over, and the scale. The design question of
// expert parallelism × data parallelism: a dense weight has a copy on every rank, an expert
// on every rank with the same place in its EP group, and each rank's loss averages its own
// tokens only.
#include "mgpu/error.h"
#include "mgpu/parallel/moe/expert_grads.h"

namespace mgpu::parallel::moe {

ExpertGradGroups expert_grad_groups(int world, int ep, int rank) {
  MGPU_CHECK(ep >= 1 && world >= 1 && world % ep == 0, "expert_grad_groups: an EP size of ",
             ep, " does not divide the world of ", world,
             " ranks; choose an EP size that divides the world size");
  MGPU_CHECK(rank >= 0 && rank < world, "expert_grad_groups: rank ", rank, " is outside 0 .. ",
             world - 1);
  ExpertGradGroups g;
  // TODO(task5) BEGIN
  for (int w = 0; w < world; ++w) g.dense.ranks.push_back(w);
  for (int w = rank % ep; w < world; w += ep) g.expert.ranks.push_back(w);
  // Every rank's tokens reach every expert's gradient (through the all-to-alls), each
  // weighted 1/N by its own rank's mean: both sums then divide by the world's replicas.
  g.dense.scale = 1.0 / world;
  g.expert.scale = 1.0 / world;
  // TODO(task5) END
  return g;
}

}  // namespace mgpu::parallel::moe
