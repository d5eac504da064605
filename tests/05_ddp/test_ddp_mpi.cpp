// Lesson 05, tasks 1-3 under mpirun (2 and 3 ranks): buckets of a real model, the in-order
// launch, DDP against one process with the whole batch, no_sync, unused parameters.
//
// Each test isolates its task where it can: the Reducer classes below take the library's
// reference for the other tasks' methods, so a bug in task 2 costs task 2's points only.
// The last test runs your whole lesson05::DistributedDataParallel.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "ddp_lesson.h"
#include "ddp_test_util.h"
#include "mgpu/optim/sgd.h"
#include "mgpu/parallel/all.h"

using namespace ddp_test;
namespace l05 = mgpu::lesson05;
namespace par = mgpu::parallel;

namespace {

// Your mark_variable_ready (task 2) with the reference finalize.
class Task2Reducer : public l05::Reducer {
 public:
  using l05::Reducer::Reducer;
  void finalize_backward() override { par::Reducer::finalize_backward(); }
};
// Your finalize_backward (task 3) with the reference mark_variable_ready.
class Task3Reducer : public l05::Reducer {
 public:
  using l05::Reducer::Reducer;
  void mark_variable_ready(std::size_t v) override { par::Reducer::mark_variable_ready(v); }
};

template <typename R>
par::DDPOptions isolated(par::DDPOptions o) {
  o.assign_buckets = par::compute_bucket_assignment_by_size;  // the reference of task 1
  o.make_reducer = [](std::vector<nn::Parameter*> p, std::vector<std::vector<std::size_t>> b,
                      dist::ProcessGroup& g, par::ReducerOptions ro) {
    return std::unique_ptr<par::Reducer>(new R(std::move(p), std::move(b), g, ro));
  };
  return o;
}

// TrapNet's three buckets: head, then unused, then fc1 (each ~100 bytes or more).
par::DDPOptions three_buckets(bool find_unused) {
  par::DDPOptions o;
  o.first_bucket_cap_mb = bytes_to_mib(100);
  o.bucket_cap_mb = bytes_to_mib(100);
  o.find_unused_parameters = find_unused;
  return o;
}

std::shared_ptr<TrapNet> make_net(bool with_unused, std::uint64_t seed) {
  nn::manual_seed(seed);
  return std::make_shared<TrapNet>(with_unused);
}

// One forward/backward of `m` (a DDP or a plain model) on rows `idx`; returns the loss.
double forward_backward(nn::Module& m, const ToyData& data, const std::vector<std::int64_t>& idx) {
  Tensor x, y;
  data.batch(idx, x, y);
  nn::CrossEntropyLoss loss;
  const double l = loss.forward(m.forward(x), y).item();
  m.backward(loss.backward());
  return l;
}

bool near(const std::vector<float>& got, const std::vector<double>& want, double tol = 1e-6) {
  if (got.size() != want.size()) return false;
  for (std::size_t i = 0; i < got.size(); ++i)
    if (std::fabs(got[i] - want[i]) > tol) return false;
  return true;
}

std::vector<std::int64_t> range(const std::vector<std::int64_t>& v, std::size_t begin, std::size_t end) {
  end = std::min(end, v.size());
  return std::vector<std::int64_t>(v.begin() + static_cast<std::ptrdiff_t>(std::min(begin, end)),
                                   v.begin() + static_cast<std::ptrdiff_t>(end));
}

}  // namespace

// ---- task 1 ---------------------------------------------------------------------------------------

TEST_CASE("task1: DDP's buckets for TrapNet with 100-byte caps, frozen parameters left out",
          "[05_ddp][task1][points:2]") {
  auto net = make_net(true, 1);
  l05::DistributedDataParallel ddp(net, group(), three_buckets(true));
  par::Reducer& r = ddp.reducer();
  // Synchronized: fc1.weight, fc1.bias, unused.weight, unused.bias, head.weight, head.bias.
  std::vector<std::string> names;
  for (nn::Parameter* p : r.variables()) names.push_back(p->name());
  CHECK(names == std::vector<std::string>{"module.fc1.weight", "module.fc1.bias",
                                          "module.unused.weight", "module.unused.bias",
                                          "module.head.weight", "module.head.bias"});
  REQUIRE(r.num_buckets() == 3);
  CHECK(r.bucket_variables(0) == std::vector<std::size_t>{5, 4});
  CHECK(r.bucket_variables(1) == std::vector<std::size_t>{3, 2});
  CHECK(r.bucket_variables(2) == std::vector<std::size_t>{1, 0});
  CHECK(r.bucket_bytes(0) == (3 + 24) * 4);
  CHECK(r.bucket_bytes(2) == (8 + 48) * 4);
  // Default caps: everything in one bucket (far below 1 MiB).
  auto small = make_net(true, 1);
  l05::DistributedDataParallel one(small, group());
  CHECK(one.reducer().num_buckets() == 1);
}

