// Checkpoints of a sharded model (parallel/sharding/sharded_state.h): the full state has DDP's names
// and values, goes through a checkpoint file, and resumes on another world size: saved on
// the N ranks of mpirun and resumed on one, saved on one and resumed on N. One rank's
// world is a group of one (SelfGroup) that every rank builds for itself.
#include <catch2/catch.hpp>

#include <limits>
#include <map>
#include <string>
#include <vector>

#include "error_measures.h"
#include "groups.h"
#include "mgpu/io/checkpoint.h"
#include "mgpu/io/safetensors.h"
#include "mgpu/parallel/sharding/sharded_state.h"
#include "sharding_runs.h"

using namespace mgpu;
using namespace mgpu::testing;
namespace par = mgpu::parallel;
namespace io = mgpu::io;

namespace {

/// A world of one rank: every collective is a copy or nothing.
class SelfGroup : public dist::ProcessGroup {
 public:
  SelfGroup() : dist::ProcessGroup(0, 1) {}
  std::string backend_name() const override { return "self"; }
  Device device() const override { return Device::cpu(); }
  dist::Work all_reduce(const Tensor&, dist::ReduceOp) override { return {}; }
  dist::Work broadcast(const Tensor&, int) override { return {}; }
  dist::Work reduce(const Tensor&, int, dist::ReduceOp) override { return {}; }
  dist::Work all_gather(const Tensor& out, const Tensor& in) override { return copy(out, in); }
  dist::Work reduce_scatter(const Tensor& out, const Tensor& in, dist::ReduceOp) override {
    return copy(out, in);
  }
  dist::Work all_to_all(const Tensor& out, const Tensor& in, const std::vector<std::int64_t>&,
                        const std::vector<std::int64_t>&) override {
    return copy(out, in);
  }
  dist::Work barrier() override { return {}; }
  dist::Work send(const Tensor&, int, int) override { MGPU_FAIL("SelfGroup: no send"); }
  dist::Work recv(const Tensor&, int, int) override { MGPU_FAIL("SelfGroup: no recv"); }
  dist::Work batch_isend_irecv(const std::vector<dist::P2POp>&) override {
    MGPU_FAIL("SelfGroup: no point to point");
  }

 private:
  static dist::Work copy(const Tensor& out, const Tensor& in) {
    Tensor dst = out;
    mgpu::copy_(dst, in.clone().reshape(out.shape()));  // in may be out itself
    return {};
  }
};

/// Every rank's batch of `step` stacked: what one rank sees when it alone trains the
/// global batch (the mean loss over it is the mean of the ranks' means).
void global_forward_backward(nn::Module& m, const RunSpec& spec, int step) {
  std::vector<float> xs;
  std::vector<std::int64_t> ys;
  for (int r = 0; r < group().size(); ++r) {
    Tensor x, y;
    rank_batch(r, step, spec.rows, spec.features, spec.classes, x, y);
    for (float v : x.to_vector<float>()) xs.push_back(v);
    for (std::int64_t v : y.to_vector<std::int64_t>()) ys.push_back(v);
  }
  const std::int64_t rows = spec.rows * group().size();
  nn::CrossEntropyLoss loss;
  loss.forward(m.forward(Tensor::from_vector(xs, {rows, spec.features})),
               Tensor::from_vector(ys, {rows}));
  m.backward(loss.backward());
}

/// The state through a checkpoint file's bytes and back.
io::TrainingState through_file(const io::TrainingState& s) {
  const io::SafetensorsFile f = io::to_checkpoint_file(s);
  const std::string bytes = io::serialize_safetensors(f.tensors, f.metadata);
  return io::from_checkpoint_file(io::parse_safetensors(bytes, "mem.safetensors"), "mem.safetensors");
}

double max_dict_diff(const io::StateDict& a, const io::StateDict& b) {
  std::map<std::string, Tensor> x(a.begin(), a.end()), y(b.begin(), b.end());
  return max_param_diff(x, y);
}

par::ShardingOptions stage(int s, bool one_unit = false) {
  par::ShardingOptions o;
  o.stage = s;
  if (one_unit) o.unit_cap_bytes = std::numeric_limits<std::size_t>::max();
  return o;
}

}  // namespace

TEST_CASE("the full state of a sharded run has DDP's names and values", "[sharding][state]") {
  RunSpec spec;
  spec.steps = 2;
  auto ddp_model = toy_mlp(61);
  par::DistributedDataParallel ddp(ddp_model, group());
  optim::AdamW ddp_opt(ddp.parameters(), spec.adamw);
  auto model = toy_mlp(61);
  par::ShardedDataParallel sdp(model, group(), stage(3));
  optim::AdamW opt(sdp.parameters(), spec.adamw);
  for (int s = 0; s < spec.steps; ++s) {
    ddp_opt.zero_grad();
    forward_backward(ddp, spec, s);
    ddp_opt.step();
    opt.zero_grad();
    forward_backward(sdp, spec, s);
    opt.step();
  }
  const io::TrainingState want = io::capture_training_state(*ddp_model, ddp_opt, {});
  const io::TrainingState got = par::capture_sharded_training_state(sdp, opt, {});
  // Same names (parameters, exp_avg, exp_avg_sq, step of each), values up to the order of
  // the gradient sums.
  CHECK(max_over_ranks(max_dict_diff(got.model, want.model)) <= 1e-5);
  CHECK(max_over_ranks(max_dict_diff(got.optimizer, want.optimizer)) <= 1e-5);
  CHECK(got.optimizer.count("5.bias.exp_avg_sq") == 1);
  CHECK(got.optimizer.at("3.weight.step").to_vector<std::int64_t>()[0] == 2);
}

