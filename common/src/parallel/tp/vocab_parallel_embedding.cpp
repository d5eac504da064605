// The token table split by vocabulary rows (see vocab_parallel_embedding.h).
#include "mgpu/parallel/tp/vocab_parallel_embedding.h"

#include <algorithm>
#include <sstream>

#include "mgpu/copy.h"
#include "mgpu/nn/embedding.h"
#include "mgpu/ops.h"
#include "mgpu/parallel/tp/parallel_block.h"  // padded_vocab (lesson 13)

namespace mgpu::parallel::tp {

VocabParallelEmbedding::VocabParallelEmbedding(nn::Module& full, dist::ProcessGroup& group)
    : group_(&group) {
  const Tensor& table = full.parameter("weight").value;
  MGPU_CHECK(table.ndim() == 2, "VocabParallelEmbedding: the table is ", table.str());
  vocab_ = table.size(0);
  dim_ = table.size(1);
  rows_ = shard_range(padded_vocab(vocab_, group.size()), group.size(), group.rank());
  Tensor mine = Tensor::zeros({rows_.size(), dim_}, table.dtype(), table.device());
  const std::int64_t real_end = std::min(rows_.end, vocab_);
  if (real_end > rows_.begin) {
    Tensor dst = mine.slice(0, real_end - rows_.begin);
    copy_(dst, table.slice(rows_.begin, real_end));
  }
  register_parameter("weight", mine);
}

std::string VocabParallelEmbedding::describe() const {
  std::ostringstream os;
  os << "VocabParallelEmbedding(vocabulary " << vocab_ << ", rows [" << rows_.begin << ", "
     << rows_.end << "), dim " << dim_ << ")";
  return os.str();
}

VocabParallelEmbedding::Routes VocabParallelEmbedding::routes(const std::vector<std::int64_t>& tokens,
                                                              const Shape& shape) const {
  MGPU_CHECK(static_cast<std::int64_t>(tokens.size()) == shape_numel(shape), describe(), ": ",
             tokens.size(), " ids for the shape ", shape_str(shape));
  Routes r;
  r.shape = shape;
  r.rows.resize(tokens.size());
  r.owned.resize(tokens.size());
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    const std::int64_t t = tokens[i];
    MGPU_CHECK(t >= 0 && t < vocab_, describe(), ": token ", t, " outside the vocabulary");
    const bool mine = t >= rows_.begin && t < rows_.end;
    r.rows[i] = mine ? t - rows_.begin : 0;  // another rank's token: any row, masked out
    r.owned[i] = mine ? 1 : 0;
  }
  return r;
}

Tensor VocabParallelEmbedding::ownership(const Routes& r) const {
  return nn::embedding(r.owned, r.shape, zero_one_);
}

Tensor VocabParallelEmbedding::lookup(std::vector<std::int64_t> ids, const Shape& shape) {
  const Tensor& table = parameter_at(0).value;
  if (!zero_one_.defined() || zero_one_.dtype() != table.dtype() || zero_one_.device() != table.device()) {
    Tensor z = Tensor::zeros({2, dim_}, table.dtype(), table.device());
    Tensor ones = z.slice(1, 2);
    fill_(ones, 1.0);
    zero_one_ = z;
  }
  Routes r = routes(ids, shape);
  // This rank's rows where it owns the token, zeros elsewhere (x · 1 and x · 0 exactly).
  Tensor out = mul(nn::embedding(r.rows, r.shape, table), ownership(r));
  group_->all_reduce(out, dist::ReduceOp::sum).wait();  // exactly one rank wrote each row
  if (is_training()) saved_.push(describe(), std::move(r));
  return out;
}

Tensor VocabParallelEmbedding::backward(const Tensor& grad_out) {
  const Routes r = saved_.pop(describe());
  nn::Parameter& w = parameter_at(0);
  // The rows of the tokens it owns; another rank's tokens add zeros (to row 0).
  nn::embedding_backward_(w.grad, r.rows, r.shape, mul(grad_out, ownership(r)));
  w.notify_grad_ready();  // final for this backward (a tied head adds first)
  return Tensor();  // ids have no gradient
}

}  // namespace mgpu::parallel::tp
