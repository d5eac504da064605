// mgpu::io checkpoints in one process: state dicts and their strict load, the checkpoint
// layout, the folder protocol (latest, keep_last) under kill -9 at every instant, and a
// bit-identical resume in a world of 1.
#include <catch2/catch.hpp>

#include <filesystem>

#include "io_files.h"
#include "kill_test.h"
#include "mgpu/amp/grad_scaler.h"
#include "mgpu/io/checkpoint.h"
#include "resume_harness.h"

using mgpu::Tensor;
namespace io = mgpu::io;
namespace nn = mgpu::nn;
using mgpu::testing::bitwise_equal;
using mgpu::testing::TempDir;
using mgpu::testing::ToyOptimizer;
using mgpu::testing::ToyTraining;

namespace {

void check_same(const io::StateDict& a, const io::StateDict& b) {
  REQUIRE(a.size() == b.size());
  for (const auto& [name, t] : a) {
    INFO(name);
    REQUIRE(b.count(name));
    CHECK(bitwise_equal(t, b.at(name)));
  }
}

io::TrainingState library_capture(nn::Module& m, const mgpu::optim::Optimizer& o,
                                  const io::TrainingProgress& p) {
  return io::capture_training_state(m, o, p);
}
io::TrainingProgress library_restore(const io::TrainingState& s, nn::Module& m,
                                     mgpu::optim::Optimizer& o) {
  return io::restore_training_state(s, m, o);
}

std::string bytes_of_step(int step) {  // a ~1 MB checkpoint whose content depends on step
  Tensor t = Tensor::full({256 * 1024}, static_cast<double>(step));
  return io::serialize_safetensors({{"w", t}}, {{"step", std::to_string(step)}});
}

void library_commit(const std::string& dir, const std::string& name, const std::string& bytes,
                    int keep_last) {
  io::commit_checkpoint(dir, name, bytes, keep_last);
}

}  // namespace

TEST_CASE("state dicts: strict load names every mismatch; module. prefix", "[io][checkpoint]") {
  nn::manual_seed(1);
  nn::Sequential a({std::make_shared<nn::Linear>(4, 3), std::make_shared<nn::BatchNorm1d>(3)});
  nn::manual_seed(2);
  nn::Sequential b({std::make_shared<nn::Linear>(4, 3), std::make_shared<nn::BatchNorm1d>(3)});
  const io::StateDict sa = io::module_state_dict(a);
  CHECK(sa.size() == 7);  // 0.weight 0.bias 1.weight 1.bias 1.running_mean 1.running_var 1.num_batches_tracked
  io::load_module_state_dict(b, sa);
  check_same(io::module_state_dict(b), sa);

  nn::Sequential wide({std::make_shared<nn::Linear>(4, 5)});
  CHECK_THROWS_WITH(io::load_module_state_dict(wide, sa, true, "ck.safetensors"),
                    Catch::Contains("ck.safetensors: '0.bias' is f32[3] but the model's is f32[5]"));
  io::StateDict partial = sa;
  partial.erase("1.running_var");
  partial["extra.thing"] = Tensor::full({1}, 1.0);
  CHECK_THROWS_WITH(io::load_module_state_dict(b, partial),
                    Catch::Contains("missing (in the model, not in the dict): 1.running_var") &&
                        Catch::Contains("unexpected (in the dict, not in the model): extra.thing"));
  const io::LoadReport r = io::load_module_state_dict(b, partial, /*strict=*/false);
  CHECK(r.missing_keys == std::vector<std::string>{"1.running_var"});
  CHECK(r.unexpected_keys == std::vector<std::string>{"extra.thing"});

  // Saved through a DDP wrapper: every name starts with "module.".
  const io::StateDict wrapped = io::add_prefix(sa, "module.");
  CHECK_THROWS_WITH(io::load_module_state_dict(b, wrapped),
                    Catch::Contains("io::strip_prefix(dict, \"module.\")"));
  io::load_module_state_dict(b, io::strip_prefix(wrapped));
  check_same(io::strip_prefix(sa), sa);  // no prefix: unchanged
}

TEST_CASE("checkpoint layout: a TrainingState survives the file bit for bit", "[io][checkpoint]") {
  ToyTraining run(nullptr, ToyOptimizer::adamw);
  run.run_until(3);
  io::TrainingState s = io::capture_training_state(run.model(), run.optimizer(), run.progress());
  s.extra["scaler"] = {{"scale", io::scalar_f64(65536.0)}, {"growth_tracker", io::scalar_i64(7)}};
  s.metadata["model"] = "toy";
  const io::TrainingState back = mgpu::testing::through_bytes(s);
  check_same(back.model, s.model);
  check_same(back.optimizer, s.optimizer);
  CHECK(back.optimizer.count("0.weight.exp_avg"));   // the model's names, not the optimizer's
  CHECK(back.optimizer.count("0.weight.step"));
  CHECK_FALSE(back.optimizer.count("4.bias.exp_avg"));  // frozen: no state
  CHECK(back.progress.global_step == 3);
  CHECK(back.progress.step_in_epoch == 3);
  CHECK(back.progress.data_seed == ToyTraining::kSeed);
  CHECK(back.progress.lr == run.optimizer().lr());
  const auto dropout = std::dynamic_pointer_cast<nn::Dropout>(run.model().at(3));
  CHECK(back.rng.dropout.at("3") == std::make_pair(dropout->seed(), std::uint64_t{3}));
  CHECK(io::get_f64(back.extra.at("scaler"), "scale", "t") == 65536.0);
  CHECK(io::get_i64(back.extra.at("scaler"), "growth_tracker", "t") == 7);
  CHECK(back.metadata.at("model") == "toy");
  CHECK(back.metadata.at("format_version") == "1");
}

