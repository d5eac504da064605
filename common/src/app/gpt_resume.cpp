// A GPT program's checkpoint metadata and the resume checks (see gpt_resume.h).
#include "mgpu/app/gpt_resume.h"

#include <filesystem>

#include "mgpu/error.h"

namespace mgpu::app {

namespace {

// The metadata value `key` as a count (digits only, at most 18 of them), naming `dir` and
// the key when it is missing or is not one.
std::int64_t count_of(const io::Metadata& m, const std::string& key, const std::string& dir) {
  const auto it = m.find(key);
  MGPU_CHECK(it != m.end(), dir, ": the checkpoint's metadata has no \"", key,
             "\" (a save that is not a GPT program's, or an edited index.json); resume from "
             "another checkpoint");
  const std::string& v = it->second;
  MGPU_CHECK(!v.empty() && v.size() <= 18 && v.find_first_not_of("0123456789") == std::string::npos, dir,
             ": the checkpoint's metadata \"", key, "\" is '", v, "', not a count (an edited "
             "index.json); resume from another checkpoint");
  return std::stoll(v);
}

}  // namespace

io::Metadata gpt_checkpoint_metadata(const GptProgramFlags& f, std::int64_t step,
                                     const std::string& layout) {
  return {{"step", std::to_string(step)}, {"batch_size", std::to_string(f.batch)},
          {"seq", std::to_string(f.seq)}, {"seed", std::to_string(f.seed)}, {"layout", layout}};
}

GptResume gpt_resume_checks(const io::Metadata& m, const GptProgramFlags& f, const std::string& dir,
                            std::int64_t unverified_chunks) {
  GptResume r;
  r.step = count_of(m, "step", dir);
  const std::int64_t batch = count_of(m, "batch_size", dir);
  MGPU_CHECK(batch == f.batch, "--load ", dir, " was saved with a global batch of ", batch,
             " windows; resume with --batch-size ", batch);
  std::string unrecorded;
  if (m.count("seq")) {
    const std::int64_t seq = count_of(m, "seq", dir);
    MGPU_CHECK(seq == f.seq, "--load ", dir, " was saved with windows of ", seq,
               " tokens; resume with --seq ", seq);
  } else {
    unrecorded = "--seq";
  }
  if (m.count("seed")) {
    const std::int64_t seed = count_of(m, "seed", dir);
    MGPU_CHECK(static_cast<std::uint64_t>(seed) == f.seed, "--load ", dir,
               " was saved by a run with --seed ", seed, " (its batches); resume with --seed ", seed);
  } else {
    unrecorded += unrecorded.empty() ? "--seed" : " and --seed";
  }
  if (!unrecorded.empty())
    r.note = "note: " + dir + " does not record the run's " + unrecorded +
             " (saved before they were recorded): not checked";
  if (unverified_chunks > 0)
    r.note += (r.note.empty() ? "" : "\n  ") + std::string("note: ") + dir + "'s index has no checksums (written "
              "before they were added): " + std::to_string(unverified_chunks) + " chunk(s) were not verified";
  const auto layout = m.find("layout");
  r.layout = layout == m.end() ? "?" : layout->second;
  return r;
}

void check_save_folder(const std::string& save, const std::string& load) {
  if (save.empty() || load.empty()) return;
  namespace fs = std::filesystem;
  std::error_code e1, e2;
  const fs::path a = fs::weakly_canonical(save, e1), b = fs::weakly_canonical(load, e2);
  MGPU_CHECK(e1 || e2 || a != b, "--save ", save, " is the folder --load reads: a save removes "
             "its index before writing the new shards, so a run killed mid-save would leave no "
             "checkpoint; save to another folder (and move it over the old one once it is "
             "written)");
}

}  // namespace mgpu::app
