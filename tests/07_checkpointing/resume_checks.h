// Lesson 07's resume tests (one process and under mpirun): your capture_state against the
// library's, and the bit-identical resume with your capture_state and restore_state.
#pragma once

#include <catch2/catch.hpp>

#include "../common/io/io_test_util.h"
#include "../common/io/resume_harness.h"
#include "checkpoint_lesson.h"

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

/// Checks that `mine` holds what the library's capture holds: the same names, the same
/// bytes, the same counters and random streams.
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
      INFO(section << " '" << name << "' is not what the library saves");
      CHECK(b.count(name) == 1);
    }
  }
  const io::TrainingProgress &p = mine.progress, &q = ref.progress;
  check_same_progress(p, q);
  CHECK(mine.rng.init_base == ref.rng.init_base);
  CHECK(mine.rng.init_drawn == ref.rng.init_drawn);
  CHECK(mine.rng.dropout == ref.rng.dropout);
}

/// Train a few steps, then compare captures.
inline void check_capture(dist::ProcessGroup* group, ToyOptimizer kind, std::int64_t steps) {
  ToyTraining run(group, kind);
  run.run_until(steps);
  check_same_state(lesson07::capture_state(run.model(), run.optimizer(), run.progress()),
                   io::capture_training_state(run.model(), run.optimizer(), run.progress()));
}

/// The resume experiment with your capture_state and restore_state: the resumed run's
/// parameters and buffers must equal the uninterrupted run's, bit for bit.
inline void check_resume(dist::ProcessGroup* group, ToyOptimizer kind, std::int64_t at,
                         std::int64_t total) {
  const auto capture = [](nn::Module& m, const optim::Optimizer& o, const io::TrainingProgress& p) {
    return lesson07::capture_state(m, o, p);
  };
  const auto restore = [](const io::TrainingState& s, nn::Module& m, optim::Optimizer& o) {
    return lesson07::restore_state(s, m, o);
  };
  const auto [straight, resumed] = resume_experiment(group, kind, at, total, capture, restore);
  REQUIRE(straight.size() == resumed.size());
  for (const auto& [name, t] : straight) {
    INFO("'" << name << "' after resuming at step " << at << " of " << total);
    CHECK(bitwise_equal(resumed.at(name), t));
  }
}

}  // namespace mgpu::testing
