// Lesson 08, task 2 under mpirun (2 and 3 ranks): one skip decision for every rank.
// Each rank steps on its own, unreduced gradients (as inside no_sync, or with parameters
// that are not all-reduced); the last rank's gradients hold a NaN.
#include "mgpu/dist/dist.h"
#include "mp_test_util.h"

using namespace mptest;

namespace {

// Every rank's value of v, in rank order.
std::vector<double> gather(double v) {
  Tensor t = Tensor::zeros({group().size()}, DType::f64);
  t.data<double>()[group().rank()] = v;
  group().all_reduce(t, dist::ReduceOp::sum).wait();
  return t.to_vector<double>();
}

}  // namespace

TEST_CASE("task2: a NaN on one rank makes every rank skip, with the same scale after",
          "[08_mixed_precision][task2][points:3]") {
  Toy toy;
  amp::GradScaler scaler({}, &group());
  const auto before = toy.weights();
  scaler.scale(Tensor::full({}, 1.0));
  toy.set_grads(1.f);
  if (group().rank() == group().size() - 1) toy.layer->weight().grad.data<float>()[0] = kNaN;
  const bool stepped = scaler.step(*toy.sgd);
  scaler.update();
  CHECK_FALSE(stepped);
  CHECK(toy.weights() == before);
  for (double s : gather(scaler.get_scale())) CHECK(s == 32768.0);
  // The next, clean iteration steps everywhere.
  scaler.scale(Tensor::full({}, 1.0));
  toy.set_grads(1.f);
  CHECK(scaler.step(*toy.sgd));
  scaler.update();
  for (double t : gather(scaler.growth_tracker())) CHECK(t == 1.0);
}

TEST_CASE("task2: the agreement is one all-reduce MAX, also when every rank is clean",
          "[08_mixed_precision][task2][points:1]") {
  Toy toy;
  amp::GradScaler scaler({}, &group());
  for (int it = 0; it < 3; ++it) {
    scaler.scale(Tensor::full({}, 1.0));
    // Rank r overflows in iteration r only (iteration 2 is clean on 2 ranks).
    toy.set_grads(group().rank() == it ? kInf : 1.f);
    const bool stepped = scaler.step(*toy.sgd);
    scaler.update();
    const bool someone_overflowed = it < group().size();
    INFO("iteration " << it);
    CHECK(stepped == !someone_overflowed);
    for (double s : gather(stepped ? 1.0 : 0.0)) CHECK(s == (stepped ? 1.0 : 0.0));
  }
}
