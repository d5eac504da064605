// The skip decision across ranks (run under mpirun with 2 and 3 ranks): when DDP's
// averaging already makes every rank see the same inf/NaN, and when only the scaler's
// explicit agreement (an all-reduce MAX of found_inf) keeps the replicas identical.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <memory>
#include <vector>

#include "groups.h"
#include "mgpu/amp/all.h"
#include "mgpu/dist/dist.h"
#include "mgpu/nn/all.h"
#include "mgpu/ops.h"
#include "mgpu/optim/sgd.h"
#include "mgpu/parallel/ddp/ddp.h"
#include "reference_models.h"

using namespace mgpu;

namespace {

using testing::group;

int rank() { return group().rank(); }
int last_rank() { return group().size() - 1; }

// The same small MLP on every rank (same seed), 6 -> 8 -> 3.
std::shared_ptr<nn::Sequential> make_mlp() { return testing::mlp({6, 8, 3}, 21); }

// This rank's batch: 4 rows, different on every rank.
void batch(Tensor& x, Tensor& y) {
  x = Tensor::empty({4, 6});
  uniform_(x, 100 + static_cast<std::uint64_t>(rank()), -1.0, 1.0);
  y = Tensor::from_vector(std::vector<std::int64_t>{0, 1, 2, 1}, {4});
}

// Forward, loss, and the scaled backward; rank `poison` puts a NaN into the gradient that
// starts backward (as an overflow in its forward would).
void scaled_backward(nn::Module& model, amp::GradScaler& scaler, int poison) {
  Tensor x, y;
  batch(x, y);
  nn::CrossEntropyLoss loss;
  {
    amp::Autocast region(DType::f16);
    loss.forward(model.forward(x), y);
  }
  Tensor g = scaler.scale(loss.backward());
  if (rank() == poison) g.data<float>()[0] = std::numeric_limits<float>::quiet_NaN();
  model.backward(g);
}

// Every rank's value of `v`, gathered (a vector of size ranks).
std::vector<double> gather(double v) {
  Tensor t = Tensor::zeros({group().size()}, DType::f64);
  t.data<double>()[rank()] = v;
  group().all_reduce(t, dist::ReduceOp::sum).wait();
  return t.to_vector<double>();
}

// A fingerprint of the weights: the same on every rank while the replicas agree.
double checksum(nn::Module& m) {
  double s = 0;
  for (nn::Parameter* p : m.parameters())
    for (double v : p->value.to_vector<double>()) s = s * 1.000001 + v;
  return s;
}

bool same_everywhere(double v) {
  for (double x : gather(v))
    if (x != v) return false;
  return true;
}

}  // namespace

TEST_CASE("DDP's averaging spreads one rank's NaN: every rank skips without agreeing",
          "[amp][mpi]") {
  auto model = make_mlp();
  parallel::DistributedDataParallel ddp(model, group());
  optim::SGD sgd(ddp.parameters(), optim::SGDOptions{0.1});
  amp::GradScaler scaler;  // no process group: each rank decides alone
  const double before = checksum(ddp);
  scaled_backward(ddp, scaler, /*poison=*/last_rank());
  const bool stepped = scaler.step(sgd);
  scaler.update();
  // NaN + anything = NaN: after the all-reduce every rank holds the same NaN gradients.
  CHECK_FALSE(stepped);
  CHECK(same_everywhere(stepped ? 1 : 0));
  CHECK(checksum(ddp) == before);
  CHECK(scaler.get_scale() == 32768.0);
}

TEST_CASE("no_sync then a synchronized backward: the sum is reduced, so ranks still agree",
          "[amp][mpi]") {
  auto model = make_mlp();
  parallel::DistributedDataParallel ddp(model, group());
  optim::SGD sgd(ddp.parameters(), optim::SGDOptions{0.1});
  amp::GradScaler scaler;
  {
    auto guard = ddp.no_sync();
    scaled_backward(ddp, scaler, /*poison=*/0);  // the NaN stays on rank 0 for now
  }
  scaled_backward(ddp, scaler, /*poison=*/-1);  // this backward reduces both micro-batches
  const bool stepped = scaler.step(sgd);
  scaler.update();
  CHECK_FALSE(stepped);
  CHECK(same_everywhere(stepped ? 1 : 0));
}

TEST_CASE("unreduced gradients: ranks disagree unless the scaler agrees across them",
          "[amp][mpi]") {
  // Each rank steps on its own gradients (no DDP, as with sharded or model-parallel
  // parameters, or a step taken inside no_sync). One rank overflows.
  SECTION("without agreement the replicas drift apart") {
    auto model = make_mlp();
    optim::SGD sgd(model->parameters(), optim::SGDOptions{0.1});
    amp::GradScaler scaler;
    scaled_backward(*model, scaler, last_rank());
    const bool stepped = scaler.step(sgd);
    scaler.update();
    CHECK(stepped == (rank() != last_rank()));  // only the overflowing rank skipped...
    // ...and its scale halved while the others' did not.
    CHECK(scaler.get_scale() == (rank() == last_rank() ? 32768.0 : 65536.0));
  }
  SECTION("with agreement every rank skips and keeps the same scale") {
    auto model = make_mlp();
    optim::SGD sgd(model->parameters(), optim::SGDOptions{0.1});
    amp::GradScaler scaler({}, &group());
    const double before = checksum(*model);
    scaled_backward(*model, scaler, last_rank());
    const bool stepped = scaler.step(sgd);
    scaler.update();
    CHECK_FALSE(stepped);
    CHECK(checksum(*model) == before);
    CHECK(same_everywhere(scaler.get_scale()));
    CHECK(scaler.get_scale() == 32768.0);
    // A clean iteration afterwards steps on every rank.
    model->zero_grad();
    scaled_backward(*model, scaler, -1);
    CHECK(scaler.step(sgd));
    scaler.update();
    CHECK(scaler.growth_tracker() == 1);
  }
}
