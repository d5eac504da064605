// Shared by lesson 13's graded tests: a small f64 GPT block every rank builds the same,
// this rank's part of its gradients, and one split forward and backward.
#pragma once

#include <catch2/catch.hpp>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "error_measures.h"
#include "forwarding_group.h"
#include "groups.h"
#include "mgpu/copy.h"
#include "mgpu/dist/dist.h"
#include "mgpu/nn/all.h"
#include "mgpu/ops.h"
#include "mgpu/parallel/tp/parallel_block.h"
#include "random_data.h"

namespace tp_sp_test {

using namespace mgpu;
using namespace mgpu::testing;
namespace tpar = mgpu::parallel::tp;  // tensor parallelism: lesson 13 writes four of its functions

/// f64 on both sides: only the order of the sums differs.
constexpr double kTol = 1e-12;
/// B = 2 sequences of T = 12 tokens, C = 24 in 12 heads of 2: 2, 3 and 4 ranks divide the
/// heads, the hidden 4C = 96 features and T.
constexpr std::int64_t kB = 2, kT = 12, kC = 24, kHeads = 12;

/// An f64 nn::Block whose every parameter (biases and LayerNorms too) is random, the same
/// on every rank: a zero bias or a unit LayerNorm would hide a misplaced gradient.
inline std::shared_ptr<nn::Block> f64_block(std::int64_t C = kC, std::int64_t heads = kHeads) {
  nn::manual_seed(5);
  auto b = std::make_shared<nn::Block>(C, heads);
  b->to(DType::f64);
  unsigned salt = 100;
  for (auto& [name, p] : b->named_parameters()) {
    Tensor r = random_tensor(p->value.shape(), ++salt);
    scale_(r, 0.4);
    if (name.find("ln_") != std::string::npos && name.find("weight") != std::string::npos)
      add_(r, Tensor::full(p->value.shape(), 1.0, DType::f64));
    copy_(p->value, r);
  }
  return b;
}

/// This rank's part of a full gradient of the block: its heads' rows of c_attn (q's, k's
/// and v's), its hidden rows of c_fc, the matching columns of both c_proj weights, and
/// everything else whole.
inline Tensor my_part(tpar::ParallelBlock& blk, const std::string& name, const Tensor& full) {
  const int P = blk.group().size(), r = blk.group().rank();
  const tpar::ShardRange heads{r * kHeads / P, (r + 1) * kHeads / P};
  const std::int64_t D = kC / kHeads, width = heads.size() * D;
  if (name.rfind("attn.c_attn.", 0) == 0) {
    Shape shape = full.shape();
    shape[0] = 3 * width;
    Tensor out = Tensor::empty(shape, DType::f64);
    for (std::int64_t part = 0; part < 3; ++part) {
      Tensor dst = out.slice(part * width, (part + 1) * width);
      copy_(dst, full.slice(part * kC + heads.begin * D, part * kC + heads.end * D));
    }
    return out;
  }
  if (name == "attn.c_proj.weight") return tpar::take_columns(full, {heads.begin * D, heads.end * D});
  const tpar::ShardRange hidden{r * 4 * kC / P, (r + 1) * 4 * kC / P};
  if (name.rfind("mlp.c_fc.", 0) == 0) return full.slice(hidden.begin, hidden.end).clone();
  if (name == "mlp.c_proj.weight") return tpar::take_columns(full, hidden);
  return full;
}

/// True for the parameters every rank holds whole (LayerNorms, row-parallel biases).
inline bool replicated(const std::string& name) {
  return name.rfind("ln_", 0) == 0 || name == "attn.c_proj.bias" || name == "mlp.c_proj.bias";
}

/// This rank's tokens [r·T/P, (r+1)·T/P) of x [B, T, C], cut here without the library.
inline Tensor my_tokens(const Tensor& x, int P, int r) {
  const std::int64_t B = x.size(0), T = x.size(1), C = x.size(2), Tr = T / P;
  Tensor out = Tensor::empty({B, Tr, C}, x.dtype());
  for (std::int64_t b = 0; b < B; ++b) {
    Tensor dst = out.view(b * Tr * C, {Tr * C});
    copy_(dst, x.view((b * T + r * Tr) * C, {Tr * C}));
  }
  return out;
}

/// The collectives `g` issued while `body` ran (the runtime counts them).
template <typename F>
std::int64_t collectives_during(dist::ProcessGroup& g, F&& body) {
  const std::int64_t before = g.collectives_issued();
  body();
  return g.collectives_issued() - before;
}

/// Kind and bytes written of each collective, in order: ("all_reduce", bytes), ...
using CollectiveLog = std::vector<std::pair<std::string, std::size_t>>;

/// A group that passes everything on to a real group and records each collective's kind
/// and the bytes it writes (for an all-gather its output, for a reduce-scatter its output).
class RecordingGroup : public ForwardingGroup {
 public:
  /// Records the collectives `inner` is asked for through this group.
  explicit RecordingGroup(dist::ProcessGroup& inner) : ForwardingGroup(inner) {}
  /// What was recorded since the last take(), and forgets it.
  CollectiveLog take() { return std::exchange(log_, {}); }

 protected:
  void on_collective(const std::string& op, const Tensor& written) override {
    log_.emplace_back(op, written.defined() ? written.nbytes() : 0);
  }

 private:
  CollectiveLog log_;
};

/// The output, the input gradient and the collectives of one split forward and backward.
struct SplitRun {
  Tensor y, dx;                   ///< this rank's part (its tokens under SP)
  std::int64_t forward_collectives = 0, backward_collectives = 0;  ///< issued on the group
};

/// One forward and backward of `blk` on this rank's part of x and dy [B, T, C].
inline SplitRun run_split(tpar::ParallelBlock& blk, const Tensor& x, const Tensor& dy) {
  dist::ProcessGroup& g = blk.group();
  const bool sp = blk.sequence_parallel();
  const Tensor xin = sp ? my_tokens(x, g.size(), g.rank()) : x.clone();
  const Tensor dyin = sp ? my_tokens(dy, g.size(), g.rank()) : dy.clone();
  SplitRun out;
  out.forward_collectives = collectives_during(g, [&] { out.y = blk.forward(xin); });
  out.backward_collectives = collectives_during(g, [&] { out.dx = blk.backward(dyin); });
  return out;
}

}  // namespace tp_sp_test
