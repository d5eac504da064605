// A TrainingState's layout as a checkpoint file's tensors (checkpoint.h). Capturing and
// restoring a run are lesson 07's.
#include "mgpu/io/checkpoint.h"

#include "mgpu/io/checksum.h"
#include "starts_with.h"

namespace mgpu::io {

SafetensorsFile to_checkpoint_file(const TrainingState& state) {
  SafetensorsFile f;
  for (const auto& [k, t] : state.model) f.tensors["model." + k] = t;
  for (const auto& [k, t] : state.optimizer) f.tensors["optim." + k] = t;
  const TrainingProgress& p = state.progress;
  f.tensors["train.epoch"] = scalar_i64(p.epoch);
  f.tensors["train.step_in_epoch"] = scalar_i64(p.step_in_epoch);
  f.tensors["train.global_step"] = scalar_i64(p.global_step);
  f.tensors["train.samples_in_epoch"] = scalar_i64(p.samples_in_epoch);
  f.tensors["train.world_size"] = scalar_i64(p.world_size);
  f.tensors["train.batch_size"] = scalar_i64(p.batch_size);
  f.tensors["train.data_seed"] = scalar_u64(p.data_seed);
  f.tensors["train.lr"] = scalar_f64(p.lr);
  f.tensors["rng.init.base"] = scalar_u64(state.rng.init_base);
  f.tensors["rng.init.drawn"] = scalar_u64(state.rng.init_drawn);
  for (const auto& [path, sc] : state.rng.dropout) {
    f.tensors["rng.dropout." + path + ".seed"] = scalar_u64(sc.first);
    f.tensors["rng.dropout." + path + ".calls"] = scalar_u64(sc.second);
  }
  for (const auto& [component, dict] : state.extra) {
    MGPU_CHECK(!component.empty() && component.find('.') == std::string::npos,
               "checkpoint: extra state component '", component, "' must be a name without '.'");
    for (const auto& [k, t] : dict) f.tensors["extra." + component + "." + k] = t;
  }
  f.metadata = state.metadata;
  f.metadata["format"] = "mgpu-checkpoint";
  f.metadata["format_version"] = std::to_string(kCheckpointFormatVersion);
  add_checksums(f);  // every tensor's, verified by load_checkpoint (checksum.h)
  return f;
}

TrainingState from_checkpoint_file(const SafetensorsFile& f, const std::string& source) {
  auto meta = [&](const char* key) {
    auto it = f.metadata.find(key);
    return it == f.metadata.end() ? std::string("(none)") : it->second;
  };
  MGPU_CHECK(meta("format") == "mgpu-checkpoint", source, ": not an mgpu checkpoint (its "
             "__metadata__ has format ", meta("format"), ", expected mgpu-checkpoint)");
  MGPU_CHECK(meta("format_version") == std::to_string(kCheckpointFormatVersion), source,
             ": checkpoint format version ", meta("format_version"), "; this program reads version ",
             kCheckpointFormatVersion);
  TrainingState s;
  s.metadata = f.metadata;
  StateDict train, rng;
  for (const auto& [key, t] : f.tensors) {
    if (starts_with(key, "model.")) s.model[key.substr(6)] = t;
    else if (starts_with(key, "optim.")) s.optimizer[key.substr(6)] = t;
    else if (starts_with(key, "train.")) train[key.substr(6)] = t;
    else if (starts_with(key, "rng.")) rng[key.substr(4)] = t;
    else if (starts_with(key, "extra.")) {
      const std::string rest = key.substr(6);
      const std::size_t dot = rest.find('.');
      MGPU_CHECK(dot != std::string::npos && dot > 0, source, ": '", key,
                 "' is not extra.<component>.<name>");
      s.extra[rest.substr(0, dot)][rest.substr(dot + 1)] = t;
    } else {
      MGPU_FAIL(source, ": '", key, "' is in no section this version knows (model., optim., "
                "train., rng., extra.)");
    }
  }
  const std::string where = source + " (train.)";
  TrainingProgress& p = s.progress;
  p.epoch = get_i64(train, "epoch", where);
  p.step_in_epoch = get_i64(train, "step_in_epoch", where);
  p.global_step = get_i64(train, "global_step", where);
  p.samples_in_epoch = get_i64(train, "samples_in_epoch", where);
  p.world_size = get_i64(train, "world_size", where);
  p.batch_size = get_i64(train, "batch_size", where);
  p.data_seed = get_u64(train, "data_seed", where);
  p.lr = get_f64(train, "lr", where);
  MGPU_CHECK(train.size() == 8, source, ": the train. section has ", train.size(),
             " counters; version ", kCheckpointFormatVersion, " has 8");
  s.rng.init_base = get_u64(rng, "init.base", source + " (rng.)");
  s.rng.init_drawn = get_u64(rng, "init.drawn", source + " (rng.)");
  MGPU_CHECK(rng.size() % 2 == 0, source, ": the rng. section has ", rng.size(),
             " entries; every stream has two");
  for (const auto& [key, t] : rng) {
    if (key == "init.base" || key == "init.drawn") continue;
    MGPU_CHECK(starts_with(key, "dropout."), source, ": 'rng.", key, "' is a stream this version does not know");
    const std::string rest = key.substr(8);
    const std::size_t dot = rest.find_last_of('.');
    MGPU_CHECK(dot != std::string::npos, source, ": 'rng.", key, "' is not rng.dropout.<path>.<seed|calls>");
    const std::string path = rest.substr(0, dot), field = rest.substr(dot + 1);
    MGPU_CHECK(field == "seed" || field == "calls", source, ": 'rng.", key, "' is not rng.dropout.<path>.<seed|calls>");
    const std::uint64_t v = get_u64(rng, key, source + " (rng.)");
    (field == "seed" ? s.rng.dropout[path].first : s.rng.dropout[path].second) = v;
  }
  for (const auto& [path, sc] : s.rng.dropout)
    MGPU_CHECK(rng.count("dropout." + path + ".seed") && rng.count("dropout." + path + ".calls"),
               source, ": Dropout '", path, "' needs both rng.dropout.", path, ".seed and .calls");
  return s;
}

}  // namespace mgpu::io