TEST_CASE("saved on N ranks, resumed on one; saved on one, resumed on N", "[sharding][state]") {
  RunSpec spec;  // 4 steps; the reference: DDP over the N ranks
  const auto want = train_ddp(toy_mlp(62), spec);

  // N ranks, stage 3: two steps, then the full state through a checkpoint file.
  auto a = toy_mlp(62);
  par::ShardedDataParallel on_n(a, group(), stage(3));
  optim::AdamW opt_n(on_n.parameters(), spec.adamw);
  for (int s = 0; s < 2; ++s) {
    opt_n.zero_grad();
    forward_backward(on_n, spec, s);
    opt_n.step();
  }
  io::TrainingProgress progress;
  progress.global_step = 2;
  progress.world_size = group().size();
  const io::TrainingState saved_n = through_file(par::capture_sharded_training_state(on_n, opt_n, progress));

  // One rank (every rank on its own), stage 2 with one unit: another layout entirely.
  SelfGroup self;
  auto b = toy_mlp(99);  // other initial values: the load must replace them all
  par::ShardedDataParallel on_1(b, self, stage(2, /*one_unit=*/true));
  optim::AdamW opt_1(on_1.parameters(), {});
  CHECK(par::restore_sharded_training_state(saved_n, on_1, opt_1).global_step == 2);
  CHECK(opt_1.lr() == spec.adamw.lr);
  for (int s = 2; s < 4; ++s) {
    opt_1.zero_grad();
    global_forward_backward(on_1, spec, s);
    opt_1.step();
  }
  const auto got_1 = on_1.full_parameters();
  INFO("N ranks -> 1: largest |resumed - DDP| " << max_over_ranks(max_param_diff(got_1, want)));
  CHECK(max_over_ranks(max_param_diff(got_1, want)) <= 1e-5);

  // And back: one rank's state after the first two steps, resumed on the N ranks.
  auto c = toy_mlp(62);
  par::ShardedDataParallel first_1(c, self, stage(1));
  optim::AdamW opt_c(first_1.parameters(), spec.adamw);
  for (int s = 0; s < 2; ++s) {
    opt_c.zero_grad();
    global_forward_backward(first_1, spec, s);
    opt_c.step();
  }
  const io::TrainingState saved_1 = through_file(par::capture_sharded_training_state(first_1, opt_c, progress));
  auto d = toy_mlp(98);
  par::ShardedDataParallel on_n2(d, group(), stage(3));
  optim::AdamW opt_d(on_n2.parameters(), {});
  par::restore_sharded_training_state(saved_1, on_n2, opt_d);
  for (int s = 2; s < 4; ++s) {
    opt_d.zero_grad();
    forward_backward(on_n2, spec, s);
    opt_d.step();
  }
  CHECK(max_over_ranks(max_param_diff(on_n2.full_parameters(), want)) <= 1e-5);
}

TEST_CASE("a state that does not fit the model is refused by name, and nothing changes",
          "[sharding][state]") {
  RunSpec spec;
  auto model = toy_mlp(63);
  par::ShardedDataParallel sdp(model, group(), stage(3));
  optim::AdamW opt(sdp.parameters(), spec.adamw);
  opt.zero_grad();
  forward_backward(sdp, spec, 0);
  opt.step();
  const io::TrainingState good = par::capture_sharded_training_state(sdp, opt, {});
  const auto before = sdp.full_parameters();

  io::TrainingState broken = good;
  broken.optimizer.erase("3.bias.exp_avg");
  CHECK_THROWS_WITH(par::restore_sharded_training_state(broken, sdp, opt),
                    Catch::Contains("'3.bias.exp_avg' is missing"));
  broken = good;
  broken.optimizer["9.weight.exp_avg"] = Tensor::zeros({2});
  CHECK_THROWS_WITH(par::restore_sharded_training_state(broken, sdp, opt),
                    Catch::Contains("'9.weight.exp_avg'"));
  broken = good;
  broken.model["1.weight"] = Tensor::zeros({5, 6});
  CHECK_THROWS_WITH(par::restore_sharded_training_state(broken, sdp, opt),
                    Catch::Contains("'1.weight'"));
  broken = good;
  broken.optimizer["1.weight.exp_avg"] = Tensor::zeros({7, 5});
  CHECK_THROWS_WITH(par::restore_sharded_training_state(broken, sdp, opt),
                    Catch::Contains("'1.weight.exp_avg'"));
  CHECK(max_param_diff(sdp.full_parameters(), before) == 0.0);
  CHECK(opt.state().at("flat_param_0.step").to_vector<std::int64_t>()[0] == 1);
}
