/// @file tensor_parallel.h
/// @brief Tensor parallelism, as in "Megatron-LM: Training Multi-Billion Parameter Language
/// Models Using Model Parallelism" (Shoeybi et al., 2019). Lesson 11 defines the functions of
/// tasks 1-4 (lessons/11_tensor_parallel/: shard.cpp, conjugate.cpp, column_parallel.cpp,
/// row_parallel.cpp); the library compiles their reference (solutions/11_tensor_parallel/).
/// The Megatron MLP built from them is the library's (common/src/parallel/tp/parallel_mlp.cpp).
///
/// P ranks of a tensor-parallel group share every layer instead of each holding a copy:
///
///   column-parallel Linear: W [out, in] cut by rows (output features). Rank r computes
///     y_r = x W_r^T + b_r, its own columns of y. The input x is the same on every rank.
///     Forward: no communication. Backward: dx = sum over r of dy_r W_r: one all-reduce.
///   row-parallel Linear: W cut by columns (input features). Rank r holds x_r, its columns
///     of the input, and computes x_r W_r^T, a partial sum of y. Forward: one all-reduce,
///     then the bias, once. Backward: dx_r = dy W_r, no communication.
///
/// The Megatron MLP puts them together, column then row, so the activation between them
/// never travels:
///
///          x (every rank)                                      y (every rank)
///     --f--> [x W1_r^T + b1_r] --ReLU--> [h_r W2_r^T] --g--> (+ b2) -->
///          rank r: its slice of the hidden features, h_r
///
///   f: identity forward, all-reduce backward   (CopyToTensorParallelRegion)
///   g: all-reduce forward, identity backward   (ReduceFromTensorParallelRegion)
///
/// f and g are each other's conjugate: one all-reduce in the forward (g) and one in the
/// backward (f) per MLP block.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "mgpu/dist/process_group.h"
#include "mgpu/nn/layer.h"
#include "mgpu/nn/linear.h"
#include "mgpu/tensor.h"

namespace mgpu::parallel::tp {

// ---- Task 1: who holds what (shard.cpp) -------------------------------------------------------

/// Features [begin, end) of one shard.
struct ShardRange {
  std::int64_t begin = 0;  ///< first feature of the shard
  std::int64_t end = 0;    ///< one past the last
  /// Number of features in the shard.
  std::int64_t size() const { return end - begin; }
  /// Equal when both ends are.
  bool operator==(const ShardRange& o) const { return begin == o.begin && end == o.end; }
};

/// Shard `index` of `parts` over `total` features: as equal as possible, the first
/// total % parts shards one longer (torch.tensor_split's rule): 10 features over 3 ranks
/// -> [0, 4) [4, 7) [7, 10). Throws unless 1 <= parts <= total and 0 <= index < parts.
ShardRange shard_range(std::int64_t total, int parts, int index);

/// Where one rank sits in a grid of world = tp x dp ranks (2-D parallelism).
struct GridPosition {
  int tp_rank = 0;  ///< rank inside its tensor-parallel group: which shard it holds
  int dp_rank = 0;  ///< rank inside its data-parallel group: which part of the batch it reads
  std::vector<int> tp_group;  ///< world ranks of its tensor-parallel group, ascending
  std::vector<int> dp_group;  ///< world ranks of its data-parallel group, ascending
};

/// The grid Megatron-LM uses: tensor-parallel groups are blocks of `tp` consecutive world
/// ranks (consecutive ranks share a node, where the links are fast), data-parallel groups
/// take every tp-th rank. world 4, tp 2: rank 3 is tp_rank 1, dp_rank 1, tp_group {2, 3},
/// dp_group {1, 3}. Throws unless tp >= 1, world % tp == 0 and 0 <= rank < world.
GridPosition grid_position(int world, int tp, int rank);

// ---- Task 2: the conjugate operators f and g (conjugate.cpp) -----------------------------------

/// What f and g share: the group they sum over (the tensor-parallel group; it must outlive
/// the module), and nothing kept between forward and backward.
template <typename Self>
class TensorParallelRegion : public nn::Layer<Self> {
 public:
  /// The group the sum runs over.
  dist::ProcessGroup& group() const { return *group_; }

 protected:
  /// f or g over `group`.
  explicit TensorParallelRegion(dist::ProcessGroup& group) : group_(&group) {}

