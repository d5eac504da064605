/// @file model_presets.h
/// @brief The planner's named models (planner.h): lesson 12's gpt-tiny, GPT-2 small, GPT-3
/// 6.7B, and the mixtures of experts gpt-tiny-moe (lesson 16), Mixtral 8x7B and a
/// DeepSeek-V3-like model, each with the shape its paper states (model_presets.cpp says
/// which paper and which table).
#pragma once

#include <string>
#include <vector>

#include "mgpu/perf/planner.h"

namespace mgpu::perf {

/// The preset called `name` (one of model_preset_names()). Throws mgpu::Error naming the
/// presets for another name.
ModelShape model_preset(const std::string& name);

/// The presets' names: "tiny", "gpt2-small", "gpt3-6.7b", "gpt-tiny-moe", "mixtral-8x7b",
/// "deepseek-v3-like".
std::vector<std::string> model_preset_names();

}  // namespace mgpu::perf
