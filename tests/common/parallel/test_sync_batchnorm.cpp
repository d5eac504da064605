// mgpu::parallel::SyncBatchNorm under mpirun (1, 2 and 3 ranks): against nn::BatchNorm on
// the whole batch, uneven and empty batches, momentum none, eval mode, the collectives it
// issues, finite differences across ranks, DDP, convert_sync_batchnorm, errors.
#include <catch2/catch.hpp>

#include <cmath>
#include <memory>
#include <vector>

#include "mgpu/parallel/all.h"
#include "sync_bn_checks.h"

using namespace mgpu;
using namespace mgpu::testing;
namespace par = mgpu::parallel;

namespace {

LayerFactory library_layer(dist::ProcessGroup* g = &group()) {
  return [g](std::int64_t c) {
    return std::make_shared<par::SyncBatchNorm>(c, 1e-5, 0.1, true, true, g);
  };
}

const Converter library_convert = [](std::shared_ptr<nn::Module> m) {
  return par::convert_sync_batchnorm(std::move(m), &group());
};

}  // namespace

TEST_CASE("SyncBatchNorm equals BatchNorm on the whole batch, ranks with different batch sizes",
          "[parallel][syncbn]") {
  check_against_batchnorm(library_layer(), {3}, uneven_split(), DType::f32, 1e-5);
  check_against_batchnorm(library_layer(), {2, 3, 2}, uneven_split(), DType::f32, 1e-5);
  check_against_batchnorm(library_layer(), {2, 4}, uneven_split(), DType::f64, 1e-12);
}

TEST_CASE("a rank with an empty batch takes part in both collectives and is masked out",
          "[parallel][syncbn]") {
  check_against_batchnorm(library_layer(), {3}, split_with_empty_rank(), DType::f32, 1e-5);
  check_against_batchnorm(library_layer(), {2, 2, 3}, split_with_empty_rank(), DType::f64, 1e-12);
}

TEST_CASE("batch 1 per rank trains with 2+ ranks; one value per channel in the world is an error",
          "[parallel][syncbn]") {
  const int W = group().size();
  if (W >= 2) {
    check_against_batchnorm(library_layer(), {3}, equal_split(1), DType::f32, 1e-5);
    // Only rank 0 has a sample: the world has 1 value per channel. Every rank throws.
    Split one;
    one.counts.assign(static_cast<std::size_t>(W), 0);
    one.counts[0] = 1;
    auto layer = library_layer()(3);
    CHECK_THROWS_WITH(layer->forward(my_rows(global_batch({1, 3}, 7, DType::f32), one)),
                      Catch::Contains("1 value per channel"));
    CHECK_THROWS_WITH(layer->forward(Tensor::empty({0, 3})), Catch::Contains("every rank's batch is empty"));
  } else {
    auto layer = library_layer()(3);
    CHECK_THROWS_WITH(layer->forward(Tensor::zeros({1, 3})), Catch::Contains("1 value per channel"));
  }
}

TEST_CASE("momentum none keeps the cumulative average of the world's batch statistics",
          "[parallel][syncbn]") {
  const Split split = uneven_split();
  par::SyncBatchNorm bn(2, 1e-5, std::nullopt, true, true, &group());
  bn.to(DType::f64);
  std::vector<double> mean_sum(2, 0.0), var_sum(2, 0.0);
  for (int step = 0; step < 3; ++step) {
    const Tensor x_all = global_batch({split.total(), 2}, 600 + step, DType::f64);
    const std::vector<double> v = x_all.to_vector<double>();
    const auto n = static_cast<double>(split.total());
    for (int c = 0; c < 2; ++c) {
      double m = 0, q = 0;
      for (std::int64_t i = 0; i < split.total(); ++i) m += v[i * 2 + c] / n;
      for (std::int64_t i = 0; i < split.total(); ++i) q += (v[i * 2 + c] - m) * (v[i * 2 + c] - m);
      mean_sum[c] += m;
      var_sum[c] += q / (n - 1);  // unbiased
    }
    bn.forward(my_rows(x_all, split));
    bn.clear_saved();
    const std::vector<double> rm = bn.running_mean().to_vector<double>();
    const std::vector<double> rv = bn.running_var().to_vector<double>();
    for (int c = 0; c < 2; ++c) {
      CHECK(std::fabs(rm[c] - mean_sum[c] / (step + 1)) <= 1e-12);
      CHECK(std::fabs(rv[c] - var_sum[c] / (step + 1)) <= 1e-12);
    }
  }
  CHECK(bn.num_batches_tracked().item() == 3);
  CHECK(bn.describe().find("momentum=none") != std::string::npos);
}

