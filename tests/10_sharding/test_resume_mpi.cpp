// Lesson 10, task 4 under mpirun (2 and 3 ranks): a checkpoint saved on 2 ranks resumes on
// all of them. Ranks 0 and 1 alone (a sub-group) train at stage 3 and save the full state
// (parallel/sharding/sharded_state.h) with io::save_checkpoint; then every rank loads the file and
// continues at stage 2: at 3 ranks, each unit saved as 2 shards is cut into 3. These run
// every task (1-4): do them in order.
#include <catch2/catch.hpp>

#include <stdlib.h>  // mkdtemp

#include <cstdint>
#include <cstring>
#include <exception>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "mgpu/io/checkpoint.h"
#include "mgpu/parallel/sharding/sharded_state.h"
#include "sharding_test_util.h"

using namespace shard_test;
namespace io = mgpu::io;

namespace {

constexpr std::int64_t kGlobalRows = 6;  // a global batch that 2 and 3 ranks split evenly

// Rank g.rank()'s even slice of step `step`'s global batch. The batch is the same at every
// world size, and the mean of the slices' mean losses is the mean over the whole batch, so
// 2 ranks and 3 ranks take the same optimizer steps (up to the order of the sums).
void slice_forward_backward(nn::Module& m, const RunSpec& spec, int step,
                            const dist::ProcessGroup& g) {
  Tensor x, y;
  rank_batch(0, step, kGlobalRows, spec.features, spec.classes, x, y);
  const std::int64_t rows = kGlobalRows / g.size(), begin = g.rank() * rows;
  nn::CrossEntropyLoss loss;
  loss.forward(m.forward(x.slice(begin, begin + rows)), y.slice(begin, begin + rows));
  m.backward(loss.backward());
}

// Step 1) zero the gradients, 2) forward and backward on this rank's slice, 3) step.
void train_steps(nn::Module& m, optim::AdamW& opt, const RunSpec& spec, int first, int end,
                 const dist::ProcessGroup& g) {
  for (int s = first; s < end; ++s) {
    opt.zero_grad();
    slice_forward_backward(m, spec, s, g);
    opt.step();
  }
}

// A folder every rank sees: rank 0 creates it and removes it, the others learn its name.
class SharedTempDir {
 public:
  SharedTempDir() {
    std::vector<std::int32_t> name(64, 0);
    if (group().rank() == 0) {
      char buf[] = "/tmp/mgpu-reshard-XXXXXX";
      if (::mkdtemp(buf) != nullptr) std::memcpy(name.data(), buf, sizeof buf);
    }
    Tensor t = Tensor::from_vector(name, {64});
    group().broadcast(t, 0).wait();
    name = t.to_vector<std::int32_t>();
    path_ = reinterpret_cast<const char*>(name.data());
  }
  // No barrier here: the test ends with one, and a REQUIRE that stops it holds on every rank.
  ~SharedTempDir() {
    std::error_code ignored;
    if (group().rank() == 0 && !path_.empty()) std::filesystem::remove_all(path_, ignored);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace

TEST_CASE("a checkpoint saved on 2 ranks resumes on every rank (2 -> 3 shards at 3 ranks)",
          "[10_sharding][task4][points:2]") {
  REQUIRE(group().size() >= 2);  // the saving sub-group is ranks 0 and 1
  RunSpec spec;                  // AdamW; 4 steps in all: 2 on ranks 0 and 1, then 2 on all

  // The reference: DDP over every rank for the 4 steps.
  auto reference = toy_mlp(15);
  {
    par::DistributedDataParallel ddp(reference, group());
    optim::AdamW opt(ddp.parameters(), spec.adamw);
    train_steps(ddp, opt, spec, 0, 4, group());
  }
  std::map<std::string, Tensor> want;
  for (auto& [name, p] : reference->named_parameters()) want[name] = p->value.clone();

  const SharedTempDir tmp;
  const std::string dir = tmp.path() + "/run";
  REQUIRE(!tmp.path().empty());

  // Ranks 0 and 1: stage 3, a unit per layer, two steps, then the full state saved. Every
  // rank creates the sub-group (a world collective); rank 2 gets none and skips ahead to
  // the load, where it waits for rank 0.
  dist::GroupOptions options;
  options.announce = false;
  options.timeout_s = 60;
  const std::shared_ptr<dist::ProcessGroup> pair =
      dist::new_group({0, 1}, "mpi", Device::cpu(), options);
  std::string failure;  // a throw on ranks 0 and 1 alone must not leave rank 2 waiting
  if (pair != nullptr) {
    try {
      auto model = toy_mlp(15);
      par::ShardedDataParallel on_two(model, *pair, stage_options(3));
      optim::AdamW opt(on_two.parameters(), spec.adamw);
      train_steps(on_two, opt, spec, 0, 2, *pair);
      io::TrainingProgress progress;
      progress.global_step = 2;
      progress.world_size = pair->size();
      io::save_checkpoint(*pair, dir,
                          par::capture_sharded_training_state(on_two, opt, progress));
    } catch (const std::exception& e) {
      failure = e.what();
    }
  }
  INFO("ranks 0 and 1 (stage 3, two steps, save): " << (failure.empty() ? "done" : failure));
  REQUIRE(all_ranks(failure.empty()));

  // Every rank: load the file, restore at stage 2 with the whole model as one unit (another
  // layout and, at 3 ranks, another shard size), two more steps.
  io::TrainingState saved;
  REQUIRE(io::load_checkpoint(group(), dir, Device::cpu(), saved));
  CHECK(saved.progress.world_size == 2);
  auto model = toy_mlp(98);  // other initial values: the load must replace every one
  const std::size_t whole_model = std::numeric_limits<std::size_t>::max();
  par::ShardedDataParallel on_all(model, group(), stage_options(2, whole_model));
  optim::AdamW opt(on_all.parameters(), {});
  try {
    const io::TrainingProgress resumed = par::restore_sharded_training_state(saved, on_all, opt);
    CHECK(resumed.global_step == 2);
    failure.clear();
  } catch (const std::exception& e) {
    failure = e.what();
  }
  INFO("restore on " << group().size() << " ranks: " << (failure.empty() ? "done" : failure));
  REQUIRE(all_ranks(failure.empty()));
  CHECK(opt.lr() == spec.adamw.lr);
  train_steps(on_all, opt, spec, 2, 4, group());

  const double diff = max_over_ranks(max_param_diff(on_all.full_parameters(), want));
  INFO("saved on 2 ranks, resumed on " << group().size()
       << ": largest |resumed - DDP over 4 steps| = " << diff);
  CHECK(diff <= kTolerance);
  group().barrier().wait();  // every rank has read the file before rank 0 removes it
}
