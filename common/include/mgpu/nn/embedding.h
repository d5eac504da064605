/// @file embedding.h
/// @brief A lookup table: token ids to rows of a learned matrix (PyTorch's nn.Embedding).
/// The transformer's token and position embeddings; its output head reuses the token
/// table (weight tying), so that table's gradient arrives from two places.
#pragma once

#include <cstdint>
#include <vector>

#include "mgpu/nn/layer.h"
#include "mgpu/tensor.h"

namespace mgpu::nn {

/// out[..., :] = weight[ids[...], :]: ids any shape, i32 or i64, each in [0, V) (checked on
/// the host: one read of the ids' data); weight [V, C]. Output [ids..., C] in weight's dtype
/// on weight's device.
Tensor embedding(const Tensor& ids, const Tensor& weight);
/// The same for ids already on the host, of shape `shape` (checked there; no read of
/// device data: on a GPU they are copied over once).
Tensor embedding(const std::vector<std::int64_t>& ids, const Shape& shape, const Tensor& weight);
/// grad_weight[ids[n], :] += grad_out[n, :] for every position n (grad_out [ids..., C]).
/// A row picked twice gets both contributions, added in a fixed order (position order on
/// the CPU; on CUDA each row's positions in order, in segments whose sums are added in
/// order), so results never depend on timing.
void embedding_backward_(Tensor& grad_weight, const Tensor& ids, const Tensor& grad_out);
/// The same for ids on the host, of shape `shape`.
void embedding_backward_(Tensor& grad_weight, const std::vector<std::int64_t>& ids,
                         const Shape& shape, const Tensor& grad_out);

namespace detail {
/// What an Embedding keeps of a training forward: its ids, on the host.
struct EmbeddingSaved {
  std::vector<std::int64_t> rows;
  Shape shape;
};
}  // namespace detail

/// A layer that looks tokens up in a table (Embedding, and lesson 13's table split by
/// vocabulary). Its ids are needed on the host (to check them against the table, and to
/// route them under a split), so besides forward(ids) it has lookup(): the same forward on
/// ids the host already holds (a batch read from a corpus), which reads no tensor data. A
/// model fed from the host calls lookup, and its step needs no read of the ids on a GPU.
class TokenTable : public Module {
 public:
  /// forward(ids) on ids of shape `shape` held on the host: checked there against the
  /// table, the output [shape..., C] on the table's device; in training mode the ids are kept
  /// for backward.
  virtual Tensor lookup(std::vector<std::int64_t> ids, const Shape& shape) = 0;
  /// ids (i32 or i64, any shape, any device) read to the host once, then lookup.
  Tensor forward(const Tensor& ids) override;
};

/// nn.Embedding(num_embeddings, embedding_dim): parameter "weight" [V, C], drawn from
/// N(0, 1) as PyTorch does. Input: ids (i32 or i64); output [ids..., C]. Keeps the ids (on
/// the host) for backward in training mode. The ids are integers, so backward returns no
/// input gradient.
class Embedding : public Layer<Embedding, detail::EmbeddingSaved, TokenTable> {
 public:
  /// A table of num_embeddings rows of embedding_dim values.
  Embedding(std::int64_t num_embeddings, std::int64_t embedding_dim);
  Tensor lookup(std::vector<std::int64_t> ids, const Shape& shape) override;
  /// Adds to the weight's gradient; returns an undefined tensor (ids have no gradient).
  Tensor backward(const Tensor& grad_out) override;
  std::string describe() const override;

  /// V, the rows of the table.
  std::int64_t num_embeddings() const { return rows_; }
  /// C, the values per row.
  std::int64_t embedding_dim() const { return dim_; }
  /// The table [V, C] ("weight").
  Parameter& weight() { return parameter_at(weight_); }

 private:
  using Saved = detail::EmbeddingSaved;
  std::int64_t rows_, dim_;
  std::size_t weight_ = 0;
};

}  // namespace mgpu::nn
