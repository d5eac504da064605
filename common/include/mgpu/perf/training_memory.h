/// @file training_memory.h
/// @brief What a training run keeps in memory, by the published formulas the planner
/// (planner.h) builds on: the model states of the ZeRO paper and the activations per
/// transformer layer of Korthikanti et al.
///
/// Model states ("ZeRO: Memory Optimizations Toward Training Trillion Parameter Models",
/// Rajbhandari et al. 2020, section 3.1 and Figure 1), for Ψ parameters trained with Adam:
///
///   fp32                       weights 4Ψ, gradients 4Ψ, optimizer K·Ψ with K = 8 (the two
///                              moments; the weights are their own master copy)
///   bf16 / fp16 mixed          weights 2Ψ (the 16-bit copy the forward uses), gradients 2Ψ
///                              (16-bit, as the paper counts them; 4Ψ when accumulated in
///                              fp32, Megatron-LM's main_grad), optimizer K·Ψ with K = 12
///                              (fp32 master weights 4, momentum 4, variance 4): 16 bytes
///                              a parameter in all
///   ZeRO over N_d data-parallel ranks divides: stage 1 the optimizer, (2 + 2 + K/N_d)Ψ;
///   stage 2 also the gradients, (2 + (2 + K)/N_d)Ψ; stage 3 also the weights,
///   (2 + 2 + K)Ψ/N_d.
///
/// Activations of one transformer layer ("Reducing Activation Recomputation in Large
/// Transformer Models", Korthikanti et al. 2022, section 4 and Table 2), for s tokens per
/// sequence, micro-batch b, hidden size h, a heads, t tensor-parallel ranks, in 16-bit
/// with dropout (a mask is 1 byte a value):
///
///   no recomputation, TP          s·b·h·(10 + 24/t + 5·a·s/(h·t))
///   no recomputation, TP + SP     s·b·h·(34/t + 5·a·s/(h·t))            (t = 1: 34 + 5as/h)
///   selective recomputation       s·b·h·(10 + 24/t), with SP s·b·h·34/t  (the a·s² part
///                                 recomputed in the backward)
///   full recomputation            2·s·b·h, the layer's input only (with SP 2·s·b·h/t:
///                                 Megatron-LM keeps the sequence-parallel shard)
///
/// The 10 kept whole under TP are the two LayerNorms' inputs, the inputs of the QKV and
/// first MLP products (2 bytes each) and the two dropout masks (1 byte each); the 24 split
/// are Q, K, V, the output projection's input, GELU's input and output (4h wide, so 8
/// each); the 5·a·s² per sequence are the softmax output, its dropout mask and the dropout's
/// output. layer_activation_bytes generalises the count to a value size of w bytes (fp32:
/// w = 4) and to no dropout (no masks, no dropout output), and adds flash attention: the
/// scores are never kept (no a·s² term), only the softmax's log-sum-exp, 4 bytes per head
/// and token, which the backward uses to recompute them.
#pragma once

#include <string>

namespace mgpu::perf {

/// How a run stores its numbers.
struct Precision {
  std::string name = "fp32";  ///< "fp32", or "bf16" / "fp16": 16-bit compute, fp32 master weights
  bool fp32_grads = false;    ///< mixed precision: gradients kept in fp32 (Megatron-LM's main_grad)
  /// True for bf16 and fp16.
  bool mixed() const { return name != "fp32"; }
  /// Bytes of a weight and of an activation the forward computes: 4 or 2.
  double value_bytes() const { return mixed() ? 2 : 4; }
  /// Bytes of a gradient: 4 in fp32 or with fp32_grads, else 2.
  double grad_bytes() const { return mixed() && !fp32_grads ? 2 : 4; }
  /// The ZeRO paper's K, the optimizer's bytes per parameter: 8 (fp32) or 12 (mixed).
  double optimizer_bytes() const { return mixed() ? 12 : 8; }
};

/// One rank's model states, bytes.
struct ModelStates {
  double parameters = 0;  ///< the weights the forward uses (fp32, or the 16-bit copy)
  double gradients = 0;   ///< the gradients (this rank's shard under ZeRO-2 and -3)
  double optimizer = 0;   ///< Adam's moments, + the fp32 master weights in mixed precision
  /// The sum.
  double total() const { return parameters + gradients + optimizer; }
};

/// The model states one of `dp` data-parallel ranks keeps for `params` parameters under
/// ZeRO stage `zero_stage` (0: DDP, every state whole on every rank). Throws mgpu::Error
/// for a stage outside 0-3, dp < 1 or an unknown precision.
ModelStates model_state_bytes(double params, const Precision& precision, int zero_stage, int dp);

/// How a layer's activations are kept for the backward.
struct ActivationSettings {
  double value_bytes = 2;          ///< w: 2 (16-bit) or 4 (fp32)
  bool dropout = true;             ///< dropout after attention and MLP (the paper's count)
  std::string recompute = "none";  ///< "none", "selective" (the attention core) or "full"
  bool flash = false;              ///< flash attention: the a·s² scores never kept
  bool sequence_parallel = false;  ///< SP inside the TP group: the whole-kept part split too
};

/// Bytes one transformer layer keeps for its backward (the formulas above): s tokens per
/// sequence, micro-batch b, hidden size h, a heads, t TP ranks. With w = 2 and dropout, the
/// paper's Table 2 exactly. Throws mgpu::Error for an unknown recompute or t < 1.
double layer_activation_bytes(double s, double b, double h, double a, int t,
                              const ActivationSettings& settings);

}  // namespace mgpu::perf
