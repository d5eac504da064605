// SyncBatchNorm checks shared by the library's tests and lesson 06's graded tests. Each
// takes a factory, so the same check runs on the library's SyncBatchNorm and on a lesson's
// (with some or all of its steps written by the learner). Every rank builds the same
// whole batch from a seed and takes its own rows; the reference is nn::BatchNorm on the
// whole batch in one process.
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "error_measures.h"
#include "forwarding_group.h"
#include "groups.h"
#include "mgpu/dist/dist.h"
#include "mgpu/nn/all.h"
#include "mgpu/ops.h"
#include "mgpu/tensor.h"

namespace mgpu::testing {

/// Builds a SyncBatchNorm-like layer of C channels (momentum 0.1, affine, tracking).
using LayerFactory = std::function<std::shared_ptr<nn::Module>(std::int64_t channels)>;

/// Passes every op through to `inner` and records each collective as "all_gather 15":
/// the op and the numel of its output (the tensor it writes).
class RecordingGroup : public ForwardingGroup {
 public:
  /// Records what is asked of `inner` (which must outlive it).
  explicit RecordingGroup(dist::ProcessGroup& inner) : ForwardingGroup(inner) {}
  std::vector<std::string> ops;  ///< the collectives issued so far, in order
  /// What each all_reduce was given to sum, as read just before it ran (CPU tensors).
  std::vector<std::vector<double>> all_reduce_inputs;

