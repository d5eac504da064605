// Task 4: the row-parallel Linear. Rank r keeps columns in_r of W (its input features)
// and receives x_r, its columns of the input: x_r W_r^T is a partial sum of y, and the
// ranks meet in the forward, where g adds the partial sums up. The bias is whole on every
// rank and is added once, after the sum.
#include <sstream>

#include "mgpu/copy.h"
#include "mgpu/ops.h"
#include "mgpu/parallel/tp/tensor_parallel.h"

namespace mgpu::parallel::tp {
namespace {

// p.grad += contribution, then p's grad-ready hooks (DDP listens there): what every layer
// does with a gradient it has finished.
[[maybe_unused]]  // the exercise does not call it yet
void add_to_grad(nn::Parameter& p, const Tensor& contribution) {
  if (!p.requires_grad()) return;
  add_(p.grad, contribution.dtype() == p.grad.dtype() ? contribution : cast(contribution, p.grad.dtype()));
  p.notify_grad_ready();
}

}  // namespace

RowParallelLinear::RowParallelLinear(nn::Linear& full, dist::ProcessGroup& group)
    : Layer(shard_range(full.in_features(), group.size(), group.rank()).size(),
            full.out_features(), /*bias=*/false),
      g_(std::make_shared<ReduceFromTensorParallelRegion>(group)),
      range_(shard_range(full.in_features(), group.size(), group.rank())),
      full_in_(full.in_features()),
      has_replicated_bias_(full.has_bias()) {
  // The local Linear has no bias: added on every rank before the sum it would count P times.
  if (has_replicated_bias_) bias_ = register_parameter("bias", Tensor::zeros({full.out_features()}));
  to(full.dtype());
  to(full.device());
  // What you have: full (bias(), has_bias(), weight()); range_ (this rank's input
  // features); has_replicated_bias_, replicated_bias(), weight(). Functions: copy_(dst,
  // src); t.slice(begin, end) (rows, a view); take_columns(t, range), take_rows(t, range)
  // (copies).
  // TODO(task4) BEGIN: chapter §1's row cut: the weight holds the full weight's columns for
  // the input features range_ ([out, in_r]); the bias, when the full layer has one, is
  // whole and the same on every rank; both written into the tensors they already are.
  // Stuck: tools/hint 11 4 (about 3 lines).
  MGPU_FAIL("TODO(task4): RowParallelLinear's constructor is not written yet "
            "(lessons/11_tensor_parallel/row_parallel.cpp); columns [", range_.begin, ", ",
            range_.end, ") of ", full.describe());
  // TODO(task4) END
}

Tensor RowParallelLinear::forward(const Tensor& x) {
  // What you have: g_ (g: forward, backward); has_replicated_bias_, replicated_bias();
  // nn::Linear::forward(x) (the shard's Linear, built without a bias). Functions:
  // add_rowwise_(y, v) (v added to every row of y).
  // TODO(task4) BEGIN: chapter §1's row-parallel forward (§3's second layer): x_r [N, in_r],
  // this rank's columns of the input -> the whole y = x Wᵀ + b [N, out], the same on every
  // rank, with the bias counted once, not P times; one collective. Stuck: tools/hint 11 4
  // (about 4 lines).
  MGPU_FAIL("TODO(task4): RowParallelLinear::forward is not written yet "
            "(lessons/11_tensor_parallel/row_parallel.cpp); input ", x.str());
  // TODO(task4) END
}

Tensor RowParallelLinear::backward(const Tensor& grad_out) {
  // What you have: g_; has_replicated_bias_, replicated_bias(); nn::Linear::backward(dy)
  // (accumulates the weight's gradient and returns this rank's dx_r). Functions:
  // add_to_grad(p, contribution) (above: adds to p.grad and fires p's grad-ready hooks,
  // which DDP listens to); sum(t, dim).
  // TODO(task4) BEGIN: chapter §1's row-parallel backward: dy [N, out], whole on every
  // rank -> dx_r [N, in_r]; the weight's and the bias's gradients accumulated, the bias's
  // the same on every rank and announced to its hooks; no collective. Stuck:
  // tools/hint 11 4 (about 3 lines).
  MGPU_FAIL("TODO(task4): RowParallelLinear::backward is not written yet "
            "(lessons/11_tensor_parallel/row_parallel.cpp); gradient ", grad_out.str());
  // TODO(task4) END
}

// ---- given -----------------------------------------------------------------------------------

nn::Parameter& RowParallelLinear::replicated_bias() {
  MGPU_CHECK(has_replicated_bias_, describe(), ": the full layer had no bias");
  return parameter_at(bias_);
}

std::string RowParallelLinear::describe() const {
  std::ostringstream os;
  os << "RowParallelLinear(in=" << full_in_ << ", out=" << out_features() << ", rank "
     << group().rank() << " of " << group().size() << " holds inputs [" << range_.begin << ", "
     << range_.end << "), bias=" << (has_replicated_bias_ ? "true, added after the sum" : "false")
     << ")";
  return os.str();
}

}  // namespace mgpu::parallel::tp
