// Lesson 07's reference against the library across ranks (meson test runs it with 1, 2
// and 3): save_on_rank0 beside io::save_checkpoint, and restore_state beside
// io::restore_training_state through DDP. Not graded (agreement_mpi_tests in
// lessons/meson.build).
#include <stdlib.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "../common/io/io_test_util.h"
#include "../common/io/shared_temp_dir.h"
#include "agree_checks.h"
#include "mgpu/dist/dist.h"

using mgpu::Tensor;
using mgpu::testing::ToyOptimizer;
namespace io = mgpu::io;
namespace dist = mgpu::dist;
namespace l07 = mgpu::lesson07;

using mgpu::testing::cpu_group;
using mgpu::testing::SharedTempDir;

TEST_CASE("agreement: save_on_rank0 writes what io::save_checkpoint writes",
          "[07_checkpointing][agreement]") {
  dist::ProcessGroup& g = cpu_group();
  SharedTempDir tmp("mgpu-l07-agree");
  const std::string ref_dir = tmp.file("ref"), lib_dir = tmp.file("lib");
  mgpu::testing::ToyTraining run(&g, ToyOptimizer::adamw);
  for (std::int64_t step : {2, 3, 5, 7}) {
    CAPTURE(step);
    run.run_until(step);
    const io::TrainingState s =
        io::capture_training_state(run.model(), run.optimizer(), run.progress());
    const std::string ref_path = l07::save_on_rank0(g, ref_dir, step, [&] {
      const io::SafetensorsFile f = io::to_checkpoint_file(s);
      return io::serialize_safetensors(f.tensors, f.metadata);
    }, 2);
    const std::string lib_path = io::save_checkpoint(g, lib_dir, s, 2);
    // Both collectives have returned: every rank sees the same complete folders.
    CHECK(ref_path.substr(ref_dir.size()) == lib_path.substr(lib_dir.size()));
    CHECK(mgpu::testing::slurp(ref_path) == mgpu::testing::slurp(lib_path));
    CHECK(mgpu::testing::slurp(ref_dir + "/latest") == mgpu::testing::slurp(lib_dir + "/latest"));
    CHECK(io::list_checkpoints(ref_dir) == io::list_checkpoints(lib_dir));
  }
  // A save that fails on rank 0 fails on every rank, in both; the ranks stay in step.
  if (g.rank() == 0) std::ofstream(tmp.file("not-a-folder")) << "a file where the folder goes";
  g.barrier().wait();
  const io::TrainingState s = io::capture_training_state(run.model(), run.optimizer(), run.progress());
  CHECK_THROWS(l07::save_on_rank0(g, tmp.file("not-a-folder/run"), 1, [] { return std::string("x"); }, 0));
  CHECK_THROWS(io::save_checkpoint(g, tmp.file("not-a-folder/run"), s, 0));
  Tensor one = Tensor::full({1}, 1.0);
  g.all_reduce(one).wait();
  CHECK(one.item() == g.size());
}

TEST_CASE("agreement: restore_state through DDP, reference and library",
          "[07_checkpointing][agreement]") {
  for (ToyOptimizer kind : {ToyOptimizer::sgd_momentum, ToyOptimizer::adamw})
    for (std::int64_t at : {2, 3, 5, 7}) mgpu::testing::check_same_restore(&cpu_group(), kind, at, 12);
  mgpu::testing::check_same_refusals(&cpu_group());
}