TEST_CASE("collectives: one all_gather of W x (2C+1) forward, one all_reduce of 2C backward; none in eval",
          "[parallel][syncbn]") {
  const int W = group().size();
  RecordingGroup counting(group());
  par::SyncBatchNorm bn(4, 1e-5, 0.1, true, true, &counting);
  const Tensor x = my_rows(global_batch({uneven_split().total(), 4, 2, 2}, 8, DType::f32), uneven_split());
  const Tensor y = bn.forward(x);
  bn.backward(y);
  if (W > 1) {
    CHECK(counting.ops == std::vector<std::string>{"all_gather " + std::to_string(W * 9), "all_reduce 8"});
  } else {
    CHECK(counting.ops.empty());  // a world of one rank: plain BatchNorm
  }
  counting.ops.clear();
  // The observer hears of both synchronised steps, with their bytes.
  std::vector<std::string> seen;
  bn.set_step_observer([&](const char* what, double begin_s, double end_s, std::int64_t bytes) {
    CHECK(end_s >= begin_s);
    seen.push_back(std::string(what) + " " + std::to_string(bytes));
  });
  bn.backward(bn.forward(x));
  if (W > 1) {
    CHECK(seen == std::vector<std::string>{"stats + all_gather " + std::to_string(W * 9 * 4),
                                           "sums + all_reduce + dx 32"});
  }
  counting.ops.clear();
  bn.eval();
  const Tensor y_eval = bn.forward(x);
  CHECK(counting.ops.empty());
  // Eval mode normalises with the running statistics, like BatchNorm.
  nn::BatchNorm2d ref(4);
  ref.running_mean() = bn.running_mean().clone();
  ref.running_var() = bn.running_var().clone();
  ref.eval();
  CHECK(max_abs_diff(y_eval, ref.forward(x)) <= 1e-6);
}

TEST_CASE("track_running_stats=false: no buffers, and eval mode uses the rank's own batch",
          "[parallel][syncbn]") {
  RecordingGroup counting(group());
  par::SyncBatchNorm bn(3, 1e-5, 0.1, true, false, &counting);
  CHECK(bn.named_buffers().empty());
  CHECK_THROWS_WITH(bn.running_mean(), Catch::Contains("track_running_stats=false"));
  // Training: the world's statistics, as with tracking.
  const Split split = uneven_split();
  const Tensor x_all = global_batch({split.total(), 3}, 9, DType::f32);
  const Tensor x = my_rows(x_all, split);
  nn::BatchNorm1d whole(3);
  CHECK(max_abs_diff(bn.forward(x), my_rows(whole.forward(x_all), split)) <= 1e-5);
  bn.clear_saved();
  counting.ops.clear();
  // As PyTorch: with no running statistics, eval mode normalises with the local batch and
  // does not synchronise.
  bn.eval();
  const Tensor y = bn.forward(x);
  CHECK(counting.ops.empty());
  nn::BatchNorm1d local(3);
  CHECK(max_abs_diff(y, local.forward(x)) <= 1e-6);
}

TEST_CASE("SyncBatchNorm gradients match finite differences across ranks (f64)",
          "[parallel][syncbn][gradcheck]") {
  check_gradients_numerically(library_layer(), {2, 2}, uneven_split());
  check_gradients_numerically(library_layer(), {2}, split_with_empty_rank());
}

TEST_CASE("under DDP, W ranks x B equal one process x WB with BatchNorm", "[parallel][syncbn][ddp]") {
  const DdpFactory wrap = [](std::shared_ptr<nn::Module> m) {
    return std::make_shared<par::DistributedDataParallel>(std::move(m), group());
  };
  check_ddp_matches_single_process(library_layer(), wrap, 4);
  // The same through convert_sync_batchnorm.
  auto model = library_convert(bn_mlp(41));
  CHECK(dynamic_cast<par::SyncBatchNorm*>(model->children()[1].second.get()) != nullptr);
}

TEST_CASE("convert_sync_batchnorm replaces every BatchNorm, sharing parameters and buffers",
          "[parallel][syncbn][convert]") {
  check_conversion(library_convert,
                   [](nn::Module& m) { return dynamic_cast<par::SyncBatchNorm*>(&m) != nullptr; });
}

