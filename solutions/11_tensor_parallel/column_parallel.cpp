// Task 3: the column-parallel Linear. Rank r keeps rows out_r of W (its output features):
// y_r = x W_r^T + b_r is its own slice of the output and needs no communication. The
// input's gradient is where the ranks meet: each rank's dy_r W_r is one term of dx.
#include <sstream>

#include "mgpu/copy.h"
#include "mgpu/parallel/tp/tensor_parallel.h"

namespace mgpu::parallel::tp {

ColumnParallelLinear::ColumnParallelLinear(nn::Linear& full, dist::ProcessGroup& group)
    : nn::Linear(full.in_features(),
                 shard_range(full.out_features(), group.size(), group.rank()).size(),
                 full.has_bias()),
      f_(std::make_shared<CopyToTensorParallelRegion>(group)),
      range_(shard_range(full.out_features(), group.size(), group.rank())),
      full_out_(full.out_features()) {
  to(full.dtype());
  to(full.device());
  // TODO(task3) BEGIN: copy this rank's rows of the full weight (take_rows with range_)
  // into weight().value, and entries range_ of the full bias into bias().value when the
  // layer has one (copy_ from mgpu/copy.h; about 3 lines).
  copy_(weight().value, take_rows(full.weight().value, range_));
  if (has_bias()) copy_(bias().value, full.bias().value.slice(range_.begin, range_.end));
  // TODO(task3) END
}

Tensor ColumnParallelLinear::forward(const Tensor& x) {
  // TODO(task3) BEGIN: f, then the local Linear (nn::Linear::forward) on f's output
  // (1 line).
  return nn::Linear::forward(f_->forward(x));
  // TODO(task3) END
}

Tensor ColumnParallelLinear::backward(const Tensor& grad_out) {
  // TODO(task3) BEGIN: the reverse order: the local Linear's backward (it adds this
  // rank's weight and bias gradients and returns its term of dx), then f's backward,
  // which sums the terms (1 line).
  return f_->backward(nn::Linear::backward(grad_out));
  // TODO(task3) END
}

// ---- given -----------------------------------------------------------------------------------

std::shared_ptr<nn::Module> ColumnParallelLinear::clone() const {
  auto copy = std::shared_ptr<ColumnParallelLinear>(new ColumnParallelLinear(*this));
  copy->clear_saved();
  return copy;
}

std::string ColumnParallelLinear::describe() const {
  std::ostringstream os;
  os << "ColumnParallelLinear(in=" << in_features() << ", out=" << full_out_ << ", rank "
     << group().rank() << " of " << group().size() << " holds outputs [" << range_.begin << ", "
     << range_.end << "), bias=" << (has_bias() ? "true" : "false") << ")";
  return os.str();
}

}  // namespace mgpu::parallel::tp
