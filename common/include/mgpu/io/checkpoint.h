/// @file checkpoint.h
/// @brief Training checkpoints: everything a bit-identical resume needs, in one safetensors
/// file, saved atomically by rank 0 and loaded by every rank.
///
/// A checkpoint file's tensors, by section (one flat safetensors dict):
///
///     model.<name>              parameters and buffers by dotted name
///     optim.<name>.<state>      optimizer state of parameter <name> (momentum_buffer;
///                               exp_avg, exp_avg_sq, step), keyed by the model's names
///     train.<counter>           where training stands (TrainingProgress), 0-d tensors
///     rng.<stream>              what each random stream has drawn (RngState), 0-d tensors
///     extra.<component>.<key>   any other component's state dict (e.g. "scaler", the loss
///                               scaler of mixed precision)
///
/// and its `__metadata__`: "format": "mgpu-checkpoint", "format_version": "1",
/// "checksum.<tensor name>" for every tensor (checksum.h, verified on load), plus free
/// text the program adds (model, command line). Scalars are 0-d tensors (i64 counts and
/// seeds, f64 learning rate), not metadata strings: they round-trip bit for bit, carry their
/// dtype, and are checked like every other tensor. Metadata holds what a person or a reader
/// must see before interpreting the tensors: the format and its version.
///
/// In a folder, checkpoints are `step-<global step, 8 digits>.safetensors`, and the file
/// `latest` holds the name of the newest complete one (as DeepSpeed's `latest` file does).
///
/// Capturing and restoring a run (task 4) and the atomic, collective save (task 3) are
/// lesson 07's: declared here, defined in the lesson's exercise files; the library is built
/// with their reference (solutions/07_checkpointing/). The file layout, the folder's names
/// and the collective load are the library's own.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "mgpu/dist/process_group.h"
#include "mgpu/io/state_dict.h"
#include "mgpu/nn/module.h"
#include "mgpu/optim/optimizer.h"

