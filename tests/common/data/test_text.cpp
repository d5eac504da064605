// Text for the transformer lessons: the character tokenizer, the corpus split, the loader
// of random windows (next-token targets, determinism), and clear errors. Uses generated
// text and a small file written here, never the installed corpus.
#include <catch2/catch.hpp>

#include <cstdio>
#include <fstream>
#include <functional>
#include <set>
#include <string>

#include "mgpu/data/text.h"
#include "mgpu/error.h"

using namespace mgpu;
using namespace mgpu::data;

namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  FAIL("no error");
  return "";
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("CharTokenizer: sorted characters, encode and decode are inverses", "[data][text]") {
  const CharTokenizer tok("to be, or not to be\n");
  CHECK(tok.chars() == "\n ,benort");
  CHECK(tok.vocab_size() == 9);
  const std::vector<std::int32_t> ids = tok.encode("not be");
  CHECK(ids == std::vector<std::int32_t>{5, 6, 8, 1, 3, 4});
  CHECK(tok.decode(ids) == "not be");
  CHECK(contains(error_of([&] { tok.encode("be x"); }), "'x' at position 3"));
  CHECK(contains(error_of([&] { tok.decode({0, 9}); }), "id 9 at position 1"));
  CHECK_THROWS_AS(CharTokenizer(""), Error);
}

TEST_CASE("TextCorpus: the first 90% trains, the last 10% validates", "[data][text]") {
  std::string text;
  for (int i = 0; i < 100; ++i) text += static_cast<char>('a' + i % 26);
  const TextCorpus c = TextCorpus::from_text(text, "letters");
  CHECK(c.train.size() == 90);
  CHECK(c.validation.size() == 10);
  CHECK(c.tokenizer.decode(c.train).substr(0, 3) == "abc");
  CHECK(c.tokenizer.decode(c.validation) == text.substr(90));
  CHECK(contains(error_of([] { TextCorpus::from_text("short", "tiny"); }), "at least 20"));
}

TEST_CASE("TextCorpus: a file loads, a missing one says how to install the corpus",
          "[data][text]") {
  const std::string path = "test_text_sample.txt";
  {
    std::ofstream out(path);
    out << "Now is the winter of our discontent\nMade glorious summer by this sun of York;\n";
  }
  const TextCorpus c = TextCorpus::load(path);
  CHECK(c.train.size() + c.validation.size() == 78);
  CHECK(contains(c.source, "78 characters"));
  std::remove(path.c_str());
  const std::string missing = error_of([] { TextCorpus::load("/no/such/corpus.txt"); });
  CHECK(contains(missing, "does not exist"));
  CHECK(contains(missing, "tools/install-deps"));
  CHECK(contains(missing, "--data synthetic"));
  CHECK(contains(error_of([] { TextCorpus::load("/"); }), "not a regular file"));
}

TEST_CASE("TextCorpus::synthetic is deterministic, sized, and has few characters",
          "[data][text]") {
  const TextCorpus a = TextCorpus::synthetic(5000, 3), b = TextCorpus::synthetic(5000, 3);
  CHECK(a.train == b.train);
  CHECK(a.validation == b.validation);
  CHECK(a.train.size() + a.validation.size() == 5000);
  CHECK(a.tokenizer.vocab_size() < 40);
  CHECK(TextCorpus::synthetic(5000, 4).train != a.train);
}

TEST_CASE("TextLoader: targets are the inputs shifted by one, batches are reproducible",
          "[data][text]") {
  std::vector<std::int32_t> tokens(1000);
  for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<std::int32_t>(i);
  const TextLoader loader(tokens, 4, 16, 42);
  const TextBatch b = loader.batch(3);
  REQUIRE(b.inputs.shape() == Shape{4, 16});
  REQUIRE(b.targets.shape() == Shape{4, 16});
  CHECK(b.inputs.dtype() == DType::i64);
  const std::vector<std::int64_t> in = b.inputs.to_vector<std::int64_t>();
  const std::vector<std::int64_t> out = b.targets.to_vector<std::int64_t>();
  std::set<std::int64_t> starts;
  for (std::size_t r = 0; r < 4; ++r) {
    starts.insert(in[r * 16]);
    for (std::size_t t = 0; t < 16; ++t) {
      CHECK(out[r * 16 + t] == in[r * 16 + t] + 1);                // the next token
      if (t > 0) CHECK(in[r * 16 + t] == in[r * 16 + t - 1] + 1);  // consecutive tokens
    }
    CHECK(in[r * 16] + 16 < 1000);  // the window's last target exists
  }
  CHECK(starts.size() > 1);
  // Batch k depends on (seed, k) alone: another loader, read in another order, agrees.
  const TextLoader again(tokens, 4, 16, 42);
  again.batch(7);
  CHECK(again.batch(3).inputs.to_vector<std::int64_t>() == in);
  CHECK(TextLoader(tokens, 4, 16, 43).batch(3).inputs.to_vector<std::int64_t>() != in);
  CHECK(contains(error_of([&] { TextLoader(tokens, 4, 1000, 1); }), "window of 1000 + 1"));
}