TEST_CASE("SyncBatchNorm: clear errors for bad input and settings", "[parallel][syncbn]") {
  par::SyncBatchNorm bn(3, 1e-5, 0.1, true, true, &group());
  CHECK_THROWS_WITH(bn.forward(Tensor::zeros({4, 2})), Catch::Contains("C = 3"));
  CHECK_THROWS_WITH(bn.forward(Tensor::zeros({4})), Catch::Contains("at least 2 dimensions"));
  CHECK_THROWS_WITH(bn.forward(Tensor::zeros({4, 3}, DType::f64)), Catch::Contains("f32"));
  CHECK_THROWS_WITH(par::SyncBatchNorm(3, 1e-5, 1.5), Catch::Contains("momentum in [0, 1]"));
  CHECK_THROWS_WITH(bn.backward(Tensor::zeros({4, 3})), Catch::Contains("without a matching forward"));
  par::SyncBatchNorm plain(3, 1e-5, 0.1, false);
  CHECK_THROWS_WITH(plain.weight(), Catch::Contains("affine=false"));
  CHECK_THROWS_WITH(par::convert_sync_batchnorm(nullptr), Catch::Contains("null"));
}

TEST_CASE("a clone is an independent SyncBatchNorm with the same group", "[parallel][syncbn]") {
  par::SyncBatchNorm bn(2, 1e-4, std::nullopt, true, true, &group());
  auto copy = std::dynamic_pointer_cast<par::SyncBatchNorm>(bn.clone());
  REQUIRE(copy);
  CHECK(copy->describe() == bn.describe());
  CHECK(copy->process_group() == &group());
  CHECK_FALSE(copy->running_mean().shares_storage(bn.running_mean()));
}

TEST_CASE("gpu: SyncBatchNorm on CUDA (mpi backend) matches the CPU", "[parallel][syncbn][gpu]") {
  const Device gpu = dist::rank_device(Device::Kind::cuda);
  dist::ProcessGroup& gpu_group = mgpu::testing::rank_gpu_group();
  const Split split = split_with_empty_rank();
  for (DType dtype : {DType::f32, DType::f64}) {
    CAPTURE(mgpu::dtype_name(dtype));
    const Tensor x_all = global_batch({split.total(), 3, 2, 3}, 700, dtype);
    const Tensor dy_all = global_batch({split.total(), 3, 2, 3}, 701, dtype);
    auto run = [&](const Device& device, dist::ProcessGroup& g) {
      par::SyncBatchNorm bn(3, 1e-5, std::nullopt, true, true, &g);
      bn.to(dtype);
      set_affine(bn);
      bn.to(device);
      std::vector<Tensor> out;
      out.push_back(bn.forward(my_rows(x_all, split).to(device)).to(Device::cpu()));
      out.push_back(bn.backward(my_rows(dy_all, split).to(device)).to(Device::cpu()));
      out.push_back(bn.weight().grad.to(Device::cpu()));
      out.push_back(bn.running_var().to(Device::cpu()));
      return out;
    };
    const auto cpu = run(Device::cpu(), group());
    const auto cuda = run(gpu, gpu_group);
    const double tol = dtype == DType::f64 ? 1e-10 : 2e-5;
    for (std::size_t i = 0; i < cpu.size(); ++i) {
      CAPTURE(i);
      CHECK(max_abs_diff(cpu[i], cuda[i]) <= tol * (i == 2 ? 10 : 1));
    }
  }
  // The merge kernel alone, with an empty row in the middle.
  const Tensor rows_cpu = Tensor::from_vector(
      std::vector<float>{1.f, 2.f, 0.5f, 0.25f, 4.f, 0.f, 0.f, 0.f, 0.f, 0.f, 3.f, -2.f, 1.f, 2.f, 6.f},
      {3, 5});
  Tensor m1, v1, i1, m2, v2, i2;
  std::int64_t n1 = 0, n2 = 0;
  par::merge_batch_stats(rows_cpu, 1e-5, m1, v1, i1, n1);
  par::merge_batch_stats(rows_cpu.to(gpu), 1e-5, m2, v2, i2, n2);
  CHECK(n1 == 10);
  CHECK(n2 == 10);
  CHECK(max_abs_diff(m1, m2.to(Device::cpu())) <= 1e-6);
  CHECK(max_abs_diff(v1, v2.to(Device::cpu())) <= 1e-5);
  CHECK(max_abs_diff(i1, i2.to(Device::cpu())) <= 1e-5);
}
