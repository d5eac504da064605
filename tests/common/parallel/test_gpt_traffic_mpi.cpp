// What lesson 14's program prints beside the chapter's formulas, checked: under each CP core
// (ring, all-gather, Ulysses, the hybrid) a GPT step sends over the CP group exactly the
// bytes per layer of cp_bytes_per_layer_formula, by the process group's own count
// (ProcessGroup::traffic), and attention keeps attention_kept_bytes_formula per layer.
#include <catch2/catch.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "gpt_test_util.h"
#include "groups.h"
#include "mgpu/data/text.h"
#include "mgpu/nn/gpt.h"
#include "mgpu/nn/init.h"
#include "mgpu/parallel/gpt/parallel_gpt.h"

using namespace mgpu;
using namespace mgpu::testing;
namespace gpt = mgpu::parallel::gpt;
namespace grid = mgpu::parallel::grid;

namespace gpt_traffic_test {

constexpr std::int64_t kTrafficVocab = 11, kTrafficB = 2, kTrafficT = 16;

nn::GPTConfig traffic_config() { return small_gpt_config(kTrafficVocab, kTrafficT); }

data::TextBatch traffic_batch() { return small_text_batch(kTrafficB, kTrafficT, kTrafficVocab); }

}  // namespace gpt_traffic_test

TEST_CASE("a CP step sends the chapter's bytes per layer and attention keeps its formula", "[gpt][traffic]") {
  using namespace gpt_traffic_test;
  const int W = group().size();
  const nn::GPTConfig config = traffic_config();
  for (const std::string kind : {"ring", "allgather", "ulysses", "hybrid"}) {
    gpt::GptPlan plan;
    plan.shape = grid::GridShape{1, 1, 1, W};
    plan.attention = gpt::attention_from_name(kind);
    plan.embedding = plan.head = gpt::Vocab::replicated;
    plan.grad_sync = gpt::GradSync::ddp;
    INFO(kind << " over " << W << " rank(s)");
    grid::ProcessGrid g(plan.shape, "mpi", Device::cpu(), quiet_options(test_timeout_s()));
    nn::GPT full((nn::manual_seed(3), config));
    gpt::ParallelGpt model(full, plan, g);
    const std::size_t s = dtype_size(model.parameters().front()->value.dtype());
    for (int step = 0; step < 2; ++step) {
      const gpt::StepReport rep = model.train_step(traffic_batch());
      INFO("step " << step << ": CP " << rep.cp_traffic.str() << "; all " << rep.traffic.str());
      CHECK(static_cast<double>(rep.cp_traffic.sent_bytes()) ==
            config.n_layer * gpt::cp_bytes_per_layer_formula(plan, config, kTrafficB, kTrafficT, s));
      CHECK(rep.cp_traffic.recv.bytes == rep.cp_traffic.send.bytes);  // every ring block comes back
      CHECK(rep.traffic.sent_bytes() >= rep.cp_traffic.sent_bytes());
    }
    CHECK(static_cast<double>(model.attention_stats().kept) ==
          config.n_layer * gpt::attention_kept_bytes_formula(plan, config, kTrafficB, kTrafficT, s));
    if (W > 1 && kind == std::string("ulysses")) CHECK(model.attention_stats().kept > 0);
  }
}
