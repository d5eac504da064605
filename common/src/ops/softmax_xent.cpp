// softmax_cross_entropy and its backward: the CPU loops and the dispatch to
// softmax_xent.cu. For row r with logits x and label y:
//   loss_r = -log softmax(x)_y = log(sum_c exp(x_c - m)) + m - x_y,  with m = max_c x_c.
// Subtracting m first makes every exponent <= 0: nothing overflows, whatever the logits.
#include <algorithm>
#include <cmath>
#include <limits>

#include "dispatch.h"
#include "mgpu/ops.h"
#include "op_checks.h"
#include "ops_cuda.h"

namespace mgpu {
namespace {

// Checks labels against logits/probs [N, C]: defined, same device, integer, shape [N].
void check_labels(const char* op, const char* name, const Tensor& scores, const Tensor& labels) {
  detail::check_floating(op, name, scores);
  detail::check_defined_operand(op, "labels", labels);
  MGPU_CHECK(scores.ndim() == 2, op, ": ", name, " must be 2-D [N, C], got ", scores.str());
  MGPU_CHECK(scores.device() == labels.device(), op, ": device mismatch: ", name, " is ",
             scores.str(), ", labels is ", labels.str());
  MGPU_CHECK(labels.dtype() == DType::i32 || labels.dtype() == DType::i64, op,
             ": labels must be i32 or i64, got labels ", labels.str(), " for ", name, " ",
             scores.str());
  MGPU_CHECK(labels.ndim() == 1 && labels.size(0) == scores.size(0), op, ": labels ",
             labels.str(), " must be [N] for ", name, " ", scores.str());
}

// Label of row r as int64 (i32 or i64 storage), checked against [0, classes).
std::int64_t label_at(const char* op, const Tensor& labels, std::int64_t r, std::int64_t classes) {
  const std::int64_t y = labels.dtype() == DType::i32 ? labels.data<std::int32_t>()[r]
                                                      : labels.data<std::int64_t>()[r];
  MGPU_CHECK(y >= 0 && y < classes, op, ": label ", y, " at row ", r, " is outside [0, ",
             classes, ") for labels ", labels.str());
  return y;
}

}  // namespace

Tensor softmax_cross_entropy(const Tensor& logits, const Tensor& labels, Tensor* probs,
                             LabelCheck check) {
  const char* op = "softmax_cross_entropy";
  check_labels(op, "logits", logits, labels);
  const std::int64_t rows = logits.size(0), classes = logits.size(1);
  if (probs) *probs = Tensor::empty(logits.shape(), logits.dtype(), logits.device());
  const DType loss_dtype = detail::accumulate_dtype(logits.dtype());

  if (logits.device().is_cuda()) {
    if (rows == 0) {
      Tensor loss = Tensor::empty({}, loss_dtype, logits.device());
      fill_(loss, std::numeric_limits<double>::quiet_NaN());  // mean over no rows
      return loss;
    }
    // Per-row losses from one fused kernel, then their mean with the reduction kernels.
    Tensor row_loss = Tensor::empty({rows}, loss_dtype, logits.device());
    MGPU_IF_CUDA(detail::softmax_xent_rows_cuda(row_loss, probs, logits, labels, check == LabelCheck::here));
    return mean(row_loss);
  }

  Tensor loss = Tensor::empty({}, loss_dtype, logits.device());
  detail::dispatch_floating(logits.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    using A = detail::compute_t<T>;  // float, or double for f64
    const T* px = logits.data<T>();
    double total = 0;
    for (std::int64_t r = 0; r < rows; ++r) {
      const std::int64_t y = label_at(op, labels, r, classes);
      const T* row = px + r * classes;
      // Step 1) the row's maximum. Step 2) sum of exp(x - max). Step 3) the loss.
      A m = -std::numeric_limits<A>::infinity();
      for (std::int64_t c = 0; c < classes; ++c) m = std::max<A>(m, detail::to_compute(row[c]));
      A s = 0;
      for (std::int64_t c = 0; c < classes; ++c) s += std::exp(detail::to_compute(row[c]) - m);
      total += std::log(s) + m - detail::to_compute(row[y]);
      // Step 4) optionally, the probabilities the backward pass needs.
      if (probs) {
        T* pp = probs->data<T>() + r * classes;
        for (std::int64_t c = 0; c < classes; ++c)
          pp[c] = detail::from_compute<T>(std::exp(detail::to_compute(row[c]) - m) / s);
      }
    }
    const double mean_loss = total / static_cast<double>(rows);  // NaN for zero rows
    if (loss_dtype == DType::f64) {
      *loss.data<double>() = mean_loss;
    } else {
      *loss.data<float>() = static_cast<float>(mean_loss);
    }
  });
  return loss;
}

Tensor softmax_cross_entropy_backward(const Tensor& probs, const Tensor& labels,
                                      double grad_scale) {
  const char* op = "softmax_cross_entropy_backward";
  check_labels(op, "probs", probs, labels);
  const std::int64_t rows = probs.size(0), classes = probs.size(1);
  Tensor grad = Tensor::empty(probs.shape(), probs.dtype(), probs.device());
  if (grad.numel() == 0) {
    // No elements to write, but labels of an [N, 0] problem are all out of range.
    if (rows > 0 && probs.device().is_cpu()) label_at(op, labels, 0, classes);
    return grad;
  }
  // d(mean loss)/d(x_rc) = (p_rc - [c == y_r]) / N, times the caller's scale.
  const double scale = grad_scale / static_cast<double>(rows);
  if (probs.device().is_cuda()) {
    // The labels were validated by the forward pass on the GPU (checking them again here
    // would cost a host-device synchronization per step).
    MGPU_IF_CUDA(detail::softmax_xent_backward_cuda(grad, probs, labels, scale));
    return grad;
  }
  detail::dispatch_floating(probs.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    using A = detail::compute_t<T>;
    const A s = static_cast<A>(scale);
    const T* pp = probs.data<T>();
    T* pg = grad.data<T>();
    for (std::int64_t r = 0; r < rows; ++r) {
      const std::int64_t y = label_at(op, labels, r, classes);
      for (std::int64_t c = 0; c < classes; ++c) {
        const A onehot = c == y ? A(1) : A(0);
        pg[r * classes + c] = detail::from_compute<T>((detail::to_compute(pp[r * classes + c]) - onehot) * s);
      }
    }
  });
  return grad;
}

}  // namespace mgpu