TEST_CASE("checkpoint layout: files that are not a checkpoint of this version are refused",
          "[io][checkpoint]") {
  ToyTraining run(nullptr, ToyOptimizer::sgd_momentum);
  const io::SafetensorsFile good =
      io::to_checkpoint_file(io::capture_training_state(run.model(), run.optimizer(), run.progress()));
  io::SafetensorsFile f = good;
  f.metadata["format_version"] = "2";
  CHECK_THROWS_WITH(io::from_checkpoint_file(f, "c.st"), Catch::Contains("c.st: checkpoint format version 2"));
  f = good;
  f.metadata.erase("format");
  CHECK_THROWS_WITH(io::from_checkpoint_file(f, "c.st"), Catch::Contains("not an mgpu checkpoint"));
  f = good;
  f.tensors.erase("train.step_in_epoch");
  CHECK_THROWS_WITH(io::from_checkpoint_file(f, "c.st"), Catch::Contains("'step_in_epoch' is missing"));
  f = good;
  f.tensors["weights.0"] = Tensor::full({1}, 1.0);
  CHECK_THROWS_WITH(io::from_checkpoint_file(f, "c.st"), Catch::Contains("'weights.0' is in no section"));
  f = good;
  f.tensors["train.epoch"] = Tensor::full({}, 1.0);
  CHECK_THROWS_WITH(io::from_checkpoint_file(f, "c.st"), Catch::Contains("expected one i64 value"));
}

TEST_CASE("checkpoint folder: latest, keep_last, stale temporary files", "[io][checkpoint]") {
  TempDir tmp;
  const std::string dir = tmp.file("run");
  CHECK(io::latest_checkpoint(dir).empty());  // nothing yet
  for (int step = 1; step <= 5; ++step) library_commit(dir, io::checkpoint_name(step * 10), bytes_of_step(step), 2);
  CHECK(io::list_checkpoints(dir) ==
        std::vector<std::string>{"step-00000040.safetensors", "step-00000050.safetensors"});
  CHECK(io::latest_checkpoint(dir) == dir + "/step-00000050.safetensors");
  CHECK(io::load_safetensors(io::latest_checkpoint(dir)).metadata.at("step") == "5");
  { std::ofstream(dir + "/.step-00000060.safetensors.tmp.999") << "half"; }
  library_commit(dir, io::checkpoint_name(60), bytes_of_step(6), 0);
  CHECK_FALSE(std::filesystem::exists(dir + "/.step-00000060.safetensors.tmp.999"));
  CHECK(io::list_checkpoints(dir).size() == 3);  // keep_last 0 keeps all
  std::filesystem::remove(dir + "/step-00000060.safetensors");
  CHECK_THROWS_WITH(io::latest_checkpoint(dir), Catch::Contains("which does not exist"));
}

TEST_CASE("checkpoint folder: kill -9 at every instant of a save leaves a loadable checkpoint",
          "[io][checkpoint][kill]") {
  const mgpu::testing::KillReport r = mgpu::testing::kill_at_every_instant(
      library_commit, bytes_of_step(1), bytes_of_step(2), /*keep_last=*/1);
  INFO(r.error);
  CHECK(r.error.empty());
  CHECK(r.instants >= 8);  // write, fsync, close, rename, fsync x2 for the file and `latest`, ...
  CHECK(r.kills == 2 * r.instants);
}

TEST_CASE("checkpoint folder: data fsync'ed before its rename, the folder after", "[io][checkpoint]") {
  TempDir tmp;
  const std::string dir = tmp.file("run");
  library_commit(dir, io::checkpoint_name(1), bytes_of_step(1), 1);
  mgpu::testing::start_syscall_trace();
  library_commit(dir, io::checkpoint_name(2), bytes_of_step(2), 1);
  const std::vector<std::string> trace = mgpu::testing::stop_syscall_trace();
  INFO(Catch::Detail::stringify(trace));
  CHECK(mgpu::testing::check_save_protocol(trace, dir, io::checkpoint_name(2)) == "");
  CHECK(trace.back() == "remove " + dir + "/step-00000001.safetensors");  // keep_last 1
  // And the checker sees a missing fsync: a trace without the folder's.
  std::vector<std::string> no_dir_sync;
  for (const std::string& e : trace)
    if (e != "fsync " + dir) no_dir_sync.push_back(e);
  CHECK_THAT(mgpu::testing::check_save_protocol(no_dir_sync, dir, io::checkpoint_name(2)),
             Catch::Contains("no fsync of the folder"));
}

