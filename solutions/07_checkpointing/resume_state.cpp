// Lesson 07, task 4: what a bit-identical resume needs, captured and put back
// (io::capture_training_state and its kin, declared in mgpu/io/checkpoint.h).
#include <unordered_map>
#include <utility>
#include <vector>

#include "mgpu/io/checkpoint.h"
#include "mgpu/nn/dropout.h"
#include "mgpu/nn/init.h"

namespace mgpu::io {

namespace {

/// Every nn::Dropout of `m`'s tree with its dotted path ("3", "features.2").
void find_dropouts(nn::Module& m, const std::string& path,
                   std::vector<std::pair<std::string, nn::Dropout*>>& out) {
  if (auto* d = dynamic_cast<nn::Dropout*>(&m)) out.emplace_back(path, d);
  for (const auto& [name, child] : m.children())
    find_dropouts(*child, path.empty() ? name : path + "." + name, out);
}

/// For each parameter the optimizer updates: its name in the optimizer (p->name(), which
/// has "module." in front when the optimizer was built over a DDP wrapper) and its name in
/// `model` (from model.named_parameters()). Throws for a parameter the model does not have.
std::vector<std::pair<std::string, std::string>> optimizer_and_model_names(
    nn::Module& model, const optim::Optimizer& optimizer) {
  std::unordered_map<const nn::Parameter*, std::string> model_names;
  for (auto& [name, p] : model.named_parameters()) model_names[p] = name;
  std::vector<std::pair<std::string, std::string>> out;
  for (const nn::Parameter* p : optimizer.params()) {
    auto it = model_names.find(p);
    MGPU_CHECK(it != model_names.end(), "the optimizer updates '", p->name(),
               "', which is not a parameter of the model (pass the unwrapped model)");
    out.emplace_back(p->name(), it->second);
  }
  return out;
}

/// "<to>.<state name>" when `key` is "<from>.<state name>" (state names have no dots:
/// momentum_buffer, exp_avg, exp_avg_sq, step); "" otherwise.
[[maybe_unused]] std::string rename_state(const std::string& key, const std::string& from,
                                          const std::string& to) {
  if (key.compare(0, from.size() + 1, from + ".") != 0) return "";
  if (key.find('.', from.size() + 1) != std::string::npos) return "";
  return to + key.substr(from.size());
}

}  // namespace

RngState capture_rng_state(nn::Module& model) {
  RngState rng;
  std::vector<std::pair<std::string, nn::Dropout*>> dropouts;
  find_dropouts(model, "", dropouts);
  // What you have: dropouts, (path, Dropout*) pairs, and a Dropout's calls() and seed();
  // nn::seed_sequence_state() -> {base, drawn}; rng.dropout (path -> {seed, calls}),
  // rng.init_base, rng.init_drawn.
  // TODO(task4) BEGIN: rng: the random streams of chapter §1's table, the initialisation
  // sequence's and every Dropout's by its path. Stuck: tools/hint 07 4 (about 4 lines).
  const nn::SeedSequenceState seq = nn::seed_sequence_state();
  rng.init_base = seq.base;
  rng.init_drawn = seq.drawn;
  for (const auto& [path, d] : dropouts) rng.dropout[path] = {d->seed(), d->calls()};
  // TODO(task4) END
  return rng;
}

void restore_rng_state(nn::Module& model, const RngState& rng) {
  std::vector<std::pair<std::string, nn::Dropout*>> dropouts;
  find_dropouts(model, "", dropouts);
  // What you have: dropouts, (path, Dropout*) pairs, and a Dropout's seed() and
  // set_calls(n); MGPU_CHECK; nn::set_seed_sequence_state({base, drawn}); rng.dropout
  // (path -> {seed, calls}), rng.init_base, rng.init_drawn.
  // TODO(task4) BEGIN: every stream of rng continues where the saved one stopped: each
  // Dropout and the initialisation sequence. The model's Dropouts must be exactly the saved
  // ones (the same paths with the same seeds, no more, no fewer), or it throws naming the
  // difference. Stuck: tools/hint 07 4 (about 10 lines).
  MGPU_CHECK(dropouts.size() == rng.dropout.size(), "checkpoint: ", rng.dropout.size(),
             " Dropout streams saved, the model has ", dropouts.size());
  for (const auto& [path, d] : dropouts) {
    auto it = rng.dropout.find(path);
    MGPU_CHECK(it != rng.dropout.end() && it->second.first == d->seed(),
               "checkpoint: no saved stream for Dropout '", path, "' with seed ", d->seed());
    d->set_calls(it->second.second);
  }
  nn::set_seed_sequence_state({rng.init_base, rng.init_drawn});
  // TODO(task4) END
}

TrainingState capture_training_state(nn::Module& model, const optim::Optimizer& optimizer,
                                     const TrainingProgress& progress) {
  TrainingState s;
  const auto names = optimizer_and_model_names(model, optimizer);
  // What you have: capture_rng_state (above); module_state_dict(model); names (above: per
  // parameter, its name in the optimizer and in the model); optimizer.lr(); optimizer.state()
  // (tensors keyed "<the optimizer's parameter name>.<state name>"); progress;
  // rename_state(key, from, to) (above); s.model, s.optimizer, s.progress, s.rng.
  // TODO(task4) BEGIN: s, chapter §1's table for this run (chapter §5): the model's tensors,
  // the optimizer's state keyed by the MODEL's names, the progress with the optimizer's lr,
  // the random streams; live tensors, no copies. Stuck: tools/hint 07 4 (about 12 lines).
  s.model = module_state_dict(model);
  for (const auto& [key, t] : optimizer.state())
    for (const auto& [opt_name, model_name] : names) {
      const std::string renamed = rename_state(key, opt_name, model_name);
      if (!renamed.empty()) s.optimizer[renamed] = t;
    }
  s.progress = progress;
  s.progress.lr = optimizer.lr();
  s.rng = capture_rng_state(model);
  // TODO(task4) END
  return s;
}

TrainingProgress restore_training_state(const TrainingState& state, nn::Module& model,
                                        optim::Optimizer& optimizer, const std::string& source) {
  const auto names = optimizer_and_model_names(model, optimizer);
  // What you have: load_module_state_dict(model, dict, strict, source); MGPU_CHECK; names,
  // rename_state (above); optimizer.load_state(dict) (keyed by its own names),
  // optimizer.set_lr(lr); restore_rng_state (above); state.model, state.optimizer (keyed by
  // the model's names), state.progress, state.rng.
  // TODO(task4) BEGIN: the inverse of capture_training_state, into a freshly built model
  // and optimizer (chapter §5): the model loaded strictly, the optimizer's state under its
  // own names and its lr, the random streams; a saved optimizer state of no parameter
  // throws, naming it and `source`. Returns the saved progress. Stuck: tools/hint 07 4
  // (about 18 lines).
  load_module_state_dict(model, state.model, /*strict=*/true, source);
  std::map<std::string, Tensor> opt_state;
  for (const auto& [key, t] : state.optimizer) {
    bool placed = false;
    for (const auto& [opt_name, model_name] : names) {
      const std::string renamed = rename_state(key, model_name, opt_name);
      if (!renamed.empty()) {
        opt_state[renamed] = t;
        placed = true;
      }
    }
    MGPU_CHECK(placed, source, ": optimizer state '", key, "' belongs to no parameter");
  }
  optimizer.load_state(opt_state);
  optimizer.set_lr(state.progress.lr);
  restore_rng_state(model, state.rng);
  return state.progress;
  // TODO(task4) END
}

}  // namespace mgpu::io