// ---- task 2 ---------------------------------------------------------------------------------------

TEST_CASE("task2: buckets launch strictly in index order, pre-divided by the world size",
          "[05_ddp][task2][points:4]") {
  const int w = group().size(), rank = group().rank();
  // Four parameters; gradient of p_v on rank r is (r + 1) * (v + 1) everywhere.
  std::vector<std::unique_ptr<nn::Parameter>> owned;
  std::vector<nn::Parameter*> params;
  for (int v = 0; v < 4; ++v) {
    owned.push_back(std::make_unique<nn::Parameter>("p" + std::to_string(v), Tensor::zeros({3})));
    mgpu::fill_(owned.back()->grad, (rank + 1.0) * (v + 1.0));
    params.push_back(owned.back().get());
  }
  Task2Reducer reducer(params, {{3}, {2, 1}, {0}}, group());
  std::vector<std::size_t> launched;
  std::vector<std::vector<float>> at_launch;
  reducer.register_comm_hook([&](dist::ProcessGroup& g, par::GradBucket& b) {
    launched.push_back(b.index);
    at_launch.push_back(b.buffer.to_vector<float>());
    return par::allreduce_hook(g, b);
  });
  reducer.prepare_for_backward();
  params[2]->notify_grad_ready();
  params[1]->notify_grad_ready();  // bucket 1 is complete, but bucket 0 is not launched yet
  const std::vector<std::size_t> after_bucket1 = launched;
  params[3]->notify_grad_ready();  // bucket 0 complete: launches 0, then the waiting 1
  const std::vector<std::size_t> after_bucket0 = launched;
  params[0]->notify_grad_ready();
  const std::vector<std::size_t> after_all = launched;
  reducer.finalize_backward();  // the reference finalize

  CHECK(after_bucket1.empty());
  CHECK(after_bucket0 == std::vector<std::size_t>{0, 1});
  CHECK(after_all == std::vector<std::size_t>{0, 1, 2});
  CHECK(reducer.launch_order() == std::vector<std::size_t>{0, 1, 2});
  // What went on the wire: each gradient divided by the world size, in bucket order.
  REQUIRE(at_launch.size() == 3);
  const double r1 = (rank + 1.0) / w;
  CHECK(near(at_launch[0], {4 * r1, 4 * r1, 4 * r1}));
  CHECK(near(at_launch[1], {3 * r1, 3 * r1, 3 * r1, 2 * r1, 2 * r1, 2 * r1}));
  CHECK(near(at_launch[2], {r1, r1, r1}));
  // And the averages came back: mean over ranks of (r + 1) * (v + 1).
  for (int v = 0; v < 4; ++v)
    CHECK(max_abs_diff(params[v]->grad, Tensor::full({3}, (v + 1) * (w + 1) / 2.0)) < 1e-6);
}

TEST_CASE("task2: a bucket's all-reduce starts during backward, before the earlier layers' grads",
          "[05_ddp][task2][points:2]") {
  auto net = make_net(false, 3);
  CountingGroup counting(group());
  par::DistributedDataParallel ddp(net, counting, isolated<Task2Reducer>(three_buckets(false)));
  REQUIRE(ddp.reducer().num_buckets() == 2);  // head, fc1
  // Record, at each launch, whether fc1's weight gradient had been computed yet.
  std::vector<int> fc1_ready_at_launch;
  nn::Parameter& fc1_weight = ddp.module().parameter("fc1.weight");
  ddp.register_comm_hook([&](dist::ProcessGroup& g, par::GradBucket& b) {
    double mass = 0;
    for (float x : fc1_weight.grad.to_vector<float>()) mass += std::fabs(x);
    fc1_ready_at_launch.push_back(mass > 0 ? 1 : 0);
    return par::allreduce_hook(g, b);
  });
  ToyData data(8);
  ddp.zero_grad();
  counting.reset();
  forward_backward(ddp, data, {0, 1, 2, 3});
  // Bucket 0 (head) went out before fc1's gradient existed: communication overlapped backward.
  CHECK(fc1_ready_at_launch == std::vector<int>{0, 1});
  CHECK(counting.all_reduce_numels == std::vector<std::int64_t>{27, 56});
  const par::StepTimeline& t = ddp.last_step();
  REQUIRE(t.buckets.size() == 2);
  CHECK(t.buckets[0].launch_s < t.backward_end);
}

