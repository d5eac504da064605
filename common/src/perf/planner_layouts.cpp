// The planner's candidates: every dp x tp x pp of the ranks the model and the batch allow.
#include <sstream>

#include "mgpu/error.h"
#include "mgpu/perf/planner.h"

namespace mgpu::perf {

std::int64_t ModelShape::parameters() const {
  const std::int64_t C = n_embd;
  return vocab_size * C + position_rows() * C + n_layer * (12 * C * C + 13 * C) + 2 * C;
}

std::string Layout::str() const {
  std::ostringstream out;
  out << "DP" << dp << " x TP" << tp << " x PP" << pp;
  return out.str();
}

std::int64_t blocks_of_stage(std::int64_t n_layer, int pp, int stage) {
  MGPU_CHECK(pp >= 1 && stage >= 0 && stage < pp, "blocks_of_stage: stage ", stage, " of ", pp);
  return n_layer / pp + (stage < n_layer % pp ? 1 : 0);
}

std::vector<Layout> candidate_layouts(int gpus, const ModelShape& model, const JobSettings& job) {
  MGPU_CHECK(gpus >= 1, "plan: ", gpus, " GPUs");
  MGPU_CHECK(job.global_batch >= 1 && job.micro_batch >= 1, "plan: global batch ", job.global_batch,
             " and micro-batch ", job.micro_batch, " must be at least 1");
  MGPU_CHECK(job.schedule == "gpipe" || job.schedule == "1f1b" || job.schedule == "interleaved",
             "plan: schedule '", job.schedule, "' (gpipe, 1f1b or interleaved)");
  MGPU_CHECK(job.virtual_stages >= 1, "plan: ", job.virtual_stages, " virtual stages");
  MGPU_CHECK(job.precision.name == "fp32" || job.precision.name == "bf16" ||
                 job.precision.name == "fp16",
             "plan: precision '", job.precision.name, "' (fp32, bf16 or fp16)");
  MGPU_CHECK(job.zero_stage >= 0 && job.zero_stage <= 3, "plan: ZeRO stage ", job.zero_stage,
             " (0 to 3)");
  MGPU_CHECK(job.recompute == "none" || job.recompute == "selective" || job.recompute == "full",
             "plan: recompute '", job.recompute, "' (none, selective or full)");
  MGPU_CHECK(model.vocab_size >= 1 && model.seq >= 1 && model.n_embd >= 1 && model.positions >= 0,
             "plan: vocabulary ", model.vocab_size, ", T = ", model.seq, ", C = ", model.n_embd,
             ", ", model.positions, " positions: each must be at least 1");
  MGPU_CHECK(model.n_layer >= 1 && model.n_head >= 1 && model.n_embd % model.n_head == 0,
             "plan: ", model.n_layer, " blocks, ", model.n_head, " heads, C = ", model.n_embd,
             " (C must be a multiple of the heads)");
  MGPU_CHECK(model.seq <= model.position_rows(), "plan: a sequence of ", model.seq,
             " tokens is past the model's context of ", model.position_rows(),
             " (the position table's rows)");
  std::vector<Layout> out;
  for (int dp = gpus; dp >= 1; --dp) {
    if (gpus % dp != 0 || job.global_batch % (dp * job.micro_batch) != 0) continue;
    for (int tp = gpus / dp; tp >= 1; --tp) {
      if ((gpus / dp) % tp != 0 || model.n_head % tp != 0) continue;
      const int pp = gpus / dp / tp;
      const int chunks = job.schedule == "interleaved" ? job.virtual_stages : 1;
      if (pp * chunks > model.n_layer) continue;
      out.push_back(Layout{dp, tp, pp});
    }
  }
  return out;
}

}  // namespace mgpu::perf
