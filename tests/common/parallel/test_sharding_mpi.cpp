// mgpu::parallel's ShardedDataParallel beyond what lesson 10 grades: 16-bit compute on fp32
// master shards, BatchNorm units, frozen parameters, evaluation, the full parameters
// gathered and loaded back on another world size, GradScaler over shards, the memory
// formula in bf16, and the formulas themselves. Under mpirun with 2 and 3 ranks, and alone.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "error_measures.h"
#include "groups.h"
#include "mgpu/amp/grad_scaler.h"
#include "sharding_runs.h"

using namespace mgpu;
using namespace mgpu::testing;
namespace par = mgpu::parallel;

namespace {

// Sharding at `stage` (sharding_runs.h's defaults otherwise) with products in `compute`.
par::ShardingOptions options(int stage, DType compute = DType::f32) {
  par::ShardingOptions o = stage_options(stage);
  o.compute_dtype = compute;
  return o;
}

}  // namespace

TEST_CASE("bf16 and f16 compute on fp32 master shards trains close to fp32 DDP",
          "[sharding]") {
  RunSpec spec;
  const auto want = train_ddp(toy_mlp(51), spec);
  for (DType compute : {DType::bf16, DType::f16}) {
    std::map<std::string, Tensor> first;
    for (int stage : {1, 2, 3}) {
      const auto got = train_sharded(toy_mlp(51), spec, options(stage, compute));
      // 16-bit products and gradients: each step's update differs from fp32's by a few
      // percent of lr (1e-2) at most; 4 steps.
      const double diff = max_over_ranks(max_param_diff(got, want));
      INFO(mgpu::dtype_name(compute) << " stage " << stage << ": largest |sharded - fp32 DDP| " << diff);
      CHECK(diff <= 4e-3);
      CHECK(diff > 0);  // it did compute in 16 bits
      // Every stage reduces the same 16-bit gradients: the same result up to the order of
      // the sums.
      if (first.empty()) first = got;
      CHECK(max_over_ranks(max_param_diff(got, first)) <= 1e-6);
      for (const auto& [name, t] : got) CHECK(t.dtype() == DType::f32);
    }
  }
}

TEST_CASE("a unit with BatchNorm computes in fp32 while the others compute in bf16",
          "[sharding]") {
  nn::manual_seed(52);
  auto model = std::make_shared<nn::Sequential>();
  model->add(std::make_shared<nn::Linear>(7, 6));
  model->add(std::make_shared<nn::BatchNorm1d>(6));
  model->add(std::make_shared<nn::ReLU>());
  model->add(std::make_shared<nn::Linear>(6, 3));
  par::ShardedDataParallel sdp(model, group(), options(3, DType::bf16));
  REQUIRE(sdp.num_units() == 3);  // Linear | BatchNorm1d, ReLU | Linear
  CHECK(sdp.unit(0).compute_dtype() == DType::bf16);
  CHECK(sdp.unit(1).compute_dtype() == DType::f32);
  CHECK(sdp.unit(2).compute_dtype() == DType::bf16);
  optim::AdamW opt(sdp.parameters(), {});
  RunSpec spec;
  for (int s = 0; s < 3; ++s) {
    opt.zero_grad();
    forward_backward(sdp, spec, s);
    opt.step();
  }
  // Buffers stay per rank until synced; then every rank has rank 0's.
  sdp.sync_buffers();
  Tensor mean = model->buffer("1.running_mean").clone();
  Tensor rank0 = mean.clone();
  group().broadcast(rank0, 0).wait();
  CHECK(all_ranks(max_abs_diff(mean, rank0) == 0.0));
}

TEST_CASE("frozen parameters are left whole and untouched", "[sharding]") {
  auto model = toy_mlp(53);
  for (nn::Parameter* p : model->at(3)->parameters()) p->set_requires_grad(false);
  const Tensor frozen = model->parameter("3.weight").value.clone();
  const Tensor trained = model->parameter("1.weight").value.clone();
  RunSpec spec;
  const auto got = train_sharded(model, spec, options(3));
  CHECK(max_abs_diff(got.at("3.weight"), frozen) == 0.0);
  CHECK(max_abs_diff(got.at("1.weight"), trained) > 0);
  // Against DDP with the same frozen layer.
  auto ref = toy_mlp(53);
  for (nn::Parameter* p : ref->at(3)->parameters()) p->set_requires_grad(false);
  CHECK(max_over_ranks(max_param_diff(got, train_ddp(ref, spec))) <= 1e-5);
}

