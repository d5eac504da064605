// Lesson 10, task 4 under mpirun (2 and 3 ranks): whole sharded training steps. Each ZeRO
// stage against the library's DDP over AdamW steps, a fully sharded unit's
// gather-compute-free cycle and its prefetch, and the memory per rank against the formula.
// These run every task (1-4): do them in order.
#include <catch2/catch.hpp>

#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "grade_record.h"
#include "sharding_test_util.h"

using namespace shard_test;
using mgpu::testing::record;

namespace {

// A parameterless layer that notes, during its forward, where another unit's parameters are:
// put into unit 0, it shows whether unit 1's all-gather was started before unit 0 computed.
class StateProbe : public nn::Module {
 public:
  Tensor forward(const Tensor& x) override {
    if (watched != nullptr) seen.push_back(watched->state());
    return x;
  }
  Tensor backward(const Tensor& g) override { return g; }
  std::shared_ptr<nn::Module> clone() const override { return std::make_shared<StateProbe>(); }
  std::string describe() const override { return "StateProbe"; }
  par::ShardedUnit* watched = nullptr;
  std::vector<par::UnitState> seen;
};

}  // namespace

TEST_CASE("each ZeRO stage trains to DDP's parameters over AdamW steps",
          "[10_sharding][task4][points:6]") {
  RunSpec spec;
  const auto want = train_ddp(toy_mlp(11), spec);
  for (int stage : {1, 2, 3}) {
    const auto got = train_sharded(toy_mlp(11), spec, stage_options(stage));
    const double diff = max_over_ranks(max_param_diff(got, want));
    for (const auto& [name, t] : got) record("stage " + std::to_string(stage) + " " + name, t, 2 * kTolerance);
    INFO("stage " << stage << ", " << group().size() << " ranks: largest |sharded - DDP| = " << diff);
    CHECK(all_ranks(diff <= kTolerance));
  }
}

TEST_CASE("units of any size: one per layer, two layers, the whole model",
          "[10_sharding][task4][points:2]") {
  RunSpec spec;
  spec.steps = 3;
  const auto want = train_ddp(toy_mlp(12), spec);
  // caps: a unit per Linear (40, 24, 15 elements), 40 + 24 then 15, everything in one unit
  for (std::size_t cap : {std::size_t{0}, std::size_t{200}, std::numeric_limits<std::size_t>::max()})
    for (int stage : {2, 3}) {
      const auto got = train_sharded(toy_mlp(12), spec, stage_options(stage, cap));
      const double diff = max_over_ranks(max_param_diff(got, want));
      for (const auto& [name, t] : got)
        record("stage " + std::to_string(stage) + " cap " + std::to_string(cap) + " " + name, t, 2 * kTolerance);
      INFO("stage " << stage << ", unit cap " << cap << " bytes: largest difference " << diff);
      CHECK(all_ranks(diff <= kTolerance));
    }
}

TEST_CASE("a fully sharded unit keeps only its shard outside its forward and backward",
          "[10_sharding][task4][points:2]") {
  auto model = toy_mlp(13);
  par::ShardedDataParallel sdp(model, group(), stage_options(3));
  RunSpec spec;
  bool ok = true;
  for (int step = 0; step < 2; ++step) {
    forward_backward(sdp, spec, step);
    for (std::size_t k = 0; k < sdp.num_units(); ++k) {
      const par::ShardedUnit& u = sdp.unit(k);
      ok = ok && u.state() == par::UnitState::sharded && !u.full().storage()->holds_memory() &&
           !u.reduction_in_flight();
      for (nn::Parameter* p : u.params()) ok = ok && !p->grad.defined();
    }
    // the master shards' gradients hold this rank's part of the average
    for (nn::Parameter* p : sdp.parameters()) ok = ok && p->grad.defined();
  }
  INFO("after backward every unit must be sharded, its full parameters released, no "
       "reduction in flight, no full gradient left");
  CHECK(all_ranks(ok));
}

TEST_CASE("the next unit's all-gather is started before a unit computes (prefetch)",
          "[10_sharding][task4][points:2]") {
  for (bool prefetch : {true, false}) {
    auto model = toy_mlp(14);
    auto probe = std::make_shared<StateProbe>();
    // Flatten, Linear, probe, ReLU, ...: the probe runs inside unit 0's forward.
    auto with_probe = std::make_shared<nn::Sequential>();
    for (std::size_t i = 0; i < model->size(); ++i) {
      with_probe->add(model->at(i));
      if (i == 1) with_probe->add(probe);
    }
    par::ShardedDataParallel sdp(with_probe, group(), stage_options(3, 0, prefetch));
    probe->watched = &sdp.unit(1);
    RunSpec spec;
    forward_backward(sdp, spec, 0);
    const auto log = sdp.take_comm_log();
    // Backward, with 3 units: unit 2 gathers, prefetches unit 1, computes and its last
    // gradient launches its reduce-scatter; unit 1 prefetches unit 0, ...
    std::vector<std::string> backward;
    for (std::size_t i = 3; i < log.size(); ++i)
      backward.push_back(log[i].op + " " + std::to_string(log[i].index));
    const std::vector<std::string> want_backward =
        prefetch ? std::vector<std::string>{"all-gather 2", "all-gather 1", "reduce-scatter 2",
                                            "all-gather 0", "reduce-scatter 1", "reduce-scatter 0"}
                 : std::vector<std::string>{"all-gather 2", "reduce-scatter 2", "all-gather 1",
                                            "reduce-scatter 1", "all-gather 0", "reduce-scatter 0"};
    const bool started = probe->seen.size() == 1 && probe->seen[0] != par::UnitState::sharded;
    INFO("prefetch " << prefetch << ": unit 1 during unit 0's forward was "
         << (started ? "gathering or gathered" : "sharded"));
    CHECK(all_ranks(started == prefetch));
    INFO("the backward's collectives in order");
    CHECK(all_ranks(backward == want_backward));
  }
}

TEST_CASE("memory per rank matches the formula at every stage",
          "[10_sharding][task4][points:3]") {
  for (int stage : {1, 2, 3}) {
    const MemoryMeasurement m = measure_memory(stage, DType::f32);
    record("stage " + std::to_string(stage) + " kept, peak bytes",
           std::vector<double>{static_cast<double>(m.persistent), static_cast<double>(m.peak)},
           0.06 * static_cast<double>(m.formula.peak()));
    INFO("stage " << stage << ", " << group().size() << " ranks: kept " << m.persistent
         << " bytes (formula " << m.formula.persistent() << "), peak " << m.peak << " (formula "
         << m.formula.peak() << ")");
    CHECK(all_ranks(std::fabs(m.persistent - m.formula.persistent()) <= 0.02 * m.formula.persistent()));
    CHECK(all_ranks(std::fabs(m.peak - m.formula.peak()) <= 0.03 * m.formula.peak()));
  }
}