 protected:
  void on_collective(const std::string& op, const Tensor& t) override {
    ops.push_back(op == "barrier" ? op : op + " " + std::to_string(t.numel()));
    if (op == "all_reduce" && t.device().is_cpu()) all_reduce_inputs.push_back(t.to_vector<double>());
  }
};

/// How many rows of the whole batch each rank holds.
struct Split {
  std::vector<std::int64_t> counts;
  std::int64_t total() const {
    std::int64_t n = 0;
    for (std::int64_t c : counts) n += c;
    return n;
  }
  std::int64_t begin(int rank) const {
    std::int64_t n = 0;
    for (int r = 0; r < rank; ++r) n += counts[static_cast<std::size_t>(r)];
    return n;
  }
  std::int64_t mine() const { return counts[static_cast<std::size_t>(group().rank())]; }
};

/// Different batch sizes on every rank: 3, 5, 2, 4, 3, ...
inline Split uneven_split() {
  Split s;
  for (int r = 0; r < group().size(); ++r) s.counts.push_back(2 + (3 * r + 1) % 4);
  return s;
}
/// As uneven_split, but the last rank's batch is empty (in a world of 2 or more).
inline Split split_with_empty_rank() {
  Split s = uneven_split();
  if (s.counts.size() > 1) s.counts.back() = 0;
  return s;
}
/// `rows` rows on every rank.
inline Split equal_split(std::int64_t rows) {
  return Split{std::vector<std::int64_t>(static_cast<std::size_t>(group().size()), rows)};
}

/// A batch of `shape` from `seed`, the same on every rank: values around 3 with spread 2,
/// so the mean matters and a variance computed carelessly loses digits.
inline Tensor global_batch(const Shape& shape, std::uint64_t seed, DType dtype) {
  Tensor t = Tensor::empty(shape, DType::f64);
  normal_(t, seed, 3.0, 2.0);
  return cast(t, dtype);
}

/// Rows [begin, begin + n) of t as a tensor of its own (an empty [0, ...] one for n = 0).
inline Tensor rows(const Tensor& t, std::int64_t begin, std::int64_t n) {
  if (n == 0) {
    Shape s = t.shape();
    s[0] = 0;
    return Tensor::empty(s, t.dtype(), t.device());
  }
  return t.slice(begin, begin + n).clone();
}
/// This rank's rows of a whole batch.
inline Tensor my_rows(const Tensor& whole, const Split& split) {
  return rows(whole, split.begin(group().rank()), split.mine());
}

/// nn::BatchNorm1d for [N, C] / [N, C, L] inputs, BatchNorm2d for [N, C, H, W].
inline std::shared_ptr<nn::BatchNorm> reference_batchnorm(int input_dims, std::int64_t channels,
                                                           double momentum = 0.1) {
  if (input_dims == 4) return std::make_shared<nn::BatchNorm2d>(channels, 1e-5, momentum);
  return std::make_shared<nn::BatchNorm1d>(channels, 1e-5, momentum);
}

/// gamma and beta away from 1 and 0, so that their role in dx shows.
inline void set_affine(nn::Module& m) {
  uniform_(m.parameter("weight").value, 5, 0.5, 1.5);
  uniform_(m.parameter("bias").value, 6, -0.5, 0.5);
}

/// `steps` training steps of make(C) on this rank's rows against nn::BatchNorm on the
/// whole batch: outputs, dx (with the same dy), the running statistics and
/// num_batches_tracked after every step, and the parameter gradients summed over ranks.
/// sample_shape is [C] or [C, H, W].
inline void check_against_batchnorm(const LayerFactory& make, const Shape& sample_shape,
                                    const Split& split, DType dtype, double tol, int steps = 2,
                                    bool check_backward = true) {
  const std::int64_t C = sample_shape[0];
  Shape whole_shape{split.total()};
  whole_shape.insert(whole_shape.end(), sample_shape.begin(), sample_shape.end());
  CAPTURE(shape_str(whole_shape), dtype_name(dtype), split.counts);
  auto layer = make(C);
  auto ref = reference_batchnorm(static_cast<int>(whole_shape.size()), C);
  layer->to(dtype);
  ref->to(dtype);
  set_affine(*layer);
  set_affine(*ref);
  for (int step = 0; step < steps; ++step) {
    CAPTURE(step);
    const Tensor x_all = global_batch(whole_shape, 100 + step, dtype);
    const Tensor dy_all = global_batch(whole_shape, 200 + step, dtype);
    const Tensor y = layer->forward(my_rows(x_all, split));
    const Tensor y_ref = ref->forward(x_all);
    REQUIRE(y.shape() == my_rows(y_ref, split).shape());
    CHECK(max_abs_diff(y, my_rows(y_ref, split)) <= tol);
    CHECK(max_abs_diff(layer->buffer("running_mean"), ref->running_mean()) <= tol);
    CHECK(max_abs_diff(layer->buffer("running_var"), ref->running_var()) <= tol);
    CHECK(layer->buffer("num_batches_tracked").item() == ref->num_batches_tracked().item());
    if (!check_backward) {
      layer->clear_saved();
      ref->clear_saved();
      continue;
    }
    const Tensor dx = layer->backward(my_rows(dy_all, split));
    const Tensor dx_ref = ref->backward(dy_all);
    REQUIRE(dx.shape() == my_rows(dx_ref, split).shape());
    CHECK(max_abs_diff(dx, my_rows(dx_ref, split)) <= tol);
  }
  if (!check_backward) return;
  // Each rank's grad_weight / grad_bias is its own share; together they are the whole's.
  for (const char* name : {"weight", "bias"}) {
    CAPTURE(name);
    CHECK(max_abs_diff(sum_over_ranks(layer->parameter(name).grad), ref->parameter(name).grad) <=
          tol * static_cast<double>(split.total()));
  }
}

/// Central finite differences in f64 of L = sum over ranks of <w, y> (w a fixed random dy)
/// with respect to every input element of every rank, gamma and beta, against the layer's
/// backward. Every rank runs every forward (each one is a collective); only the owner of
/// an input element perturbs it.
inline void check_gradients_numerically(const LayerFactory& make, const Shape& sample_shape,
                                        const Split& split) {
  const std::int64_t C = sample_shape[0];
  Shape whole_shape{split.total()};
  whole_shape.insert(whole_shape.end(), sample_shape.begin(), sample_shape.end());
  CAPTURE(shape_str(whole_shape), split.counts);
  auto layer = make(C);
  layer->to(DType::f64);
  set_affine(*layer);
  Tensor x = my_rows(global_batch(whole_shape, 300, DType::f64), split);
  const Tensor w = my_rows(global_batch(whole_shape, 301, DType::f64), split);
  layer->zero_grad();
  layer->forward(x);
  const Tensor dx = layer->backward(w);
  auto loss = [&] {
    Tensor y = layer->forward(x);
    layer->clear_saved();
    const std::vector<double> a = y.to_vector<double>(), b = w.to_vector<double>();
    double local = 0;
    for (std::size_t i = 0; i < a.size(); ++i) local += a[i] * b[i];
    Tensor t = Tensor::from_vector(std::vector<double>{local}, {1});
    group().all_reduce(t, dist::ReduceOp::sum).wait();
    return t.item();
  };
  const double h = 1e-6;
  // Nudges element i of `t` by `delta` when `mine`; every rank evaluates the loss.
  auto nudged_loss = [&](Tensor& t, std::int64_t i, double delta, bool mine) {
    double* p = t.data<double>();
    const double keep = mine ? p[i] : 0;
    if (mine) p[i] = keep + delta;
    const double l = loss();
    if (mine) p[i] = keep;
    return l;
  };
  const std::int64_t row_size = shape_numel(sample_shape);
  std::vector<double> numeric_dx;
  for (int owner = 0; owner < group().size(); ++owner) {
    const std::int64_t n = split.counts[static_cast<std::size_t>(owner)] * row_size;
    const bool mine = owner == group().rank();
    for (std::int64_t i = 0; i < n; ++i) {
      const double g =
          (nudged_loss(x, i, h, mine) - nudged_loss(x, i, -h, mine)) / (2 * h);
      if (mine) numeric_dx.push_back(g);
    }
  }
  const std::vector<double> analytic_dx = dx.to_vector<double>();
  REQUIRE(analytic_dx.size() == numeric_dx.size());
  for (std::size_t i = 0; i < numeric_dx.size(); ++i) {
    CAPTURE(i);
    CHECK(std::fabs(analytic_dx[i] - numeric_dx[i]) <= 1e-7 + 1e-5 * std::fabs(numeric_dx[i]));
  }
  for (const char* name : {"weight", "bias"}) {
    CAPTURE(name);
    Tensor& value = layer->parameter(name).value;
    const std::vector<double> analytic = sum_over_ranks(layer->parameter(name).grad).to_vector<double>();
    for (std::int64_t c = 0; c < C; ++c) {
      // The parameter is the same on every rank: every rank nudges it.
      const double g = (nudged_loss(value, c, h, true) - nudged_loss(value, c, -h, true)) / (2 * h);
      CHECK(std::fabs(analytic[static_cast<std::size_t>(c)] - g) <= 1e-7 + 1e-5 * std::fabs(g));
    }
  }
}

/// Turns a model's BatchNorms into SyncBatchNorms (a convert_sync_batchnorm).
using Converter = std::function<std::shared_ptr<nn::Module>(std::shared_ptr<nn::Module>)>;
/// Wraps a model in DDP over group() (a library or lesson DistributedDataParallel).
using DdpFactory = std::function<std::shared_ptr<nn::Module>(std::shared_ptr<nn::Module>)>;

/// [N, 6] -> Linear(6, 4) -> norm(4) -> ReLU -> Linear(4, 3), weights from `seed`; norm is
/// make(4), or BatchNorm1d(4) when make is empty (neither draws random numbers, so both
/// models get the same Linear weights).
inline std::shared_ptr<nn::Module> bn_mlp(std::uint64_t seed, const LayerFactory& make = nullptr) {
  nn::manual_seed(seed);
  auto first = std::make_shared<nn::Linear>(6, 4);
  std::shared_ptr<nn::Module> norm = make ? make(4) : std::make_shared<nn::BatchNorm1d>(4);
  return std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
      first, norm, std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(4, 3)});
}

