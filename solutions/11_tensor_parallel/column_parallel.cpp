// Task 3: the column-parallel Linear. Rank r keeps rows out_r of W (its output features):
// y_r = x W_r^T + b_r is its own slice of the output and needs no communication. The
// input's gradient is where the ranks meet: each rank's dy_r W_r is one term of dx.
#include <sstream>

#include "mgpu/copy.h"
#include "mgpu/parallel/tp/tensor_parallel.h"

namespace mgpu::parallel::tp {

ColumnParallelLinear::ColumnParallelLinear(nn::Linear& full, dist::ProcessGroup& group)
    : Layer(full.in_features(),
            shard_range(full.out_features(), group.size(), group.rank()).size(),
            full.has_bias()),
      f_(std::make_shared<CopyToTensorParallelRegion>(group)),
      range_(shard_range(full.out_features(), group.size(), group.rank())),
      full_out_(full.out_features()) {
  to(full.dtype());
  to(full.device());
  // What you have: full (the unsplit Linear: bias(), has_bias(), weight()); range_ (this
  // rank's output features); this layer's bias(), has_bias(), weight(). Functions:
  // copy_(dst, src) (mgpu/copy.h); t.slice(begin, end) (rows, a view); take_columns(t,
  // range), take_rows(t, range) (copies).
  // TODO(task3) BEGIN: chapter §1's column cut: this layer's parameters hold the full
  // layer's values for the output features range_ (weight [out_r, in]; bias [out_r] when
  // there is one), written into the tensors they already are. Stuck: tools/hint 11 3
  // (about 3 lines).
  copy_(weight().value, take_rows(full.weight().value, range_));
  if (has_bias()) copy_(bias().value, full.bias().value.slice(range_.begin, range_.end));
  // TODO(task3) END
}

Tensor ColumnParallelLinear::forward(const Tensor& x) {
  // What you have: f_ (f: forward, backward); nn::Linear::forward(x) (the shard's own
  // Linear; in training it keeps x for its backward).
  // TODO(task3) BEGIN: chapter §1's column-parallel forward, with §2's f where the ranks
  // meet: x [N, in], the same on every rank -> y_r [N, out_r], this rank's columns of y;
  // no collective; one saved context per call, so that two forwards can be followed by
  // their two backwards. Stuck: tools/hint 11 3 (1 line).
  return nn::Linear::forward(f_->forward(x));
  // TODO(task3) END
}

Tensor ColumnParallelLinear::backward(const Tensor& grad_out) {
  // What you have: f_; nn::Linear::backward(dy) (accumulates the shard's weight and bias
  // gradients and returns this rank's term of dx).
  // TODO(task3) BEGIN: chapter §1's column-parallel backward: dy_r [N, out_r] -> the whole
  // dx [N, in] on every rank, this rank's parameter gradients accumulated; one collective.
  // Stuck: tools/hint 11 3 (1 line).
  return f_->backward(nn::Linear::backward(grad_out));
  // TODO(task3) END
}

// ---- given -----------------------------------------------------------------------------------

std::string ColumnParallelLinear::describe() const {
  std::ostringstream os;
  os << "ColumnParallelLinear(in=" << in_features() << ", out=" << full_out_ << ", rank "
     << group().rank() << " of " << group().size() << " holds outputs [" << range_.begin << ", "
     << range_.end << "), bias=" << (has_bias() ? "true" : "false") << ")";
  return os.str();
}

}  // namespace mgpu::parallel::tp