TEST_CASE("evaluation at stage 3 gathers, computes and frees; it agrees with the full model",
          "[sharding]") {
  auto model = toy_mlp(54);
  auto copy = toy_mlp(54);  // the same weights, unsharded
  par::ShardedDataParallel sdp(model, group(), options(3));
  sdp.eval();
  Tensor x, y;
  rank_batch(group().rank(), 0, 4, 7, 3, x, y);
  const Tensor got = sdp.forward(x);
  copy->eval();
  CHECK(max_abs_diff(got, copy->forward(x)) <= 1e-6);
  for (std::size_t k = 0; k < sdp.num_units(); ++k) {
    CHECK(sdp.unit(k).state() == par::UnitState::sharded);
    CHECK_FALSE(sdp.unit(k).full().storage()->holds_memory());
  }
  CHECK_THROWS_WITH(model->parameter("1.weight").value.to_vector<float>(),
                    Catch::Contains("released"));
}

TEST_CASE("full parameters gathered on one world size load into another sharding",
          "[sharding]") {
  // Train at stage 3 over every rank, gather the full parameters, load them into a model
  // sharded differently (stage 2, one unit): the forward agrees with the unsharded model.
  RunSpec spec;
  auto a = toy_mlp(55);
  std::map<std::string, Tensor> full = train_sharded(a, spec, options(3));
  par::ShardingOptions one_unit = options(2);
  one_unit.unit_cap_bytes = std::numeric_limits<std::size_t>::max();
  auto b = toy_mlp(99);  // other initial values, overwritten by the load
  par::ShardedDataParallel sdp(b, group(), one_unit);
  sdp.load_full_parameters(full);
  CHECK(max_param_diff(sdp.full_parameters(), full) == 0.0);
  auto plain = toy_mlp(99);
  for (auto& [name, p] : plain->named_parameters()) mgpu::copy_(p->value, full.at(name));
  sdp.eval();
  plain->eval();
  Tensor x, y;
  rank_batch(group().rank(), 3, 4, 7, 3, x, y);
  CHECK(max_abs_diff(sdp.forward(x), plain->forward(x)) <= 1e-6);
  // A missing or misshaped value is refused by name.
  std::map<std::string, Tensor> broken = full;
  broken.erase("5.bias");
  CHECK_THROWS_WITH(sdp.load_full_parameters(broken), Catch::Contains("'5.bias'"));
  broken = full;
  broken["5.bias"] = Tensor::zeros({4});
  CHECK_THROWS_WITH(sdp.load_full_parameters(broken), Catch::Contains("'5.bias'"));
}

TEST_CASE("GradScaler over sharded gradients skips the step on every rank together",
          "[sharding]") {
  auto model = toy_mlp(56);
  par::ShardedDataParallel sdp(model, group(), options(2, DType::f16));
  optim::AdamW opt(sdp.parameters(), {});
  mgpu::amp::GradScaler scaler({}, &group());
  RunSpec spec;
  Tensor x, y;
  rank_batch(group().rank(), 0, spec.rows, spec.features, spec.classes, x, y);
  nn::CrossEntropyLoss loss;
  loss.forward(sdp.forward(x), y);
  sdp.backward(scaler.scale(loss.backward()));
  // An overflow in the last rank's shard only: every rank must skip.
  if (group().rank() == group().size() - 1) mgpu::fill_(sdp.parameters()[0]->grad, INFINITY);
  const auto before = sdp.full_parameters();
  CHECK_FALSE(scaler.step(opt));
  scaler.update();
  CHECK(scaler.get_scale() == 32768.0);
  CHECK(max_param_diff(sdp.full_parameters(), before) == 0.0);
}

TEST_CASE("the memory of bf16 compute per rank matches the formula", "[sharding]") {
  for (int stage : {1, 2, 3}) {
    const MemoryMeasurement m = measure_memory(stage, DType::bf16);
    INFO("stage " << stage << ": kept " << m.persistent << " (formula " << m.formula.persistent()
         << "), peak " << m.peak << " (formula " << m.formula.peak() << ")");
    CHECK(std::fabs(m.persistent - m.formula.persistent()) <= 0.02 * m.formula.persistent());
    CHECK(std::fabs(m.peak - m.formula.peak()) <= 0.03 * m.formula.peak());
  }
}

