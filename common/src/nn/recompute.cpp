// Activation recomputation's switch: the policy's names, and the policy applied to every
// block of a GPT (the recomputing forward and backward are lesson 12's task 3).
#include "mgpu/nn/recompute.h"

#include "mgpu/error.h"
#include "mgpu/nn/gpt.h"

namespace mgpu::nn {

RecomputePolicy parse_recompute(const std::string& name) {
  if (name == "none") return RecomputePolicy::none;
  if (name == "full") return RecomputePolicy::full;
  if (name == "attn") return RecomputePolicy::attn;
  MGPU_FAIL("recompute policy '", name,
            "' is not one of: none (keep every activation), full (keep each block's input, "
            "run the block again in backward), attn (keep all but attention's probabilities, "
            "compute them again in backward)");
}

const char* recompute_name(RecomputePolicy policy) {
  switch (policy) {
    case RecomputePolicy::none: return "none";
    case RecomputePolicy::full: return "full";
    case RecomputePolicy::attn: return "attn";
  }
  return "?";
}

void set_recompute(GPT& model, RecomputePolicy policy) {
  for (const auto& [name, child] : model.children())
    if (auto* block = dynamic_cast<Block*>(child.get())) block->set_recompute(policy);
}

}  // namespace mgpu::nn