// ---- task 3 ---------------------------------------------------------------------------------------

TEST_CASE("task3: DDP on W ranks x batch 4 equals 1 process x batch 4W after 5 SGD steps "
          "(frozen and unused parameters, short last batch)",
          "[05_ddp][task3][points:5]") {
  const int w = group().size(), rank = group().rank();
  const std::int64_t b = 4;
  // 4 full steps and a last one with 3 samples per rank: N = W * 19.
  ToyData data(static_cast<std::int64_t>(w) * 19);
  // The reference: one process, rank 0's initial weights, the whole global batch.
  auto ref = make_net(true, 11);
  mgpu::optim::SGD ref_opt(ref->parameters(), {0.1, 0.9, 0.0});
  // DDP: every rank starts from different weights; construction broadcasts rank 0's.
  auto net = make_net(true, 11 + static_cast<std::uint64_t>(rank));
  l05::DistributedDataParallel ddp(net, group(), three_buckets(true));
  mgpu::optim::SGD opt(ddp.parameters(), {0.1, 0.9, 0.0});
  par::DistributedSampler mine(data.n, w, rank, false);  // the reference sampler
  const std::vector<std::int64_t> my_idx = mine.indices(0);

  for (std::size_t step = 0; step < 5; ++step) {
    std::vector<std::int64_t> global;
    for (int r = 0; r < w; ++r) {
      const auto part = range(par::DistributedSampler(data.n, w, r, false).indices(0), step * b, (step + 1) * b);
      global.insert(global.end(), part.begin(), part.end());
    }
    ref_opt.zero_grad();
    forward_backward(*ref, data, global);
    ref_opt.step();

    opt.zero_grad();
    forward_backward(ddp, data, range(my_idx, step * b, (step + 1) * b));
    opt.step();
  }
  // Every parameter (frozen and unused ones too) matches the single-process run...
  auto ref_params = ref->named_parameters();
  auto ddp_params = net->named_parameters();
  REQUIRE(ref_params.size() == ddp_params.size());
  double worst = 0;
  std::string worst_name;
  for (std::size_t i = 0; i < ref_params.size(); ++i) {
    const double d = max_abs_diff(ref_params[i].second->value, ddp_params[i].second->value);
    if (d > worst) {
      worst = d;
      worst_name = ref_params[i].first;
    }
  }
  INFO("rank " << rank << ": largest difference " << worst << " in " << worst_name);
  CHECK(all_ranks(worst < 1e-5));
  // ...and the replicas are bit-identical to rank 0's.
  bool same = true;
  for (auto& [name, p] : ddp_params) {
    Tensor r0 = p->value.clone();
    group().broadcast(r0, 0).wait();
    same = same && max_abs_diff(r0, p->value) == 0;
  }
  CHECK(all_ranks(same));
}

TEST_CASE("task3: no_sync() issues no collective; the next backward reduces the accumulated grads",
          "[05_ddp][task3][points:4]") {
  const int w = group().size(), rank = group().rank();
  ToyData data(static_cast<std::int64_t>(w) * 6);
  auto net = make_net(false, 5);
  auto ref = make_net(false, 5);
  CountingGroup counting(group());
  par::DistributedDataParallel ddp(net, counting, isolated<Task3Reducer>(three_buckets(false)));
  // Micro-batch k of rank r: rows 6r + 2k, 6r + 2k + 1.
  auto micro = [&](int r, int k) {
    return std::vector<std::int64_t>{6 * r + 2 * k, 6 * r + 2 * k + 1};
  };
  ddp.zero_grad();
  counting.reset();
  {
    auto guard = ddp.no_sync();
    forward_backward(ddp, data, micro(rank, 0));
    forward_backward(ddp, data, micro(rank, 1));
  }
  const int during_no_sync = counting.collectives;
  forward_backward(ddp, data, micro(rank, 2));
  const std::size_t reduced = counting.all_reduce_numels.size();
  // The expectation: the sum over every rank's three micro-batches, divided by W.
  ref->zero_grad();
  for (int r = 0; r < w; ++r)
    for (int k = 0; k < 3; ++k) forward_backward(*ref, data, micro(r, k));
  double worst = 0;
  auto rp = ref->named_parameters();
  auto np = net->named_parameters();
  for (std::size_t i = 0; i < rp.size(); ++i) {
    if (!rp[i].second->requires_grad()) continue;
    worst = std::max(worst, max_abs_diff(mgpu::scale(rp[i].second->grad, 1.0 / w), np[i].second->grad));
  }
  CHECK(during_no_sync == 0);
  CHECK(reduced == 2);  // both buckets, once
  INFO("rank " << rank << ": largest gradient difference " << worst);
  CHECK(all_ranks(worst < 1e-5));
}

