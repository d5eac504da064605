// Lesson 07, task 4: what a bit-identical resume needs (io::capture_training_state,
// io::restore_training_state), in a world of 1 (no DDP wrapper).
#include "checkpointing_test_util.h"

using mgpu::testing::ToyOptimizer;
using mgpu::testing::ToyTraining;
namespace io = mgpu::io;

TEST_CASE("capture_training_state holds every name, byte, counter and random stream",
          "[07_checkpointing][task4][points:1]") {
  mgpu::testing::check_capture(nullptr, ToyOptimizer::sgd_momentum, 4);
  mgpu::testing::check_capture(nullptr, ToyOptimizer::adamw, 11);
}

TEST_CASE("resume in a world of 1 is bit-identical, mid-epoch and at an epoch's end",
          "[07_checkpointing][task4][points:2]") {
  for (ToyOptimizer kind : {ToyOptimizer::sgd_momentum, ToyOptimizer::adamw})
    for (std::int64_t at : {4, 9, 11}) mgpu::testing::check_resume(nullptr, kind, at, 12);
}

TEST_CASE("restore_training_state refuses a model the checkpoint is not for",
          "[07_checkpointing][task4][points:1]") {
  ToyTraining run(nullptr, ToyOptimizer::sgd_momentum);
  run.run_until(3);
  const io::TrainingState s = io::capture_training_state(run.model(), run.optimizer(), run.progress());
  // A model with one more output: the shapes differ.
  mgpu::nn::manual_seed(ToyTraining::kSeed);
  mgpu::nn::Sequential other({std::make_shared<mgpu::nn::Linear>(6, 16), std::make_shared<mgpu::nn::BatchNorm1d>(16),
                              std::make_shared<mgpu::nn::ReLU>(), std::make_shared<mgpu::nn::Dropout>(0.25),
                              std::make_shared<mgpu::nn::Linear>(16, 16), std::make_shared<mgpu::nn::ReLU>(),
                              std::make_shared<mgpu::nn::Linear>(16, 4)});
  mgpu::optim::SGD sgd(other.parameters(), {0.1, 0.9});
  CHECK_THROWS_WITH(io::restore_training_state(s, other, sgd),
                    Catch::Contains("6.bias") || Catch::Contains("6.weight"));
  // A checkpoint whose Dropout stream has another seed than the model's Dropout: its
  // masks would not be the ones the saved run drew.
  ToyTraining fresh(nullptr, ToyOptimizer::sgd_momentum);
  io::TrainingState wrong_seed = s;
  wrong_seed.rng.dropout.at("3").first += 1;
  CHECK_THROWS(io::restore_training_state(wrong_seed, fresh.model(), fresh.optimizer()));
}
