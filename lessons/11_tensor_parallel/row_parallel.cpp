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
    : nn::Linear(shard_range(full.in_features(), group.size(), group.rank()).size(),
                 full.out_features(), /*bias=*/false),
      g_(std::make_shared<ReduceFromTensorParallelRegion>(group)),
      range_(shard_range(full.in_features(), group.size(), group.rank())),
      full_in_(full.in_features()),
      has_replicated_bias_(full.has_bias()) {
  // The local Linear has no bias: added on every rank before the sum it would count P times.
  if (has_replicated_bias_) bias_ = register_parameter("bias", Tensor::zeros({full.out_features()}));
  to(full.dtype());
  to(full.device());
  // TODO(task4) BEGIN: copy this rank's columns of the full weight (take_columns with
  // range_) into weight().value, and the whole full bias into replicated_bias().value when
  // there is one (about 3 lines).
  MGPU_FAIL("TODO(task4): RowParallelLinear's constructor is not written yet "
            "(lessons/11_tensor_parallel/row_parallel.cpp); columns [", range_.begin, ", ",
            range_.end, ") of ", full.describe());
  // TODO(task4) END
}

Tensor RowParallelLinear::forward(const Tensor& x) {
  // TODO(task4) BEGIN: the local Linear (nn::Linear::forward) gives this rank's partial sum
  // x_r W_r^T; g sums the partial sums over the group; then add the bias to the sum, once
  // (add_rowwise_), when there is one (about 4 lines).
  MGPU_FAIL("TODO(task4): RowParallelLinear::forward is not written yet "
            "(lessons/11_tensor_parallel/row_parallel.cpp); input ", x.str());
  // TODO(task4) END
}

Tensor RowParallelLinear::backward(const Tensor& grad_out) {
  // TODO(task4) BEGIN: the bias's gradient is grad_out summed over its rows (sum(t, 0)),
  // the same on every rank: add it with add_to_grad. Then, in reverse order of the
  // forward, g's backward and the local Linear's backward give dx_r (about 3 lines).
  MGPU_FAIL("TODO(task4): RowParallelLinear::backward is not written yet "
            "(lessons/11_tensor_parallel/row_parallel.cpp); gradient ", grad_out.str());
  // TODO(task4) END
}

// ---- given -----------------------------------------------------------------------------------

nn::Parameter& RowParallelLinear::replicated_bias() {
  MGPU_CHECK(has_replicated_bias_, describe(), ": the full layer had no bias");
  return parameter_at(bias_);
}

std::shared_ptr<nn::Module> RowParallelLinear::clone() const {
  auto copy = std::shared_ptr<RowParallelLinear>(new RowParallelLinear(*this));
  copy->clear_saved();
  return copy;
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
