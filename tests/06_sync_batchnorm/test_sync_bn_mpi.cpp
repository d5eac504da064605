// Lesson 06, tasks 1-4 under mpirun (2 and 3 ranks). Every rank builds the same whole batch
// from a seed and takes its own rows (different sizes per rank, sometimes none); the
// reference is nn::BatchNorm on the whole batch in one process.
//
// The library's parallel::SyncBatchNorm runs your steps: the test binary of task K links
// your code of task K and the reference of the other tasks, so a bug in task 1 costs task
// 1's points only.
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

template <typename Layer>
LayerFactory layer_on(dist::ProcessGroup& g, std::optional<double> momentum = 0.1) {
  return [&g, momentum](std::int64_t c) {
    return std::make_shared<Layer>(c, 1e-5, momentum, true, true, &g);
  };
}

// Rank r's row as the reference computes it from the whole batch.
std::vector<double> expected_row(const Tensor& x_all, const Split& split, int r, double eps) {
  const Tensor x = rows(x_all, split.begin(r), split.counts[static_cast<std::size_t>(r)]);
  const std::int64_t C = x_all.size(1);
  std::vector<double> row(static_cast<std::size_t>(2 * C + 1), 0.0);
  if (x.numel() == 0) return row;
  nn::BatchNormStats st = nn::batch_norm_stats(x);
  const std::vector<double> m = st.mean.to_vector<double>();
  const std::vector<double> is = nn::batch_norm_invstd(st.var, eps).to_vector<double>();
  for (std::int64_t c = 0; c < C; ++c) {
    row[c] = m[c];
    row[C + c] = is[c];
  }
  row[2 * C] = static_cast<double>(st.count);
  return row;
}

void check_gathered_rows(const Split& split, const Shape& whole_shape) {
  const int W = group().size();
  const Tensor x_all = global_batch(whole_shape, 11, DType::f32);
  const Tensor got = par::gather_batch_stats(my_rows(x_all, split), 1e-5, group());
  const std::int64_t C = whole_shape[1];
  REQUIRE(got.shape() == Shape({W, 2 * C + 1}));
  CHECK(got.dtype() == DType::f32);
  const std::vector<double> g = got.to_vector<double>();
  for (int r = 0; r < W; ++r) {
    CAPTURE(r, split.counts);
    const std::vector<double> want = expected_row(x_all, split, r, 1e-5);
    for (std::size_t i = 0; i < want.size(); ++i) {
      CAPTURE(i);
      CHECK(std::fabs(g[r * want.size() + i] - want[i]) <= 1e-6 * (1 + std::fabs(want[i])));
    }
  }
}

}  // namespace

// ---- Task 1 ----------------------------------------------------------------------------

TEST_CASE("task1: row r of the gathered tensor is rank r's mean, invstd and count",
          "[06_sync_batchnorm][task1][points:2]") {
  check_gathered_rows(uneven_split(), {uneven_split().total(), 3});
  check_gathered_rows(uneven_split(), {uneven_split().total(), 2, 3, 2});
  // f64 input: f64 statistics.
  const Tensor x = my_rows(global_batch({uneven_split().total(), 2}, 12, DType::f64), uneven_split());
  CHECK(par::gather_batch_stats(x, 1e-5, group()).dtype() == DType::f64);
}

TEST_CASE("task1: a rank with an empty batch sends zeros with count 0, and nobody waits for it",
          "[06_sync_batchnorm][task1][points:2]") {
  check_gathered_rows(split_with_empty_rank(), {split_with_empty_rank().total(), 4});
  check_gathered_rows(split_with_empty_rank(), {split_with_empty_rank().total(), 2, 2, 2});
}

TEST_CASE("task1: forward with your gather equals BatchNorm on the whole batch",
          "[06_sync_batchnorm][task1][points:2]") {
  check_against_batchnorm(layer_on<par::SyncBatchNorm>(group()), {3}, uneven_split(), DType::f32, 1e-5);
  check_against_batchnorm(layer_on<par::SyncBatchNorm>(group()), {2, 3, 2}, split_with_empty_rank(),
                          DType::f32, 1e-5);
}

// ---- Task 2 ----------------------------------------------------------------------------

