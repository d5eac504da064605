// Lesson 07, task 3: the atomic save (io::commit_checkpoint). What kill -9 at any instant
// must leave behind, and the fsyncs no kill can show.
#include <catch2/catch.hpp>

#include <filesystem>

#include "crash_points.h"
#include "kill_test.h"
#include "mgpu/io/checkpoint.h"

using mgpu::Tensor;
namespace io = mgpu::io;
using mgpu::testing::TempDir;

namespace {

std::string bytes_of_step(int step) {  // ~1 MB, different for every step
  return io::serialize_safetensors({{"w", Tensor::full({256 * 1024}, static_cast<double>(step))}},
                                   {{"step", std::to_string(step)}});
}

}  // namespace

TEST_CASE("atomic save: the checkpoint, latest, and the last K kept",
          "[07_checkpointing][task3][points:1]") {
  TempDir tmp;
  const std::string dir = tmp.file("run");  // created by the save
  for (int step = 1; step <= 4; ++step)
    io::commit_checkpoint(dir, io::checkpoint_name(step * 100), bytes_of_step(step), 2);
  CHECK(io::list_checkpoints(dir) ==
        std::vector<std::string>{"step-00000300.safetensors", "step-00000400.safetensors"});
  CHECK(mgpu::testing::slurp(dir + "/latest") == "step-00000400.safetensors\n");
  CHECK(mgpu::testing::slurp(dir + "/step-00000400.safetensors") == bytes_of_step(4));
  io::commit_checkpoint(dir, io::checkpoint_name(500), bytes_of_step(5), 0);  // 0: keep all
  CHECK(io::list_checkpoints(dir).size() == 3);
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    INFO(e.path());
    CHECK(e.path().filename().string().find(".tmp") == std::string::npos);  // nothing left over
  }
}

TEST_CASE("atomic save: data fsync'ed before its rename, the folder fsync'ed after",
          "[07_checkpointing][task3][points:1]") {
  TempDir tmp;
  const std::string dir = tmp.file("run");
  io::commit_checkpoint(dir, io::checkpoint_name(1), bytes_of_step(1), 1);
  mgpu::testing::start_syscall_trace();
  io::commit_checkpoint(dir, io::checkpoint_name(2), bytes_of_step(2), 1);
  const std::vector<std::string> trace = mgpu::testing::stop_syscall_trace();
  INFO("the calls of the save:\n  " << [&] {
    std::string s;
    for (const std::string& e : trace) s += e + "\n  ";
    return s;
  }());
  CHECK(mgpu::testing::check_save_protocol(trace, dir, io::checkpoint_name(2)) == "");
  CHECK(io::list_checkpoints(dir) == std::vector<std::string>{io::checkpoint_name(2)});
}

TEST_CASE("atomic save: kill -9 at every instant leaves the previous checkpoint loadable",
          "[07_checkpointing][task3][points:2]") {
  const auto commit = [](const std::string& dir, const std::string& name, const std::string& bytes,
                         int keep_last) { io::commit_checkpoint(dir, name, bytes, keep_last); };
  for (int keep_last : {0, 1}) {
    const mgpu::testing::KillReport r =
        mgpu::testing::kill_at_every_instant(commit, bytes_of_step(1), bytes_of_step(2), keep_last);
    INFO("keep_last " << keep_last << ": " << r.kills << " kills at " << r.instants
                      << " instants; " << r.error);
    CHECK(r.error.empty());
    CHECK(r.instants >= 8);
  }
  const mgpu::testing::KillReport r = mgpu::testing::kill_at_random_times(commit, bytes_of_step, 15, 150, 2);
  INFO(r.error);
  CHECK(r.error.empty());
}
