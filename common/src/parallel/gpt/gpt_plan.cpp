// A plan's description, its checks, and the chapters' formulas for what the blocks keep
// and what CP attention sends.
#include "mgpu/parallel/gpt/gpt_plan.h"

#include <algorithm>
#include <sstream>

#include "mgpu/error.h"
#include "mgpu/parallel/cp/hybrid_attention.h"

namespace mgpu::parallel::gpt {

std::string GptPlan::str() const {
  std::ostringstream os;
  os << shape.str();
  if (shape.tp > 1 || sequence_parallel)
    os << (regather ? ", TP with SP (re-gather)" : sequence_parallel ? ", TP with SP" : "");
  if (attention != Attention::local)
    os << ", CP " << cp::split_name(split)
       << (attention == Attention::allgather ? " all-gather K/V"
           : attention == Attention::ulysses ? " Ulysses"
           : attention == Attention::hybrid ? " hybrid" : " ring");
  if (attention == Attention::hybrid)
    os << " (Ulysses " << (ulysses_size > 0 ? std::to_string(ulysses_size) : std::string("auto"))
       << " x ring)";
  if (shape.pp > 1 || micro_batches > 1)
    os << ", " << pp::schedule_name(schedule) << ", " << virtual_stages << " chunk(s) per rank, "
       << micro_batches << " micro-batch(es)";
  os << ", embedding " << (embedding == Vocab::split ? "split" : "replicated") << ", head "
     << (head == Vocab::split ? "split" : "replicated") << ", gradients averaged "
     << (grad_sync == GradSync::ddp ? "by DDP" : "after the backward");
  return os.str();
}

int GptPlan::ulysses_size_for(const nn::GPTConfig& config) const {
  if (ulysses_size > 0) return ulysses_size;
  return cp::default_ulysses_size(shape.cp, config.n_head / std::max(shape.tp, 1));
}

void GptPlan::check(const nn::GPTConfig& config) const {
  const grid::GridShape& s = shape;
  MGPU_CHECK(s.dp >= 1 && s.tp >= 1 && s.pp >= 1 && s.cp >= 1 && s.ep >= 1, "plan ", s.str(),
             ": every extent must be 1 or more");
  MGPU_CHECK((s.dp * s.cp) % s.ep == 0, "plan ", s.str(), ": EP ", s.ep, " groups consecutive "
             "data-parallel ranks; it must divide DP x CP = ", s.dp * s.cp, " (raise --dp to a "
             "multiple of --ep)");
  MGPU_CHECK(virtual_stages >= 1 && micro_batches >= 1, "plan: ", virtual_stages,
             " virtual stage(s) and ", micro_batches, " micro-batch(es): need at least 1 of each");
  MGPU_CHECK(!regather || sequence_parallel, "plan: the re-gather keeps the sequence-parallel "
             "inputs cut; it needs sequence parallelism (--sp)");
  MGPU_CHECK(s.cp == 1 || attention != Attention::local, "plan: CP ", s.cp, " cuts every sequence "
             "over its ranks; attention then needs the ring (or the all-gather baseline), not the "
             "local core");
  MGPU_CHECK(attention != Attention::ulysses || config.n_head % (static_cast<std::int64_t>(s.tp) * s.cp) == 0,
             "plan: Ulysses: H = ", config.n_head, " heads do not split over TP·CP = ", s.tp, "·",
             s.cp, " ranks (a CP rank attends to H/(TP·CP) whole heads): choose a CP (and TP) "
             "whose product divides H, or use the ring");
  MGPU_CHECK(ulysses_size >= 0, "plan: a Ulysses size of ", ulysses_size, " ranks; give 1 or "
             "more, or 0 for the default");
  MGPU_CHECK(ulysses_size == 0 || attention == Attention::hybrid, "plan: a Ulysses size (",
             ulysses_size, ") sizes the hybrid's Ulysses groups; it needs the hybrid core "
             "(--cp-kind hybrid)");
  if (attention == Attention::hybrid) {
    const int U = ulysses_size_for(config);
    MGPU_CHECK(U >= 1 && s.cp % U == 0 && config.n_head % (static_cast<std::int64_t>(s.tp) * U) == 0,
               "plan: hybrid: Ulysses groups of U = ", U, " ranks need U to divide CP = ", s.cp,
               " and TP·U = ", s.tp, "·", U, " to divide the H = ", config.n_head,
               " heads (a rank attends to H/(TP·U) whole heads): choose --ulysses-size among "
               "the divisors of CP that divide H/TP, or use the ring");
  }
  MGPU_CHECK(!sequence_parallel || attention == Attention::local, "plan: sequence parallelism "
             "gathers the whole sequence for attention over the TP group; it does not combine "
             "with a context-parallel core (CP ", s.cp, ")");
  MGPU_CHECK(grad_sync != GradSync::ddp || (s.pp == 1 && virtual_stages == 1 && micro_batches == 1),
             "plan: DDP averages the gradients while one backward runs; with a pipeline or "
             "micro-batches (PP ", s.pp, ", ", virtual_stages, " chunk(s), ", micro_batches,
             " micro-batch(es)) average them after the backward instead");
  MGPU_CHECK(!(embedding == Vocab::split && head == Vocab::replicated),
             "plan: a replicated head reads the whole token table, which a split embedding "
             "does not hold; split the head too, or replicate the embedding");
  MGPU_CHECK(static_cast<std::int64_t>(s.pp) * virtual_stages <= config.n_layer, "plan: ",
             s.pp, " pipeline stage(s) x ", virtual_stages, " chunk(s) is more virtual stages "
             "than the ", config.n_layer, " blocks; every stage needs a block");
  MGPU_CHECK(virtual_stages == 1 || schedule == pp::ScheduleKind::interleaved, "plan: ",
             virtual_stages, " chunks per rank need the interleaved schedule (--schedule interleaved)");
}

void GptPlan::check_experts(std::int64_t moe_layers, std::int64_t experts) const {
  const grid::GridShape& s = shape;
  MGPU_CHECK(s.ep == 1 || moe_layers > 0, "plan: EP ", s.ep, " splits the experts, but the "
             "model has no MoE layer; build it with experts (use_experts, moe_gpt.h) or use EP 1");
  if (moe_layers == 0) return;
  MGPU_CHECK(experts % s.ep == 0, "plan: EP ", s.ep, " does not divide the ", experts,
             " experts of each MoE layer; choose --ep among the divisors of E");
  const char* what = sequence_parallel ? "sequence parallelism (the MoE runs whole on every TP rank)"
                     : s.cp > 1 || attention != Attention::local ? "context parallelism"
                     : s.pp > 1 || virtual_stages > 1 ? "a pipeline"
                     : micro_batches > 1 ? "micro-batches" : nullptr;
  MGPU_CHECK(what == nullptr, "plan ", s.str(), ": a model with MoE layers runs on DP, EP and "
             "TP (for attention) for now; ", what, " with experts is not supported: drop it "
             "(no SP, CP 1, PP 1, 1 micro-batch)");
  MGPU_CHECK(grad_sync == GradSync::after_step, "plan: with MoE layers the expert gradients "
             "are reduced over their own groups after the backward; DDP's buckets are not: "
             "average the gradients after the backward (GradSync::after_step)");
}

double kept_bytes_formula(const GptPlan& plan, const nn::GPTConfig& config, std::int64_t B,
                          std::int64_t T, std::int64_t blocks, std::size_t value_bytes) {
  const double N = static_cast<double>(B * T), C = static_cast<double>(config.n_embd),
               H = static_cast<double>(config.n_head), P = plan.shape.tp,
               att = static_cast<double>(B) * H * static_cast<double>(T) * static_cast<double>(T);
  const double bytes = static_cast<double>(value_bytes);
  if (plan.attention != Attention::local) {
    MGPU_CHECK(plan.shape.tp == 1, "kept_bytes_formula: not derived for a CP core with TP");
    const double Tr = static_cast<double>(T) / plan.shape.cp, Nr = static_cast<double>(B) * Tr;
    const double per_block = (15 * Nr * C + 4 * Nr) * bytes + (Nr * C + static_cast<double>(B) * H * Tr) * 8.0;
    return per_block * static_cast<double>(blocks);
  }
  const double per_block = plan.regather            ? (15 * N * C + 4 * N + att) / P
                           : plan.sequence_parallel ? 2 * N * C + (13 * N * C + 4 * N + att) / P
                                                    : 3 * N * C + 4 * N + (12 * N * C + att) / P;
  return per_block * static_cast<double>(blocks) * bytes;
}

double attention_kept_bytes_formula(const GptPlan& plan, const nn::GPTConfig& config,
                                    std::int64_t B, std::int64_t T, std::size_t value_bytes) {
  if (plan.attention == Attention::local) return 0.0;
  const double Tr = static_cast<double>(T) / plan.shape.cp, Nr = static_cast<double>(B) * Tr,
               C = static_cast<double>(config.n_embd) / plan.shape.tp,
               H = static_cast<double>(config.n_head) / plan.shape.tp;
  return 3 * Nr * C * static_cast<double>(value_bytes) + (Nr * C + static_cast<double>(B) * H * Tr) * 8.0;
}

double cp_bytes_per_layer_formula(const GptPlan& plan, const nn::GPTConfig& config,
                                  std::int64_t B, std::int64_t T, std::size_t value_bytes) {
  if (plan.attention == Attention::local) return 0.0;
  const double P = plan.shape.cp, s = static_cast<double>(value_bytes),
               NC = static_cast<double>(B * T) * static_cast<double>(config.n_embd / plan.shape.tp);
  // K and V forward and backward in s bytes, dK and dV in f64 (the host kernel's sums).
  const double ring_values = 4 * s + 2 * 8.0;
  if (plan.attention == Attention::ulysses) return 8 * (P - 1) / (P * P) * NC * s;
  if (plan.attention != Attention::hybrid) return (P - 1) / P * NC * ring_values;
  const double U = plan.ulysses_size_for(config), R = P / U;
  return 8 * (U - 1) / (U * P) * NC * s + (R - 1) / P * NC * ring_values;
}

Attention attention_from_name(const std::string& name) {
  if (name == "ring") return Attention::ring;
  if (name == "allgather") return Attention::allgather;
  if (name == "ulysses") return Attention::ulysses;
  MGPU_CHECK(name == "hybrid", "plan: no attention core \"", name, "\" (ring, allgather, ulysses or hybrid)");
  return Attention::hybrid;
}

}  // namespace mgpu::parallel::gpt
