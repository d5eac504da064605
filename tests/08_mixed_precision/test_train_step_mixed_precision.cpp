// Lesson 08, task 4: the mixed-precision training step. Its test binary links the
// reference's nn::Linear and GradScaler (your tasks 1-3 are not used here).
#include "mp_test_util.h"

using namespace mptest;

namespace {

amp::GradScaler& disabled() {
  static amp::GradScaler s([] {
    amp::GradScalerOptions o;
    o.enabled = false;
    return o;
  }());
  return s;
}

}  // namespace

TEST_CASE("task4: fp32 is a plain SGD step, bit for bit",
          "[08_mixed_precision][task4][points:1]") {
  auto a = small_mlp(nullptr), b = small_mlp(nullptr);
  optim::SGD sa(a->parameters(), {0.1}), sb(b->parameters(), {0.1});
  nn::CrossEntropyLoss la, lb;
  Tensor x, y;
  batch_of(*synthetic(data::Split::train, 64), 0, 16, x, y);
  fill_(a->parameters()[0]->grad, 9.0);  // stale gradients: the step must zero them
  const amp::StepResult r = amp::train_step(*a, la, sa, disabled(), x, y, amp::Precision::fp32);
  sb.zero_grad();
  const double loss = lb.forward(b->forward(x), y).item();
  b->backward(lb.backward());
  sb.step();
  CHECK(r.loss == loss);
  CHECK(r.stepped);
  CHECK(r.scale == 1.0);
  for (std::size_t i = 0; i < a->parameters().size(); ++i)
    CHECK(a->parameters()[i]->value.to_vector<float>() == b->parameters()[i]->value.to_vector<float>());
}

TEST_CASE("task4: fp16: the forward in a region, the loss outside, the backward scaled",
          "[08_mixed_precision][task4][points:2]") {
  auto a = small_mlp(nullptr), b = small_mlp(nullptr);
  optim::SGD sa(a->parameters(), {0.1}), sb(b->parameters(), {0.1});
  amp::GradScaler scaler;
  nn::CrossEntropyLoss la, lb;
  Tensor x, y;
  batch_of(*synthetic(data::Split::train, 64), 0, 16, x, y);
  const amp::StepResult r = amp::train_step(*a, la, sa, scaler, x, y, amp::Precision::fp16);
  // The reference: the same six steps written out.
  sb.zero_grad();
  Tensor logits;
  {
    amp::Autocast region(DType::f16);
    logits = b->forward(x);
  }
  const double loss = lb.forward(logits, y).item();
  b->backward(scale(lb.backward(), 65536.0));
  for (nn::Parameter* p : b->parameters()) scale_(p->grad, 1.0 / 65536.0);
  sb.step();
  CHECK(r.loss == loss);
  REQUIRE(r.logits.defined());
  CHECK(r.logits.to_vector<float>() == logits.to_vector<float>());
  CHECK(r.stepped);
  CHECK(r.scale == 65536.0);
  CHECK(scaler.growth_tracker() == 1);  // update() ran
  for (std::size_t i = 0; i < a->parameters().size(); ++i)
    CHECK(a->parameters()[i]->value.to_vector<float>() == b->parameters()[i]->value.to_vector<float>());
}

TEST_CASE("task4: an fp16 overflow skips the step, keeps the weights, halves the scale",
          "[08_mixed_precision][task4][points:2]") {
  auto model = small_mlp(nullptr);
  optim::SGD sgd(model->parameters(), {0.1});
  amp::GradScaler scaler;
  nn::CrossEntropyLoss loss;
  Tensor x, y;
  batch_of(*synthetic(data::Split::train, 64), 0, 16, x, y);
  std::vector<std::vector<float>> before;
  for (nn::Parameter* p : model->parameters()) before.push_back(p->value.to_vector<float>());
  // Inputs beyond fp16's 65504 become inf when the GEMM casts them: the step must not run.
  const Tensor huge = scale(x, 1e6);
  const amp::StepResult r = amp::train_step(*model, loss, sgd, scaler, huge, y, amp::Precision::fp16);
  CHECK_FALSE(r.stepped);
  CHECK(r.scale == 32768.0);
  for (std::size_t i = 0; i < before.size(); ++i)
    CHECK(model->parameters()[i]->value.to_vector<float>() == before[i]);
  // The same batch in bf16 (fp32's range) is finite and steps.
  amp::GradScaler bf16_scaler([] {
    amp::GradScalerOptions o;
    o.enabled = false;
    return o;
  }());
  const amp::StepResult rb = amp::train_step(*model, loss, sgd, bf16_scaler, huge, y, amp::Precision::bf16);
  CHECK(rb.stepped);
  CHECK(std::isfinite(rb.loss));
}

