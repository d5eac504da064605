// Lesson 14's program's lines of measurements beside the chapter's formulas (cp_report.h).
#include "mgpu/app/cp_report.h"

#include <algorithm>
#include <cstdio>
#include <numeric>
#include <vector>

#include "mgpu/dist/runtime.h"

namespace mgpu::app {
namespace {

namespace gpt = parallel::gpt;
namespace cp = parallel::cp;

std::string kib_text(double bytes) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.1f KiB", bytes / 1024.0);
  return buf;
}

}  // namespace

std::string cp_first_step_lines(const gpt::ParallelGpt& model, const gpt::StepReport& rep,
                                std::int64_t B, std::int64_t T, std::size_t value_bytes) {
  // The score entries each rank computed (per batch row and head, every layer): the causal
  // mask's load balance, plain against zigzag. Every rank takes part.
  const std::vector<cp::CoreStats> by_rank = model.attention_stats_by_cp_rank();
  if (dist::rank() != 0) return "";
  const gpt::GptPlan& plan = model.plan();
  const nn::GPTConfig& config = model.config();
  const std::int64_t layers = config.n_layer;
  const int P = plan.shape.cp;
  const std::string blocks = plan.shape.tp == 1
      ? kib_text(gpt::kept_bytes_formula(plan, config, B, T, layers, value_bytes))
      : std::string("not derived under TP");
  const cp::CoreStats mine = model.attention_stats();
  std::string s = "memory per rank (rank 0): activations the blocks keep " +
                  kib_text(static_cast<double>(rep.kept_bytes)) + " (formula " + blocks +
                  "); attention keeps per layer " +
                  kib_text(static_cast<double>(mine.kept) / static_cast<double>(layers)) + " (formula " +
                  kib_text(gpt::attention_kept_bytes_formula(plan, config, B, T, value_bytes)) +
                  "); the attention core's peak in a forward " + kib_text(static_cast<double>(mine.peak)) +
                  "\nattention score entries per rank (per row and head, " + std::to_string(layers) +
                  " layers):";
  std::int64_t total = 0, largest = 0;
  for (int r = 0; r < P; ++r) {
    const std::int64_t w = by_rank[static_cast<std::size_t>(r)].work;
    s += " " + std::to_string(w) + " (causal_work x layers " +
         std::to_string(cp::causal_work(T, P, r, plan.split) * layers) + ")";
    total += w;
    largest = std::max(largest, w);
  }
  char tail[48];
  std::snprintf(tail, sizeof tail, "; largest / mean %.3f",
                static_cast<double>(largest) * P / std::max(static_cast<double>(total), 1.0));
  return s + tail;
}

std::string cp_traffic_line(const gpt::ParallelGpt& model, const gpt::StepReport& rep,
                            std::int64_t B, std::int64_t T, std::size_t value_bytes) {
  const double layers = static_cast<double>(model.config().n_layer);
  return "  sent (rank 0): CP " + rep.cp_traffic.str() + ", per layer " +
         kib_text(static_cast<double>(rep.cp_traffic.sent_bytes()) / layers) + " (formula " +
         kib_text(gpt::cp_bytes_per_layer_formula(model.plan(), model.config(), B, T, value_bytes)) +
         "); all groups " + rep.traffic.str();
}

std::string cp_core_seconds_line(const gpt::ParallelGpt& model) {
  const std::vector<cp::CoreStats> cores = model.attention_stats_by_cp_rank();
  if (dist::rank() != 0) return "";
  std::string s = "attention core CPU seconds per rank, all steps, forward and backward:";
  for (const cp::CoreStats& st : cores) {
    char buf[32];
    std::snprintf(buf, sizeof buf, " %.3f", st.cpu_s);
    s += buf;
  }
  return s;
}

}  // namespace mgpu::app
