// The GPU's speed rule, checked without a GPU: a steady-state step of the library's GPT under
// each plan (DP, TP with SP, CP, PP at the world's size; alone, the unsplit plan) reads tensor
// data to the host about as often as it logs: once, for the loss. The count (host_reads.h) is
// the same on every device, so a step that would wait for a GPU more often fails here.
#include <catch2/catch.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "expect_error.h"
#include "gpt_test_util.h"
#include "groups.h"
#include "mgpu/data/text.h"
#include "mgpu/host_reads.h"
#include "mgpu/nn/gpt.h"
#include "mgpu/nn/init.h"
#include "mgpu/parallel/gpt/parallel_gpt.h"

using namespace mgpu;
using namespace mgpu::testing;
namespace gpt = mgpu::parallel::gpt;
namespace grid = mgpu::parallel::grid;

namespace {

constexpr std::int64_t kVocab = 11, kB = 4, kT = 8;

nn::GPTConfig tiny_config() { return small_gpt_config(kVocab, kT); }

// Batch k as a loader makes it: the tensors and the same ids on the host.
data::TextBatch batch(std::int64_t k) { return small_text_batch(kB, kT, kVocab, k); }

struct Case {
  std::string name;
  gpt::GptPlan plan;
  // Host reads a step may make beyond its loss: lesson 13's vocabulary-parallel
  // cross-entropy (task 2) computes on the host, four reads per micro-batch on a rank that
  // holds the split head.
  int extra = 0;
};

// The plans of lessons 12-15 over W ranks, one axis each (all the unsplit plan at W = 1).
std::vector<Case> plans(int W) {
  std::vector<Case> out;
  gpt::GptPlan dp;
  dp.shape = grid::GridShape{W, 1, 1, 1};
  dp.embedding = dp.head = gpt::Vocab::replicated;
  dp.grad_sync = gpt::GradSync::ddp;
  out.push_back({"DP (DDP)", dp, 0});
  gpt::GptPlan tp = dp;
  tp.shape = grid::GridShape{1, W, 1, 1};
  tp.sequence_parallel = true;
  tp.embedding = tp.head = gpt::Vocab::split;
  out.push_back({"TP + SP, vocabulary split", tp, 4});
  gpt::GptPlan cp = dp;
  cp.shape = grid::GridShape{1, 1, 1, W};
  cp.attention = gpt::Attention::ring;
  out.push_back({"CP (ring, zigzag)", cp, 0});
  gpt::GptPlan pp;
  pp.shape = grid::GridShape{1, 1, W, 1};
  pp.micro_batches = 4;
  pp.embedding = pp.head = gpt::Vocab::replicated;
  out.push_back({"PP (1F1B, 4 micro-batches)", pp, 0});
  return out;
}

// The tiny GPT under `plan` on this rank's grid (the same seed on every rank).
struct Trained {
  explicit Trained(const gpt::GptPlan& plan)
      : grid(plan.shape, "mpi", Device::cpu(), quiet_options(test_timeout_s())),
        full((nn::manual_seed(3), tiny_config())),
        model(full, plan, grid) {}
  grid::ProcessGrid grid;
  nn::GPT full;
  gpt::ParallelGpt model;
};

}  // namespace

TEST_CASE("a steady-state GPT step reads the host once, for its loss, under every plan", "[gpt][host_reads]") {
  const int W = group().size();
  for (const Case& c : plans(W)) {
    INFO("plan " << c.name << " over " << W << " rank(s)");
    Trained t(c.plan);
    gpt::ParallelGpt& model = t.model;
    const grid::ProcessGrid& g = t.grid;
    std::vector<std::int64_t> reads;
    for (std::int64_t s = 0; s < 4; ++s) reads.push_back(model.train_step(batch(s)).host_reads);
    // Steps 0 and 1 may read more (DDP rebuilds its buckets once, in step 1's forward, and
    // the ranks agree on them); from then on, the loss alone.
    const bool holds_head = g.coords().pp == c.plan.shape.pp - 1;
    const int allowed = 1 + (holds_head ? c.extra * c.plan.micro_batches : 0);
    INFO("host reads per step: " << reads[0] << " " << reads[1] << " " << reads[2] << " " << reads[3]);
    CHECK(reads[2] <= allowed);
    CHECK(reads[3] == reads[2]);
  }
}

TEST_CASE("a GPT step on tensors alone reads their ids once each", "[gpt][host_reads]") {
  Trained t(plans(group().size()).front().plan);
  gpt::ParallelGpt& model = t.model;
  for (std::int64_t s = 0; s < 2; ++s) model.train_step(batch(s));
  const data::TextBatch b = batch(2);
  // Counted around the calls: the tensors are read before the step's own count starts.
  const std::int64_t before = host_reads();
  model.train_step(b);
  const std::int64_t with_ids = host_reads() - before;
  model.train_step(b.inputs, b.targets);
  CHECK(host_reads() - before - with_ids == with_ids + 2);
}

TEST_CASE("a GPT step refuses a token outside the vocabulary, naming it", "[gpt][host_reads]") {
  Trained t(plans(group().size()).front().plan);
  gpt::ParallelGpt& model = t.model;
  data::TextBatch b = batch(0);
  b.target_ids[5] = kVocab;  // one past the last token
  const std::string what = error_of([&] { model.train_step(b); });
  CHECK(contains(what, "target token 11 at position 5"));
  CHECK(contains(what, "outside the vocabulary [0, 11)"));
}
