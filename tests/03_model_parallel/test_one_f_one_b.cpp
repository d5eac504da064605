// Task 4: the 1F1B order of each stage, and the runner executing it: the gradients of the
// full batch with at most K - k micro-batches' saved contexts alive on stage k.
#include <sstream>

#include "model_parallel_test_util.h"

using namespace lesson03_test;

namespace {

std::string text(const std::vector<l03::PipeOp>& ops) {
  std::ostringstream os;
  for (std::size_t i = 0; i < ops.size(); ++i)
    os << (i ? " " : "") << (ops[i].pass == l03::Pass::forward ? "F" : "B") << ops[i].micro;
  return os.str();
}

}  // namespace

TEST_CASE("task4: 1F1B order, K = 4 and M = 6, stage by stage", "[03_model_parallel][task4][points:3]") {
  CHECK(text(l03::one_f_one_b_order(4, 6, 0)) == "F0 F1 F2 F3 B0 F4 B1 F5 B2 B3 B4 B5");
  CHECK(text(l03::one_f_one_b_order(4, 6, 1)) == "F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 B4 B5");
  CHECK(text(l03::one_f_one_b_order(4, 6, 2)) == "F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 B5");
  CHECK(text(l03::one_f_one_b_order(4, 6, 3)) == "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5");
}

TEST_CASE("task4: 1F1B order with fewer micro-batches than stages, and with one stage",
          "[03_model_parallel][task4][points:2]") {
  CHECK(text(l03::one_f_one_b_order(4, 2, 0)) == "F0 F1 B0 B1");
  CHECK(text(l03::one_f_one_b_order(4, 2, 2)) == "F0 F1 B0 B1");
  CHECK(text(l03::one_f_one_b_order(4, 2, 3)) == "F0 B0 F1 B1");
  CHECK(text(l03::one_f_one_b_order(1, 3, 0)) == "F0 B0 F1 B1 F2 B2");
  CHECK(text(l03::one_f_one_b_order(3, 1, 0)) == "F0 B0");
}

TEST_CASE("task4: 1F1B is as short as GPipe and holds min(K - k, M) micro-batches on stage k",
          "[03_model_parallel][task4][points:2]") {
  for (int K = 1; K <= 5; ++K) {
    for (int M = 1; M <= 10; ++M) {
      INFO("K = " << K << ", M = " << M);
      const l03::Schedule s = l03::one_f_one_b_schedule(K, M);
      CHECK_NOTHROW(l03::check_schedule(s));
      CHECK(s.ticks.size() == static_cast<std::size_t>(2 * (M + K - 1)));
      CHECK(s.idle_fraction() == Approx(static_cast<double>(K - 1) / (M + K - 1)));
      for (int k = 0; k < K; ++k) CHECK(l03::max_in_flight(s, k) == std::min(K - k, M));
    }
  }
}

TEST_CASE("task4: the runner runs 1F1B: full-batch gradients, at most K - k live contexts on stage k",
          "[03_model_parallel][task4][points:3]") {
  const int K = 4;
  for (int M : {4, 8}) {
    INFO("M = " << M);
    auto model = small_model(600 + M);
    auto reference = model->clone();
    const Tensor x = random_tensor({16, 5}, 90), labels = random_labels(16, 4, 91);
    const double want = full_batch_step(*reference, x, labels);
    l03::Pipeline pipe(l03::split_model(*model, boundaries_for(K), cpus(K)));
    const l03::StepStats stats = pipe.train_step(x, labels, l03::one_f_one_b_schedule(K, M));
    CHECK(stats.loss == Approx(want).epsilon(1e-12));
    check_same_grads(*model, *reference, 1e-12);
    REQUIRE(stats.peak_live_contexts.size() == static_cast<std::size_t>(K));
    for (int k = 0; k < K; ++k) {
      INFO("stage " << k);
      CHECK(stats.peak_live_contexts[k] >= 1);
      CHECK(stats.peak_live_contexts[k] <= K - k);
    }
    for (const auto& layer : pipe.stages()[0].layers) CHECK(layer->saved_forwards() == 0);
  }
}

TEST_CASE("one_f_one_b_order refuses a stage outside the pipeline", "[03_model_parallel]") {
  CHECK(contains(error_of([] { l03::one_f_one_b_order(4, 8, 4); }), "0 <= stage < K"));
  CHECK(contains(error_of([] { l03::one_f_one_b_order(0, 8, 0); }), "K >= 1"));
}