TEST_CASE("task4: bf16 and fp16 with GradScaler train within 0.01 loss and 2 points of fp32",
          "[08_mixed_precision][task4][points:2]") {
  amp::GradScalerOptions off;
  off.enabled = false;
  amp::GradScaler s32(off), s16bf(off), s16;
  auto m32 = small_mlp(nullptr), mbf = small_mlp(nullptr), m16 = small_mlp(nullptr);
  const RunResult r32 = train_small_mlp(*m32, s32, amp::Precision::fp32, 2, amp::train_step);
  const RunResult rbf = train_small_mlp(*mbf, s16bf, amp::Precision::bf16, 2, amp::train_step);
  const RunResult r16 = train_small_mlp(*m16, s16, amp::Precision::fp16, 2, amp::train_step);
  INFO("fp32: loss " << r32.last_loss << " acc " << r32.test_acc << "; bf16: loss "
       << rbf.last_loss << " acc " << rbf.test_acc << "; fp16: loss " << r16.last_loss
       << " acc " << r16.test_acc << " skipped " << r16.skipped);
  CHECK(r32.test_acc > 0.5);  // the task is learnable: the comparison means something
  CHECK(std::fabs(rbf.last_loss - r32.last_loss) < 0.01);
  CHECK(std::fabs(r16.last_loss - r32.last_loss) < 0.01);
  CHECK(std::fabs(rbf.test_acc - r32.test_acc) < 0.02);
  CHECK(std::fabs(r16.test_acc - r32.test_acc) < 0.02);
  CHECK(r16.skipped == 0);  // 2^16 is small enough for these gradients
}

TEST_CASE("task4: on a GPU the fp16 and bf16 steps match the CPU's",
          "[08_mixed_precision][task4][points:1][gpu]") {
  const Device gpu = Device::cuda(0);
  for (amp::Precision p : {amp::Precision::fp16, amp::Precision::bf16}) {
    INFO(amp::precision_name(p));
    auto cpu_model = small_mlp(nullptr);
    auto gpu_model = cpu_model->clone();
    gpu_model->to(gpu);
    optim::SGD sc(cpu_model->parameters(), {0.1}), sg(gpu_model->parameters(), {0.1});
    amp::GradScalerOptions o;
    o.enabled = p == amp::Precision::fp16;
    amp::GradScaler scaler_cpu(o), scaler_gpu(o);
    nn::CrossEntropyLoss lc, lg;
    Tensor x, y;
    batch_of(*synthetic(data::Split::train, 64), 0, 32, x, y);
    for (int step = 0; step < 3; ++step) {
      const auto rc = amp::train_step(*cpu_model, lc, sc, scaler_cpu, x, y, p);
      const auto rg = amp::train_step(*gpu_model, lg, sg, scaler_gpu, x.to(gpu), y.to(gpu), p);
      CHECK(rg.stepped == rc.stepped);
      CHECK(rg.scale == rc.scale);
      CHECK(rg.loss == Approx(rc.loss).epsilon(1e-4));
    }
    auto pc = cpu_model->parameters(), pg = gpu_model->parameters();
    for (std::size_t i = 0; i < pc.size(); ++i) {
      const auto a = pc[i]->value.to_vector<float>();
      const auto b = pg[i]->value.to(Device::cpu()).to_vector<float>();
      for (std::size_t j = 0; j < a.size(); ++j) CHECK(b[j] == Approx(a[j]).margin(1e-4));
    }
  }
}
