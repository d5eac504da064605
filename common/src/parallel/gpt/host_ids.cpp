// A batch of token ids on the host (see parallel_gpt_impl.h).
#include "parallel_gpt_impl.h"

namespace mgpu::parallel::gpt {

HostIds HostIds::read(const Tensor& ids) {
  MGPU_CHECK(ids.ndim() == 2 && (ids.dtype() == DType::i64 || ids.dtype() == DType::i32),
             "ParallelGpt: token ids ", ids.str(), " must be [B, T] integers (i32 or i64)");
  return {ids.to_vector<std::int64_t>(), ids.size(0), ids.size(1)};
}

HostIds HostIds::rows(std::int64_t b0, std::int64_t b1) const {
  MGPU_CHECK(0 <= b0 && b0 <= b1 && b1 <= B, "HostIds::rows(", b0, ", ", b1, ") of ", B);
  return {std::vector<std::int64_t>(values.begin() + b0 * T, values.begin() + b1 * T), b1 - b0, T};
}

HostIds HostIds::columns(const std::vector<std::int64_t>& cols) const {
  const auto n = static_cast<std::int64_t>(cols.size());
  HostIds out{std::vector<std::int64_t>(static_cast<std::size_t>(B * n)), B, n};
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t i = 0; i < n; ++i)
      out.values[static_cast<std::size_t>(b * n + i)] = values[static_cast<std::size_t>(b * T + cols[static_cast<std::size_t>(i)])];
  return out;
}

Tensor HostIds::on(const Device& device) const { return Tensor::from_vector(values, {B, T}, device); }

}  // namespace mgpu::parallel::gpt
