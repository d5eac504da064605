// Lesson 10, task 2 under mpirun (2 and 3 ranks): a unit's parameter all-gather and the
// release of its full parameters, driven by hand on one ShardedUnit (built with your task 1
// layout; nothing of tasks 3-4 runs here).
#include <catch2/catch.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "sharding_test_util.h"

using namespace shard_test;

namespace {

// The toy MLP's layers as one unit, with its master shard parameter.
struct Unit {
  std::shared_ptr<nn::Sequential> model;
  std::vector<Tensor> original;  // every parameter's value before sharding
  par::CommLog log;
  std::unique_ptr<par::ShardedUnit> unit;
  std::unique_ptr<nn::Parameter> shard;

  Unit(int stage, DType compute) : model(toy_mlp(31)) {
    std::vector<std::shared_ptr<nn::Module>> layers;
    for (std::size_t i = 0; i < model->size(); ++i) layers.push_back(model->at(i));
    for (nn::Parameter* p : model->parameters()) original.push_back(p->value.clone());
    unit = std::make_unique<par::ShardedUnit>(0, layers, group(), stage, compute, &log);
    shard = std::make_unique<nn::Parameter>("flat_param_0", unit->master_value());
    unit->attach_shard(shard.get());
  }
};

// Every element of the unit's parameters equals `want` (original values, or per-chunk
// constants), within `tol`.
bool params_equal(const par::ShardedUnit& u, const std::vector<Tensor>& want, double tol) {
  const auto& ps = u.params();
  if (ps.size() != want.size()) return false;
  for (std::size_t i = 0; i < ps.size(); ++i)
    if (max_abs_diff(ps[i]->value.to(DType::f32), want[i]) > tol) return false;
  return true;
}

// What every parameter holds when rank r's shard is all (r + 1) / 8: the value of the
// chunk each element lies in (padding is no parameter).
std::vector<Tensor> chunk_constants(const par::FlatLayout& l) {
  std::vector<Tensor> out;
  for (const par::FlatSlot& s : l.slots) {
    std::vector<float> v;
    for (std::int64_t e = 0; e < s.numel; ++e)
      v.push_back(static_cast<float>((s.offset + e) / l.shard_numel + 1) / 8.0f);
    out.push_back(Tensor::from_vector(v, s.shape));
  }
  return out;
}

}  // namespace

TEST_CASE("a fully sharded unit gathers its full parameters, then frees them",
          "[10_sharding][task2][points:2]") {
  Unit u(3, DType::f32);
  par::ShardedUnit& unit = *u.unit;
  REQUIRE(unit.state() == par::UnitState::sharded);  // the constructor released full_
  const double before = allocated_bytes();
  unit.start_gather();
  CHECK(unit.state() == par::UnitState::gathering);
  unit.wait_gather();
  CHECK(unit.state() == par::UnitState::gathered);
  CHECK(unit.full().storage()->holds_memory());
  const double gathered = allocated_bytes() - before;
  INFO("the gathered parameters must be rank 0's original values on every rank");
  CHECK(all_ranks(params_equal(unit, u.original, 0.0)));
  INFO("gathering allocates the unit's full buffer, " << unit.layout().padded_numel * 4
       << " bytes; measured " << gathered);
  CHECK(all_ranks(gathered == static_cast<double>(unit.layout().padded_numel * 4)));
  unit.free_full();
  CHECK(unit.state() == par::UnitState::sharded);
  CHECK_FALSE(unit.full().storage()->holds_memory());
  CHECK(all_ranks(allocated_bytes() == before));
  // The log holds one all-gather of the whole unit.
  const auto log = u.log.take();
  REQUIRE(log.size() == 1);
  CHECK(log[0].op == "all-gather");
  CHECK(log[0].bytes == static_cast<std::size_t>(unit.layout().padded_numel * 4));
}

TEST_CASE("each rank's shard lands in its chunk of every rank's full parameters",
          "[10_sharding][task2][points:2]") {
  // fp32 at stage 3 (the shard is copied into the chunk), fp32 at stage 1 (the shard is
  // the chunk: nothing to copy), bf16 at stage 2 (the shard is cast; k/8 is exact in bf16).
  struct Case {
    int stage;
    DType compute;
  };
  for (const Case c : {Case{3, DType::f32}, Case{1, DType::f32}, Case{2, DType::bf16}}) {
    Unit u(c.stage, c.compute);
    par::ShardedUnit& unit = *u.unit;
    mgpu::fill_(u.shard->value, (group().rank() + 1) / 8.0);  // an optimizer step, say
    unit.mark_stale();
    unit.start_gather();
    unit.wait_gather();
    INFO("stage " << c.stage << ", " << mgpu::dtype_name(c.compute) << ": every element must "
         "hold (r + 1) / 8 of the rank r whose shard it is in");
    CHECK(all_ranks(unit.full().dtype() == c.compute));
    CHECK(all_ranks(params_equal(unit, chunk_constants(unit.layout()), 0.0)));
    // The master shard itself is untouched (still fp32).
    CHECK(all_ranks(u.shard->value.dtype() == DType::f32));
    CHECK(all_ranks(max_abs_diff(u.shard->value,
                                 Tensor::full({unit.layout().shard_numel},
                                              (group().rank() + 1) / 8.0)) == 0.0));
  }
}

TEST_CASE("gathering again reuses the memory; a gather in flight is not started twice",
          "[10_sharding][task2][points:2]") {
  Unit u(3, DType::f32);
  par::ShardedUnit& unit = *u.unit;
  for (int round = 0; round < 3; ++round) {
    mgpu::fill_(u.shard->value, round + 0.5);
    unit.start_gather();
    unit.wait_gather();
    bool ok = true;
    for (nn::Parameter* p : unit.params())
      ok = ok && max_abs_diff(p->value, Tensor::full(p->value.shape(), round + 0.5)) == 0.0;
    INFO("round " << round);
    CHECK(all_ranks(ok));
    unit.free_full();
  }
  unit.start_gather();
  CHECK_THROWS_WITH(unit.start_gather(), Catch::Contains("already in flight"));
  unit.wait_gather();
  unit.free_full();
}
