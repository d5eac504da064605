// Lesson 03, task 3 and everything together: micro-batches, loss scaling, and the pipeline
// whose accumulated gradients equal the full-batch gradients.
#include "model_parallel_test_util.h"

#include <cmath>

#include "gpu.h"
#include "mgpu/ops.h"
#include "mgpu/stream.h"

using namespace lesson03_test;
using Sizes = std::vector<std::int64_t>;

TEST_CASE("task3: micro-batch sizes differ by at most one row", "[03_model_parallel][task3][points:2]") {
  CHECK(l03::micro_batch_sizes(10, 4) == Sizes{3, 3, 2, 2});
  CHECK(l03::micro_batch_sizes(8, 8) == Sizes(8, 1));
  CHECK(l03::micro_batch_sizes(12, 5) == Sizes{3, 3, 2, 2, 2});
  CHECK(l03::micro_batch_sizes(7, 1) == Sizes{7});
  CHECK(contains(error_of([] { l03::micro_batch_sizes(3, 4); }), "micro-batches"));
}

TEST_CASE("task3: micro-batch losses are weighted by their share of the batch", "[03_model_parallel][task3][points:3]") {
  // 10 rows in micro-batches of 3, 3, 2, 2: with 1/M instead of rows/B the sum is wrong.
  const Tensor logits = random_tensor({10, 4}, 1), labels = random_labels(10, 4, 2);
  Tensor probs;
  const double full = mgpu::softmax_cross_entropy(logits, labels, &probs).item();
  const Tensor full_grad = mgpu::softmax_cross_entropy_backward(probs, labels);
  double sum = 0;
  std::int64_t row = 0;
  for (std::int64_t n : {3, 3, 2, 2}) {
    const l03::MicroLoss ml = l03::micro_batch_loss(logits.slice(row, row + n), labels.slice(row, row + n), 10);
    sum += ml.weighted_loss;
    REQUIRE(ml.grad.shape() == Shape{n, 4});
    CHECK(max_rel_diff(ml.grad, full_grad.slice(row, row + n)) < 1e-14);
    row += n;
  }
  CHECK(sum == Approx(full).epsilon(1e-12));
}

TEST_CASE("task3: pipeline gradients equal the full-batch gradients, K = 2..4, M = 1..8",
          "[03_model_parallel][task3][points:5]") {
  const std::int64_t batch = 12;  // M = 5, 7, 8 give uneven micro-batches
  for (int K = 2; K <= 4; ++K) {
    for (int M = 1; M <= 8; ++M) {
      INFO("K = " << K << ", M = " << M);
      auto model = small_model(100);
      auto reference = model->clone();
      const Tensor x = random_tensor({batch, 5}, static_cast<unsigned>(10 * K + M));
      const Tensor labels = random_labels(batch, 4, static_cast<unsigned>(10 * K + M));
      const double want = full_batch_step(*reference, x, labels);
      // Gradients left over from before the step must not leak into it.
      for (nn::Parameter* p : model->parameters()) mgpu::fill_(p->grad, 7.0);

      l03::Pipeline pipe(l03::split_model(*model, boundaries_for(K), cpus(K)));
      const l03::StepStats stats = pipe.train_step(x, labels, l03::gpipe_schedule(K, M));
      CHECK(stats.loss == Approx(want).epsilon(1e-12));
      check_same_grads(*model, *reference, 1e-12);
      CHECK(stats.ops.size() == static_cast<std::size_t>(2 * K * M));
    }
  }
}

TEST_CASE("task3: two pipeline steps with SGD follow the single-device run", "[03_model_parallel][task3][points:2]") {
  auto model = small_model(200);
  auto reference = model->clone();
  l03::Pipeline pipe(l03::split_model(*model, boundaries_for(3), cpus(3)));
  for (int step = 0; step < 2; ++step) {
    const Tensor x = random_tensor({8, 5}, 30u + static_cast<unsigned>(step));
    const Tensor labels = random_labels(8, 4, 40u + static_cast<unsigned>(step));
    full_batch_step(*reference, x, labels);
    pipe.train_step(x, labels, l03::gpipe_schedule(3, 4));
    const auto mine = model->parameters(), theirs = reference->parameters();
    for (std::size_t j = 0; j < mine.size(); ++j) {  // plain SGD, each on its own device
      mgpu::axpy_(mine[j]->value, -0.1, mine[j]->grad);
      mgpu::axpy_(theirs[j]->value, -0.1, theirs[j]->grad);
    }
  }
  const Tensor x = random_tensor({5, 5}, 50);
  model->eval();
  reference->eval();
  CHECK(max_rel_diff(pipe.forward(x), reference->forward(x)) < 1e-12);
}

