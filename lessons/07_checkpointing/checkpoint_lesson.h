/// @file checkpoint_lesson.h
/// @brief Lesson 07's contract: the pieces of checkpointing you write. The graded tests
/// compile against exactly these declarations.
///
///   task 1  serialize_safetensors   a dict of tensors as the bytes of a safetensors file,
///                                   identical to the reference implementation's
///   task 2  parse_safetensors       read one back, refusing every malformed file
///   task 3  commit_checkpoint       the atomic save: temporary file, fsync, rename,
///           save_on_rank0           fsync of the folder, `latest`, keep the last K;
///                                   rank 0 writes, every rank waits and learns the outcome
///   task 4  capture_state           everything a bit-identical resume needs, and putting it
///           restore_state           back: model, optimizer, schedule, data position, RNG
///
/// The library (mgpu/io/) holds the rest: the checkpoint file's layout
/// (io::to_checkpoint_file), the folder's names (io::checkpoint_name, io::latest_checkpoint),
/// the loading collective, and its own reference of each piece, which the graded tests
/// compare yours with.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "mgpu/dist/process_group.h"
#include "mgpu/io/checkpoint.h"
#include "mgpu/io/safetensors.h"
#include "mgpu/nn/module.h"
#include "mgpu/optim/optimizer.h"

namespace mgpu::lesson07 {

// ---- Task 1: the writer (safetensors_writer.cpp) ----------------------------------------------

/// The bytes of a safetensors file holding `tensors` and `metadata`:
///  - the tensors in the reference implementation's order: by io::safetensors_dtype_rank
///    of their dtype, largest first, then by name (bytewise); their data back to back in
///    that order, each tensor's bytes as they are on the host (little-endian, row-major);
///  - the header: compact JSON (no spaces), "__metadata__" first when `metadata` is not
///    empty (its keys in name order), then each tensor as
///    "NAME":{"dtype":"F32","shape":[2,3],"data_offsets":[BEGIN,END]}, offsets counted
///    from the first data byte; padded with spaces to a multiple of 8 bytes;
///  - first of all, the header's length N as 8 bytes, little-endian.
/// Example: {"a": f32[2] {1, 2}} gives 8 bytes of N = 56, then
/// {"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}} (54 bytes) and 2 spaces, then 00 00 80 3f
/// 00 00 00 40. Throws mgpu::Error for a name that is "__metadata__" or not UTF-8.
std::string serialize_safetensors(const io::TensorDict& tensors, const io::Metadata& metadata = {});

// ---- Task 2: the reader (safetensors_reader.cpp) ----------------------------------------------

/// The tensors (on the CPU) and metadata of the safetensors file whose bytes are `bytes`.
/// Trusts nothing: refuses with io::refuse(file, tensor, rule, detail) - the tensor's name,
/// or "" when the problem is the header as a whole - every file that breaks a rule of
/// io::SafetensorsRule, in this order:
///  - too_small, header_too_large (N > io::kMaxHeaderBytes), header_past_end (8 + N beyond
///    the file), invalid_utf8 (io::is_valid_utf8);
///  - invalid_json and duplicate_name: io::parse_header_json does these for you;
///  - per entry: invalid_entry ("__metadata__" must map strings to strings, or be null; a
///    tensor must be an object with a string "dtype", a "shape" of integers >= 0 and
///    "data_offsets" of exactly two integers >= 0; other fields are ignored),
///    unknown_dtype (io::dtype_from_safetensors), overflow (a dimension above INT64_MAX);
///  - the data, with the entries sorted by (begin, end, name): offsets_reversed (end <
///    begin), overlap (begin before the previous end), hole (begin after it), past_end
///    (end beyond the data), overflow (numel x dtype size beyond 64 bits), byte_length
///    (end - begin != numel x dtype size), and at the end trailing_data (the last tensor
///    does not end where the file does).
/// Accepts zero-size tensors, 0-d tensors (shape []), a missing or null __metadata__, and
/// headers padded with any JSON whitespace or not padded at all.
io::SafetensorsFile parse_safetensors(std::string_view bytes, const std::string& file);

// ---- Task 3: the atomic save (atomic_save.cpp) ------------------------------------------------

/// One process saves checkpoint `name` (e.g. "step-00000120.safetensors", from
/// io::checkpoint_name) with content `bytes` into folder `dir` (created if missing) so that
/// a process killed at any instant leaves every complete checkpoint intact and dir/latest
/// naming a complete one:
///  1. write `bytes` to a temporary file in `dir` (not /tmp: rename() is atomic only
///     within one file system), fsync it, close it, rename it to dir/name, fsync `dir`;
///  2. the same for dir/latest, whose content is `name` and a newline;
///  3. only then, when keep_last > 0, delete the oldest checkpoints (io::list_checkpoints)
///     so that keep_last remain.
/// Throws mgpu::Error naming the file and the system's reason (strerror) when a step fails.
void commit_checkpoint(const std::string& dir, const std::string& name, const std::string& bytes,
                       int keep_last);

/// The collective save: every rank calls it. Rank 0 alone calls `serialize()` and
/// commit_checkpoint(dir, io::checkpoint_name(step), ..., keep_last); then all ranks take
/// part in one all_reduce (max) of a failure flag on group.device(), which is also the
/// barrier: no rank goes on before the checkpoint is complete, and if rank 0 failed, every
/// rank throws (rank 0 with its own message). Returns dir + "/" + io::checkpoint_name(step).
std::string save_on_rank0(dist::ProcessGroup& group, const std::string& dir, std::int64_t step,
                          const std::function<std::string()>& serialize, int keep_last);

// ---- Task 4: what a resume needs (resume_state.cpp) ---------------------------------------------

/// Everything of a training run a bit-identical resume needs, as io::capture_training_state
/// has it (the graded tests compare the two, entry by entry):
///  - model: every parameter and buffer by its dotted name (io::module_state_dict);
///  - optimizer: optimizer.state(), renamed from the optimizer's parameter names to the
///    model's (they differ by "module." when the optimizer was built over a DDP wrapper's
///    parameters; match them by identity: the same nn::Parameter*);
///  - progress: `progress` with lr set to the optimizer's learning rate;
///  - rng: the initialisation seed sequence (nn::seed_sequence_state) and, for every
///    nn::Dropout of the model by dotted path ("3", "features.2"), its seed and calls().
/// The tensors are the live ones, not copies.
io::TrainingState capture_state(nn::Module& model, const optim::Optimizer& optimizer,
                                 const io::TrainingProgress& progress);

/// Puts `state` back into a freshly built model and optimizer (a restarted process):
/// the model strictly (io::load_module_state_dict), the optimizer's state under its own
/// names and its learning rate, every Dropout's calls() (its seed must match, or throw),
/// the seed sequence. Returns the progress, where training continues.
io::TrainingProgress restore_state(const io::TrainingState& state, nn::Module& model,
                                   optim::Optimizer& optimizer);

}  // namespace mgpu::lesson07
