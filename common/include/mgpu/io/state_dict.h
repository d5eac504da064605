/// @file state_dict.h
/// @brief State dicts: a model's parameters and buffers by dotted name, loaded back strictly.
///
/// As PyTorch's Module.state_dict() / load_state_dict(): the names are the modules' dotted
/// paths ("features.0.weight", "features.1.running_mean"), and a load checks that the dict
/// and the model agree on every name, shape and dtype. Scalars of a state (a step count, a
/// loss scale) are 0-d tensors: i64 for counts, f64 for reals, so they round-trip exactly.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "mgpu/io/safetensors.h"
#include "mgpu/nn/module.h"

namespace mgpu::io {

/// Named tensors: a model's, an optimizer's, or any component's state.
using StateDict = TensorDict;

/// Every parameter and buffer of `model` by dotted name. The tensors are the model's own
/// (shared storage, not copies): serialize or clone them before training on.
StateDict module_state_dict(nn::Module& model);

/// What a load found besides the names that matched.
struct LoadReport {
  std::vector<std::string> missing_keys;     ///< the model has them, the dict does not
  std::vector<std::string> unexpected_keys;  ///< the dict has them, the model does not
};

/// Copies `state` into the model's parameters and buffers, in place (each on its own device:
/// views into them, such as DDP's buckets, stay valid). Every tensor that both have must
/// agree in shape and dtype, or it throws naming the tensor and both shapes/dtypes. With
/// `strict`, missing or unexpected names throw too, listing them all (and, when the dict's
/// names start with "module.", saying how to strip it); otherwise they are reported.
/// `source` names the dict in messages (e.g. the checkpoint's path).
LoadReport load_module_state_dict(nn::Module& model, const StateDict& state, bool strict = true,
                                  const std::string& source = "state dict");

/// The dict with `prefix` removed from every name that starts with it, other names kept:
/// PyTorch's consume_prefix_in_state_dict_if_present. A model saved through its
/// DistributedDataParallel wrapper has every name prefixed "module."; this makes the dict
/// load into the bare model.
StateDict strip_prefix(const StateDict& state, const std::string& prefix = "module.");
/// The dict with `prefix` put in front of every name.
StateDict add_prefix(const StateDict& state, const std::string& prefix);
/// The entries whose names start with `prefix`, with the prefix removed.
StateDict select_prefix(const StateDict& state, const std::string& prefix);

/// A 0-d i64 tensor holding `value` (counts, positions).
Tensor scalar_i64(std::int64_t value);
/// A 0-d f64 tensor holding `value` (learning rates, loss scales).
Tensor scalar_f64(double value);
/// A 0-d i64 tensor holding the 64 bits of `value` (seeds; read back with get_u64).
Tensor scalar_u64(std::uint64_t value);
/// The i64 scalar `key` of `state`; throws naming `where` and the key if it is missing or
/// is not a one-element i64 tensor.
std::int64_t get_i64(const StateDict& state, const std::string& key, const std::string& where);
/// The f64 scalar `key` of `state` (same checks, f64).
double get_f64(const StateDict& state, const std::string& key, const std::string& where);
/// The 64 bits stored by scalar_u64.
std::uint64_t get_u64(const StateDict& state, const std::string& key, const std::string& where);

/// Named doubles (a GradScaler's state_dict(), say) as 0-d f64 tensors: how a component
/// whose state is a few numbers joins a checkpoint's extra state.
StateDict scalars_to_state(const std::map<std::string, double>& scalars);
/// Back to named doubles; every entry must be one f64 value (throws naming `where`).
std::map<std::string, double> state_to_scalars(const StateDict& state, const std::string& where);

/// FNV-1a (64 bits) over every tensor's bytes, in name order: equal fingerprints mean
/// bit-identical states (a resumed run prints it to show it ended with the uninterrupted
/// run's weights). Tensors on a GPU are copied to the host first.
std::uint64_t fingerprint(const StateDict& state);

}  // namespace mgpu::io