TEST_CASE("checkpoint extra state: a GradScaler's state_dict through a checkpoint", "[io][checkpoint]") {
  mgpu::amp::GradScaler scaler;
  scaler.scale(Tensor::full({1}, 1.0));
  scaler.update(2048.0);
  ToyTraining run(nullptr, ToyOptimizer::sgd_momentum);
  io::TrainingState s = io::capture_training_state(run.model(), run.optimizer(), run.progress());
  s.extra["scaler"] = io::scalars_to_state(scaler.state_dict());
  const io::TrainingState back = mgpu::testing::through_bytes(s);
  mgpu::amp::GradScaler fresh;
  fresh.load_state_dict(io::state_to_scalars(back.extra.at("scaler"), "scaler"));
  CHECK(fresh.state_dict() == scaler.state_dict());
  CHECK(fresh.get_scale() == 2048.0);
}

TEST_CASE("fingerprint: equal for bit-identical states, different for one changed bit",
          "[io][state_dict]") {
  ToyTraining run(nullptr, ToyOptimizer::sgd_momentum);
  const io::StateDict state = io::module_state_dict(run.model());
  io::StateDict copy;
  for (const auto& [name, t] : state) copy[name] = t.clone();
  CHECK(io::fingerprint(copy) == io::fingerprint(state));
  Tensor& first = copy.begin()->second;
  reinterpret_cast<unsigned char*>(first.raw_data())[0] ^= 1;  // one bit of one tensor
  CHECK(io::fingerprint(copy) != io::fingerprint(state));
  CHECK(io::fingerprint({}) == 14695981039346656037ull);  // FNV-1a 64's offset basis
}

TEST_CASE("checkpoint folder: kill -9 at random times while saving", "[io][checkpoint][kill]") {
  const mgpu::testing::KillReport r =
      mgpu::testing::kill_at_random_times(library_commit, bytes_of_step, 20, 200, 2);
  INFO(r.error);
  CHECK(r.error.empty());
  CHECK(r.kills == 20);
}

TEST_CASE("resume in a world of 1 is bit-identical, mid-epoch and at an epoch's end",
          "[io][checkpoint][resume]") {
  for (ToyOptimizer kind : {ToyOptimizer::sgd_momentum, ToyOptimizer::adamw}) {
    for (std::int64_t at : {3, 9, 12}) {  // mid-epoch, the end of epoch 0, the very end
      INFO("resume at step " << at);
      const auto [straight, resumed] =
          mgpu::testing::resume_experiment(nullptr, kind, at, 12, library_capture, library_restore);
      check_same(resumed, straight);
    }
  }
}

TEST_CASE("resume without the RNG state or the data position is not bit-identical",
          "[io][checkpoint][resume]") {
  const auto forget = [](const char* what) {
    return [what](const io::TrainingState& s, nn::Module& m, mgpu::optim::Optimizer& o) {
      io::TrainingState t = s;
      if (std::string(what) == "rng") t.rng.dropout.begin()->second.second = 0;
      io::TrainingProgress p = io::restore_training_state(t, m, o);
      if (std::string(what) == "position") p.step_in_epoch = p.samples_in_epoch = 0;
      return p;
    };
  };
  for (const char* what : {"rng", "position"}) {
    INFO("forgetting " << what);
    const auto [straight, resumed] = mgpu::testing::resume_experiment(
        nullptr, ToyOptimizer::sgd_momentum, 3, 8, library_capture, forget(what));
    CHECK_FALSE(bitwise_equal(resumed.at("6.weight"), straight.at("6.weight")));
  }
}

TEST_CASE("resume_position: the same sizes resume exactly; others re-derive from samples seen",
          "[io][checkpoint]") {
  io::TrainingProgress p;
  p.epoch = 2;
  p.step_in_epoch = 7;
  p.samples_in_epoch = 7 * 64 * 2;
  p.world_size = 2;
  p.batch_size = 64;
  const io::ResumePosition same = io::resume_position(p, 2, 64);
  CHECK(same.exact);
  CHECK(same.epoch == 2);
  CHECK(same.step_in_epoch == 7);
  const io::ResumePosition three = io::resume_position(p, 3, 64);  // 896 samples / 192 per step
  CHECK_FALSE(three.exact);
  CHECK(three.step_in_epoch == 4);
  CHECK_THAT(three.note, Catch::Contains("128 of them are seen again"));
  CHECK(io::resume_position(p, 4, 32).step_in_epoch == 7);  // same global batch: exact step
}
