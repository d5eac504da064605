/// @file gpt_resume.h
/// @brief A GPT program's sharded checkpoint and the run that resumes it: the metadata it
/// saves (step, global batch, window length, seed, layout), the checks a resume makes against
/// this run's flags, and the refusal to save into the folder it loaded.
///
/// The checkpoint's tensors are checked by the loader (checksums, finite values, AdamW's
/// state); these are the run's own facts. A resume with another --batch-size, --seq or
/// --seed would continue on other batches than the saved run: each is refused, naming the
/// flag and the value to give. Metadata missing or not a number is refused naming the key.
#pragma once

#include <cstdint>
#include <string>

#include "mgpu/app/gpt_program.h"
#include "mgpu/io/safetensors.h"

namespace mgpu::app {

/// What a GPT program's checkpoint records about its run after `step` optimizer steps on
/// grid `layout` ("DP 2 x TP 2 x PP 1").
io::Metadata gpt_checkpoint_metadata(const GptProgramFlags& f, std::int64_t step,
                                     const std::string& layout);

/// What gpt_resume_checks found.
struct GptResume {
  std::int64_t step = 0;  ///< the optimizer steps the checkpoint had done
  std::string layout;     ///< the saving run's grid ("?" when it did not say)
  std::string note;       ///< "" or a line for the log (facts an older save did not record)
};

/// Checks the metadata of the checkpoint in `dir` against `f`: "step" a count, "batch_size"
/// equal to --batch-size, and "seq" and "seed" (when the checkpoint has them; older saves do
/// not, which the note says) equal to --seq and --seed. Throws mgpu::Error naming the
/// checkpoint, the key and the flag to give. `unverified_chunks` (io::ShardedLoadStats'):
/// chunks an index written before checksums could not verify, said in the note.
GptResume gpt_resume_checks(const io::Metadata& metadata, const GptProgramFlags& f,
                            const std::string& dir, std::int64_t unverified_chunks = 0);

/// Refuses --save DIR when it is the folder --load reads (the same folder after resolving
/// "." and symlinks): a save removes the index it would resume from before writing, so a run
/// killed mid-save would leave no checkpoint at all. Does nothing when either is empty.
void check_save_folder(const std::string& save, const std::string& load);

}  // namespace mgpu::app
