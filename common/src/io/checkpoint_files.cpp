// Checkpoint folders: names, `latest`, the save of a TrainingState and the collective load
// (every rank reads). The atomic commit and the collective save are lesson 07's.
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "mgpu/io/atomic_file.h"
#include "mgpu/io/checkpoint.h"
#include "mgpu/io/checksum.h"

namespace mgpu::io {

namespace fs = std::filesystem;

namespace {

// The step of "step-00001200.safetensors"; -1 for any other name.
std::int64_t step_of(const std::string& name) {
  const std::string head = "step-", tail = ".safetensors";
  if (name.size() <= head.size() + tail.size() || name.compare(0, head.size(), head) != 0 ||
      name.compare(name.size() - tail.size(), tail.size(), tail) != 0)
    return -1;
  const std::string digits = name.substr(head.size(), name.size() - head.size() - tail.size());
  if (digits.empty() || digits.size() > 18 ||
      !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return -1;
  return std::stoll(digits);
}

// Every rank learns whether every rank succeeded; if one failed, all throw (the one that
// failed with its own message). Also a barrier: no rank returns before all have arrived.
void agree(dist::ProcessGroup& group, const std::string& error, const std::string& what) {
  Tensor failed = Tensor::full({1}, error.empty() ? -1.0 : group.rank(), DType::f32, group.device());
  group.all_reduce(failed, dist::ReduceOp::max).wait();
  const int rank = static_cast<int>(failed.item());
  if (rank < 0) return;
  if (!error.empty()) MGPU_FAIL(error);
  MGPU_FAIL(what, " failed on rank ", rank, " (its error is printed there)");
}

// Rank 0's string on every rank.
std::string broadcast_string(dist::ProcessGroup& group, const std::string& s) {
  Tensor len = Tensor::full({1}, static_cast<double>(s.size()), DType::i64, group.device());
  group.broadcast(len, 0).wait();
  const auto n = static_cast<std::size_t>(len.to_vector<std::int64_t>()[0]);
  if (n == 0) return "";
  std::vector<std::int32_t> words((n + 3) / 4, 0);  // bytes packed into i32 (no u8 dtype)
  if (group.rank() == 0) std::memcpy(words.data(), s.data(), n);
  Tensor buf = Tensor::from_vector(words, {static_cast<std::int64_t>(words.size())}, group.device());
  group.broadcast(buf, 0).wait();
  words = buf.to_vector<std::int32_t>();
  return std::string(reinterpret_cast<const char*>(words.data()), n);
}

}  // namespace

std::string checkpoint_name(std::int64_t global_step) {
  MGPU_CHECK(global_step >= 0, "checkpoint_name: step ", global_step, " is negative");
  char buf[64];
  std::snprintf(buf, sizeof buf, "step-%08lld.safetensors", static_cast<long long>(global_step));
  return buf;
}

std::vector<std::string> list_checkpoints(const std::string& dir) {
  std::vector<std::pair<std::int64_t, std::string>> found;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (step_of(name) >= 0) found.emplace_back(step_of(name), name);
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> out;
  for (auto& [step, name] : found) out.push_back(std::move(name));
  return out;
}

std::string latest_checkpoint(const std::string& dir) {
  const std::string pointer = dir + "/latest";
  if (describe_path(pointer) == "missing") return "";
  std::string name = read_file(pointer);
  while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
  MGPU_CHECK(step_of(name) >= 0, pointer, " holds '", name,
             "', not a checkpoint name (step-N.safetensors); was it edited by hand?");
  const std::string path = dir + "/" + name;
  MGPU_CHECK(describe_path(path) != "missing", pointer, " names ", name,
             ", which does not exist (deleted by hand?). Resume from one of the files in ", dir,
             " by its path, or delete ", pointer, " to start over");
  return path;
}

std::string save_checkpoint(dist::ProcessGroup& group, const std::string& dir,
                            const TrainingState& state, int keep_last) {
  return save_on_rank0(group, dir, state.progress.global_step, [&] {
    const SafetensorsFile f = to_checkpoint_file(state);
    return serialize_safetensors(f.tensors, f.metadata);
  }, keep_last);
}

bool load_checkpoint(dist::ProcessGroup& group, const std::string& where, const Device& device,
                     TrainingState& state, std::string* path_out,
                     const std::function<SafetensorsFile(std::string_view, const std::string&)>& parse,
                     bool allow_non_finite) {
  // Step 1) rank 0 decides which file: every rank loads the same one even if `latest`
  // changes meanwhile or another node's view of the folder lags behind.
  std::string path, error;
  if (group.rank() == 0) {
    try {
      const bool file_name = where.size() > 12 && where.compare(where.size() - 12, 12, ".safetensors") == 0;
      const std::string what = describe_path(where);
      if (what == "a folder") {
        path = latest_checkpoint(where);
      } else if (what != "missing") {  // a file; anything else is refused by the read, saying what
        path = where;
      } else {  // a folder not created yet: nothing to resume; a missing file: an error
        MGPU_CHECK(!file_name, "no checkpoint at ", where,
                   " (give a checkpoint file, or the folder that holds `latest`)");
      }
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  agree(group, error, "finding the checkpoint in " + where);
  path = broadcast_string(group, path);
  if (path.empty()) return false;
  // Step 2) every rank reads it, onto its own device.
  TrainingState loaded;
  try {
    SafetensorsFile f;
    if (parse) {
      f = parse(read_file(path), path);
      for (auto& [name, t] : f.tensors) t = t.to(device);
    } else {
      f = load_safetensors(path, device);
    }
    verify_checksums(f, path);  // false (nothing to check) for a file written before them
    loaded = from_checkpoint_file(f, path);
    if (!allow_non_finite) {
      check_finite(loaded.model, "model.", path);
      check_finite(loaded.optimizer, "optim.", path);
    }
  } catch (const std::exception& e) {
    error = e.what();
  }
  agree(group, error, "loading " + path);
  // Step 3) the ranks check they read the same step (a stale copy on one node would not).
  Tensor steps = Tensor::from_vector<double>({static_cast<double>(loaded.progress.global_step),
                                              -static_cast<double>(loaded.progress.global_step)},
                                             {2}, group.device());
  group.all_reduce(steps, dist::ReduceOp::max).wait();
  const std::vector<double> s = steps.to_vector<double>();
  MGPU_CHECK(s[0] == -s[1], path, ": the ranks read different checkpoints (steps ", -s[1], " to ",
             s[0], "); is the folder shared by every node?");
  state = std::move(loaded);
  if (path_out) *path_out = path;
  return true;
}

ResumePosition resume_position(const TrainingProgress& saved, int world_size,
                               std::int64_t batch_size) {
  MGPU_CHECK(world_size >= 1 && batch_size >= 1, "resume_position: world size ", world_size,
             ", batch size ", batch_size);
  ResumePosition r;
  r.epoch = saved.epoch;
  if (saved.world_size == world_size && saved.batch_size == batch_size) {
    r.step_in_epoch = saved.step_in_epoch;
    return r;
  }
  r.exact = false;
  const std::int64_t per_step = batch_size * world_size;
  r.step_in_epoch = saved.samples_in_epoch / per_step;
  const std::int64_t again = saved.samples_in_epoch - r.step_in_epoch * per_step;
  r.note = "saved with " + std::to_string(saved.world_size) + " rank(s) x batch " +
           std::to_string(saved.batch_size) + ", resuming with " + std::to_string(world_size) +
           " x " + std::to_string(batch_size) + ": epoch " + std::to_string(saved.epoch + 1) +
           " continues at step " + std::to_string(r.step_in_epoch) + " (" +
           std::to_string(saved.samples_in_epoch) + " samples of its order already seen; " +
           std::to_string(again) + " of them are seen again). The epoch's order is the same; "
           "each rank's share of it and the global batch are not, so the run is not "
           "bit-identical to an uninterrupted one";
  return r;
}

}  // namespace mgpu::io
