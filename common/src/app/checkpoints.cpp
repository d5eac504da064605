// A training run's checkpoints and the weights' fingerprint (see checkpoints.h).
#include "mgpu/app/checkpoints.h"

#include <sstream>
#include <utility>

#include "mgpu/app/clock.h"
#include "mgpu/dist/log.h"
#include "mgpu/error.h"
#include "mgpu/io/checksum.h"
#include "mgpu/io/state_dict.h"

namespace mgpu::app {

Checkpoints::Checkpoints(const CheckpointFlags& flags, const Options& opt, const Data& data,
                         Run& run, dist::ProcessGroup& group, CheckpointHooks hooks)
    : flags_(flags), run_(run), group_(group), hooks_(std::move(hooks)), epochs_(opt.epochs) {
  MGPU_CHECK(hooks_.capture && hooks_.restore, "Checkpoints: hooks.capture and hooks.restore "
             "are required");
  progress_.world_size = group.size();
  progress_.batch_size = opt.batch_size;
  progress_.data_seed = opt.seed;
  record("model", opt.model, "--model");
  record("train_samples", std::to_string(data.train_samples), "--train-samples");
}

void Checkpoints::record(const std::string& key, const std::string& value, const std::string& flag) {
  recorded_.push_back({key, value, flag});
}

bool Checkpoints::resume() {
  const std::string where = flags_.resume == "auto" ? flags_.dir : flags_.resume;
  if (where.empty()) return false;
  io::TrainingState st;
  std::string path;
  if (!io::load_checkpoint(group_, where, Device::cpu(), st, &path, hooks_.parse,
                           flags_.allow_non_finite)) {
    dist::log0("nothing to resume in ", where, ": starting from scratch");
    return false;
  }
  // The same run continues: the same shuffle, the same data, the same settings.
  MGPU_CHECK(st.progress.data_seed == progress_.data_seed, path, " was trained with --seed ",
             st.progress.data_seed, "; resume with the same --seed");
  for (const Recorded& r : recorded_) {
    const auto it = st.metadata.find(r.key);
    MGPU_CHECK(it != st.metadata.end(), path, " has no ", r.key, " in its metadata (", r.flag,
               "): another program saved it; start without --resume");
    MGPU_CHECK(it->second == r.value, path, " was trained with ", r.flag, " ", it->second,
               "; resume with the same ", r.flag);
  }
  check_progress(st.progress, path);
  const int world = group_.size();
  const std::int64_t batch = progress_.batch_size;
  try {
    progress_ = hooks_.restore(st, path);
  } catch (const std::exception& e) {  // every message names the file
    const std::string what = e.what();
    if (what.find(path) != std::string::npos) throw;
    MGPU_FAIL(path, ": ", what);
  }
  const io::ResumePosition pos = io::resume_position(progress_, world, batch);
  resumed_sums_ = {};
  if (pos.exact) {  // the same ranks and batches: each rank's sums of the epoch go on
    const auto run_state = st.extra.find("run");
    MGPU_CHECK(run_state != st.extra.end() && run_state->second.count("epoch_sums") != 0, path,
               " holds no extra.run.epoch_sums (every rank's sums of the epoch in progress); "
               "start without --resume");
    resumed_sums_ = Run::epoch_sums_of(run_state->second.at("epoch_sums"), group_.rank());
  }
  resumed_sums_.steps = progress_.step_in_epoch = pos.step_in_epoch;
  progress_.world_size = world;
  progress_.batch_size = batch;
  dist::log0("resumed from ", path, ": epoch ", progress_.epoch + 1, ", step ",
             progress_.step_in_epoch, " of it, global step ", progress_.global_step,
             hooks_.resumed_note ? hooks_.resumed_note() : "", pos.exact ? "" : "\n  " + pos.note,
             io::checksum_note(st.metadata).empty() ? "" : "\n  " + io::checksum_note(st.metadata));
  return true;
}

void Checkpoints::check_progress(const io::TrainingProgress& p, const std::string& path) const {
  std::string bad;
  if (p.epoch < 0 || p.epoch > epochs_)
    bad = "train.epoch is " + std::to_string(p.epoch) + ", outside 0.." + std::to_string(epochs_) +
          " (--epochs " + std::to_string(epochs_) + ")";
  else if (p.epoch == epochs_ && p.step_in_epoch != 0)
    bad = "train.epoch is " + std::to_string(p.epoch) + " (the end of --epochs " +
          std::to_string(epochs_) + ") with train.step_in_epoch " + std::to_string(p.step_in_epoch);
  else if (p.step_in_epoch < 0)
    bad = "train.step_in_epoch is " + std::to_string(p.step_in_epoch) + ", negative";
  else if (p.global_step < p.epoch + p.step_in_epoch)
    bad = "train.global_step is " + std::to_string(p.global_step) + ", fewer than the steps its "
          "epoch " + std::to_string(p.epoch) + " and step_in_epoch " + std::to_string(p.step_in_epoch) +
          " need";
  else if (p.samples_in_epoch < 0)
    bad = "train.samples_in_epoch is " + std::to_string(p.samples_in_epoch) + ", negative";
  else if (p.world_size < 1 || p.batch_size < 1)
    bad = "train.world_size x batch_size is " + std::to_string(p.world_size) + " x " +
          std::to_string(p.batch_size);
  else if (!(p.lr >= 0) || p.lr > 1e30)
    bad = "train.lr is " + std::to_string(p.lr);
  MGPU_CHECK(bad.empty(), path, ": ", bad, ": not a position of this run (the file was edited, or "
             "is from a run with other flags); resume from another checkpoint or start without "
             "--resume");
}

void Checkpoints::start_epoch(int epoch, double lr, data::DataLoader& loader) {
  if (progress_.step_in_epoch > 0) {  // a resumed position inside the epoch's data
    const std::int64_t batches = static_cast<std::int64_t>(loader.num_batches());
    MGPU_CHECK(progress_.step_in_epoch <= batches, "the checkpoint resumed from says epoch ",
               epoch + 1, " continues at step ", progress_.step_in_epoch, ", but this run's epoch has ",
               batches, " step(s) per rank (--train-samples, --batch-size, ranks): not a position "
               "of this run; resume from another checkpoint or start without --resume");
  }
  loader.start_epoch(epoch, progress_.step_in_epoch);  // mid-epoch after a resume
  if (progress_.step_in_epoch > 0) run_.resume_epoch(epoch, lr, loader, resumed_sums_);
  else run_.start_epoch(epoch, lr, loader);
}

void Checkpoints::step_done(int epoch) {
  progress_.epoch = epoch;
  progress_.step_in_epoch = run_.epoch_steps();
  progress_.samples_in_epoch = progress_.step_in_epoch * progress_.batch_size * progress_.world_size;
  ++progress_.global_step;
  if (!flags_.dir.empty() && flags_.save_every > 0 && progress_.global_step % flags_.save_every == 0)
    save();
}

void Checkpoints::epoch_done(int epoch) {
  progress_.epoch = epoch + 1;
  progress_.step_in_epoch = progress_.samples_in_epoch = 0;
  if (!flags_.dir.empty() && flags_.save_every == 0) save();
}

void Checkpoints::save() {
  io::TrainingState state = hooks_.capture(progress_);
  // Every rank's sums of the epoch in progress: a resumed epoch reports what an
  // uninterrupted one would. Rank 0 alone writes; every rank takes part.
  state.extra["run"]["epoch_sums"] = run_.gather_epoch_sums(group_);
  for (const Recorded& r : recorded_) state.metadata[r.key] = r.value;
  const double begin = now_s();
  const std::string saved = hooks_.save ? hooks_.save(group_, flags_.dir, state, flags_.keep_last)
                                        : io::save_checkpoint(group_, flags_.dir, state, flags_.keep_last);
  run_.trace().span("compute", "checkpoint", begin, now_s());
  dist::log0("checkpoint: ", saved, " (", static_cast<int>(1e3 * (now_s() - begin)), " ms)");
}

CheckpointHooks with_ddp_buckets(CheckpointHooks hooks, parallel::DistributedDataParallel& ddp) {
  auto capture = std::move(hooks.capture);
  hooks.capture = [capture, &ddp](const io::TrainingProgress& progress) {
    io::TrainingState state = capture(progress);
    io::StateDict buckets = ddp.bucket_state_dict();
    if (!buckets.empty()) state.extra["ddp"] = std::move(buckets);
    return state;
  };
  auto restore = std::move(hooks.restore);
  hooks.restore = [restore, &ddp](const io::TrainingState& state, const std::string& path) {
    const io::TrainingProgress progress = restore(state, path);
    // A checkpoint saved before the rebuild (or by another program) has none: the resumed
    // DDP then starts with one bucket and rebuilds, as a fresh one does.
    const auto it = state.extra.find("ddp");
    if (it != state.extra.end()) ddp.load_bucket_state_dict(it->second, path);
    return progress;
  };
  return hooks;
}

int log_weights_fingerprint(nn::Module& model, dist::ProcessGroup* agree_over) {
  const std::uint64_t mine = io::fingerprint(io::module_state_dict(model));
  std::ostringstream line;
  line << "weights: fnv1a64=" << std::hex << mine << std::dec << " (bit-identical runs print the same";
  int differing = 0;
  if (agree_over) {
    const int world = agree_over->size();
    Tensor all = Tensor::empty({world}, DType::i64);
    agree_over->all_gather(all, Tensor::from_vector<std::int64_t>({static_cast<std::int64_t>(mine)}, {1}))
        .wait();
    const std::vector<std::int64_t> v = all.to_vector<std::int64_t>();
    for (std::int64_t f : v) differing += f != v[0] ? 1 : 0;
    line << "; " << (differing == 0 ? "the same on all " + std::to_string(world) + " rank(s)"
                                    : std::to_string(differing) + " rank(s) differ from rank 0");
  }
  line << ")";
  dist::log0(line.str());
  return differing;
}

}  // namespace mgpu::app
