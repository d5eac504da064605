// Embedding: the lookup and its gradient (CPU loops here, CUDA in transformer_kernels.cu)
// and the module.
#include "mgpu/nn/embedding.h"

#include <cstring>
#include <sstream>
#include <vector>

#include "dispatch.h"
#include "layer_util.h"
#include "mgpu/ops.h"
#include "mgpu/nn/init.h"
#include "parallel_for.h"
#ifdef MGPU_WITH_CUDA
#include "nn/transformer_kernels_cuda.h"
#endif

namespace mgpu::nn {
namespace {

/// The ids as i64 on the host, each checked against [0, V): an id out of range is the
/// classic bug of a wrong vocabulary, and must never read another row's memory.
std::vector<std::int64_t> checked_ids(const Tensor& ids, std::int64_t V, const char* op) {
  MGPU_CHECK(ids.dtype() == DType::i64 || ids.dtype() == DType::i32, op, ": ids are ", ids.str(),
             "; they must be integers (i32 or i64)");
  const std::vector<std::int64_t> v = ids.to_vector<std::int64_t>();
  for (std::size_t n = 0; n < v.size(); ++n)
    MGPU_CHECK(v[n] >= 0 && v[n] < V, op, ": id ", v[n], " at position ", n,
               " is outside the table's rows [0, ", V, ") (is the vocabulary the model's?)");
  return v;
}

Shape out_shape(const Tensor& ids, std::int64_t C) {
  Shape s = ids.shape();
  s.push_back(C);
  return s;
}

}  // namespace

Tensor embedding(const Tensor& ids, const Tensor& weight) {
  check_defined("embedding", ids, "ids");
  check_defined("embedding", weight, "weight");
  MGPU_CHECK(weight.ndim() == 2, "embedding: weight is ", weight.str(), "; it must be [V, C]");
  const std::int64_t V = weight.size(0), C = weight.size(1);
  const std::vector<std::int64_t> rows = checked_ids(ids, V, "embedding");
  Tensor out = Tensor::empty(out_shape(ids, C), weight.dtype(), weight.device());
  if (rows.empty() || C == 0) return out;
  if (weight.device().is_cuda()) {
    const Tensor dev_ids = Tensor::from_vector(rows, {static_cast<std::int64_t>(rows.size())},
                                               weight.device());
    MGPU_IF_CUDA(detail::embedding_cuda(dev_ids, weight, out, C));
    return out;
  }
  const std::size_t row_bytes = static_cast<std::size_t>(C) * dtype_size(weight.dtype());
  const auto* w = static_cast<const unsigned char*>(weight.raw_data());
  auto* o = static_cast<unsigned char*>(out.raw_data());
  for (std::size_t n = 0; n < rows.size(); ++n)
    std::memcpy(o + n * row_bytes, w + static_cast<std::size_t>(rows[n]) * row_bytes, row_bytes);
  return out;
}

void embedding_backward_(Tensor& grad_weight, const Tensor& ids, const Tensor& grad_out) {
  check_defined("embedding_backward_", grad_weight, "grad_weight");
  check_defined("embedding_backward_", grad_out, "grad_out");
  MGPU_CHECK(grad_weight.ndim() == 2, "embedding_backward_: grad_weight is ", grad_weight.str(),
             "; it must be [V, C]");
  const std::int64_t V = grad_weight.size(0), C = grad_weight.size(1);
  MGPU_CHECK(grad_out.shape() == out_shape(ids, C) && grad_out.dtype() == grad_weight.dtype() &&
                 grad_out.device() == grad_weight.device(),
             "embedding_backward_: grad_out is ", grad_out.str(), " but ids ", ids.str(),
             " and grad_weight ", grad_weight.str(), " need ", shape_str(out_shape(ids, C)),
             " in the weight's dtype on its device");
  const std::vector<std::int64_t> rows = checked_ids(ids, V, "embedding_backward_");
  if (rows.empty() || C == 0) return;
  if (grad_weight.device().is_cuda()) {
    MGPU_IF_CUDA(detail::embedding_backward_cuda(rows, grad_out, grad_weight, V, C));
    return;
  }
  mgpu::detail::dispatch_floating(grad_weight.dtype(), "embedding_backward_", [&](auto tag) {
    using T = decltype(tag);
    const T* g = grad_out.data<T>();
    T* gw = grad_weight.data<T>();
    // Columns are independent; each walks the positions in order (a fixed order of sums).
    mgpu::detail::parallel_for(0, C, 64, [&](std::int64_t c0, std::int64_t c1) {
      for (std::size_t n = 0; n < rows.size(); ++n)
        for (std::int64_t c = c0; c < c1; ++c) {
          T& dst = gw[rows[n] * C + c];
          dst = mgpu::detail::from_compute<T>(mgpu::detail::to_compute(dst) +
                                              mgpu::detail::to_compute(g[static_cast<std::int64_t>(n) * C + c]));
        }
    });
  });
}

// ---- the module ------------------------------------------------------------------------------

Embedding::Embedding(std::int64_t num_embeddings, std::int64_t embedding_dim)
    : rows_(num_embeddings), dim_(embedding_dim) {
  MGPU_CHECK(rows_ > 0 && dim_ > 0, "Embedding(", rows_, ", ", dim_,
             "): both sizes must be positive");
  Tensor w = Tensor::empty({rows_, dim_});
  normal_(w, next_seed(), 0.0, 1.0);
  weight_ = register_parameter("weight", w);
}

std::string Embedding::describe() const {
  std::ostringstream os;
  os << "Embedding(" << rows_ << ", " << dim_ << ")";
  return os.str();
}

Tensor Embedding::forward(const Tensor& ids) {
  if (is_training()) saved_.push(describe(), ids);
  return embedding(ids, weight().value);
}

Tensor Embedding::backward(const Tensor& grad_out) {
  const Tensor ids = saved_.pop(describe());
  Parameter& w = weight();
  if (w.requires_grad()) {
    embedding_backward_(w.grad, ids, grad_out);
    w.notify_grad_ready();
  }
  return Tensor();
}

}  // namespace mgpu::nn
