// Lesson 07's resume tests (one process and under mpirun): your capture_training_state
// against what a resume needs, worked out here from the model, the optimizer and the random
// streams themselves, and the bit-identical resume with your capture_training_state and
// restore_training_state.
#pragma once

#include <catch2/catch.hpp>

#include "io_files.h"
#include "resume_harness.h"
#include "mgpu/io/checkpoint.h"
#include "mgpu/nn/dropout.h"
#include "mgpu/nn/init.h"

namespace mgpu::testing {

/// Every field of two training positions equal.
inline void check_same_progress(const io::TrainingProgress& p, const io::TrainingProgress& q) {
  CHECK(p.epoch == q.epoch);
  CHECK(p.step_in_epoch == q.step_in_epoch);
  CHECK(p.global_step == q.global_step);
  CHECK(p.samples_in_epoch == q.samples_in_epoch);
  CHECK(p.world_size == q.world_size);
  CHECK(p.batch_size == q.batch_size);
  CHECK(p.data_seed == q.data_seed);
  CHECK(p.lr == q.lr);
}

/// Every nn::Dropout of `m`'s tree by dotted path, with its seed and calls().
inline void dropout_streams(nn::Module& m, const std::string& path,
                            std::map<std::string, std::pair<std::uint64_t, std::uint64_t>>& out) {
  if (auto* d = dynamic_cast<nn::Dropout*>(&m)) out[path] = {d->seed(), d->calls()};
  for (const auto& [name, child] : m.children())
    dropout_streams(*child, path.empty() ? name : path + "." + name, out);
}

/// What a capture of (model, optimizer, progress) must hold, from the objects themselves:
/// the model's state dict; each optimizer state "<optimizer's name>.<state>" under
/// "<model's name>.<state>" (the same nn::Parameter); the progress with the optimizer's lr;
/// the seed sequence and every Dropout's stream.
inline io::TrainingState expected_state(nn::Module& model, const optim::Optimizer& optimizer,
                                        const io::TrainingProgress& progress) {
  io::TrainingState s;
  s.model = io::module_state_dict(model);
  for (auto& [name, p] : model.named_parameters()) {
    const std::string prefix = p->name() + ".";
    for (const auto& [key, t] : optimizer.state())
      if (key.compare(0, prefix.size(), prefix) == 0) s.optimizer[name + "." + key.substr(prefix.size())] = t;
  }
  s.progress = progress;
  s.progress.lr = optimizer.lr();
  const nn::SeedSequenceState seq = nn::seed_sequence_state();
  s.rng.init_base = seq.base;
  s.rng.init_drawn = seq.drawn;
  dropout_streams(model, "", s.rng.dropout);
  return s;
}

/// Checks that `mine` holds what `expected` holds: the same names, the same bytes, the same
/// counters and random streams.
inline void check_same_state(const io::TrainingState& mine, const io::TrainingState& ref) {
  for (const auto* section : {"model", "optimizer"}) {
    const io::StateDict& a = std::string(section) == "model" ? mine.model : mine.optimizer;
    const io::StateDict& b = std::string(section) == "model" ? ref.model : ref.optimizer;
    for (const auto& [name, t] : b) {
      INFO(section << " '" << name << "'");
      CHECK(a.count(name) == 1);
      if (a.count(name)) CHECK(bitwise_equal(a.at(name), t));
    }
    for (const auto& [name, t] : a) {
      INFO(section << " '" << name << "' is not what a resume needs");
      CHECK(b.count(name) == 1);
    }
  }
  const io::TrainingProgress &p = mine.progress, &q = ref.progress;
  check_same_progress(p, q);
  CHECK(mine.rng.init_base == ref.rng.init_base);
  CHECK(mine.rng.init_drawn == ref.rng.init_drawn);
  CHECK(mine.rng.dropout == ref.rng.dropout);
}

/// Train a few steps, then check the capture; the toy model has a Dropout, and the
/// optimizer has state for every trained parameter.
inline void check_capture(dist::ProcessGroup* group, ToyOptimizer kind, std::int64_t steps) {
  ToyTraining run(group, kind);
  run.run_until(steps);
  const io::TrainingState want = expected_state(run.model(), run.optimizer(), run.progress());
  REQUIRE(want.rng.dropout.size() == 1);
  REQUIRE(!want.optimizer.empty());
  check_same_state(io::capture_training_state(run.model(), run.optimizer(), run.progress()), want);
}

/// The resume experiment with your capture_training_state and restore_training_state: the resumed run's
/// parameters and buffers must equal the uninterrupted run's, bit for bit.
inline void check_resume(dist::ProcessGroup* group, ToyOptimizer kind, std::int64_t at,
                         std::int64_t total) {
  const auto capture = [](nn::Module& m, const optim::Optimizer& o, const io::TrainingProgress& p) {
    return io::capture_training_state(m, o, p);
  };
  const auto restore = [](const io::TrainingState& s, nn::Module& m, optim::Optimizer& o) {
    return io::restore_training_state(s, m, o);
  };
  const auto [straight, resumed] = resume_experiment(group, kind, at, total, capture, restore);
  REQUIRE(straight.size() == resumed.size());
  for (const auto& [name, t] : straight) {
    INFO("'" << name << "' after resuming at step " << at << " of " << total);
    CHECK(bitwise_equal(resumed.at(name), t));
  }
}

}  // namespace mgpu::testing
