// Lesson 06's reference (solutions/06_sync_batchnorm) against its twins in the library
// (mgpu::parallel): the same bits on the CPU, on the graded tests' inputs, with 2 and 3
// ranks. Not graded: the reference build runs it (agreement_mpi_tests in lessons/meson.build).
#include <catch2/catch.hpp>

#include <cmath>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "../common/agreement.h"
#include "../common/parallel/sync_bn_test_util.h"
#include "mgpu/parallel/all.h"
#include "sync_bn_lesson.h"

using namespace sbn_test;
namespace l06 = mgpu::lesson06;
namespace par = mgpu::parallel;

namespace {

/// One input of the graded tests: a sample shape, the ranks' rows, a dtype.
struct Input {
  Shape sample;
  Split split;
  DType dtype;
};

std::vector<Input> graded_inputs() {
  return {{{3}, uneven_split(), DType::f32},
          {{2, 3, 2}, uneven_split(), DType::f32},
          {{4}, split_with_empty_rank(), DType::f32},
          {{2, 2, 2}, split_with_empty_rank(), DType::f32},
          {{2, 3, 2}, split_with_empty_rank(), DType::f32},
          {{2, 2, 3}, split_with_empty_rank(), DType::f32},
          {{4}, equal_split(1), DType::f64},
          {{2}, equal_split(1), DType::f64},
          {{2, 2}, uneven_split(), DType::f64},
          {{3}, split_with_empty_rank(), DType::f64},
          {{4}, uneven_split(), DType::f64}};
}

/// This rank's rows of the whole batch drawn from `seed`.
Tensor my_batch(const Input& in, std::uint64_t seed) {
  Shape whole{in.split.total()};
  whole.insert(whole.end(), in.sample.begin(), in.sample.end());
  return my_rows(global_batch(whole, seed, in.dtype), in.split);
}

/// Per-channel values around `center`, the same on every rank.
Tensor channels(std::int64_t C, DType dtype, std::uint64_t seed, double center) {
  Tensor t = Tensor::empty({C}, DType::f64);
  mgpu::uniform_(t, seed, center - 0.5, center + 0.5);
  return mgpu::cast(t, dtype);
}

// The one result the two copies round differently: the running variance. The reference
// blends in var * n/(n-1) with weight `momentum`, the library var with weight
// momentum * n/(n-1): the same update with its roundings in another order (two or three
// each), so the last bits may part. Everything else must be bitwise the same.
constexpr double kRunningVarUlps = 4;

void check_running_var(const Tensor& ref, const Tensor& lib) {
  const double ulps = mgpu::agreement::max_ulps(ref, lib);
  INFO("running_var: the copies are " << ulps << " ulps apart");
  CHECK(ulps <= kRunningVarUlps);
}

/// Both merges on the same rows, with running statistics defined (from the same values)
/// or not; every result compared.
void check_merge(const Tensor& gathered, DType stats, double momentum, bool running) {
  const std::int64_t C = (gathered.size(1) - 1) / 2;
  Tensor ref_mean, ref_var, lib_mean, lib_var;
  if (running) {
    ref_mean = channels(C, stats, 31, 0.0);
    ref_var = channels(C, stats, 32, 1.0);
    lib_mean = ref_mean.clone();
    lib_var = ref_var.clone();
  }
  const par::GlobalBatchStats ref =
      l06::batch_norm_gather_stats_with_counts(gathered, ref_mean, ref_var, momentum, 1e-5);
  const par::GlobalBatchStats lib =
      par::batch_norm_gather_stats_with_counts(gathered, lib_mean, lib_var, momentum, 1e-5);
  CHECK(ref.count == lib.count);
  CHECK_SAME_BITS(ref.mean, lib.mean);
  CHECK_SAME_BITS(ref.invstd, lib.invstd);
  CHECK_SAME_BITS(ref_mean, lib_mean);
  if (running) check_running_var(ref_var, lib_var);
}

/// An f32 [W, 3] tensor of rows (mean, invstd, count) for one channel.
Tensor one_channel_rows(const std::vector<float>& values) {
  return Tensor::from_vector(values, {static_cast<std::int64_t>(values.size() / 3), 3});
}

/// SyncBatchNorm with the reference's steps, or the library's: the same class, so the
/// two differ in the steps alone.
template <typename Layer>
std::shared_ptr<par::SyncBatchNorm> layer(std::int64_t C, DType dtype,
                                          std::optional<double> momentum) {
  auto m = std::make_shared<Layer>(C, 1e-5, momentum, true, true, &group());
  m->to(dtype);
  set_affine(*m);
  return m;
}

/// Every parameter and buffer of two models, and their names, bit for bit.
void check_same_state(nn::Module& ref, nn::Module& lib) {
  const auto rp = ref.named_parameters(), lp = lib.named_parameters();
  REQUIRE(rp.size() == lp.size());
  for (std::size_t i = 0; i < rp.size(); ++i) {
    INFO("parameter " << rp[i].first);
    CHECK(rp[i].first == lp[i].first);
    CHECK(rp[i].second->requires_grad() == lp[i].second->requires_grad());
    CHECK_SAME_BITS(rp[i].second->value, lp[i].second->value);
    CHECK_SAME_BITS(rp[i].second->grad, lp[i].second->grad);
  }
  const auto rb = ref.named_buffers(), lb = lib.named_buffers();
  REQUIRE(rb.size() == lb.size());
  for (std::size_t i = 0; i < rb.size(); ++i) {
    INFO("buffer " << rb[i].first);
    CHECK(rb[i].first == lb[i].first);
    const std::string& name = rb[i].first;
    if (name.size() >= 11 && name.compare(name.size() - 11, 11, "running_var") == 0)
      check_running_var(*rb[i].second, *lb[i].second);
    else
      CHECK_SAME_BITS(*rb[i].second, *lb[i].second);
  }
}

/// The three normalisation layers of nested_bn_model, in order.
std::vector<std::shared_ptr<nn::Module>> norms_of(nn::Sequential& m) {
  return {m[0].children()[1].second, m.at(3), m[4].children()[0].second};
}

/// Two converted layers: both SyncBatchNorms with the same settings and modes.
void check_same_settings(nn::Module& ref_module, nn::Module& lib_module) {
  auto* ref = dynamic_cast<par::SyncBatchNorm*>(&ref_module);
  auto* lib = dynamic_cast<par::SyncBatchNorm*>(&lib_module);
  REQUIRE(ref != nullptr);
  REQUIRE(lib != nullptr);
  CHECK(ref->describe() == lib->describe());
  CHECK(ref->num_features() == lib->num_features());
  CHECK(ref->eps() == lib->eps());
  CHECK(ref->momentum() == lib->momentum());
  CHECK(ref->affine() == lib->affine());
  CHECK(ref->track_running_stats() == lib->track_running_stats());
  CHECK(ref->process_group() == lib->process_group());
  CHECK(ref->is_training() == lib->is_training());
  CHECK(ref->dtype() == lib->dtype());
  CHECK(ref->device() == lib->device());
}

/// `now` shares every parameter (value and gradient) and buffer of `old`, the layer it
/// replaced.
void check_shares(nn::Module& now, nn::Module& old) {
  const auto params = now.named_parameters(), old_params = old.named_parameters();
  REQUIRE(params.size() == old_params.size());
  for (std::size_t k = 0; k < params.size(); ++k) {
    CHECK(params[k].second->value.shares_storage(old_params[k].second->value));
    CHECK(params[k].second->grad.shares_storage(old_params[k].second->grad));
    CHECK(params[k].second->requires_grad() == old_params[k].second->requires_grad());
  }
  const auto buffers = now.named_buffers(), old_buffers = old.named_buffers();
  REQUIRE(buffers.size() == old_buffers.size());
  for (std::size_t k = 0; k < buffers.size(); ++k)
    CHECK(buffers[k].second->shares_storage(*old_buffers[k].second));
}

}  // namespace

