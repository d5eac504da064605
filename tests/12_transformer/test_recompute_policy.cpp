// Lesson 12: the recomputation switch (names, errors) and what no policy changes: parameter
// names and values. None of these cases runs the learner's code.
#include "transformer_test_util.h"

using namespace mgpu;
using nn::RecomputePolicy;

TEST_CASE("parse_recompute and recompute_name are each other's inverse; a bad name lists "
          "the three",
          "[12_transformer]") {
  for (RecomputePolicy p : {RecomputePolicy::none, RecomputePolicy::full, RecomputePolicy::attn})
    CHECK(nn::parse_recompute(nn::recompute_name(p)) == p);
  CHECK(std::string(nn::recompute_name(RecomputePolicy::attn)) == "attn");
  try {
    nn::parse_recompute("selective");
    FAIL("no error");
  } catch (const Error& e) {
    const std::string what = e.what();
    CHECK_THAT(what, Catch::Contains("'selective'"));
    CHECK_THAT(what, Catch::Contains("none") && Catch::Contains("full") && Catch::Contains("attn"));
  }
}

TEST_CASE("set_recompute keeps every parameter's name and value", "[12_transformer]") {
  const nn::GPTConfig c = transformer_test::small_gpt(2);
  nn::manual_seed(3);
  nn::GPT model(c);
  std::vector<std::pair<std::string, std::vector<double>>> before;
  for (auto& [name, p] : model.named_parameters()) before.emplace_back(name, p->value.to_vector<double>());
  for (RecomputePolicy p : {RecomputePolicy::full, RecomputePolicy::attn, RecomputePolicy::none}) {
    nn::set_recompute(model, p);
    const auto now = model.named_parameters();
    REQUIRE(now.size() == before.size());
    for (std::size_t i = 0; i < now.size(); ++i) {
      CHECK(now[i].first == before[i].first);
      CHECK(now[i].second->value.to_vector<double>() == before[i].second);
    }
  }
  CHECK(model.named_parameters()[4].first == "transformer.h.0.attn.c_attn.weight");
}

TEST_CASE("the chapter's sizes: GPT-2 small's parameters and gpt-tiny's",
          "[12_transformer]") {
  CHECK(nn::GPTConfig::gpt2_small().num_parameters() == 124439808);
  // gpt-tiny: 65 characters, T = 128, 4 blocks of C = 128: 65·128 + 128·128 + 4·(12·128² +
  // 13·128) + 2·128.
  CHECK(nn::GPTConfig::tiny(65).num_parameters() == 8320 + 16384 + 4 * (196608 + 1664) + 256);
  nn::manual_seed(1);
  nn::GPT tiny(nn::GPTConfig::tiny(65));
  CHECK(tiny.num_parameters() == nn::GPTConfig::tiny(65).num_parameters());
}