TEST_CASE("the formulas: bytes per parameter, working set, bytes sent", "[sharding]") {
  // The table of sharding_model.h.
  CHECK(par::bytes_per_parameter(0, 8, DType::f32) == 16);
  CHECK(par::bytes_per_parameter(0, 8, DType::f32, true) == 20);
  CHECK(par::bytes_per_parameter(1, 4, DType::f32) == 8 + 3);
  CHECK(par::bytes_per_parameter(2, 4, DType::f32) == 4 + 3);
  CHECK(par::bytes_per_parameter(3, 4, DType::f32) == 4);
  CHECK(par::bytes_per_parameter(1, 4, DType::bf16) == 4 + 4);
  CHECK(par::bytes_per_parameter(2, 4, DType::bf16) == 2 + 4);
  CHECK(par::bytes_per_parameter(3, 64, DType::bf16) == 0.25);
  for (int stage = 1; stage <= 3; ++stage)
    CHECK(par::bytes_per_parameter(stage, 1, DType::f32) >= 16);
  // Three equal units of 100 elements, fp32, 2 ranks, stage 3 with prefetch: while the
  // middle unit computes backward, 2 units of parameters (itself and the prefetched first),
  // 2 of gradients (its own and the last unit's, still being reduce-scattered) and their
  // reduce-scatter outputs: 400 + 400 + 400 + 400 + 200 + 200 bytes.
  const std::vector<std::int64_t> three = {100, 100, 100};
  const par::MemoryPrediction m = par::predict_memory(3, three, 2, DType::f32, true);
  CHECK(m.persistent() == 16 * 300 / 2);
  CHECK(m.working_set == 400 + 400 + 400 + 400 + 200 + 200);
  CHECK(par::predict_memory(3, three, 2, DType::f32, false).working_set ==
        400 + 400 + 200 + 400 + 200);
  CHECK(par::predict_memory(2, three, 2, DType::f32).working_set == 400 + 200 + 400 + 200);
  CHECK(par::predict_memory(1, three, 2, DType::f32).working_set == 0);
  // Ring volumes on 4 ranks for a 1000-byte buffer.
  CHECK(par::ring_bytes_sent("all-reduce", 1000, 4) == 1500);
  CHECK(par::ring_bytes_sent("all-gather", 1000, 4) == 750);
  CHECK(par::ring_messages("reduce-scatter", 4) == 3);
  CHECK_THROWS_WITH(par::ring_messages("broadcast", 4), Catch::Contains("unknown op"));
  // Per step: stage 2 moves DDP's volume, stages 1 and 3 1.5 times it.
  const std::vector<std::int64_t> units = {1000};
  const double ddp = par::predict_comm(0, units, 4, DType::f32).bytes_sent;
  CHECK(par::predict_comm(2, units, 4, DType::f32).bytes_sent == ddp);
  CHECK(par::predict_comm(1, units, 4, DType::f32).bytes_sent == 1.5 * ddp);
  CHECK(par::predict_comm(3, units, 4, DType::f32).bytes_sent == 1.5 * ddp);
  CHECK(par::predict_comm(3, units, 4, DType::bf16).bytes_sent == 0.75 * ddp);
  CHECK_THROWS_WITH(par::predict_memory(4, units, 2, DType::f32), Catch::Contains("stage 4"));
}

TEST_CASE("ShardedDataParallel refuses what it cannot shard", "[sharding]") {
  CHECK_THROWS_WITH(par::ShardedDataParallel(toy_mlp(58), group(), options(0)),
                    Catch::Contains("stage 0"));
  CHECK_THROWS_WITH(par::ShardedDataParallel(toy_mlp(58), group(), options(3, DType::f64)),
                    Catch::Contains("compute dtype"));
  auto frozen = toy_mlp(58);
  for (nn::Parameter* p : frozen->parameters()) p->set_requires_grad(false);
  CHECK_THROWS_WITH(par::ShardedDataParallel(frozen, group(), options(3)),
                    Catch::Contains("no trainable parameter"));
  auto f64 = toy_mlp(58);
  f64->to(DType::f64);
  CHECK_THROWS_WITH(par::ShardedDataParallel(f64, group(), options(3)),
                    Catch::Contains("f32 parameters"));
}