TEST_CASE("task3: an unused parameter without find_unused_parameters fails the next forward, "
          "naming it and the fix",
          "[05_ddp][task3][points:3]") {
  auto net = make_net(true, 9);
  par::DistributedDataParallel ddp(net, group(), isolated<Task3Reducer>(three_buckets(false)));
  ToyData data(8);
  forward_backward(ddp, data, {0, 1});  // the reduction stays unfinished: bucket 1 never fills
  std::string message;
  try {
    Tensor x, y;
    data.batch({2, 3}, x, y);
    ddp.forward(x);
  } catch (const mgpu::Error& e) {
    message = e.what();
  }
  INFO("message: " << message);
  CHECK(message.find("module.unused.weight") != std::string::npos);
  CHECK(message.find("module.unused.bias") != std::string::npos);
  CHECK(message.find("module.fc1.weight") == std::string::npos);  // fc1 did get its gradient
  CHECK(message.find("find_unused_parameters") != std::string::npos);
}

TEST_CASE("task3: with find_unused_parameters an unused gradient stays untouched, the rest averaged",
          "[05_ddp][task3][points:3]") {
  const int w = group().size(), rank = group().rank();
  auto net = make_net(true, 13);
  auto ref = make_net(true, 13);
  CountingGroup counting(group());
  par::DistributedDataParallel ddp(net, counting, isolated<Task3Reducer>(three_buckets(true)));
  ToyData data(static_cast<std::int64_t>(w) * 2);
  ddp.zero_grad();
  nn::Parameter& unused = net->parameter("unused.weight");
  const double marker = 0.5 + rank;  // differs per rank: averaging would change it
  mgpu::fill_(unused.grad, marker);
  counting.reset();
  forward_backward(ddp, data, {2 * rank, 2 * rank + 1});
  forward_backward(*ref, data, [&] {
    std::vector<std::int64_t> all;
    for (std::int64_t i = 0; i < 2 * w; ++i) all.push_back(i);
    return all;
  }());
  CHECK(all_ranks(max_abs_diff(unused.grad, Tensor::full(unused.value.shape(), marker)) == 0));
  double worst = std::max(max_abs_diff(ref->parameter("head.weight").grad, net->parameter("head.weight").grad),
                          max_abs_diff(ref->parameter("fc1.weight").grad, net->parameter("fc1.weight").grad));
  INFO("rank " << rank << ": largest gradient difference " << worst);
  CHECK(all_ranks(worst < 1e-5));
  // All three buckets were reduced, plus the small all-reduce of the "used" flags.
  CHECK(counting.all_reduce_numels.size() == 4);
  // And the next forward works: nothing was left unfinished.
  Tensor x, y;
  data.batch({0}, x, y);
  CHECK_NOTHROW(ddp.forward(x));
  net->clear_saved();
}

// ---- the library's own pieces (not graded) ----------------------------------------------------------

TEST_CASE("library: ranks that built different models fail together, naming the first difference",
          "[05_ddp][library]") {
  const int rank = group().rank();
  if (group().size() < 2) return;
  nn::manual_seed(1);
  auto model = std::make_shared<nn::Sequential>();
  model->add(std::make_shared<nn::Linear>(6, 8));
  model->add(std::make_shared<nn::Linear>(8, rank == 1 ? 4 : 3));  // rank 1 differs
  std::string message;
  try {
    par::DistributedDataParallel ddp(model, group());
  } catch (const mgpu::Error& e) {
    message = e.what();
  }
  INFO("message: " << message);
  CHECK(message.find("parameter 2 ('1.weight')") != std::string::npos);
  CHECK(message.find("f32[3, 8] (trainable) on rank 0") != std::string::npos);
  CHECK(message.find("f32[4, 8] (trainable) on rank 1") != std::string::npos);
}

