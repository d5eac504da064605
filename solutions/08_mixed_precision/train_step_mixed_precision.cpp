// Lesson 08, task 4: one mixed-precision training step (amp::train_step, declared in
// mgpu/amp/train_step.h).
#include "mgpu/amp/all.h"
#include "mgpu/amp/train_step.h"

namespace mgpu::amp {

Precision parse_precision(const std::string& name) {
  if (name == "fp32") return Precision::fp32;
  if (name == "bf16") return Precision::bf16;
  if (name == "fp16") return Precision::fp16;
  MGPU_FAIL("unknown precision '", name, "': choose fp32, bf16 or fp16");
}

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::fp32: return "fp32";
    case Precision::bf16: return "bf16";
    case Precision::fp16: return "fp16";
  }
  return "?";
}

StepResult train_step(nn::Module& model, nn::CrossEntropyLoss& loss_fn,
                      optim::Optimizer& optimizer, GradScaler& scaler, const Tensor& x,
                      const Tensor& y, Precision precision) {
  StepResult result;
  // What you have: amp::Autocast region(dtype) (the region lasts while the object lives);
  // loss_fn: backward() (d loss / d logits), forward(logits, y) (the mean loss, a {}
  // tensor); model: backward(g), forward(x); optimizer: step(), zero_grad(); scaler:
  // get_scale(), scale(t), step(optimizer) (false when it skipped), unscale_(optimizer),
  // update(); t.item(); result (StepResult: logits, loss, scale, stepped).
  // TODO(task4) BEGIN: one iteration of chapter §4 at `precision` (§6, task 4). Afterwards
  // the optimizer has stepped once on this batch's gradients alone, unscaled, unless an inf
  // or NaN was found (then the weights are unchanged), and the scale has followed §4's
  // rule. Only the forward runs in an autocast region, of the precision's 16-bit dtype
  // (fp32: no region); the loss and everything after it run outside; the backward starts
  // from the scaled gradient of the loss. result: the unscaled mean loss, whether the
  // optimizer stepped, the scale after the rule, the logits. Stuck: tools/hint 08 4
  // (about 12 lines).
  // Step 1) fresh gradients.
  optimizer.zero_grad();
  // Step 2) the forward's GEMMs in 16 bits, on the f32 master weights.
  Tensor logits;
  if (precision == Precision::fp32) {
    logits = model.forward(x);
  } else {
    amp::Autocast region(precision == Precision::bf16 ? DType::bf16 : DType::f16);
    logits = model.forward(x);
  }
  // Step 3) the loss in f32.
  result.loss = loss_fn.forward(logits, y).item();
  result.logits = logits;
  // Step 4) backward of scale * loss: the gradient that starts backward, scaled.
  model.backward(scaler.scale(loss_fn.backward()));
  // Step 5) unscale, check, step unless an inf/NaN was found.
  result.stepped = scaler.step(optimizer);
  // Step 6) adapt the scale for the next step.
  scaler.update();
  result.scale = scaler.get_scale();
  // TODO(task4) END
  return result;
}

}  // namespace mgpu::amp
