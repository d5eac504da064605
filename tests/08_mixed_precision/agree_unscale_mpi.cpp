// Lesson 08's reference unscale_ against amp::GradScaler's across ranks (2 and 3), on the
// graded scripts: every rank agrees on one skip decision, and both copies agree with each
// other after every call. Not graded (agreement_mpi_tests in lessons/meson.build).
#include "agree_scalers.h"
#include "mgpu/dist/dist.h"

using namespace mptest;

namespace {

/// Every gradient 1, and a `bad` value in the weight gradient on rank `rank` only (none
/// for rank -1: a clean iteration).
auto gradients_with(float bad, int rank) {
  return [=](amp::GradScaler&, Toy& t) {
    t.set_grads(1.f);
    if (group().rank() == rank) t.layer->weight().grad.data<float>()[0] = bad;
    return std::string();
  };
}

}  // namespace

TEST_CASE("agreement: unscale_ across ranks, reference and library",
          "[08_mixed_precision][agreement]") {
  SECTION("a NaN on the last rank, then a clean iteration") {
    UnscalePair p({}, &group());
    for (const auto& grads : {gradients_with(kNaN, group().size() - 1), gradients_with(0.f, -1)}) {
      p.both("scale", scale_one);
      p.both("gradients", grads);
      p.both("step", step);
      p.both("update", update);
    }
  }
  SECTION("rank r overflows in iteration r, and an iteration clean everywhere") {
    UnscalePair p({}, &group());
    for (int it = 0; it < 4; ++it) {
      CAPTURE(it);
      p.both("scale", scale_one);
      p.both("gradients", gradients_with(kInf, it));
      p.both("unscale_", unscale);
      p.both("step", step);
      p.both("update", update);
    }
  }
}
