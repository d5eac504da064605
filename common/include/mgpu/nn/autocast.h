/// @file autocast.h
/// @brief The precision policy of the layers, in the spirit of torch.autocast: inside an
/// Autocast region, the matrix products of Linear and Conv2d run in f16 or bf16 on fp32
/// parameters ("master weights"); everything else stays fp32.
///
///     {
///       amp::Autocast region(DType::bf16);      // like `with torch.autocast(..., dtype=...)`
///       logits = model.forward(x);              // GEMMs in bf16, accumulated in f32
///     }                                         // weight casts dropped here
///     loss = loss_fn.forward(logits, y);        // fp32
///     model.backward(loss_fn.backward());       // gradients reach the fp32 .grad in f32
///
/// The policy, per layer (see lesson 08's chapter for the table and where PyTorch differs):
///  - Linear, Conv2d: the input and the weight are cast to the region's dtype, the product
///    is accumulated in f32 and written as f32; the 16-bit operands are what backward
///    keeps. Backward casts the incoming gradient to 16 bits, runs both GEMMs the same way
///    and adds the weight gradient to the f32 .grad without rounding it to 16 bits.
///  - Bias, ReLU, pooling, BatchNorm (statistics and output), softmax/cross-entropy, sums:
///    f32, because the GEMMs hand them f32.
///  - Only f32 weights are cast. f64 (gradient checks) and models converted to 16 bits with
///    Module::to(dtype) run as they are.
///
/// The state is per thread, as in PyTorch: a region opened on one thread does not reach
/// work the program hands to other threads. Regions nest; the inner one wins until it
/// closes, and Autocast(dtype, false) turns the policy off inside a region.
///
/// It is part of mgpu::amp (mgpu/amp/all.h includes it) but lives beside the layers that
/// read it, so that nn needs nothing of amp.
#pragma once

#include <cstddef>
#include <string>

#include "mgpu/dtype.h"
#include "mgpu/tensor.h"

namespace mgpu::amp {

/// An autocast region: the policy applies on this thread while the object lives.
class Autocast {
 public:
  /// Opens a region computing GEMMs in `dtype` (f16 or bf16; anything else throws).
  /// enabled = false opens a region where the policy is off (fp32 inside an autocast
  /// region). cache_enabled = false casts the weights again at every use.
  explicit Autocast(DType dtype, bool enabled = true, bool cache_enabled = true);
  /// Restores the enclosing region's settings; the outermost region also drops every
  /// cached weight cast (as torch.autocast's exit clears its cache).
  ~Autocast();
  Autocast(const Autocast&) = delete;
  Autocast& operator=(const Autocast&) = delete;

 private:
  bool prev_enabled_;
  DType prev_dtype_;
  bool prev_cache_enabled_;
};

/// True inside an enabled Autocast region on this thread.
bool is_autocast_enabled();
/// The region's dtype (f16 or bf16); meaningful when is_autocast_enabled().
DType autocast_dtype();

/// The dtype a layer's GEMMs run in for parameter `weight`: the region's dtype when
/// autocast is on and the weight is f32, the weight's own dtype otherwise.
DType gemm_dtype(const Tensor& weight);
/// `t` in `dtype`: `t` itself when it already is (no copy), else a cast copy.
Tensor cast_operand(const Tensor& t, DType dtype);
/// A weight in `dtype`, cast once per region: inside an Autocast region with the cache
/// on, the cast of an f32 weight is kept and returned again until the outermost region
/// closes (so several forwards in one region, e.g. micro-batches, cast each weight once).
/// Do not change the weights while a region is open: the cache would serve the old values.
Tensor cast_weight(const Tensor& weight, DType dtype);
/// Number of weight casts cached on this thread now (0 outside a region).
std::size_t autocast_cache_size();

/// Throws unless `x` may go into a GEMM that runs in `compute` for a layer whose weight is
/// `weight`: same device always; same dtype as the weight unless the policy casts (compute
/// differs from the weight's dtype), in which case any floating dtype. `layer` names it.
void check_gemm_input(const std::string& layer, const char* what, const Tensor& x,
                      const Tensor& weight, DType compute);

}  // namespace mgpu::amp