TEST_CASE("agreement: gather_batch_stats, reference and library",
          "[06_sync_batchnorm][agreement]") {
  for (const Input& in : graded_inputs()) {
    CAPTURE(mgpu::shape_str(in.sample), in.split.counts, mgpu::dtype_name(in.dtype));
    for (std::uint64_t seed : {11, 100, 101}) {
      const Tensor x = my_batch(in, seed);
      for (double eps : {1e-5, 1e-3}) {
        CHECK_SAME_BITS(l06::gather_batch_stats(x, eps, group()),
                        par::gather_batch_stats(x, eps, group()));
      }
    }
  }
}

TEST_CASE("agreement: batch_norm_gather_stats_with_counts, reference and library",
          "[06_sync_batchnorm][agreement]") {
  for (const Input& in : graded_inputs()) {
    CAPTURE(mgpu::shape_str(in.sample), in.split.counts, mgpu::dtype_name(in.dtype));
    const Tensor gathered = par::gather_batch_stats(my_batch(in, 100), 1e-5, group());
    // Momentum 0.1, and the cumulative average's factors (1/1, 1/2, 1/3).
    for (double momentum : {0.1, 1.0, 0.5, 1.0 / 3.0})
      for (bool running : {true, false}) {
        CAPTURE(momentum, running);
        check_merge(gathered, gathered.dtype(), momentum, running);
      }
  }
  // The graded tests' hand-made rows: the chapter's example (f64, an empty rank between),
  // one value on each of two ranks, and the worlds with 0 or 1 value that must throw.
  const double eps = 1e-5;
  const std::vector<double> example{2, 1 / std::sqrt(1 + eps), 2, 0, 0, 0,
                                    6, 1 / std::sqrt(8.0 / 3.0 + eps), 3};
  check_merge(Tensor::from_vector(example, {3, 3}), DType::f64, 0.1, true);
  check_merge(one_channel_rows({1, 316.2f, 1, 3, 316.2f, 1}), DType::f32, 0.1, true);
  for (const Tensor& bad : {Tensor::zeros({2, 3}), one_channel_rows({0, 0, 0, 2, 316.2f, 1})}) {
    Tensor rm, rv;
    CHECK_THROWS(l06::batch_norm_gather_stats_with_counts(bad, rm, rv, 0.1, eps));
    CHECK_THROWS(par::batch_norm_gather_stats_with_counts(bad, rm, rv, 0.1, eps));
  }
}