TEST_CASE("library: buffers come from rank 0 before each forward; fp16 hook; exact timings",
          "[05_ddp][library]") {
  const int w = group().size(), rank = group().rank();
  nn::manual_seed(2);
  auto model = std::make_shared<nn::Sequential>();
  model->add(std::make_shared<nn::Linear>(6, 5));
  model->add(std::make_shared<nn::BatchNorm1d>(5));
  model->add(std::make_shared<nn::Linear>(5, 3));
  par::DDPOptions o;
  o.record_timings = true;
  par::DistributedDataParallel ddp(model, group(), o);
  ddp.register_comm_hook(par::fp16_compress_hook);
  // Each rank's statistics drift apart with its own batch...
  ToyData data(static_cast<std::int64_t>(w) * 4);
  ddp.zero_grad();
  forward_backward(ddp, data, {4 * rank, 4 * rank + 1, 4 * rank + 2, 4 * rank + 3});
  Tensor mine = ddp.module().buffer("1.running_mean").clone();
  // Exact completion times: inside the step, after the launch.
  const par::StepTimeline t = ddp.last_step();
  CHECK(t.buckets.size() == 1);
  for (const par::BucketTiming& b : t.buckets) {
    CHECK(b.done_s >= b.launch_s);
    CHECK(b.done_s <= t.reduce_end);
  }
  // ...and the next forward starts from rank 0's again.
  Tensor x, y;
  data.batch({0}, x, y);
  ddp.module().eval();
  ddp.forward(x);
  ddp.module().train();
  Tensor r0 = mine.clone();
  group().broadcast(r0, 0).wait();
  CHECK(all_ranks(max_abs_diff(ddp.module().buffer("1.running_mean"), r0) == 0));
  // The fp16 hook's sum is the exact sum up to f16 rounding (3 decimal digits).
  std::vector<float> values;
  double want_sum = 0;
  for (int i = 0; i < 100; ++i) values.push_back(0.01f * static_cast<float>((i * 37 + rank * 11) % 97));
  for (int r = 0; r < w; ++r) want_sum += 0.01 * ((5 * 37 + r * 11) % 97);
  par::GradBucket bucket;
  bucket.buffer = Tensor::from_vector(values, {100});
  par::fp16_compress_hook(group(), bucket).wait();
  CHECK(std::fabs(bucket.buffer.to_vector<float>()[5] - want_sum) <= 2e-3 * std::fabs(want_sum) + 1e-3);
  CHECK(bucket.buffer.dtype() == DType::f32);
}

TEST_CASE("gpu: DDP on CUDA (mpi backend, ranks may share a GPU) matches DDP on the CPU",
          "[05_ddp][gpu]") {
  const int w = group().size(), rank = group().rank();
  const Device gpu = dist::rank_device(Device::Kind::cuda);
  static std::shared_ptr<dist::ProcessGroup> gpu_group = [&] {
    dist::GroupOptions o;
    o.announce = false;
    o.timeout_s = 60;
    return dist::new_group("mpi", gpu, o);
  }();
  ToyData data(static_cast<std::int64_t>(w) * 8);
  auto run = [&](const Device& device, dist::ProcessGroup& g) {
    auto net = make_net(true, 21);
    net->to(device);
    par::DistributedDataParallel ddp(net, g, three_buckets(true));
    mgpu::optim::SGD opt(ddp.parameters(), {0.1, 0.9, 0.0});
    for (int step = 0; step < 3; ++step) {
      Tensor x, y;
      const std::int64_t base = 8 * rank;
      data.batch({base + 2 * step, base + 2 * step + 1}, x, y);
      opt.zero_grad();
      nn::CrossEntropyLoss loss;
      loss.forward(ddp.forward(x.to(device)), y.to(device));
      ddp.backward(loss.backward());
      opt.step();
    }
    return net;
  };
  auto on_cpu = run(Device::cpu(), group());
  auto on_gpu = run(gpu, *gpu_group);
  double worst = 0;
  auto a = on_cpu->named_parameters(), b = on_gpu->named_parameters();
  for (std::size_t i = 0; i < a.size(); ++i)
    worst = std::max(worst, max_abs_diff(a[i].second->value, b[i].second->value.to(Device::cpu())));
  INFO("rank " << rank << ": largest difference " << worst);
  CHECK(all_ranks(worst < 1e-5));
}
