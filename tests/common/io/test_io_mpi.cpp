// mgpu::io checkpoints across ranks (run under mpirun with 1, 2 and 3 ranks): rank 0 saves,
// every rank loads the same step, a failed save fails on every rank, and a resume with DDP
// is bit-identical, mid-epoch too.
#include <catch2/catch.hpp>

#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include "io_files.h"
#include "mgpu/dist/dist.h"
#include "mgpu/io/checkpoint.h"
#include "resume_harness.h"
#include "shared_temp_dir.h"

using mgpu::Tensor;
namespace io = mgpu::io;
namespace nn = mgpu::nn;
namespace dist = mgpu::dist;
using mgpu::testing::bitwise_equal;
using mgpu::testing::ToyOptimizer;
using mgpu::testing::ToyTraining;

namespace {

using mgpu::testing::cpu_group;
using mgpu::testing::SharedTempDir;

void check_same(const io::StateDict& a, const io::StateDict& b) {
  REQUIRE(a.size() == b.size());
  for (const auto& [name, t] : a) {
    INFO(name);
    CHECK(bitwise_equal(t, b.at(name)));
  }
}

}  // namespace

TEST_CASE("save on rank 0, load on every rank: the same step everywhere", "[io][checkpoint][mpi]") {
  dist::ProcessGroup& g = cpu_group();
  SharedTempDir tmp("mgpu-ckpt-mpi");
  const std::string dir = tmp.path() + "/run";
  io::TrainingState loaded;
  CHECK_FALSE(io::load_checkpoint(g, dir, mgpu::Device::cpu(), loaded));  // nothing yet

  ToyTraining run(&g, ToyOptimizer::sgd_momentum);
  run.run_until(4);
  io::TrainingState s = io::capture_training_state(run.model(), run.optimizer(), run.progress());
  const std::string path = io::save_checkpoint(g, dir, s, /*keep_last=*/2);
  CHECK(path == dir + "/step-00000004.safetensors");
  // After the collective returns, the file is complete for every rank.
  CHECK(std::filesystem::exists(path));
  CHECK(io::latest_checkpoint(dir) == path);

  std::string where;
  REQUIRE(io::load_checkpoint(g, dir, mgpu::Device::cpu(), loaded, &where));
  CHECK(where == path);
  // Every rank holds rank 0's state: the parameters and optimizer state are the same on
  // every rank anyway; BatchNorm's running statistics are rank 0's (each rank's own
  // batches moved its own; DDP broadcasts rank 0's before every forward).
  const io::SafetensorsFile file = io::load_safetensors(path);
  check_same(loaded.model, io::select_prefix(file.tensors, "model."));
  check_same(loaded.optimizer, s.optimizer);
  for (const auto& [name, p] : run.model().named_parameters()) CHECK(bitwise_equal(loaded.model.at(name), p->value));
  CHECK(loaded.progress.global_step == 4);
  CHECK(loaded.progress.world_size == g.size());

  run.run_until(6);
  io::save_checkpoint(g, dir, io::capture_training_state(run.model(), run.optimizer(), run.progress()), 2);
  run.run_until(8);
  io::save_checkpoint(g, dir, io::capture_training_state(run.model(), run.optimizer(), run.progress()), 2);
  CHECK(io::list_checkpoints(dir) ==
        std::vector<std::string>{"step-00000006.safetensors", "step-00000008.safetensors"});
  REQUIRE(io::load_checkpoint(g, dir + "/step-00000006.safetensors", mgpu::Device::cpu(), loaded));
  CHECK(loaded.progress.global_step == 6);
}

TEST_CASE("a save that fails on rank 0 fails on every rank", "[io][checkpoint][mpi]") {
  dist::ProcessGroup& g = cpu_group();
  SharedTempDir tmp("mgpu-ckpt-mpi");
  const std::string blocker = tmp.path() + "/not-a-folder";
  if (g.rank() == 0) std::ofstream(blocker) << "a file where the folder should be";
  g.barrier().wait();
  ToyTraining run(&g, ToyOptimizer::sgd_momentum);
  const io::TrainingState s = io::capture_training_state(run.model(), run.optimizer(), run.progress());
  if (g.rank() == 0)
    CHECK_THROWS_WITH(io::save_checkpoint(g, blocker + "/run", s), Catch::Contains("cannot create the checkpoint folder"));
  else
    CHECK_THROWS_WITH(io::save_checkpoint(g, blocker + "/run", s), Catch::Contains("failed on rank 0"));
  io::TrainingState loaded;
  CHECK_THROWS_WITH(io::load_checkpoint(g, tmp.path() + "/missing.safetensors", mgpu::Device::cpu(), loaded),
                    Catch::Contains("missing.safetensors"));
}

TEST_CASE("resume with DDP is bit-identical, mid-epoch and at epoch ends", "[io][checkpoint][mpi][resume]") {
  dist::ProcessGroup& g = cpu_group();
  const auto capture = [](nn::Module& m, const mgpu::optim::Optimizer& o, const io::TrainingProgress& p) {
    return io::capture_training_state(m, o, p);
  };
  const auto restore = [](const io::TrainingState& s, nn::Module& m, mgpu::optim::Optimizer& o) {
    return io::restore_training_state(s, m, o);
  };
  for (ToyOptimizer kind : {ToyOptimizer::sgd_momentum, ToyOptimizer::adamw}) {
    for (std::int64_t at : {2, 3, 5, 7}) {
      INFO("resume at step " << at << " of 12 on " << g.size() << " rank(s)");
      const auto [straight, resumed] =
          mgpu::testing::resume_experiment(&g, kind, at, 12, capture, restore);
      check_same(resumed, straight);
    }
  }
}
