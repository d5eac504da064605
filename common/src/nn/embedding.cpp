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
#include "nn/embedding_kernels_cuda.h"
#endif

namespace mgpu::nn {
namespace {

/// The ids as i64 on the host (one read of the tensor's data).
std::vector<std::int64_t> ids_on_host(const Tensor& ids, const char* op) {
  check_defined(op, ids, "ids");
  MGPU_CHECK(ids.dtype() == DType::i64 || ids.dtype() == DType::i32, op, ": ids are ", ids.str(),
             "; they must be integers (i32 or i64)");
  return ids.to_vector<std::int64_t>();
}

/// Each id checked against [0, V): an id out of range is the classic bug of a wrong
/// vocabulary, and must never read another row's memory.
void check_rows(const std::vector<std::int64_t>& v, const Shape& shape, std::int64_t V,
                const char* op) {
  MGPU_CHECK(static_cast<std::int64_t>(v.size()) == shape_numel(shape), op, ": ", v.size(),
             " ids for the shape ", shape_str(shape));
  for (std::size_t n = 0; n < v.size(); ++n)
    MGPU_CHECK(v[n] >= 0 && v[n] < V, op, ": id ", v[n], " at position ", n,
               " is outside the table's rows [0, ", V, ") (is the vocabulary the model's?)");
}

Shape out_shape(const Shape& ids, std::int64_t C) {
  Shape s = ids;
  s.push_back(C);
  return s;
}

}  // namespace

Tensor embedding(const Tensor& ids, const Tensor& weight) {
  return embedding(ids_on_host(ids, "embedding"), ids.shape(), weight);
}

Tensor embedding(const std::vector<std::int64_t>& ids, const Shape& shape, const Tensor& weight) {
  check_defined("embedding", weight, "weight");
  MGPU_CHECK(weight.ndim() == 2, "embedding: weight is ", weight.str(), "; it must be [V, C]");
  const std::int64_t V = weight.size(0), C = weight.size(1);
  check_rows(ids, shape, V, "embedding");
  Tensor out = Tensor::empty(out_shape(shape, C), weight.dtype(), weight.device());
  if (ids.empty() || C == 0) return out;
  if (weight.device().is_cuda()) {
    const Tensor dev_ids = Tensor::from_vector(ids, {static_cast<std::int64_t>(ids.size())},
                                               weight.device());
    MGPU_IF_CUDA(detail::embedding_cuda(dev_ids, weight, out, C));
    return out;
  }
  const std::size_t row_bytes = static_cast<std::size_t>(C) * dtype_size(weight.dtype());
  const auto* w = static_cast<const unsigned char*>(weight.raw_data());
  auto* o = static_cast<unsigned char*>(out.raw_data());
  for (std::size_t n = 0; n < ids.size(); ++n)
    std::memcpy(o + n * row_bytes, w + static_cast<std::size_t>(ids[n]) * row_bytes, row_bytes);
  return out;
}

void embedding_backward_(Tensor& grad_weight, const Tensor& ids, const Tensor& grad_out) {
  embedding_backward_(grad_weight, ids_on_host(ids, "embedding_backward_"), ids.shape(), grad_out);
}

void embedding_backward_(Tensor& grad_weight, const std::vector<std::int64_t>& ids,
                         const Shape& shape, const Tensor& grad_out) {
  check_defined("embedding_backward_", grad_weight, "grad_weight");
  check_defined("embedding_backward_", grad_out, "grad_out");
  MGPU_CHECK(grad_weight.ndim() == 2, "embedding_backward_: grad_weight is ", grad_weight.str(),
             "; it must be [V, C]");
  const std::int64_t V = grad_weight.size(0), C = grad_weight.size(1);
  MGPU_CHECK(grad_out.shape() == out_shape(shape, C) && grad_out.dtype() == grad_weight.dtype() &&
                 grad_out.device() == grad_weight.device(),
             "embedding_backward_: grad_out is ", grad_out.str(), " but ids ", shape_str(shape),
             " and grad_weight ", grad_weight.str(), " need ", shape_str(out_shape(shape, C)),
             " in the weight's dtype on its device");
  check_rows(ids, shape, V, "embedding_backward_");
  if (ids.empty() || C == 0) return;
  if (grad_weight.device().is_cuda()) {
    MGPU_IF_CUDA(detail::embedding_backward_cuda(ids, grad_out, grad_weight, V, C));
    return;
  }
  mgpu::detail::dispatch_floating(grad_weight.dtype(), "embedding_backward_", [&](auto tag) {
    using T = decltype(tag);
    const T* g = grad_out.data<T>();
    T* gw = grad_weight.data<T>();
    // Columns are independent; each walks the positions in order (a fixed order of sums).
    mgpu::detail::parallel_for(0, C, 64, [&](std::int64_t c0, std::int64_t c1) {
      for (std::size_t n = 0; n < ids.size(); ++n)
        for (std::int64_t c = c0; c < c1; ++c) {
          T& dst = gw[ids[n] * C + c];
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

Tensor TokenTable::forward(const Tensor& ids) {
  // The ids come to the host once, for the range check; the backward reuses them.
  return lookup(ids_on_host(ids, describe().c_str()), ids.shape());
}

Tensor Embedding::lookup(std::vector<std::int64_t> ids, const Shape& shape) {
  Tensor out = embedding(ids, shape, weight().value);
  if (is_training()) saved_.push(describe(), {std::move(ids), shape});
  return out;
}

Tensor Embedding::backward(const Tensor& grad_out) {
  const Saved ids = saved_.pop(describe());
  Parameter& w = weight();
  if (w.requires_grad()) {
    embedding_backward_(w.grad, ids.rows, ids.shape, grad_out);
    w.notify_grad_ready();
  }
  return Tensor();
}

}  // namespace mgpu::nn