TEST_CASE("task2: the chapter's worked example: {1, 3}, {}, {4, 6, 8} merge to mean 4.4, var 5.84",
          "[06_sync_batchnorm][task2][points:2]") {
  const double eps = 1e-5;
  auto row = [&](double mean, double var, double n) {
    return std::vector<double>{mean, n > 0 ? 1 / std::sqrt(var + eps) : 0.0, n};
  };
  std::vector<double> rows_data;
  for (const auto& r : {row(2, 1, 2), row(0, 0, 0), row(6, 8.0 / 3.0, 3)})
    rows_data.insert(rows_data.end(), r.begin(), r.end());
  const Tensor gathered = Tensor::from_vector(rows_data, {3, 3});
  Tensor running_mean = Tensor::from_vector(std::vector<double>{1.0}, {1});
  Tensor running_var = Tensor::from_vector(std::vector<double>{1.0}, {1});
  const par::GlobalBatchStats g =
      par::batch_norm_gather_stats_with_counts(gathered, running_mean, running_var, 0.1, eps);
  CHECK(g.count == 5);
  REQUIRE(g.mean.numel() == 1);
  CHECK(g.mean.item() == Approx(4.4).epsilon(1e-12));
  CHECK(g.invstd.item() == Approx(1 / std::sqrt(5.84 + eps)).epsilon(1e-9));
  // The running statistics move with the world's mean and UNBIASED variance (n = 5).
  CHECK(running_mean.item() == Approx(0.9 * 1.0 + 0.1 * 4.4).epsilon(1e-12));
  CHECK(running_var.item() == Approx(0.9 * 1.0 + 0.1 * 5.84 * 5 / 4).epsilon(1e-9));
  // Undefined running statistics (track_running_stats = false) are left alone.
  Tensor none_mean, none_var;
  CHECK(par::batch_norm_gather_stats_with_counts(gathered, none_mean, none_var, 0.1, eps).count == 5);
  CHECK_FALSE(none_mean.defined());
}

TEST_CASE("task2: a world with 0 or 1 value per channel is an error; 2 values are enough",
          "[06_sync_batchnorm][task2][points:1]") {
  Tensor rm, rv;
  // One value on each of two ranks: a variance exists (batch 1 per rank trains).
  const Tensor two = Tensor::from_vector(std::vector<float>{1, 316.2f, 1, 3, 316.2f, 1}, {2, 3});
  CHECK(par::batch_norm_gather_stats_with_counts(two, rm, rv, 0.1, 1e-5).mean.item() == Approx(2));
  const Tensor empty = Tensor::zeros({2, 3});
  CHECK_THROWS(par::batch_norm_gather_stats_with_counts(empty, rm, rv, 0.1, 1e-5));
  const Tensor single = Tensor::from_vector(std::vector<float>{0, 0, 0, 2, 316.2f, 1}, {2, 3});
  CHECK_THROWS(par::batch_norm_gather_stats_with_counts(single, rm, rv, 0.1, 1e-5));
}

TEST_CASE("task2: forward with your merge equals BatchNorm: different sizes, an empty rank, batch 1",
          "[06_sync_batchnorm][task2][points:3]") {
  check_against_batchnorm(layer_on<par::SyncBatchNorm>(group()), {3}, uneven_split(), DType::f32, 1e-5);
  check_against_batchnorm(layer_on<par::SyncBatchNorm>(group()), {2, 2, 3}, split_with_empty_rank(),
                          DType::f32, 1e-5);
  check_against_batchnorm(layer_on<par::SyncBatchNorm>(group()), {4}, equal_split(1), DType::f64, 1e-12);
}

TEST_CASE("task2: momentum none: the running statistics are the cumulative average",
          "[06_sync_batchnorm][task2][points:1]") {
  const Split split = uneven_split();
  auto bn = layer_on<par::SyncBatchNorm>(group(), std::nullopt)(2);
  bn->to(DType::f64);
  std::vector<double> mean_sum(2, 0.0);
  for (int step = 0; step < 3; ++step) {
    const Tensor x_all = global_batch({split.total(), 2}, 600 + step, DType::f64);
    const std::vector<double> mean = nn::batch_norm_stats(x_all).mean.to_vector<double>();
    for (int c = 0; c < 2; ++c) mean_sum[c] += mean[c];
    bn->forward(my_rows(x_all, split));
    bn->clear_saved();
    const std::vector<double> rm = bn->buffer("running_mean").to_vector<double>();
    for (int c = 0; c < 2; ++c) CHECK(rm[c] == Approx(mean_sum[c] / (step + 1)).epsilon(1e-12));
  }
}

// ---- Task 3 ----------------------------------------------------------------------------