TEST_CASE("agreement: sync_batch_norm_backward, reference and library",
          "[06_sync_batchnorm][agreement]") {
  for (const Input& in : graded_inputs()) {
    CAPTURE(mgpu::shape_str(in.sample), in.split.counts, mgpu::dtype_name(in.dtype));
    const std::int64_t C = in.sample[0];
    const Tensor x = my_batch(in, 100), dy = my_batch(in, 200);
    Tensor no_mean, no_var;
    const par::GlobalBatchStats g = par::batch_norm_gather_stats_with_counts(
        par::gather_batch_stats(x, 1e-5, group()), no_mean, no_var, 0.1, 1e-5);
    for (bool affine : {true, false}) {
      CAPTURE(affine);
      const Tensor weight = affine ? channels(C, in.dtype, 5, 1.0) : Tensor();
      const par::SyncBatchNormGrads ref =
          l06::sync_batch_norm_backward(dy, x, g.mean, g.invstd, weight, g.count, group());
      const par::SyncBatchNormGrads lib =
          par::sync_batch_norm_backward(dy, x, g.mean, g.invstd, weight, g.count, group());
      CHECK_SAME_BITS(ref.grad_input, lib.grad_input);
      CHECK_SAME_BITS(ref.grad_weight, lib.grad_weight);
      CHECK_SAME_BITS(ref.grad_bias, lib.grad_bias);
    }
  }
}

