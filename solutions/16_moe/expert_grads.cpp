// Task 5: over which ranks each gradient is summed, and by what the sum is scaled: the
// design question of expert parallelism × data parallelism. Which ranks hold a copy of a
// weight, and which tokens has each copy's gradient seen once the all-to-alls' backward is
// done?
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
  // What you have: world, ep, rank (checked above); world rank w is rank w % ep of EP group
  // w / ep and holds that EP rank's experts; g.dense and g.expert, each a GradReduction
  // {ranks (ascending, this rank among them), scale}: the gradient is summed over `ranks`,
  // then multiplied by `scale`.
  // TODO(task5) BEGIN: chapter §9, task 5: g.dense for a weight every rank holds (router,
  // attention, norms), g.expert for a weight of this rank's experts. Invariant: after the
  // reductions every rank's gradients equal one process's gradients of the mean loss over
  // all world ranks' tokens, where each rank's loss averages its own N tokens (the same N
  // on every rank) and an expert's gradient on its rank is the backward of the tokens that
  // every rank of its EP group sent it through the all-to-alls. Stuck: tools/hint 16 5
  // (about 4 lines).
  for (int w = 0; w < world; ++w) g.dense.ranks.push_back(w);
  for (int w = rank % ep; w < world; w += ep) g.expert.ranks.push_back(w);
  // Every rank's tokens reach the experts of its EP group through the all-to-alls, each
  // weighted 1/N by its own rank's mean; summed over the copies, a dense gradient and an
  // expert gradient both hold every token of the world once: both divide by the world.
  // (1 / expert.ranks.size() would count an expert's gradient ep times over.)
  g.dense.scale = 1.0 / world;
  g.expert.scale = 1.0 / world;
  // TODO(task5) END
  return g;
}

}  // namespace mgpu::parallel::moe
