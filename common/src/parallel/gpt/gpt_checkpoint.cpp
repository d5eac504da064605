// A ParallelGpt's tensors as the boxes of a sharded checkpoint (see gpt_checkpoint.h).
#include "mgpu/parallel/gpt/gpt_checkpoint.h"

#include "mgpu/error.h"
#include "mgpu/io/checksum.h"
#include "mgpu/io/optimizer_state_check.h"

namespace mgpu::parallel::gpt {
namespace {

// The index metadata's "step" (the optimizer steps done when it was saved), or -1 when it
// has none that reads as a count (the program's resume check names that).
std::int64_t saved_step(const io::Metadata& metadata) {
  const auto it = metadata.find("step");
  if (it == metadata.end() || it->second.empty() || it->second.size() > 18 ||
      it->second.find_first_not_of("0123456789") != std::string::npos)
    return -1;
  return std::stoll(it->second);
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// How this rank holds `local`, the tensor of parameter `param` (or of its optimizer state):
// the unsplit model's shape and this rank's slice of it.
io::ShardedTensor checkpoint_shard(const std::string& param, const Tensor& local,
                                   const nn::GPTConfig& cfg, const grid::ProcessGrid& g) {
  const int P = g.shape().tp, r = g.coords().tp;
  const bool writer = g.coords().dp == 0 && g.coords().cp == 0;
  const std::int64_t C = cfg.n_embd;
  if (local.ndim() == 0) return io::replicated(local, writer && r == 0);  // AdamW's step
  if (ends_with(param, "attn.c_attn.weight"))
    return io::split_along(local.reshape({3, local.size(0) / 3, C}), {3, C, C}, 1, P, r, writer);
  if (ends_with(param, "attn.c_attn.bias"))
    return io::split_along(local.reshape({3, local.size(0) / 3}), {3, C}, 1, P, r, writer);
  if (ends_with(param, "attn.c_proj.weight")) return io::split_along(local, {C, C}, 1, P, r, writer);
  if (ends_with(param, "mlp.c_fc.weight")) return io::split_along(local, {4 * C, C}, 0, P, r, writer);
  if (ends_with(param, "mlp.c_fc.bias")) return io::split_along(local, {4 * C}, 0, P, r, writer);
  if (ends_with(param, "mlp.c_proj.weight")) return io::split_along(local, {C, 4 * C}, 1, P, r, writer);
  return io::replicated(local, writer && r == 0);
}

}  // namespace

io::ShardedDict checkpoint_dict(ParallelGpt& model, std::map<std::string, Tensor>& state, bool saving) {
  MGPU_CHECK(model.plan().embedding == Vocab::replicated,
             "checkpoint_dict: a split embedding's padded rows are not written to checkpoints "
             "yet; train with the embedding replicated to save");
  io::ShardedDict dict;
  for (const auto& [name, p] : model.named_parameters()) {
    const bool copy = name.rfind("lm_head.", 0) == 0;
    if (copy && saving) continue;
    const std::string stored = copy ? "transformer.wte.weight" : name;
    dict[stored] = checkpoint_shard(name, p->value, model.config(), model.grid());
    for (const char* key : {"exp_avg", "exp_avg_sq", "step"}) {
      // The optimizer keys its state by the parameter's own name.
      auto it = state.find(p->name() + "." + key);
      if (it == state.end()) {  // a load before any step: the state's shape, filled by the load
        it = state.emplace(p->name() + "." + key, std::string(key) == "step"
                                                 ? Tensor::zeros({}, DType::i64)
                                                 : Tensor::zeros(p->value.shape(), p->value.dtype())).first;
      }
      dict[stored + "." + key] = checkpoint_shard(name, it->second, model.config(), model.grid());
    }
  }
  return dict;
}

std::string save_checkpoint(dist::ProcessGroup& world, const std::string& dir, ParallelGpt& model,
                            const optim::Optimizer& optimizer, const io::Metadata& metadata) {
  std::map<std::string, Tensor> state = optimizer.state();
  return io::save_sharded(world, dir, checkpoint_dict(model, state, true), metadata);
}

LoadedCheckpoint load_checkpoint(const std::string& dir, ParallelGpt& model, optim::Optimizer& optimizer) {
  LoadedCheckpoint out;
  out.index = io::read_sharded_index(dir);
  std::map<std::string, Tensor> state;
  io::ShardedDict dict = checkpoint_dict(model, state, false);
  out.stats = io::load_sharded(dir, out.index, dict);
  // Lesson 07's finite check, and what a checksum cannot see in AdamW's state (steps outside
  // 1..the saved step, negative second moments), before the optimizer takes it.
  const std::string source = "the sharded checkpoint " + dir;
  io::TensorDict loaded;
  for (const auto& [name, t] : dict) loaded[name] = t.local;
  io::check_finite(loaded, "", source, false);
  io::check_optimizer_state(state, saved_step(out.index.metadata), "optim.", source);
  optimizer.load_state(state);
  return out;
}

}  // namespace mgpu::parallel::gpt