TEST_CASE("agreement: SyncBatchNorm with the reference's steps trains as the library's",
          "[06_sync_batchnorm][agreement]") {
  for (const Input& in : graded_inputs())
    for (std::optional<double> momentum : {std::optional<double>(0.1), std::optional<double>()}) {
      CAPTURE(mgpu::shape_str(in.sample), in.split.counts, mgpu::dtype_name(in.dtype),
              momentum.has_value());
      auto ref = layer<l06::SyncBatchNorm>(in.sample[0], in.dtype, momentum);
      auto lib = layer<par::SyncBatchNorm>(in.sample[0], in.dtype, momentum);
      for (int step = 0; step < 3; ++step) {
        CAPTURE(step);
        const Tensor x = my_batch(in, 100 + step), dy = my_batch(in, 200 + step);
        CHECK_SAME_BITS(ref->forward(x), lib->forward(x));
        CHECK_SAME_BITS(ref->backward(dy), lib->backward(dy));
        check_same_state(*ref, *lib);
      }
    }
}

TEST_CASE("agreement: convert_sync_batchnorm, reference and library",
          "[06_sync_batchnorm][agreement]") {
  // The graded test's nested model, converted by each copy.
  std::shared_ptr<nn::Sequential> models[2];
  std::vector<std::shared_ptr<nn::Module>> before[2];
  for (int i = 0; i < 2; ++i) {
    models[i] = nested_bn_model();
    models[i]->forward(global_batch({4, 1, 4, 4}, 500, DType::f32));  // running history
    models[i]->clear_saved();
    (*models[i])[3].train(false);
    before[i] = norms_of(*models[i]);
  }
  CHECK(l06::convert_sync_batchnorm(models[0], &group()) == models[0]);
  CHECK(par::convert_sync_batchnorm(models[1], &group()) == models[1]);
  const auto ref = norms_of(*models[0]), lib = norms_of(*models[1]);
  for (std::size_t b = 0; b < ref.size(); ++b) {
    CAPTURE(b, lib[b]->describe());
    REQUIRE(dynamic_cast<l06::SyncBatchNorm*>(ref[b].get()) != nullptr);
    check_same_settings(*ref[b], *lib[b]);
    check_shares(*ref[b], *before[0][b]);
    check_shares(*lib[b], *before[1][b]);
  }
  check_same_state(*models[0], *models[1]);
  // A forward in the modes conversion kept (one layer in eval), then a training step.
  const Split split = uneven_split();
  const Tensor x = my_rows(global_batch({split.total(), 1, 4, 4}, 501, DType::f32), split);
  const Tensor dy = my_rows(global_batch({split.total(), 5}, 502, DType::f32), split);
  CHECK_SAME_BITS(models[0]->forward(x), models[1]->forward(x));
  for (auto& m : models) {
    m->clear_saved();
    m->train();
  }
  CHECK_SAME_BITS(models[0]->forward(x), models[1]->forward(x));
  CHECK_SAME_BITS(models[0]->backward(dy), models[1]->backward(dy));
  check_same_state(*models[0], *models[1]);
  // A BatchNorm root becomes a new layer; a model without BatchNorm comes back as it was.
  auto bn_ref = std::make_shared<nn::BatchNorm2d>(3, 1e-3, 0.2);
  auto bn_lib = std::make_shared<nn::BatchNorm2d>(3, 1e-3, 0.2);
  const auto root_ref = l06::convert_sync_batchnorm(bn_ref, &group());
  const auto root_lib = par::convert_sync_batchnorm(bn_lib, &group());
  REQUIRE(dynamic_cast<l06::SyncBatchNorm*>(root_ref.get()) != nullptr);
  check_same_settings(*root_ref, *root_lib);
  check_shares(*root_ref, *bn_ref);
  check_shares(*root_lib, *bn_lib);
  auto plain = std::make_shared<nn::Linear>(3, 2);
  CHECK(l06::convert_sync_batchnorm(plain, &group()) == plain);
  CHECK(par::convert_sync_batchnorm(plain, &group()) == plain);
}
