/// @file gpt.h
/// @brief A GPT-2-style decoder: token and learned position embeddings, pre-LayerNorm
/// residual blocks (causal self-attention, then an MLP with GELU), a final LayerNorm, and
/// an output head tied to the token embedding. Parameter names follow nanoGPT's state
/// dict ("transformer.h.0.attn.c_attn.weight", ...); the tied head has no name of its own
/// (nanoGPT lists the same tensor a second time as "lm_head.weight").
#pragma once

#include <cstdint>
#include <string>

#include "mgpu/nn/attention.h"
#include "mgpu/nn/embedding.h"
#include "mgpu/nn/layer.h"
#include "mgpu/nn/layernorm.h"
#include "mgpu/nn/recompute.h"

namespace mgpu::nn {

/// The sizes of a GPT.
struct GPTConfig {
  std::int64_t vocab_size = 65;  ///< tokens (characters for the character-level corpus)
  std::int64_t block_size = 128; ///< the longest context T, in tokens
  std::int64_t n_layer = 4;       ///< blocks
  std::int64_t n_head = 4;        ///< attention heads per block
  std::int64_t n_embd = 128;     ///< C, a multiple of n_head

  /// gpt-tiny: trains on a 2-core CPU in minutes (4 layers, 4 heads, C = 128, T = 128).
  static GPTConfig tiny(std::int64_t vocab_size);
  /// The GPT-2 small shape (12 layers, 12 heads, C = 768, T = 1024, 50257 tokens).
  static GPTConfig gpt2_small();
  /// Parameters: token and position tables, 12C² + 13C per block, the final LayerNorm
  /// (the tied head adds none).
  std::int64_t num_parameters() const;
  /// One line: "4 layers, 4 heads, C = 128, T = 128, vocabulary 65".
  std::string str() const;
};

/// Children "c_fc" = Linear(C, 4C), "gelu", "c_proj" = Linear(4C, C). [B, T, C] in and out.
class MLP : public Layer<MLP> {
 public:
  /// C = n_embd; the hidden layer has 4C values.
  explicit MLP(std::int64_t n_embd);
  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& grad_out) override;
  std::string describe() const override;

 private:
  std::int64_t embd_;
};

namespace detail {
/// What a Block's forward under RecomputePolicy::full keeps: its input and the autocast
/// region it ran in.
struct BlockKeptInput {
  Tensor x;
  bool autocast = false;
  DType autocast_dtype = DType::f32;
};
}  // namespace detail

/// x + attn(ln_1(x)), then h + mlp(ln_2(h)): children "ln_1", "attn", "ln_2", "mlp".
/// Under RecomputePolicy::full a training forward keeps only the block's input and the
/// backward runs the forward again before backpropagating it (activation recomputation).
class Block : public Layer<Block, detail::BlockKeptInput> {
 public:
  /// C = n_embd, n_head attention heads.
  Block(std::int64_t n_embd, std::int64_t n_head);
  Tensor forward(const Tensor& x) override;
  Tensor backward(const Tensor& grad_out) override;
  std::string describe() const override;
  /// What a training forward keeps (see recompute.h): none keeps every child's context,
  /// full only the block's input, attn all but attention's probabilities.
  void set_recompute(RecomputePolicy policy);
  /// See set_recompute().
  RecomputePolicy recompute() const { return policy_; }

 private:
  // The two residual branches, each child keeping its own context in training mode.
  Tensor forward_plain(const Tensor& x);
  Tensor backward_plain(const Tensor& grad_out);
  // Lesson 12, task 3 (activation_recompute.cpp): the forward and backward under
  // RecomputePolicy::full.
  Tensor forward_full(const Tensor& x);
  Tensor backward_full(const Tensor& grad_out);
  using KeptInput = detail::BlockKeptInput;
  // Keeps x (and this thread's autocast state) for forward_kept().
  void keep_input(const Tensor& x);
  // Takes back the newest kept input and runs forward_plain on it again, in the autocast
  // region the first forward ran in (torch.utils.checkpoint restores it too). Returns the
  // output, the same bits as the first time.
  Tensor forward_kept();
  RecomputePolicy policy_ = RecomputePolicy::none;
};

namespace detail {
/// What GPT keeps of each forward for its backward.
struct GPTSaved {
  Tensor final_hidden;  // ln_f's output, [B·T, C]: the head's input
  std::int64_t batch = 0, time = 0;
};
}  // namespace detail

/// ids [B, T] (i64, T <= block_size) -> logits [B, T, vocab_size]. Children
/// "transformer.wte", "transformer.wpe", "transformer.h.0" ... and "transformer.ln_f".
/// Weights start as GPT-2's: N(0, 0.02), the residual projections (attn.c_proj, mlp.c_proj)
/// N(0, 0.02/√(2·n_layer)), biases 0, LayerNorms 1 and 0.
class GPT : public Layer<GPT, detail::GPTSaved> {
 public:
  /// A model of config's sizes, its weights drawn from the initialisation seed sequence.
  explicit GPT(const GPTConfig& config);
  Tensor forward(const Tensor& ids) override;
  /// From dL/dlogits; adds every parameter's gradient (the token table's from the head and
  /// from the lookup, announced once, when both are in) and returns no input gradient.
  Tensor backward(const Tensor& grad_logits) override;
  std::string describe() const override;
  /// The sizes it was built with.
  const GPTConfig& config() const { return config_; }

 private:
  using Saved = detail::GPTSaved;
  Embedding& wte() { return static_cast<Embedding&>(*child_at(0)); }
  GPTConfig config_;
};

/// One process's forward and backward of `model` on one batch, for comparing a split model
/// with it: ids and targets [B, T] (i64); the mean softmax cross-entropy over the B·T
/// positions is returned and its gradient propagated, adding to every parameter's .grad.
double gpt_loss_step(GPT& model, const Tensor& ids, const Tensor& targets);

}  // namespace mgpu::nn
