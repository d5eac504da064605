// Shared by lesson 12's graded tests: the attention core written out in f64 loops (forward
// and the chain rule, the references the library's functions are held to), central finite
// differences, and a small GPT with its loss, built the same way under every policy.
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "error_measures.h"
#include "mgpu/allocator.h"
#include "mgpu/nn/autocast.h"
#include "mgpu/nn/all.h"
#include "mgpu/ops.h"
#include "mgpu/rng.h"
#include "random_data.h"

namespace transformer_test {

using namespace mgpu;
using mgpu::testing::same_bits;

/// q, k, v [BH, T, D] as flat f64 vectors, with their sizes.
struct Qkv {
  std::int64_t heads = 0, time = 0, dim = 0;  ///< BH, T, D
  std::vector<double> q, k, v;                ///< each BH·T·D values, row-major
  /// Index of (h, t, d).
  std::size_t at(std::int64_t h, std::int64_t t, std::int64_t d) const {
    return static_cast<std::size_t>((h * time + t) * dim + d);
  }
};

/// The values of a [BH, T, D] tensor triple.
inline Qkv qkv_of(const Tensor& q, const Tensor& k, const Tensor& v) {
  return Qkv{q.size(0), q.size(1), q.size(2), q.to_vector<double>(), k.to_vector<double>(),
             v.to_vector<double>()};
}

/// What the loop forward gives: y [BH, T, D] and p [BH, T, T] (masked entries 0).
struct LoopForward {
  std::vector<double> y, p;
};

/// y = softmax(q kᵀ / √D, causal) v, one head, one row and one sum at a time, the row's
/// largest score subtracted before exp.
inline LoopForward loop_attention(const Qkv& a) {
  const std::int64_t H = a.heads, T = a.time, D = a.dim;
  LoopForward out;
  out.y.assign(static_cast<std::size_t>(H * T * D), 0.0);
  out.p.assign(static_cast<std::size_t>(H * T * T), 0.0);
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  for (std::int64_t h = 0; h < H; ++h)
    for (std::int64_t t = 0; t < T; ++t) {
      std::vector<double> s(static_cast<std::size_t>(t + 1));
      double top = -INFINITY;
      for (std::int64_t j = 0; j <= t; ++j) {  // keys 0..t: the causal mask
        double dot = 0;
        for (std::int64_t d = 0; d < D; ++d) dot += a.q[a.at(h, t, d)] * a.k[a.at(h, j, d)];
        s[static_cast<std::size_t>(j)] = dot * scale;
        top = std::max(top, s[static_cast<std::size_t>(j)]);
      }
      double z = 0;
      for (double& x : s) z += (x = std::exp(x - top));
      for (std::int64_t j = 0; j <= t; ++j) {
        const double p = s[static_cast<std::size_t>(j)] / z;
        out.p[static_cast<std::size_t>((h * T + t) * T + j)] = p;
        for (std::int64_t d = 0; d < D; ++d) out.y[a.at(h, t, d)] += p * a.v[a.at(h, j, d)];
      }
    }
  return out;
}

/// dq, dk, dv of L = Σ dy·y, the chain rule written out per entry.
struct LoopGrads {
  std::vector<double> dq, dk, dv;
};

/// The gradients of loop_attention for dL/dy = dy ([BH, T, D] flat).
inline LoopGrads loop_attention_grads(const Qkv& a, const std::vector<double>& dy) {
  const std::int64_t H = a.heads, T = a.time, D = a.dim;
  const LoopForward f = loop_attention(a);
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  LoopGrads g;
  g.dq.assign(a.q.size(), 0.0);
  g.dk.assign(a.k.size(), 0.0);
  g.dv.assign(a.v.size(), 0.0);
  for (std::int64_t h = 0; h < H; ++h)
    for (std::int64_t t = 0; t < T; ++t) {
      auto p = [&](std::int64_t j) { return f.p[static_cast<std::size_t>((h * T + t) * T + j)]; };
      // dp[j] = dy[t]·v[j]; dv[j] += p[j] dy[t]
      std::vector<double> dp(static_cast<std::size_t>(t + 1), 0.0);
      for (std::int64_t j = 0; j <= t; ++j)
        for (std::int64_t d = 0; d < D; ++d) {
          dp[static_cast<std::size_t>(j)] += dy[a.at(h, t, d)] * a.v[a.at(h, j, d)];
          g.dv[a.at(h, j, d)] += p(j) * dy[a.at(h, t, d)];
        }
      // ds[j] = p[j] (dp[j] - Σ_i p[i] dp[i]); s[j] = q[t]·k[j] · scale
      double mean = 0;
      for (std::int64_t j = 0; j <= t; ++j) mean += p(j) * dp[static_cast<std::size_t>(j)];
      for (std::int64_t j = 0; j <= t; ++j) {
        const double ds = p(j) * (dp[static_cast<std::size_t>(j)] - mean) * scale;
        for (std::int64_t d = 0; d < D; ++d) {
          g.dq[a.at(h, t, d)] += ds * a.k[a.at(h, j, d)];
          g.dk[a.at(h, j, d)] += ds * a.q[a.at(h, t, d)];
        }
      }
    }
  return g;
}

/// x in scientific notation ("1e-12", "3.2e-07") for INFO lines: Catch2 prints doubles in
/// fixed notation with 10 decimals, which shows a tolerance of 1e-12 as 0.0.
inline std::string sci(double x) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3g", x);
  return text;
}

