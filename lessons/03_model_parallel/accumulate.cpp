// Task 3: micro-batches, and the loss scaling that makes their accumulated gradients equal
// the gradient of the whole batch.
#include "pipeline.h"

#include "mgpu/ops.h"

namespace mgpu::lesson03 {

std::vector<std::int64_t> micro_batch_sizes(std::int64_t batch, int num_micro) {
  MGPU_CHECK(num_micro >= 1, "micro_batch_sizes: need at least one micro-batch, got ", num_micro);
  MGPU_CHECK(batch >= num_micro, "micro_batch_sizes: ", num_micro, " micro-batches need at least ",
             num_micro, " rows, the batch has ", batch, "; use fewer micro-batches (--micro) or a "
             "larger batch");
  std::vector<std::int64_t> sizes;
  // What you have: integer division and remainder; sizes.push_back.
  // TODO(task3) BEGIN: M sizes that add up to batch and differ by at most one row, the larger
  // ones first (chapter §4). Stuck: tools/hint 03 3 (about 3 lines).
  MGPU_FAIL("TODO(task3): micro_batch_sizes is not written yet (lessons/03_model_parallel/accumulate.cpp)");
  // TODO(task3) END
  return sizes;
}

MicroLoss micro_batch_loss(const Tensor& logits, const Tensor& labels, std::int64_t batch_rows) {
  check_defined("micro_batch_loss", logits, "logits");
  MGPU_CHECK(logits.ndim() == 2 && logits.size(0) >= 1 && logits.size(0) <= batch_rows,
             "micro_batch_loss: logits ", logits.str(), " must be [rows, classes] with 1 <= rows <= ",
             batch_rows, " (the rows of the whole batch)");
  MicroLoss out;
  // What you have: batch_rows (the whole batch's rows), logits.size(0) (this micro-batch's);
  // softmax_cross_entropy(logits, labels, &probs) -> the mean loss (0-d), the probabilities
  // kept in probs; softmax_cross_entropy_backward(probs, labels, scale) -> the gradient of
  // scale × that mean with respect to the logits; Tensor::item().
  // TODO(task3) BEGIN: this micro-batch's share of the whole batch's mean loss (a double,
  // out.weighted_loss) and its gradient with respect to the logits (out.grad, [rows,
  // classes]) (chapter §4): summed over the micro-batches they must give exactly the batch's
  // mean loss and gradient, whatever the micro-batch sizes. Stuck: tools/hint 03 3 (about 5
  // lines).
  (void)labels;
  (void)batch_rows;
  MGPU_FAIL("TODO(task3): micro_batch_loss is not written yet (lessons/03_model_parallel/accumulate.cpp)");
  // TODO(task3) END
  return out;
}

}  // namespace mgpu::lesson03
