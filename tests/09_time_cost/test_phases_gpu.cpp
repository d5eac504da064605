// Lesson 09, task 2 on a GPU: the GPU twin of "a step's phases from its timestamps". The
// timestamps come from a real training step on CUDA, marked by the lesson's PhaseClock
// (CUDA timing events on the compute stream, as the program marks its steps); your
// step_phases must take them apart as it takes apart the made-up ones on the CPU.
// Skipped where no GPU is visible.
#include <catch2/catch.hpp>

#include <cstdint>
#include <memory>
#include <vector>

#include "mgpu/nn/all.h"
#include "mgpu/ops.h"
#include "mgpu/optim/sgd.h"
#include "mgpu/perf/time_cost.h"
#include "step_timing.h"

using namespace mgpu;
using namespace mgpu::lesson09;  // the program's phase clock (step_timing.h)
using namespace mgpu::perf;

TEST_CASE("task2: a step's phases from the CUDA event timestamps of a real step",
          "[09_time_cost][task2][points:1][gpu]") {
  const Device gpu = Device::cuda(0);
  PhaseClock clock(gpu);
  // The program's layout: a marker before and after the model, marking backward's ends.
  nn::manual_seed(9);
  auto model = std::make_shared<nn::Sequential>();
  model->add(std::make_shared<ClockMarker>(clock, Mark::count, Mark::backward_end));
  model->add(std::make_shared<nn::Linear>(64, 256));
  model->add(std::make_shared<nn::ReLU>());
  model->add(std::make_shared<nn::Linear>(256, 10));
  model->add(std::make_shared<ClockMarker>(clock, Mark::count, Mark::backward_begin));
  model->to(gpu);
  optim::SGD opt(model->parameters(), {0.1});
  nn::CrossEntropyLoss loss_fn;
  Tensor x = Tensor::empty({128, 64});
  normal_(x, 5);
  std::vector<std::int64_t> labels;
  for (std::int64_t i = 0; i < 128; ++i) labels.push_back(i % 10);
  const Tensor y = Tensor::from_vector(labels, {128});

  StepRecord r;
  for (int step = 0; step < 3; ++step) {  // the last one is taken apart; the first warms up
    clock.begin_step();
    clock.mark(Mark::data_ready);
    const Tensor xd = x.to(gpu), yd = y.to(gpu);
    clock.mark(Mark::on_device);
    opt.zero_grad();
    loss_fn.forward(model->forward(xd), yd);
    clock.mark(Mark::forward_end);
    model->backward(loss_fn.backward());
    clock.mark(Mark::reduced);
    opt.step();
    clock.mark(Mark::optimizer_end);
    clock.end_step();
  }
  // The intervals as the program's measure_step makes them (one process: no buckets).
  r.step = clock.between(Mark::step_begin, Mark::optimizer_end);
  r.data_wait = clock.between(Mark::step_begin, Mark::data_ready);
  r.h2d = clock.between(Mark::data_ready, Mark::on_device);
  r.forward = clock.between(Mark::on_device, Mark::forward_end);
  r.backward = clock.between(Mark::backward_begin, Mark::backward_end);
  r.optimizer = clock.between(Mark::reduced, Mark::optimizer_end);
  INFO("step " << r.step.length() * 1e3 << " ms: h2d " << r.h2d.length() * 1e3 << ", forward "
       << r.forward.length() * 1e3 << ", backward " << r.backward.length() * 1e3 << ", optimizer "
       << r.optimizer.length() * 1e3 << " ms");
  REQUIRE(r.forward.length() > 0);   // the events did time the work
  REQUIRE(r.backward.length() > 0);

  const Phases p = step_phases(r);
  CHECK(p.data_wait == Approx(r.data_wait.length()).margin(1e-9));
  CHECK(p.h2d == Approx(r.h2d.length()).margin(1e-9));
  CHECK(p.forward == Approx(r.forward.length()).margin(1e-9));
  CHECK(p.backward == Approx(r.backward.length()).margin(1e-9));
  CHECK(p.exposed_comm == 0);
  CHECK(p.optimizer == Approx(r.optimizer.length()).margin(1e-9));
  CHECK(p.other >= 0);
  CHECK(p.total() == Approx(r.step.length()).margin(1e-9));
}