/// W ranks x `per_rank` rows under DDP with make(4) as the model's normalisation, against
/// one process with the whole batch and plain BatchNorm, one step of a mean cross-entropy:
///  - every parameter gradient after DDP's averaging equals the single process's;
///  - each rank's input gradient is W times the single process's rows: each rank's loss
///    is the mean over its own rows, so the ranks' losses sum to W times the whole mean.
inline void check_ddp_matches_single_process(const LayerFactory& make, const DdpFactory& wrap,
                                             std::int64_t per_rank) {
  const int W = group().size();
  const Split split = equal_split(per_rank);
  CAPTURE(W, per_rank);
  const Tensor x_all = global_batch({split.total(), 6}, 400, DType::f32);
  std::vector<std::int64_t> labels;
  for (std::int64_t i = 0; i < split.total(); ++i) labels.push_back((3 * i + 1) % 3);
  const Tensor y_all = Tensor::from_vector(labels, {split.total()});

  auto single = bn_mlp(41);
  nn::CrossEntropyLoss single_loss;
  single_loss.forward(single->forward(x_all), y_all);
  const Tensor dx_single = single->backward(single_loss.backward());

  auto ddp = wrap(bn_mlp(41, make));
  nn::CrossEntropyLoss loss;
  loss.forward(ddp->forward(my_rows(x_all, split)), my_rows(y_all, split));
  const Tensor dx = ddp->backward(loss.backward());

  REQUIRE(dx.shape() == my_rows(dx_single, split).shape());
  CHECK(max_abs_diff(dx, scale(my_rows(dx_single, split), W)) <= 1e-5);
  const auto params = ddp->parameters(), single_params = single->parameters();
  REQUIRE(params.size() == single_params.size());
  for (std::size_t i = 0; i < params.size(); ++i) {
    CAPTURE(single_params[i]->name());
    CHECK(max_abs_diff(params[i]->grad, single_params[i]->grad) <= 1e-5);
  }
}

/// Tells whether a module is the SyncBatchNorm the converter should produce.
using IsSync = std::function<bool(nn::Module&)>;