namespace mgpu::io {

/// The version of the layout above; a reader refuses files of another version.
constexpr int kCheckpointFormatVersion = 1;

/// Where a training run stands. The learning-rate schedule is a function of these counters
/// (epoch and global_step), so they are its position; `lr` is the rate in effect, saved to
/// check that the resumed run computes the same one.
struct TrainingProgress {
  std::int64_t epoch = 0;             ///< the epoch in progress (0-based)
  std::int64_t step_in_epoch = 0;     ///< optimizer steps already taken in that epoch
  std::int64_t global_step = 0;       ///< optimizer steps since the start of training
  std::int64_t samples_in_epoch = 0;  ///< samples of the epoch consumed, summed over ranks
  std::int64_t world_size = 1;        ///< ranks of the run that saved
  std::int64_t batch_size = 0;        ///< per rank, of the run that saved
  std::uint64_t data_seed = 0;        ///< seed of the shuffle: epoch e visits shuffled_indices(N, seed, e)
  double lr = 0;                      ///< the learning rate in effect
};

/// The random streams of a run. Every generator of the library is counter-based, so a
/// stream's state is its seed and how many draws it has made.
struct RngState {
  /// The initialisation seed sequence (nn::manual_seed / nn::next_seed).
  std::uint64_t init_base = 0;
  /// Seeds it has handed out.
  std::uint64_t init_drawn = 0;
  /// Each Dropout module by dotted path: its seed and its training forwards so far.
  std::map<std::string, std::pair<std::uint64_t, std::uint64_t>> dropout;
};

/// Everything a bit-identical resume needs, in memory.
struct TrainingState {
  StateDict model;      ///< parameters and buffers by dotted name (module_state_dict)
  StateDict optimizer;  ///< "<parameter name>.<state name>", named by the model's names
  TrainingProgress progress;                ///< counters, data position, learning rate
  RngState rng;                             ///< random streams
  std::map<std::string, StateDict> extra;   ///< other components' state by component name
  Metadata metadata;                        ///< free text (never needed to resume)
};

// ---- Lesson 07's task 4 (resume_state.cpp): what a bit-identical resume needs ----------

/// The RNG streams of `model` (its Dropout layers, by dotted path: "3", "features.2") and of
/// the initialisation sequence (nn::seed_sequence_state).
RngState capture_rng_state(nn::Module& model);
/// Puts them back: the model's Dropout layers must be those of the capture (same paths,
/// same seeds), or it throws; then every Dropout's calls() and the seed sequence.
void restore_rng_state(nn::Module& model, const RngState& rng);

/// The state of a run: `model` unwrapped (pass ddp.module(), not the wrapper: see
/// strip_prefix), `optimizer` over its parameters (possibly through a wrapper: its state is
/// renamed to the model's names by parameter identity, the same nn::Parameter*),
/// `progress` from the training loop, with lr set to the optimizer's learning rate.
/// The tensors are the live ones (no copies): save before the next step changes them.
TrainingState capture_training_state(nn::Module& model, const optim::Optimizer& optimizer,
                                     const TrainingProgress& progress);
/// Loads `state` into a freshly built model (strictly: names, shapes, dtypes,
/// load_module_state_dict), the optimizer (its state under its own names, and its learning
/// rate) and the RNG streams (restore_rng_state); returns the progress, from which the
/// training loop resumes. `source` names the checkpoint in messages.
TrainingProgress restore_training_state(const TrainingState& state, nn::Module& model,
                                        optim::Optimizer& optimizer,
                                        const std::string& source = "checkpoint");

// ---- the library's: the file layout, the folder, the collective load -------------------

/// The checkpoint file's tensors and metadata for `state` (the layout above), with a
/// checksum of every tensor in the metadata (add_checksums, checksum.h).
SafetensorsFile to_checkpoint_file(const TrainingState& state);
/// The state a checkpoint file holds; throws naming `source` for a file that is not a
/// checkpoint of this version, or misses a counter, or has a section it does not know.
TrainingState from_checkpoint_file(const SafetensorsFile& file, const std::string& source);

/// "step-00001200.safetensors".
std::string checkpoint_name(std::int64_t global_step);
/// The checkpoint files in `dir`, oldest first (by step).
std::vector<std::string> list_checkpoints(const std::string& dir);
/// The path of the checkpoint `dir/latest` names; "" when `dir` or `latest` does not exist.
/// Throws when `latest` names a file that is missing.
std::string latest_checkpoint(const std::string& dir);

// ---- Lesson 07's task 3 (atomic_save.cpp): the atomic save ------------------------------

/// One process saves checkpoint `name` (checkpoint_name) with content `bytes` into folder
/// `dir` (created if missing) so that a process killed at any instant leaves every complete
/// checkpoint intact and dir/latest naming a complete one: the checkpoint with
/// atomic_replace, then dir/latest (its content `name` and a newline) the same way, then
/// only, when keep_last > 0, the oldest checkpoints deleted so that keep_last remain (the
/// new one never). Temporary files of an earlier save that was killed are removed first.
/// Throws mgpu::Error naming the file and the system's reason when a step fails.
void commit_checkpoint(const std::string& dir, const std::string& name, const std::string& bytes,
                       int keep_last);

/// The collective save: every rank calls it. Rank 0 alone calls `serialize()` and
/// commit_checkpoint(dir, checkpoint_name(step), ..., keep_last); then all ranks take part
/// in one all_reduce (max) of a failure flag on group.device(), which is also the barrier:
/// no rank goes on before the checkpoint is complete, and if rank 0 failed, every rank
/// throws (rank 0 with its own message). Returns dir + "/" + checkpoint_name(step).
std::string save_on_rank0(dist::ProcessGroup& group, const std::string& dir, std::int64_t step,
                          const std::function<std::string()>& serialize, int keep_last);

/// Saves `state` as dir/checkpoint_name(global_step) (collective: every rank calls it):
/// save_on_rank0 with the bytes of to_checkpoint_file(state) (serialize_safetensors).
/// Rank 0 alone writes (the ranks' states are identical in data parallelism); every rank
/// waits for it and learns whether it succeeded, so all ranks go on, or all throw. Returns
/// the path written.
std::string save_checkpoint(dist::ProcessGroup& group, const std::string& dir,
                            const TrainingState& state, int keep_last = 0);

/// Loads a checkpoint on every rank (collective). `where` is a checkpoint file, or a folder
/// (its `latest`). Rank 0 resolves the file and tells the others which, every rank reads it
/// itself (no rank holds everyone's copy), tensors go to `device`, and the ranks check that
/// they read the same step. Returns false on every rank when `where` is a folder without a
/// checkpoint yet, or does not exist and is not a file name (*.safetensors): nothing to
/// resume, `state` untouched. A missing *.safetensors file is an error.
/// `parse`, when given, reads the file's bytes instead of load_safetensors (which reads
/// through parse_safetensors_header, lesson 07's reader, already).
/// After reading, every tensor is verified against the file's checksums (verify_checksums:
/// a file without any, written before they were added, is read unverified), and, unless
/// `allow_non_finite`, the model's and the optimizer's tensors must hold no NaN or infinity
/// (check_finite). Every refusal names the file and the tensor.
bool load_checkpoint(dist::ProcessGroup& group, const std::string& where, const Device& device,
                     TrainingState& state, std::string* path = nullptr,
                     const std::function<SafetensorsFile(std::string_view, const std::string&)>&
                         parse = nullptr,
                     bool allow_non_finite = false);

/// Where a resumed run continues in the data.
struct ResumePosition {
  std::int64_t epoch = 0;          ///< the epoch to continue
  std::int64_t step_in_epoch = 0;  ///< the first step (batch index per rank) to run in it
  bool exact = true;               ///< false: the world size or batch size changed
  std::string note;                ///< what changed and what it means, for the log
};
/// Maps a saved position onto this run's world size and per-rank batch size. The same
/// sizes continue exactly where the run stopped. Other sizes re-derive the step from the
/// samples already seen in the epoch (samples_in_epoch / (batch_size x world_size), rounded
/// down): the shuffled order of the epoch is the same, each rank's share of it is not, and a
/// few samples may be seen twice; the note says how many.
ResumePosition resume_position(const TrainingProgress& saved, int world_size,
                               std::int64_t batch_size);

}  // namespace mgpu::io
