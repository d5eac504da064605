// Lesson 07's agreement checks shared by one process and mpirun: the reference's
// restore_state against io::restore_training_state on the graded resume experiments.
#pragma once

#include <catch2/catch.hpp>

#include "../common/agreement.h"
#include "../common/io/resume_harness.h"
#include "checkpoint_lesson.h"
#include "resume_checks.h"
#include "mgpu/nn/init.h"

namespace mgpu::testing {

/// Two state dicts with the same names and the same bits.
inline void check_same_dict(const char* what, const io::StateDict& ref, const io::StateDict& lib) {
  INFO(what);
  CHECK(ref.size() == lib.size());
  for (const auto& [name, t] : lib) {
    INFO("'" << name << "'");
    REQUIRE(ref.count(name) == 1);
    CHECK_SAME_BITS(ref.at(name), t);
  }
}

/// A run saved at `at` (through the file's bytes), restored into two fresh runs, one by
/// each copy: the same model, optimizer, learning rate, random streams and progress; then
/// both continued to `total` end with the same bits.
inline void check_same_restore(dist::ProcessGroup* group, ToyOptimizer kind, std::int64_t at,
                               std::int64_t total) {
  CAPTURE(at, kind == ToyOptimizer::adamw ? "adamw" : "sgd momentum");
  io::TrainingState saved;
  {
    ToyTraining first(group, kind);
    first.run_until(at);
    saved = through_bytes(io::capture_training_state(first.model(), first.optimizer(), first.progress()));
  }
  ToyTraining ref(group, kind), lib(group, kind);
  const io::TrainingProgress p = lesson07::restore_state(saved, ref.model(), ref.optimizer());
  const nn::SeedSequenceState ref_seq = nn::seed_sequence_state();
  const io::TrainingProgress q = io::restore_training_state(saved, lib.model(), lib.optimizer());
  const nn::SeedSequenceState lib_seq = nn::seed_sequence_state();
  check_same_progress(p, q);
  CHECK(ref.optimizer().lr() == lib.optimizer().lr());
  CHECK(ref_seq.base == lib_seq.base);
  CHECK(ref_seq.drawn == lib_seq.drawn);
  const io::RngState ref_rng = io::capture_rng_state(ref.model());
  const io::RngState lib_rng = io::capture_rng_state(lib.model());
  CHECK(ref_rng.dropout == lib_rng.dropout);
  check_same_dict("model", io::module_state_dict(ref.model()), io::module_state_dict(lib.model()));
  check_same_dict("optimizer", ref.optimizer().state(), lib.optimizer().state());
  ref.resume_at(p);
  lib.resume_at(q);
  ref.run_until(total);
  lib.run_until(total);
  check_same_dict("after resuming", ref.snapshot(), lib.snapshot());
}

/// The graded refusals: a model with another shape, a Dropout with another seed. Both
/// copies refuse both.
inline void check_same_refusals(dist::ProcessGroup* group) {
  ToyTraining run(group, ToyOptimizer::sgd_momentum);
  run.run_until(3);
  const io::TrainingState s =
      io::capture_training_state(run.model(), run.optimizer(), run.progress());
  nn::manual_seed(ToyTraining::kSeed);
  nn::Sequential other({std::make_shared<nn::Linear>(6, 16), std::make_shared<nn::BatchNorm1d>(16),
                        std::make_shared<nn::ReLU>(), std::make_shared<nn::Dropout>(0.25),
                        std::make_shared<nn::Linear>(16, 16), std::make_shared<nn::ReLU>(),
                        std::make_shared<nn::Linear>(16, 4)});
  optim::SGD sgd(other.parameters(), {0.1, 0.9});
  CHECK_THROWS(lesson07::restore_state(s, other, sgd));
  CHECK_THROWS(io::restore_training_state(s, other, sgd));
  io::TrainingState wrong_seed = s;
  wrong_seed.rng.dropout.at("3").first += 1;
  ToyTraining ref(group, ToyOptimizer::sgd_momentum), lib(group, ToyOptimizer::sgd_momentum);
  CHECK_THROWS(lesson07::restore_state(wrong_seed, ref.model(), ref.optimizer()));
  CHECK_THROWS(io::restore_training_state(wrong_seed, lib.model(), lib.optimizer()));
}

}  // namespace mgpu::testing
