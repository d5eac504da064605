// What the tests of the library's GPT under each plan share: a small model's shape and
// deterministic batches of token ids.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "mgpu/data/text.h"
#include "mgpu/nn/gpt.h"

namespace mgpu::testing {

/// A GPT of 2 blocks, 4 heads and C = 8 over `vocab` tokens and contexts of `block`.
inline nn::GPTConfig small_gpt_config(std::int64_t vocab, std::int64_t block) {
  nn::GPTConfig c;
  c.vocab_size = vocab;
  c.block_size = block;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_embd = 8;
  return c;
}

/// Batch k of B x T token ids below `vocab` as a loader makes it (the tensors and the same
/// ids on the host): inputs (7i + 5k + i²) mod vocab, targets (3i + 2k + 1) mod vocab.
inline data::TextBatch small_text_batch(std::int64_t B, std::int64_t T, std::int64_t vocab,
                                        std::int64_t k = 0) {
  std::vector<std::int64_t> in(static_cast<std::size_t>(B * T)), out(in.size());
  const std::size_t ks = static_cast<std::size_t>(k);
  for (std::size_t i = 0; i < in.size(); ++i) {
    in[i] = static_cast<std::int64_t>((i * 7 + ks * 5 + i * i) % vocab);
    out[i] = static_cast<std::int64_t>((i * 3 + ks * 2 + 1) % vocab);
  }
  return {Tensor::from_vector(in, {B, T}), Tensor::from_vector(out, {B, T}), in, out};
}

}  // namespace mgpu::testing
