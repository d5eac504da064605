// TrainingState: capturing and restoring a run (model, optimizer, RNG streams), and its
// layout as a checkpoint file's tensors.
#include <set>
#include <unordered_map>

#include "mgpu/io/checkpoint.h"
#include "mgpu/nn/dropout.h"
#include "mgpu/nn/init.h"

namespace mgpu::io {

namespace {

bool starts_with(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

// Every Dropout of the tree with its dotted path ("3", "features.2").
void find_dropouts(nn::Module& m, const std::string& path,
                   std::vector<std::pair<std::string, nn::Dropout*>>& out) {
  if (auto* d = dynamic_cast<nn::Dropout*>(&m)) out.emplace_back(path, d);
  for (const auto& [name, child] : m.children())
    find_dropouts(*child, path.empty() ? name : path + "." + name, out);
}

// The model's name of each of its parameters, by identity.
std::unordered_map<const nn::Parameter*, std::string> names_by_identity(nn::Module& model) {
  std::unordered_map<const nn::Parameter*, std::string> out;
  for (auto& [name, p] : model.named_parameters()) out[p] = name;
  return out;
}

// The optimizer's state names ("<its parameter name>.<state>") mapped to the model's
// parameter names. The optimizer may see the parameters through a wrapper (DDP's names
// start with "module."); the checkpoint always uses the model's own names.
std::map<std::string, std::string> optimizer_to_model_names(nn::Module& model,
                                                            const optim::Optimizer& optimizer) {
  const auto model_names = names_by_identity(model);
  std::map<std::string, std::string> out;
  for (const nn::Parameter* p : optimizer.params()) {
    auto it = model_names.find(p);
    MGPU_CHECK(it != model_names.end(), "checkpoint: the optimizer updates parameter '", p->name(),
               "', which is not a parameter of the model being saved (pass the model the "
               "optimizer was built for, unwrapped: ddp.module())");
    out[p->name()] = it->second;
  }
  return out;
}

}  // namespace

RngState capture_rng_state(nn::Module& model) {
  RngState rng;
  const nn::SeedSequenceState s = nn::seed_sequence_state();
  rng.init_base = s.base;
  rng.init_drawn = s.drawn;
  std::vector<std::pair<std::string, nn::Dropout*>> dropouts;
  find_dropouts(model, "", dropouts);
  for (const auto& [path, d] : dropouts) rng.dropout[path] = {d->seed(), d->calls()};
  return rng;
}

void restore_rng_state(nn::Module& model, const RngState& rng) {
  std::vector<std::pair<std::string, nn::Dropout*>> dropouts;
  find_dropouts(model, "", dropouts);
  std::set<std::string> seen;
  for (const auto& [path, d] : dropouts) {
    auto it = rng.dropout.find(path);
    MGPU_CHECK(it != rng.dropout.end(), "checkpoint: the model has a Dropout at '", path,
               "' but the checkpoint has no random state for it");
    MGPU_CHECK(it->second.first == d->seed(), "checkpoint: Dropout '", path, "' has seed ",
               d->seed(), " but the checkpoint's has seed ", it->second.first,
               " (build the model with the same seed as the saved run)");
    seen.insert(path);
  }
  for (const auto& [path, state] : rng.dropout)
    MGPU_CHECK(seen.count(path), "checkpoint: has random state for a Dropout at '", path,
               "' but the model has none there");
  for (const auto& [path, d] : dropouts) d->set_calls(rng.dropout.at(path).second);
  nn::set_seed_sequence_state({rng.init_base, rng.init_drawn});
}

TrainingState capture_training_state(nn::Module& model, const optim::Optimizer& optimizer,
                                     const TrainingProgress& progress) {
  TrainingState s;
  s.model = module_state_dict(model);
  const auto rename = optimizer_to_model_names(model, optimizer);
  for (const auto& [key, t] : optimizer.state()) {
    // key = "<optimizer's parameter name>.<state name>": find the longest matching name.
    std::string best;
    for (const auto& [opt_name, model_name] : rename)
      if (starts_with(key, opt_name + ".") && opt_name.size() > best.size()) best = opt_name;
    MGPU_CHECK(!best.empty(), "checkpoint: optimizer state '", key, "' belongs to no parameter");
    s.optimizer[rename.at(best) + key.substr(best.size())] = t;
  }
  s.progress = progress;
  s.progress.lr = optimizer.lr();
  s.rng = capture_rng_state(model);
  return s;
}

TrainingProgress restore_training_state(const TrainingState& state, nn::Module& model,
                                        optim::Optimizer& optimizer, const std::string& source) {
  // Step 1) the model, strictly.
  load_module_state_dict(model, state.model, /*strict=*/true, source);
  // Step 2) the optimizer: its state renamed back to the optimizer's names, and its lr.
  std::map<std::string, std::string> to_optimizer;  // model name -> optimizer's name
  for (const auto& [opt_name, model_name] : optimizer_to_model_names(model, optimizer))
    to_optimizer[model_name] = opt_name;
  std::map<std::string, Tensor> opt_state;
  for (const auto& [key, t] : state.optimizer) {
    std::string best;
    for (const auto& [model_name, opt_name] : to_optimizer)
      if (starts_with(key, model_name + ".") && model_name.size() > best.size()) best = model_name;
    MGPU_CHECK(!best.empty(), source, ": optimizer state '", key,
               "' belongs to no parameter this optimizer updates");
    opt_state[to_optimizer.at(best) + key.substr(best.size())] = t;
  }
  optimizer.load_state(opt_state);
  optimizer.set_lr(state.progress.lr);
  // Step 3) the random streams.
  restore_rng_state(model, state.rng);
  return state.progress;
}

// ---- the file layout -------------------------------------------------------------------------

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
