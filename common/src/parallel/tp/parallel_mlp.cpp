// Cutting weights, and a whole model made tensor-parallel from the layers lesson 11 writes.
// Every Linear, ReLU, Linear in a row becomes a Megatron MLP block: ColumnParallelLinear,
// ReLU, RowParallelLinear. The block's input and output are whole on every rank; only the
// hidden activation between its two layers is split.
#include <string>
#include <typeinfo>

#include "mgpu/copy.h"
#include "mgpu/nn/activation.h"
#include "mgpu/parallel/tp/tensor_parallel.h"

namespace mgpu::parallel::tp {
namespace {

bool is_plain(const std::shared_ptr<nn::Module>& m, const std::type_info& type) {
  return m && typeid(*m) == type;
}

// Layers i, i+1, i+2 of `model` are Linear, ReLU, Linear: a block to split.
bool starts_mlp_block(nn::Sequential& model, std::size_t i) {
  return i + 2 < model.size() && is_plain(model.at(i), typeid(nn::Linear)) &&
         is_plain(model.at(i + 1), typeid(nn::ReLU)) && is_plain(model.at(i + 2), typeid(nn::Linear));
}

void check_2d(const char* what, const Tensor& t, ShardRange r, std::int64_t limit) {
  MGPU_CHECK(t.ndim() == 2, what, ": expected a matrix, got ", t.str());
  MGPU_CHECK(r.begin >= 0 && r.begin <= r.end && r.end <= limit, what, ": range [", r.begin,
             ", ", r.end, ") does not fit ", t.str());
}

}  // namespace

Tensor take_rows(const Tensor& t, ShardRange r) {
  check_2d("take_rows", t, r, t.ndim() == 2 ? t.size(0) : 0);
  return t.slice(r.begin, r.end).clone();  // rows are contiguous: one copy
}

Tensor take_columns(const Tensor& t, ShardRange r) {
  check_2d("take_columns", t, r, t.ndim() == 2 ? t.size(1) : 0);
  const std::int64_t rows = t.size(0), cols = t.size(1), width = r.size();
  Tensor out = Tensor::empty({rows, width}, t.dtype(), t.device());
  // Row i of the shard is elements [i * cols + begin, i * cols + end) of t: one copy per row.
  for (std::int64_t i = 0; i < rows; ++i) {
    Tensor dst = out.view(i * width, {width});
    copy_(dst, t.view(i * cols + r.begin, {width}));
  }
  return out;
}

std::shared_ptr<nn::Sequential> tensor_parallelize(nn::Sequential& full, dist::ProcessGroup& group) {
  // A copy of the whole model (replicated layers: the same on every rank), whose blocks
  // are then swapped for their shards; replace_child keeps the full model's names.
  auto model = std::static_pointer_cast<nn::Sequential>(full.clone());
  for (std::size_t i = 0; i < full.size();) {
    if (!starts_mlp_block(full, i)) {
      ++i;
      continue;
    }
    auto& fc1 = static_cast<nn::Linear&>(full[i]);
    auto& fc2 = static_cast<nn::Linear&>(full[i + 2]);
    MGPU_CHECK(fc1.out_features() >= group.size(), "tensor_parallelize: layer ", i, " (",
               fc1.describe(), ") has fewer output features than the ", group.size(),
               " ranks that would share them; use a smaller --tp");
    model->replace_child(std::to_string(i), std::make_shared<ColumnParallelLinear>(fc1, group));
    model->replace_child(std::to_string(i + 2), std::make_shared<RowParallelLinear>(fc2, group));
    i += 3;
  }
  model->train(full.is_training());
  return model;
}

int count_mlp_blocks(nn::Sequential& model) {
  int blocks = 0;
  for (std::size_t i = 0; i < model.size(); ++i)
    blocks += dynamic_cast<ColumnParallelLinear*>(model.at(i).get()) != nullptr;
  return blocks;
}

std::int64_t parameters_per_rank(nn::Sequential& full, int tp, int tp_rank) {
  std::int64_t n = 0;
  for (std::size_t i = 0; i < full.size();) {
    if (!starts_mlp_block(full, i)) {
      n += full.at(i)->num_parameters();
      ++i;
      continue;
    }
    auto& fc1 = static_cast<nn::Linear&>(full[i]);
    auto& fc2 = static_cast<nn::Linear&>(full[i + 2]);
    const std::int64_t hidden = shard_range(fc1.out_features(), tp, tp_rank).size();
    n += hidden * (fc1.in_features() + (fc1.has_bias() ? 1 : 0));                 // column
    n += fc2.out_features() * hidden + (fc2.has_bias() ? fc2.out_features() : 0);  // row
    i += 3;
  }
  return n;
}

}  // namespace mgpu::parallel::tp