/// CHECK(error < tolerance) whose failure names what was compared and prints both numbers
/// in scientific notation (an INFO line), e.g. "y against the loops: 3.1e-09, tolerance
/// 1e-10". The CHECK itself tests a bool, so Catch2 prints no fixed-notation expansion
/// (in which a tolerance of 1e-12 would read 0.0).
#define CHECK_BELOW(what, error, tolerance)                                                 \
  do {                                                                                      \
    const double error_ = (error), tolerance_ = (tolerance);                               \
    INFO(what << ": " << transformer_test::sci(error_) << ", tolerance "                    \
              << transformer_test::sci(tolerance_));                                        \
    const bool below_tolerance = error_ < tolerance_;                                       \
    CHECK(below_tolerance);                                                                 \
  } while (false)

/// Largest |got - want| / (|want| + 1) of two flat vectors (infinity when sizes differ).
inline double rel_diff(const std::vector<double>& got, const std::vector<double>& want) {
  if (got.size() != want.size()) return INFINITY;
  double worst = 0;
  for (std::size_t i = 0; i < got.size(); ++i)
    worst = std::max(worst, std::fabs(got[i] - want[i]) / (std::fabs(want[i]) + 1.0));
  return worst;
}

/// The sizes of the small GPTs the recomputation tests build.
inline nn::GPTConfig small_gpt(std::int64_t n_layer = 2) {
  nn::GPTConfig c;
  c.vocab_size = 11;
  c.block_size = 8;
  c.n_layer = n_layer;
  c.n_head = 2;
  c.n_embd = 16;
  return c;
}

/// Token ids [B, T] in [0, vocab), the same for a seed.
inline Tensor token_ids(std::int64_t B, std::int64_t T, std::int64_t vocab, unsigned seed) {
  std::vector<std::int64_t> v(static_cast<std::size_t>(B * T));
  std::uint64_t x = seed * 2654435761u + 1;
  for (auto& id : v) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    id = static_cast<std::int64_t>((x >> 33) % static_cast<std::uint64_t>(vocab));
  }
  return Tensor::from_vector(v, {B, T});
}

/// One training step's forward and backward of next-token cross-entropy (targets: the ids
/// shifted by one, the last wrapped); gradients added to the model's. Returns the loss.
/// With `autocast` f16 or bf16 the forward runs in an autocast region (its GEMMs in 16
/// bits) and the loss and backward after it, as lesson 08 does.
inline double loss_and_grads(nn::GPT& model, const Tensor& ids, DType autocast = DType::f32) {
  const std::int64_t B = ids.size(0), T = ids.size(1), V = model.config().vocab_size;
  const std::vector<std::int64_t> v = ids.to_vector<std::int64_t>();
  std::vector<std::int64_t> next(v.size());
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t t = 0; t < T; ++t)
      next[static_cast<std::size_t>(b * T + t)] = v[static_cast<std::size_t>(b * T + (t + 1) % T)];
  const Tensor targets = Tensor::from_vector(next, {B * T});
  Tensor logits;
  if (autocast == DType::f32) {
    logits = model.forward(ids);
  } else {
    amp::Autocast region(autocast);
    logits = model.forward(ids);
  }
  Tensor probs;
  const Tensor loss = softmax_cross_entropy(logits.reshape({B * T, V}), targets, &probs);
  model.backward(softmax_cross_entropy_backward(probs, targets).reshape({B, T, V}));
  return loss.to_vector<double>()[0];
}

/// Bytes held by live CPU tensors now.
inline std::size_t host_bytes() { return memory_stats(Device::cpu()).allocated; }

/// The activation bytes per block that lesson 12's chapter derives for our fp32 GPT, for
/// B sequences of T tokens, C = n_embd, H heads (4 bytes a value):
///   none: 16·B·T·C + H·B·T² + 4·B·T values, attn: 16·B·T·C + 4·B·T, full: B·T·C.
inline double formula_bytes(nn::RecomputePolicy policy, double B, double T, double C, double H) {
  switch (policy) {
    case nn::RecomputePolicy::none: return 4.0 * (16 * B * T * C + H * B * T * T + 4 * B * T);
    case nn::RecomputePolicy::attn: return 4.0 * (16 * B * T * C + 4 * B * T);
    case nn::RecomputePolicy::full: return 4.0 * (B * T * C);
  }
  return 0;
}

/// The activation bytes one block keeps after a training forward under `policy`, measured
/// by the allocator: the live bytes after the forward of a 2-block model minus those of a
/// 1-block one (gpt-tiny's width and heads, C = 128, 4 heads; B sequences of T tokens), the
/// same weights' seed for both. The contexts are dropped afterwards (no backward runs).
inline double activation_bytes_per_block(nn::RecomputePolicy policy, std::int64_t B,
                                         std::int64_t T) {
  nn::GPTConfig c = nn::GPTConfig::tiny(65);
  c.block_size = T;
  const Tensor ids = token_ids(B, T, c.vocab_size, 41);
  double kept[2] = {0, 0};
  for (int layers = 1; layers <= 2; ++layers) {
    c.n_layer = layers;
    nn::manual_seed(51);
    nn::GPT model(c);
    nn::set_recompute(model, policy);
    const std::size_t before = host_bytes();
    const Tensor logits = model.forward(ids);
    kept[layers - 1] = static_cast<double>(host_bytes() - before);
    model.clear_saved();
  }
  return kept[1] - kept[0];
}

}  // namespace transformer_test
