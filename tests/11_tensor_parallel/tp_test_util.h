// Shared by lesson 11's graded tests: the groups, f64 models and data that every rank can
// regenerate, and comparisons against the unsplit layer run in one process.
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "error_measures.h"
#include "groups.h"
#include "mgpu/dist/dist.h"
#include "mgpu/nn/all.h"
#include "mgpu/ops.h"
#include "mgpu/parallel/tp/tensor_parallel.h"
#include "random_data.h"
#include "reference_models.h"

namespace tp_test {

using namespace mgpu;
namespace tpar = mgpu::parallel::tp;  // tensor parallelism: lesson 11 writes its layers

/// Options for the tests' groups: quiet, and a stuck collective fails in a minute.
inline dist::GroupOptions quiet() {
  return testing::quiet_options(testing::test_timeout_s());
}

/// A CPU group over every rank, created once (every rank runs the same tests in order).
inline dist::ProcessGroup& world_group() {
  static std::shared_ptr<dist::ProcessGroup> g = dist::new_group("mpi", Device::cpu(), quiet());
  return *g;
}

/// The group of `blocks` (disjoint lists of world ranks) that holds this rank. Every rank
/// creates every group, in the same order, as new_group requires.
inline std::shared_ptr<dist::ProcessGroup> my_group(const std::vector<std::vector<int>>& blocks) {
  std::shared_ptr<dist::ProcessGroup> mine;
  for (const auto& b : blocks)
    if (auto g = dist::new_group(b, "mpi", Device::cpu(), quiet())) mine = g;
  REQUIRE(mine != nullptr);
  return mine;
}

/// The world in blocks of `size` consecutive ranks (the last may be shorter).
inline std::vector<std::vector<int>> consecutive_blocks(int size) {
  std::vector<std::vector<int>> out;
  for (int r = 0; r < dist::world_size(); ++r) {
    if (r % size == 0) out.emplace_back();
    out.back().push_back(r);
  }
  return out;
}

/// Values in [-1, 1) from a seed: the same on every rank for the same salt.
inline Tensor random_tensor(const Shape& shape, unsigned salt) {
  return testing::random_tensor(shape, salt, DType::f64, Device::cpu(), /*stream=*/17u);
}

using testing::random_labels;

/// A Linear in f64 with seeded weights (the same on every rank).
inline std::shared_ptr<nn::Linear> f64_linear(std::int64_t in, std::int64_t out, bool bias,
                                              std::uint64_t seed) {
  nn::manual_seed(seed);
  auto l = std::make_shared<nn::Linear>(in, out, bias);
  l->to(DType::f64);
  return l;
}

/// in -> h1 -> mid -> h2 -> classes with ReLUs: two Megatron blocks (Linear, ReLU, Linear)
/// joined by a ReLU, f64. Hidden sizes 11 and 13 split unevenly over 2, 3 and 4 ranks.
inline std::shared_ptr<nn::Sequential> two_block_model(std::uint64_t seed) {
  auto m = testing::mlp({5, 11, 8, 13, 4}, seed);
  m->to(DType::f64);
  return m;
}

using testing::max_rel_diff;

/// Collectives `group` issued while `body` ran (the runtime counts them).
template <typename F>
std::int64_t collectives_during(dist::ProcessGroup& group, F&& body) {
  const std::int64_t before = group.collectives_issued();
  body();
  return group.collectives_issued() - before;
}

/// The shard a rank holds of a full gradient or weight of model layer `layer`, or the
/// whole tensor for a replicated layer: rows of a column-parallel layer's weight and bias,
/// columns of a row-parallel layer's weight.
inline Tensor my_part(nn::Module& parallel_layer, const std::string& local_name, const Tensor& full) {
  if (auto* col = dynamic_cast<tpar::ColumnParallelLinear*>(&parallel_layer)) {
    const tpar::ShardRange r = col->output_range();  // rows of the weight, entries of the bias
    return full.slice(r.begin, r.end).clone();
  }
  if (auto* row = dynamic_cast<tpar::RowParallelLinear*>(&parallel_layer))
    if (local_name == "weight") return tpar::take_columns(full, row->input_range());
  return full;
}

/// Every gradient of the tensor-parallel `model` equals this rank's part of the unsplit
/// `reference`'s (same layer order and names).
inline void check_grads_match(nn::Sequential& model, nn::Sequential& reference, double tol) {
  REQUIRE(model.size() == reference.size());
  for (std::size_t i = 0; i < model.size(); ++i) {
    for (const auto& [name, p] : model.at(i)->named_parameters()) {
      INFO("layer " << i << " (" << model.at(i)->describe() << "), parameter " << name);
      const Tensor& full = reference.at(i)->parameter(name).grad;
      CHECK(max_rel_diff(p->grad, my_part(*model.at(i), name, full)) < tol);
    }
  }
}

/// Two steps of the unsplit `full` and its tensor-parallel `tp` (on `device`, over group g),
/// the second after an SGD update (lr 0.5) of both: each step's logits, loss and every
/// gradient equal full's within `tol`, with one all-reduce forward and one backward per block
/// of the two. x and labels are on the CPU, as full is.
inline void check_megatron_mlp_steps(nn::Sequential& full, nn::Sequential& tp, dist::ProcessGroup& g,
                                     const Device& device, const Tensor& x, const Tensor& labels,
                                     double tol) {
  for (int step = 0; step < 2; ++step) {
    INFO("step " << step << " on " << device.str());
    full.zero_grad();
    tp.zero_grad();
    nn::CrossEntropyLoss ref_loss, tp_loss;
    const Tensor ref_logits = full.forward(x);
    const double want = ref_loss.forward(ref_logits, labels).item();
    full.backward(ref_loss.backward());
    Tensor logits;
    CHECK(collectives_during(g, [&] { logits = tp.forward(x.to(device)); }) == 2);
    if (device.is_cuda()) CHECK(logits.device().is_cuda());
    CHECK(max_rel_diff(logits.to(Device::cpu()), ref_logits) < tol);
    CHECK(tp_loss.forward(logits, labels.to(device)).item() == Approx(want).epsilon(tol));
    CHECK(collectives_during(g, [&] { tp.backward(tp_loss.backward()); }) == 2);
    check_grads_match(tp, full, tol);
    for (nn::Module* m : {static_cast<nn::Module*>(&full), static_cast<nn::Module*>(&tp)})
      for (nn::Parameter* p : m->parameters()) axpy_(p->value, -0.5, p->grad);
  }
}

}  // namespace tp_test