 private:
  dist::ProcessGroup* group_;
};

/// f of the Megatron-LM paper: forward passes x through unchanged (every rank already holds
/// it); backward sums the gradient over the group with one all-reduce, because each rank's
/// layer after f saw all of x and so produced only its share of d(loss)/dx.
class CopyToTensorParallelRegion : public TensorParallelRegion<CopyToTensorParallelRegion> {
 public:
  /// f over `group`.
  explicit CopyToTensorParallelRegion(dist::ProcessGroup& group) : TensorParallelRegion(group) {}
  /// x itself. No communication.
  Tensor forward(const Tensor& x) override;
  /// The sum of grad_out over the group's ranks: one all_reduce (may sum grad_out in place
  /// and return it).
  Tensor backward(const Tensor& grad_out) override;
  std::string describe() const override;
};

/// g of the Megatron-LM paper, f's conjugate: forward sums the ranks' partial results with
/// one all-reduce; backward passes the gradient through unchanged (the sum's derivative
/// with respect to each term is 1, and every rank already holds the whole gradient).
class ReduceFromTensorParallelRegion : public TensorParallelRegion<ReduceFromTensorParallelRegion> {
 public:
  /// g over `group`.
  explicit ReduceFromTensorParallelRegion(dist::ProcessGroup& group) : TensorParallelRegion(group) {}
  /// The sum of x over the group's ranks: one all_reduce (may sum x in place and return it).
  Tensor forward(const Tensor& x) override;
  /// grad_out itself. No communication.
  Tensor backward(const Tensor& grad_out) override;
  std::string describe() const override;
};

// ---- Task 3: the column-parallel Linear (column_parallel.cpp) ----------------------------------

/// A Linear over this rank's slice of the output features, with f in front: input [N, in]
/// (the same on every rank), output [N, out_r], this rank's columns of the full output.
/// Its parameters are named as the full layer's ("weight" [out_r, in], "bias" [out_r]).
class ColumnParallelLinear : public nn::Layer<ColumnParallelLinear, void, nn::Linear> {
 public:
  /// Cuts `full` for this rank: rows shard_range(out, P, r) of its weight and the same
  /// entries of its bias (copied; same device and dtype). P and r: group.size(), rank().
  ColumnParallelLinear(nn::Linear& full, dist::ProcessGroup& group);
  /// x [N, in] -> [N, out_r]: f, then the local Linear. No communication.
  Tensor forward(const Tensor& x) override;
  /// [N, out_r] -> dx [N, in], the whole gradient on every rank: the local Linear's
  /// backward, then f's (one all-reduce).
  Tensor backward(const Tensor& grad_out) override;
  std::string describe() const override;
  /// The output features this rank holds.
  ShardRange output_range() const { return range_; }
  /// The tensor-parallel group.
  dist::ProcessGroup& group() const { return f_->group(); }

 private:
  std::shared_ptr<CopyToTensorParallelRegion> f_;
  ShardRange range_;
  std::int64_t full_out_ = 0;
};

// ---- Task 4: the row-parallel Linear (row_parallel.cpp) -----------------------------------------

/// A Linear over this rank's slice of the input features, with g after it and the bias
/// added once, after the sum: input [N, in_r] (this rank's columns of the full input),
/// output [N, out], the whole output on every rank. Parameters "weight" [out, in_r] and
/// "bias" [out] (the bias whole on every rank: replicated, not split).
class RowParallelLinear : public nn::Layer<RowParallelLinear, void, nn::Linear> {
 public:
  /// Cuts `full` for this rank: columns shard_range(in, P, r) of its weight (copied) and
  /// its whole bias, if it has one. P and r: group.size(), group.rank().
  RowParallelLinear(nn::Linear& full, dist::ProcessGroup& group);
  /// x_r [N, in_r] -> [N, out]: the local Linear (no bias), g (one all-reduce), the bias.
  Tensor forward(const Tensor& x) override;
  /// [N, out] -> dx_r [N, in_r]: the bias's gradient, g's backward, the local Linear's
  /// backward. No communication.
  Tensor backward(const Tensor& grad_out) override;
  std::string describe() const override;
  /// True when the full layer had a bias (this layer then adds it after the sum).
  bool has_replicated_bias() const { return has_replicated_bias_; }
  /// The bias [out], the same on every rank; throws when the full layer had none.
  nn::Parameter& replicated_bias();
  /// The input features this rank holds.
  ShardRange input_range() const { return range_; }
  /// The tensor-parallel group.
  dist::ProcessGroup& group() const { return g_->group(); }

 private:
  std::shared_ptr<ReduceFromTensorParallelRegion> g_;
  ShardRange range_;
  std::int64_t full_in_ = 0;
  bool has_replicated_bias_ = false;
  std::size_t bias_ = 0;
};

// ---- The Megatron MLP and whole models (common/src/parallel/tp/parallel_mlp.cpp) ---------------

/// Rows [r.begin, r.end) of a 2-D tensor, copied (same device and dtype).
Tensor take_rows(const Tensor& t, ShardRange r);
/// Columns [r.begin, r.end) of a 2-D tensor, copied (same device and dtype).
Tensor take_columns(const Tensor& t, ShardRange r);

/// The tensor-parallel twin of `full`, a Sequential: every Linear, ReLU, Linear in a row
/// becomes ColumnParallelLinear, ReLU, RowParallelLinear (a Megatron MLP block); every
/// other layer is cloned (replicated: the same on every rank). The parameters keep the
/// full model's dotted names. With a group of one rank every block is the full layer.
std::shared_ptr<nn::Sequential> tensor_parallelize(nn::Sequential& full, dist::ProcessGroup& group);

/// Number of Megatron MLP blocks in a model made by tensor_parallelize.
int count_mlp_blocks(nn::Sequential& model);

/// Parameter elements one rank holds after tensor_parallelize(full, group of P) on rank
/// `tp_rank`, computed from the shapes alone (the formula the program checks memory
/// against): a column-parallel layer holds out_r x (in + 1), a row-parallel one
/// out x in_r + out, every other layer all of its parameters.
std::int64_t parameters_per_rank(nn::Sequential& full, int tp, int tp_rank);

}  // namespace mgpu::parallel::tp