TEST_CASE("task2: the measured step: every op once, busy + idle = span on every stage",
          "[03_model_parallel][task2][points:2]") {
  auto model = small_model(300);
  l03::Pipeline pipe(l03::split_model(*model, boundaries_for(4), cpus(4)));
  const l03::StepStats stats = pipe.train_step(random_tensor({16, 5}, 60), random_labels(16, 4, 61),
                                               l03::gpipe_schedule(4, 8));
  REQUIRE(stats.busy_us.size() == 4);
  CHECK(stats.ops.size() == 64);
  for (int k = 0; k < 4; ++k) {
    CHECK(stats.busy_us[k] > 0);
    // Timings of this run: not an equality of results (the grader compares those with the
    // reference's), a sum held to Approx's relative tolerance.
    CHECK(std::fabs(stats.busy_us[k] + stats.idle_us[k] - stats.span_us) <= 1.2e-5 * stats.span_us);
  }
  CHECK(stats.bubble_fraction() >= 0);
  CHECK(stats.bubble_fraction() < 1);
  // Data dependencies hold in wall time too: F3 on stage 2 starts after it ended on stage 1.
  auto find = [&](int stage, l03::Pass kind, int m) {
    for (const auto& t : stats.ops)
      if (t.stage == stage && t.op.pass == kind && t.op.micro == m) return t;
    FAIL("op not found");
    return l03::OpTiming{};
  };
  CHECK(find(2, l03::Pass::forward, 3).start_us >= find(1, l03::Pass::forward, 3).end_us);
  CHECK(find(1, l03::Pass::backward, 5).start_us >= find(2, l03::Pass::backward, 5).end_us);
  const std::string timeline = l03::draw_timeline(stats, 4, 40);
  CHECK(std::count(timeline.begin(), timeline.end(), '\n') == 4);
}

TEST_CASE("the naive schedule gives the same gradients with one live context per stage", "[03_model_parallel]") {
  auto model = small_model(400);
  auto reference = model->clone();
  const Tensor x = random_tensor({6, 5}, 70), labels = random_labels(6, 4, 71);
  full_batch_step(*reference, x, labels);
  l03::Pipeline pipe(l03::split_model(*model, boundaries_for(2), cpus(2)));
  const l03::StepStats stats = pipe.train_step(x, labels, l03::naive_schedule(2, 3));
  check_same_grads(*model, *reference, 1e-12);
  CHECK(stats.peak_live_contexts == std::vector<int>{1, 1});
}

TEST_CASE("task3: GPipe on cuda:0,cuda:1 matches the full batch on the CPU",
          "[03_model_parallel][task3][points:3][gpu]") {
  auto model = small_model(500);
  auto reference = model->clone();
  const Tensor x = random_tensor({10, 5}, 80), labels = random_labels(10, 4, 81);
  const double want = full_batch_step(*reference, x, labels);
  l03::Pipeline pipe(l03::split_model(*model, boundaries_for(2), {Device::cuda(0), Device::cuda(1)}));
  const l03::StepStats stats = pipe.train_step(x, labels, l03::gpipe_schedule(2, 4));
  CHECK(stats.loss == Approx(want).epsilon(1e-10));
  CHECK(model->parameter("0.weight").grad.device() == Device::cuda(0));
  CHECK(model->parameter("6.weight").grad.device() == Device::cuda(1));
  check_same_grads(*model, *reference, 1e-10);
}

TEST_CASE("50 pipeline steps on cuda:0,cuda:1 create cuBLAS handles per stage, not per step",
          "[03_model_parallel][gpu]") {
  // The runner starts one thread per stage every step; each borrows a cuBLAS handle from the
  // library's pool and gives it back when it ends (one handle per thread ever: 100 here).
  auto model = small_model(510);
  const Tensor x = random_tensor({10, 5}, 82), labels = random_labels(10, 4, 83);
  l03::Pipeline pipe(l03::split_model(*model, boundaries_for(2), {Device::cuda(0), Device::cuda(1)}));
  const std::size_t before = mgpu::cublas_handles_created();
  for (int step = 0; step < 50; ++step) pipe.train_step(x, labels, l03::gpipe_schedule(2, 4));
  const std::size_t created = mgpu::cublas_handles_created() - before;
  INFO("cuBLAS handles created over 50 steps: " << created);
  CHECK(created <= 2);  // at most one per stage thread alive at once
}
