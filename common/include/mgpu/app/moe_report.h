/// @file moe_report.h
/// @brief What lesson 16's program prints of its experts: the load of every expert of every
/// MoE layer in a step, summed over the ranks, with the dropped choices and the slowest
/// rank's time; its JSON line for --metrics; the parameters per rank beside the formula.
/// The numbers and the text only, so that the program's train.cpp stays flags, a plan and a
/// loop.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mgpu/dist/process_group.h"
#include "mgpu/parallel/gpt/moe_gpt.h"
#include "mgpu/parallel/moe/moe_layer.h"

namespace mgpu::app {

/// One step's load of the experts, over all ranks.
struct ExpertLoad {
  std::vector<std::vector<std::int64_t>> per_layer;  ///< [L][E]: the choices routed to each
                                                     ///< expert (before capacity)
  std::vector<double> max_over_mean;  ///< [L]: the busiest expert's choices over the mean (1:
                                      ///< balanced; k/E·E = k at most)
  std::int64_t dropped = 0;           ///< choices past an expert's capacity, every layer
  double slowest_step_s = 0;          ///< the slowest rank's step, in seconds

  /// " [380 542 568 558] max/mean 1.16 [531 377 513 627] max/mean 1.17".
  std::string str() const;
};

/// The layers' stats of the last step summed over `world` (each replica counted once: the
/// ranks with `counts` false, TP ranks other than 0, add nothing), and the slowest rank's
/// `step_s`. Collective over `world`: every rank calls it, and every rank gets the sums.
ExpertLoad gather_expert_load(const std::vector<parallel::moe::MoE*>& layers, bool counts,
                              double step_s, dist::ProcessGroup& world);

/// The --metrics line of a step: step, train_loss, aux_loss, load, max_over_mean, dropped,
/// tokens_per_s (the global batch's tokens over the slowest step), ep_collectives.
nlohmann::json expert_load_json(std::int64_t step, double loss, double aux_loss,
                                const ExpertLoad& load, double tokens_per_s,
                                std::int64_t ep_collectives);

/// "memory: rank 0 holds N parameters (X KiB); formula (TP 1) dense + experts/EP = ...; one
/// process M": `held`, this rank's parameters, beside moe_parameter_count's per_rank(ep).
std::string moe_memory_line(std::int64_t held, const parallel::gpt::MoEParameterCount& formula,
                            int ep, std::size_t value_bytes);

}  // namespace mgpu::app
