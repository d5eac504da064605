/// @file checkpoints.h
/// @brief A training run's checkpoints (lessons 07 and 08): resume where --resume points,
/// save every --save-every steps, and the weights' fingerprint at the end.
///
/// The program says how a checkpoint is read, written and put back (its CheckpointHooks:
/// the library's io:: functions, or a lesson's own pieces); Checkpoints does the rest:
/// the flags, the checks that a resume continues the same run, where in the data the run
/// continues, every rank's epoch sums (so a resumed epoch reports what an uninterrupted one
/// would), the "checkpoint" span and line.
///
///     app::Checkpoints checkpoints(ck, opt, data, run, *ranks.cpu_group, hooks);
///     checkpoints.resume();                                  // --resume
///     for (int epoch = checkpoints.first_epoch(); epoch < opt.epochs; ++epoch) {
///       ...
///       checkpoints.start_epoch(epoch, lr, *loader);         // mid-epoch after a resume
///       while (run.next_batch(batch)) {
///         ...                                                // the step
///         run.step(loss, samples, correct);
///         checkpoints.step_done(epoch);                      // every --save-every steps
///       }
///       ...
///       run.end_epoch(test);
///       checkpoints.epoch_done(epoch);                       // --save-every 0: every epoch
///     }
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "mgpu/app/data.h"
#include "mgpu/app/flags.h"
#include "mgpu/app/run.h"
#include "mgpu/dist/process_group.h"
#include "mgpu/io/checkpoint.h"
#include "mgpu/io/safetensors.h"
#include "mgpu/nn/module.h"
#include "mgpu/parallel/ddp/ddp.h"

namespace mgpu::app {

/// How a program's checkpoints are made and put back.
struct CheckpointHooks {
  /// The state to save at `progress` (io::capture_training_state, a lesson's capture_state),
  /// with any component of the program's own in its `extra` (a loss scaler's state).
  std::function<io::TrainingState(const io::TrainingProgress& progress)> capture;
  /// Puts a loaded state (read from `path`) back into the model, the optimizer and the
  /// program's components; returns the progress it holds (io::restore_training_state).
  std::function<io::TrainingProgress(const io::TrainingState& state, const std::string& path)>
      restore;
  /// Reads a checkpoint file's bytes (a lesson's reader); empty: io's.
  std::function<io::SafetensorsFile(std::string_view bytes, const std::string& file)> parse;
  /// Saves `state` into folder `dir` (collective; rank 0 writes) and returns the file's
  /// path (a lesson's writer and atomic save); empty: io::save_checkpoint.
  std::function<std::string(dist::ProcessGroup& group, const std::string& dir,
                            const io::TrainingState& state, int keep_last)>
      save;
  /// Text for the end of the "resumed from" line ("; loss scale 65536"); empty: none.
  std::function<std::string()> resumed_note;
};

/// The checkpoints of one run (see the file comment). Every call is collective over the
/// group given to the constructor: every rank makes the same calls.
class Checkpoints {
 public:
  /// For a run of `opt` on `data` with the checkpoint flags `flags`, reporting through
  /// `run`; `group` is a CPU group over every rank. Records --model and --train-samples
  /// (see record()). The references must outlive this object.
  Checkpoints(const CheckpointFlags& flags, const Options& opt, const Data& data, Run& run,
              dist::ProcessGroup& group, CheckpointHooks hooks);

  /// Writes `value` into every checkpoint's metadata under `key`; resuming from a file
  /// whose value differs, or which has none, is refused with a message naming `flag`.
  void record(const std::string& key, const std::string& value, const std::string& flag);

  /// --resume: loads the checkpoint (a file, or a folder's `latest`; with "auto" the
  /// --checkpoint-dir's, if it has one yet), refuses one of another --seed or recorded
  /// value, puts it back with hooks.restore and finds where the run continues in the data
  /// (io::resume_position). Prints "resumed from ..." or "nothing to resume in ...".
  /// The file is verified on load (io::load_checkpoint: checksums, finite values unless
  /// --allow-non-finite-checkpoint); its training position must be one of this run (epoch
  /// within --epochs, counters not negative and consistent; the step within the epoch's
  /// steps, checked by start_epoch); every refusal names the file.
  /// Returns true when it resumed.
  bool resume();

  /// The epoch the run starts with: 0, or the resumed one.
  int first_epoch() const { return static_cast<int>(progress_.epoch); }
  /// Starts `epoch` on `loader` and on the run: at the resumed step in the first epoch
  /// after a resume (Run::resume_epoch with the saved sums), at its start otherwise.
  void start_epoch(int epoch, double lr, data::DataLoader& loader);
  /// After each step of `epoch` (run.step() done; a skipped step counts, the data moved
  /// on): where the run stands, and a save every --save-every steps.
  void step_done(int epoch);
  /// After `epoch`'s end_epoch: the next epoch's start, and a save when --save-every is 0.
  void epoch_done(int epoch);
  /// Where the run stands: epoch, step in it, global step.
  const io::TrainingProgress& progress() const { return progress_; }

 private:
  struct Recorded {
    std::string key, value, flag;
  };
  void save();
  // Refuses a loaded position outside this run (--epochs) or inconsistent in itself.
  void check_progress(const io::TrainingProgress& progress, const std::string& path) const;

  const CheckpointFlags& flags_;
  Run& run_;
  dist::ProcessGroup& group_;
  CheckpointHooks hooks_;
  std::vector<Recorded> recorded_;
  io::TrainingProgress progress_;
  Run::EpochSums resumed_sums_;  // of the resumed epoch, this rank's
  int epochs_;                   // --epochs
};

/// `hooks` that also save DDP's rebuilt buckets (the checkpoint's extra.ddp) and put them
/// back at a resume, so the resumed run's all-reduces sum in the order the uninterrupted
/// run's do: on 3 or more ranks a different bucket layout can change the last bits of the
/// averaged gradients. `ddp` must outlive the hooks.
CheckpointHooks with_ddp_buckets(CheckpointHooks hooks, parallel::DistributedDataParallel& ddp);

/// Prints "weights: fnv1a64=HASH (bit-identical runs print the same)" on rank 0: the FNV-1a
/// fingerprint of `model`'s parameters and buffers (io::fingerprint); two runs that print
/// the same one ended with the same bits. With `agree_over` (a CPU group; collective) every
/// rank's fingerprint is compared with rank 0's and the line ends "; the same on all N
/// rank(s))" or "; K rank(s) differ from rank 0)". Returns K (0 without a group).
int log_weights_fingerprint(nn::Module& model, dist::ProcessGroup* agree_over = nullptr);

}  // namespace mgpu::app
