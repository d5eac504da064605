/// @file cp_report.h
/// @brief What lesson 14's program prints of its context-parallel attention beside the
/// chapter's formulas: the memory a rank keeps, the causal mask's load balance, the bytes
/// each step sent by kind, and the cores' CPU time. The text only; the program prints it on
/// rank 0, so that its train.cpp stays flags, a plan and a loop.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "mgpu/parallel/gpt/parallel_gpt.h"

namespace mgpu::app {

/// The first step's lines: the activations the blocks keep and what attention keeps per
/// layer, each beside lesson 14's formula (kept_bytes_formula,
/// attention_kept_bytes_formula; the blocks' not derived under TP), the attention core's
/// peak, then the score entries of each CP rank beside causal_work. `B`, `T`: the step's
/// windows and their length; `value_bytes`: the model's dtype size. Collective over the
/// CP group (attention_stats_by_cp_rank): every rank calls it; "" on all but world rank 0.
std::string cp_first_step_lines(const parallel::gpt::ParallelGpt& model,
                                const parallel::gpt::StepReport& rep, std::int64_t B,
                                std::int64_t T, std::size_t value_bytes);

/// One step's traffic from this rank: "sent: CP all-to-all 32: 2048.0 KiB (sent 2048.0 KiB),
/// per layer 512.0 KiB (formula 512.0 KiB); all groups ...": the CP group's ops and bytes
/// by kind (the hybrid's two sub-groups included), per layer beside
/// cp_bytes_per_layer_formula, then every group's together (DDP's and TP's included).
std::string cp_traffic_line(const parallel::gpt::ParallelGpt& model,
                            const parallel::gpt::StepReport& rep, std::int64_t B, std::int64_t T,
                            std::size_t value_bytes);

/// "attention core CPU seconds per rank, all steps, forward and backward: 0.675 0.679": the
/// load balance in time. Collective over the CP group; "" on all but world rank 0.
std::string cp_core_seconds_line(const parallel::gpt::ParallelGpt& model);

}  // namespace mgpu::app