TEST_CASE("task3: dx, grad_weight and grad_bias with your backward equal BatchNorm's",
          "[06_sync_batchnorm][task3][points:3]") {
  check_against_batchnorm(layer_on<par::SyncBatchNorm>(group()), {3}, uneven_split(), DType::f32, 1e-5);
  check_against_batchnorm(layer_on<par::SyncBatchNorm>(group()), {2, 3, 2}, split_with_empty_rank(),
                          DType::f32, 1e-5);
  check_against_batchnorm(layer_on<par::SyncBatchNorm>(group()), {2}, equal_split(1), DType::f64, 1e-12);
}

TEST_CASE("task3: one all_reduce of 2C values; grad_weight and grad_bias are this rank's own sums",
          "[06_sync_batchnorm][task3][points:1]") {
  const int W = group().size();
  const Split split = uneven_split();
  RecordingGroup counting(group());
  auto bn = layer_on<par::SyncBatchNorm>(counting)(4);
  const Tensor x_all = global_batch({split.total(), 4}, 13, DType::f64);
  const Tensor dy_all = global_batch({split.total(), 4}, 14, DType::f64);
  bn->to(DType::f64);
  bn->forward(my_rows(x_all, split));
  bn->backward(my_rows(dy_all, split));
  CHECK(counting.ops == std::vector<std::string>{"all_gather " + std::to_string(W * 9), "all_reduce 8"});
  // This rank's share: sum(dy) over its own rows only.
  const std::vector<double> dy = my_rows(dy_all, split).to_vector<double>();
  const std::vector<double> x = my_rows(x_all, split).to_vector<double>();
  const std::vector<double> xs = x_all.to_vector<double>();
  const std::vector<double> grad_bias = bn->parameter("bias").grad.to_vector<double>();
  std::vector<double> sums(8, 0.0);  // what the all_reduce must carry: [sum_dy | sum_dy_xmu]
  for (int c = 0; c < 4; ++c) {
    double mean = 0;  // the world's mean, from the forward
    for (std::int64_t i = 0; i < split.total(); ++i) mean += xs[i * 4 + c];
    mean /= static_cast<double>(split.total());
    double own = 0, own_xmu = 0;
    for (std::int64_t i = 0; i < split.mine(); ++i) {
      own += dy[i * 4 + c];
      own_xmu += dy[i * 4 + c] * (x[i * 4 + c] - mean);
    }
    sums[c] = own, sums[4 + c] = own_xmu;
    CHECK(grad_bias[c] == Approx(own).margin(1e-12));
  }
  // What was summed over the ranks: this rank's two sums, not zeros (sums written into a
  // tensor other than the buffer that is all-reduced never reach the other ranks).
  REQUIRE(counting.all_reduce_inputs.size() == 1);
  const std::vector<double>& sent = counting.all_reduce_inputs[0];
  REQUIRE(sent.size() == 8);
  for (int i = 0; i < 8; ++i) {
    INFO("the all_reduce's input [sum_dy | sum_dy_xmu], entry " << i);
    CHECK(sent[i] == Approx(sums[i]).margin(1e-9));
  }
}

TEST_CASE("task3: under DDP, W ranks x 4 equal one process x 4W with BatchNorm (all gradients)",
          "[06_sync_batchnorm][task3][points:2]") {
  const DdpFactory wrap = [](std::shared_ptr<nn::Module> m) {
    return std::make_shared<par::DistributedDataParallel>(std::move(m), group());
  };
  check_ddp_matches_single_process(layer_on<par::SyncBatchNorm>(group()), wrap, 4);
}

TEST_CASE("task3: your whole SyncBatchNorm matches finite differences across ranks (f64)",
          "[06_sync_batchnorm][task3][points:3]") {
  check_gradients_numerically(layer_on<par::SyncBatchNorm>(group()), {2, 2}, uneven_split());
  check_gradients_numerically(layer_on<par::SyncBatchNorm>(group()), {3}, split_with_empty_rank());
}

// ---- Task 4 ----------------------------------------------------------------------------

TEST_CASE("task4: a nested model's BatchNorms become your SyncBatchNorm, sharing their state",
          "[06_sync_batchnorm][task4][points:3]") {
  check_conversion(
      [](std::shared_ptr<nn::Module> m) { return par::convert_sync_batchnorm(std::move(m), &group()); },
      [](nn::Module& m) { return dynamic_cast<par::SyncBatchNorm*>(&m) != nullptr; });
}