/// A model with BatchNorms at several depths and with different settings:
///   0: Sequential{ 0: Conv2d(1, 2, 3, pad 1), 1: BatchNorm2d(2), 2: ReLU }
///   1: Flatten   2: Linear(32, 5)   3: BatchNorm1d(5, eps 1e-3, momentum 0.3), frozen
///   4: Sequential{ 0: BatchNorm1d(5, affine=false) }
inline std::shared_ptr<nn::Sequential> nested_bn_model() {
  nn::manual_seed(51);
  auto block = std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Conv2d>(1, 2, 3, 1, 1), std::make_shared<nn::BatchNorm2d>(2),
      std::make_shared<nn::ReLU>()});
  auto frozen = std::make_shared<nn::BatchNorm1d>(5, 1e-3, 0.3);
  for (nn::Parameter* p : frozen->parameters()) p->set_requires_grad(false);
  auto tail = std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::BatchNorm1d>(5, 1e-5, 0.1, /*affine=*/false)});
  return std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
      block, std::make_shared<nn::Flatten>(), std::make_shared<nn::Linear>(32, 5), frozen, tail});
}

/// convert() on nested_bn_model: the same root comes back; the names of parameters and
/// buffers are unchanged; the three BatchNorms became `is_sync` layers that share their
/// parameters and running buffers, keep their settings, requires_grad and training mode;
/// in eval mode the converted model computes what the original did. A BatchNorm root
/// comes back as a new SyncBatchNorm; a model without BatchNorm is left alone.
inline void check_conversion(const Converter& convert, const IsSync& is_sync) {
  auto model = nested_bn_model();
  // Some history in the running statistics, and one BatchNorm left in eval mode.
  model->forward(global_batch({4, 1, 4, 4}, 500, DType::f32));
  model->clear_saved();
  (*model)[3].train(false);
  const auto old_params = model->named_parameters();
  const auto old_buffers = model->named_buffers();
  std::vector<Tensor> old_values, old_buffer_values;
  for (const auto& p : old_params) old_values.push_back(p.second->value);
  for (const auto& b : old_buffers) old_buffer_values.push_back(*b.second);
  std::vector<std::shared_ptr<nn::Module>> old_bns{(*model)[0].children()[1].second,
                                                   model->at(3), (*model)[4].children()[0].second};

  auto converted = convert(model);
  REQUIRE(converted.get() == model.get());
  std::vector<std::shared_ptr<nn::Module>> new_bns{(*model)[0].children()[1].second,
                                                   model->at(3), (*model)[4].children()[0].second};
  for (std::size_t i = 0; i < new_bns.size(); ++i) {
    CAPTURE(i, new_bns[i]->describe());
    CHECK(new_bns[i] != old_bns[i]);
    CHECK(is_sync(*new_bns[i]));
    CHECK(new_bns[i]->is_training() == old_bns[i]->is_training());
  }
  CHECK(new_bns[1]->describe().find("eps=0.001") != std::string::npos);
  CHECK(new_bns[1]->describe().find("momentum=0.3") != std::string::npos);
  CHECK(new_bns[2]->parameters().empty());  // affine=false stays without weight and bias

  const auto new_params = model->named_parameters();
  REQUIRE(new_params.size() == old_params.size());
  for (std::size_t i = 0; i < new_params.size(); ++i) {
    CAPTURE(old_params[i].first);
    CHECK(new_params[i].first == old_params[i].first);
    CHECK(new_params[i].second->name() == old_params[i].second->name());
    CHECK(new_params[i].second->value.shares_storage(old_values[i]));
    CHECK(new_params[i].second->requires_grad() == old_params[i].second->requires_grad());
  }
  const auto new_buffers = model->named_buffers();
  REQUIRE(new_buffers.size() == old_buffers.size());
  for (std::size_t i = 0; i < new_buffers.size(); ++i) {
    CAPTURE(old_buffers[i].first);
    CHECK(new_buffers[i].first == old_buffers[i].first);
    CHECK(new_buffers[i].second->shares_storage(old_buffer_values[i]));
  }

  // Eval mode: running statistics, no communication; the same numbers as before.
  auto original = nested_bn_model();
  original->forward(global_batch({4, 1, 4, 4}, 500, DType::f32));
  original->clear_saved();
  original->eval();
  model->eval();
  const Tensor x = global_batch({3, 1, 4, 4}, 501, DType::f32);
  CHECK(max_abs_diff(model->forward(x), original->forward(x)) <= 1e-6);

  // A BatchNorm root: a new SyncBatchNorm sharing the old one's state.
  auto root = std::make_shared<nn::BatchNorm2d>(3);
  auto new_root = convert(root);
  CHECK(new_root.get() != root.get());
  CHECK(is_sync(*new_root));
  CHECK(new_root->buffer("running_var").shares_storage(root->running_var()));
  CHECK(new_root->parameter("weight").value.shares_storage(root->weight().value));

  // Nothing to convert: the same model, untouched.
  auto plain = std::make_shared<nn::Sequential>(
      std::vector<std::shared_ptr<nn::Module>>{std::make_shared<nn::Linear>(3, 2)});
  CHECK(convert(plain).get() == plain.get());
  CHECK(plain->at(0)->describe().find("Linear") != std::string::npos);
}

}  // namespace mgpu::testing
