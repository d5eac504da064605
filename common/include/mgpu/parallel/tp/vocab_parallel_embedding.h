/// @file vocab_parallel_embedding.h
/// @brief The token table split by vocabulary rows over a tensor-parallel group (Megatron's
/// VocabParallelEmbedding), lesson 13's embedding; its head is the vocabulary-parallel
/// cross-entropy (tensor_parallel.h, task 2).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mgpu/dist/process_group.h"
#include "mgpu/nn/embedding.h"
#include "mgpu/nn/layer.h"
#include "mgpu/parallel/tp/tensor_parallel.h"
#include "mgpu/tensor.h"

namespace mgpu::parallel::tp {

namespace detail {
/// Where a forward's tokens go on this rank: each one's row of this rank's table (0 for a
/// token of another rank) and whether this rank owns it (1) or not (0), with their shape.
struct VocabRoutes {
  std::vector<std::int64_t> rows, owned;
  Shape shape;
};
}  // namespace detail

/// An embedding table split by vocabulary rows (Megatron's VocabParallelEmbedding): this
/// rank holds rows `rows` of the table padded to padded_vocab(V, P) rows (the padding rows
/// zero and never looked up), as parameter "weight" [V/P, C]. forward(ids [B, T]) looks up
/// the tokens in its rows, writes zeros for the others, and sums the ranks' results with one
/// all-reduce: [B, T, C], whole on every rank (ids on the host: the
/// loader's through lookup(), or read once by forward; a lookup and a mask: no copy per
/// token). backward(dy) adds dy's rows to the rows of the tokens it
/// owns, then fires the table's grad-ready hooks; no communication (dy is whole on every
/// rank) and no read of the ids. A head tied to the table (logits_r = h · weight^T, this rank's
/// columns of the logits) adds its share to weight.grad before this backward.
class VocabParallelEmbedding
    : public nn::Layer<VocabParallelEmbedding, detail::VocabRoutes, nn::TokenTable> {
 public:
  /// Cuts `full` (an nn::Embedding [V, C]) for rank group.rank() of group.size().
  VocabParallelEmbedding(nn::Module& full, dist::ProcessGroup& group);
  Tensor lookup(std::vector<std::int64_t> ids, const Shape& shape) override;
  Tensor backward(const Tensor& grad_out) override;
  std::string describe() const override;
  /// The rows [begin, end) of the padded vocabulary this rank holds.
  ShardRange rows() const { return rows_; }
  /// The unpadded vocabulary V.
  std::int64_t vocab() const { return vocab_; }

 private:
  using Routes = detail::VocabRoutes;
  // The routes on this rank of ids held on the host; their range checked.
  Routes routes(const std::vector<std::int64_t>& ids, const Shape& shape) const;
  // [ids..., C]: ones where this rank owns the token, zeros elsewhere.
  Tensor ownership(const Routes& r) const;

  dist::ProcessGroup* group_;
  ShardRange rows_;
  std::int64_t vocab_ = 0, dim_ = 0;
  Tensor zero_one_;  // [2, C] on the table's device and dtype: a row of zeros, a row of ones
};

}  // namespace mgpu::parallel::tp
