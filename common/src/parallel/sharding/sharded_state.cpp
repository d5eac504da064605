// Checkpoints of a sharded model: the full state from the shards, and back onto any N.
#include "mgpu/parallel/sharding/sharded_state.h"

#include <map>
#include <set>

#include "mgpu/copy.h"
#include "mgpu/error.h"

namespace mgpu::parallel {

namespace {

// A state tensor of a master shard that holds one value per element (AdamW's moments), as
// opposed to a scalar of the whole shard (AdamW's step count).
bool per_element(const Tensor& t, const ShardedUnit& unit) {
  return t.dtype() == DType::f32 && t.shape() == unit.master_value().shape();
}

}  // namespace

io::TrainingState capture_sharded_training_state(ShardedDataParallel& sdp,
                                                 const optim::Optimizer& optimizer,
                                                 const io::TrainingProgress& progress) {
  dist::ProcessGroup& group = sdp.process_group();
  io::TrainingState s;
  // Step 1) the model: buffers as they are, parameters whole and fp32 from the shards.
  for (auto& [name, b] : sdp.module().named_buffers()) s.model[name] = *b;
  for (auto& [name, value] : sdp.full_parameters()) s.model[name] = value;
  // Step 2) the optimizer's state of each master shard, renamed to the model's parameters.
  for (std::size_t k = 0; k < sdp.num_units(); ++k) {
    const ShardedUnit& unit = sdp.unit(k);
    const FlatLayout& layout = unit.layout();
    const std::string prefix = unit.shard()->name() + ".";
    for (const auto& [key, t] : optimizer.state()) {
      if (key.compare(0, prefix.size(), prefix) != 0) continue;
      const std::string state_name = key.substr(prefix.size());
      if (per_element(t, unit)) {
        // Every rank's piece, one after another: the unit's flat state, cut per parameter.
        Tensor flat = Tensor::empty({layout.padded_numel}, DType::f32, t.device());
        group.all_gather(flat, t).wait();
        const std::vector<Tensor> views = param_views(layout, flat);
        for (std::size_t i = 0; i < views.size(); ++i)
          s.optimizer[layout.slots[i].name + "." + state_name] = views[i];
      } else {
        MGPU_CHECK(t.numel() == 1, "capture_sharded_training_state: optimizer state '", key,
                   "' is ", t.str(), ": neither one value per element of the shard nor a scalar");
        for (const FlatSlot& slot : layout.slots) s.optimizer[slot.name + "." + state_name] = t.clone();
      }
    }
  }
  s.progress = progress;
  s.progress.lr = optimizer.lr();
  s.rng = io::capture_rng_state(sdp.module());
  return s;
}

io::TrainingProgress restore_sharded_training_state(const io::TrainingState& state,
                                                    ShardedDataParallel& sdp,
                                                    optim::Optimizer& optimizer,
                                                    const std::string& source) {
  const int rank = sdp.process_group().rank();
  const std::string who = source + " (restore_sharded_training_state)";
  // Step 1) the model's names: every one there with its shape, none left over.
  std::map<std::string, Shape> expected;
  for (std::size_t k = 0; k < sdp.num_units(); ++k)
    for (const FlatSlot& slot : sdp.unit(k).layout().slots) expected[slot.name] = slot.shape;
  for (auto& [name, p] : sdp.module().named_parameters())
    if (!p->requires_grad()) expected[name] = p->value.shape();
  for (auto& [name, b] : sdp.module().named_buffers()) expected[name] = b->shape();
  for (const auto& [name, shape] : expected) {
    auto it = state.model.find(name);
    MGPU_CHECK(it != state.model.end(), who, ": the model's '", name, "' is missing");
    MGPU_CHECK(it->second.shape() == shape, who, ": '", name, "' is ", it->second.str(),
               " but the model's is ", shape_str(shape));
  }
  for (const auto& [name, t] : state.model)
    MGPU_CHECK(expected.count(name), who, ": '", name, "' is not a parameter or buffer of the model");

  // Step 2) each master shard's optimizer state: this rank's pieces of the full tensors.
  std::map<std::string, Tensor> shard_state;
  std::set<std::string> used;
  for (std::size_t k = 0; k < sdp.num_units(); ++k) {
    const ShardedUnit& unit = sdp.unit(k);
    const FlatLayout& layout = unit.layout();
    // The state names of the unit's first parameter; every other one must have them too.
    const std::string first = layout.slots.front().name + ".";
    std::vector<std::string> names;
    for (auto it = state.optimizer.lower_bound(first);
         it != state.optimizer.end() && it->first.compare(0, first.size(), first) == 0; ++it)
      names.push_back(it->first.substr(first.size()));
    for (const std::string& state_name : names) {
      auto find = [&](const FlatSlot& slot) -> const Tensor& {
        const std::string key = slot.name + "." + state_name;
        auto it = state.optimizer.find(key);
        MGPU_CHECK(it != state.optimizer.end(), who, ": optimizer state '", key, "' is missing (",
                   layout.slots.front().name, " has one)");
        used.insert(key);
        return it->second;
      };
      const Tensor& head = find(layout.slots.front());
      const std::string shard_key = unit.shard()->name() + "." + state_name;
      if (head.dtype() != DType::f32) {  // a scalar of the whole shard (AdamW's i64 step)
        for (const FlatSlot& slot : layout.slots)
          MGPU_CHECK(find(slot).numel() == 1, who, ": optimizer state '", slot.name, ".",
                     state_name, "' is ", find(slot).str(), ", expected a scalar");
        shard_state[shard_key] = head;
        continue;
      }
      // Zeros in the padding, as the sharded run keeps there.
      Tensor piece_of_state = Tensor::zeros(unit.master_value().shape(), DType::f32, Device::cpu());
      for (const FlatSlot& slot : layout.slots) {
        const Tensor& full = find(slot);
        MGPU_CHECK(full.shape() == slot.shape, who, ": optimizer state '", slot.name, ".",
                   state_name, "' is ", full.str(), " but the parameter is ", shape_str(slot.shape));
      }
      for (const ShardPiece& piece : shard_pieces(layout, rank)) {
        const FlatSlot& slot = layout.slots[piece.slot];
        const Tensor full = find(slot).to(Device::cpu()).to(DType::f32);
        Tensor dst = piece_of_state.view(piece.shard_offset, {piece.numel});
        copy_(dst, full.reshape({slot.numel}).view(piece.param_offset, {piece.numel}));
      }
      shard_state[shard_key] = piece_of_state;
    }
  }
  for (const auto& [key, t] : state.optimizer)
    MGPU_CHECK(used.count(key), who, ": optimizer state '", key,
               "' belongs to no parameter this sharded model trains");

  // Step 3) everything checked: write. The optimizer's load checks its own names too.
  optimizer.load_state(shard_state);
  optimizer.set_lr(state.progress.lr);
  sdp.load_full_parameters(state.model);
  for (auto& [name, b] : sdp.module().named_buffers()) copy_(*b, state.model.at(name).to(b->device()).to(b->dtype()));
  io::restore_rng_state(sdp.module(), state.rng);
  return state.progress;
}

}  // namespace mgpu::parallel
