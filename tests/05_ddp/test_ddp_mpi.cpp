// Lesson 05, tasks 1-4 under mpirun (2 and 3 ranks): the buckets DDP builds, the in-order
// launch, DDP against one process with the whole batch, no_sync, unused parameters, comm
// hooks, gradient_as_bucket_view and the rebuild after the first iteration.
//
// The tasks build on each other in order: task 2's tests drive a Reducer directly (no
// other task needed); task 3's run whole DDP steps (tasks 1 and 2 too); task 4's run
// several steps (tasks 1-3).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "ddp_test_util.h"
#include "grade_record.h"
#include "mgpu/allocator.h"
#include "mgpu/parallel/all.h"

using namespace ddp_test;
using mgpu::testing::record;
namespace par = mgpu::parallel;

namespace {

// Caps of 100 bytes (the first bucket too, since the cap is given).
par::DDPOptions small_buckets(bool find_unused) {
  par::DDPOptions o;
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

bool near(const std::vector<double>& got, const std::vector<double>& want, double tol = 1e-6) {
  if (got.size() != want.size()) return false;
  for (std::size_t i = 0; i < got.size(); ++i)
    if (std::fabs(got[i] - want[i]) > tol) return false;
  return true;
}

// Rank r's rows of a global batch: rows r*b .. r*b+b-1 of the step's block of W*b rows.
std::vector<std::int64_t> rows(int rank, std::int64_t b, std::int64_t step, int w) {
  std::vector<std::int64_t> out;
  for (std::int64_t i = 0; i < b; ++i) out.push_back((step * w + rank) * b + i);
  return out;
}
std::vector<std::int64_t> global_rows(std::int64_t b, std::int64_t step, int w) {
  std::vector<std::int64_t> out;
  for (int r = 0; r < w; ++r) {
    const auto part = rows(r, b, step, w);
    out.insert(out.end(), part.begin(), part.end());
  }
  return out;
}

// Largest difference between two models' parameters (values).
double worst_param_diff(nn::Module& a, nn::Module& b) {
  auto pa = a.named_parameters(), pb = b.named_parameters();
  if (pa.size() != pb.size()) return INFINITY;
  double worst = 0;
  for (std::size_t i = 0; i < pa.size(); ++i)
    worst = std::max(worst, max_abs_diff(pa[i].second->value, pb[i].second->value));
  return worst;
}

// Every rank's list equals rank 0's.
bool same_as_rank0(const std::vector<std::int64_t>& mine) {
  Tensor t = Tensor::from_vector(mine, {static_cast<std::int64_t>(mine.size())});
  Tensor r0 = t.clone();
  group().broadcast(r0, 0).wait();
  return all_ranks(max_abs_diff(t, r0) == 0);
}

std::vector<std::int64_t> layout(const par::Reducer& r) {
  std::vector<std::int64_t> out;
  for (std::size_t b = 0; b < r.num_buckets(); ++b) {
    out.push_back(-1);  // bucket separator
    for (std::size_t v : r.bucket_variables(b)) out.push_back(static_cast<std::int64_t>(v));
  }
  return out;
}

}  // namespace

// ---- task 1 ---------------------------------------------------------------------------------------

TEST_CASE("task1: DDP's first buckets: registration order by size, reversed; frozen left out; "
          "one bucket per dtype without find_unused_parameters",
          "[05_ddp][task1][points:2]") {
  auto net = make_net(true, 1);
  par::DistributedDataParallel ddp(net, group(), small_buckets(true));
  par::Reducer& r = ddp.reducer();
  // Synchronized: fc1.weight (192 B), fc1.bias (32), unused.weight (96), unused.bias (12),
  // head.weight (96), head.bias (12). Walk: [0] 192; [1, 2] 128; [3, 4] 108; [5] at the end.
  std::vector<std::string> names;
  for (nn::Parameter* p : r.variables()) names.push_back(p->name());
  CHECK(names == std::vector<std::string>{"module.fc1.weight", "module.fc1.bias",
                                          "module.unused.weight", "module.unused.bias",
                                          "module.head.weight", "module.head.bias"});
  REQUIRE(r.num_buckets() == 4);
  // Reversed: the last-registered parameters' bucket launches first.
  CHECK(r.bucket_variables(0) == std::vector<std::size_t>{5});
  CHECK(r.bucket_variables(1) == std::vector<std::size_t>{3, 4});
  CHECK(r.bucket_variables(2) == std::vector<std::size_t>{1, 2});
  CHECK(r.bucket_variables(3) == std::vector<std::size_t>{0});
  CHECK(r.bucket_bytes(1) == (3 + 24) * 4);
  // Default caps (first 1 MiB): everything in one bucket. Without find_unused_parameters
  // the first iteration has one bucket whatever the cap.
  auto small = make_net(true, 1);
  par::DDPOptions defaults;
  defaults.find_unused_parameters = true;
  par::DistributedDataParallel one(small, group(), defaults);
  CHECK(one.reducer().num_buckets() == 1);
  auto again = make_net(true, 1);
  par::DistributedDataParallel first(again, group(), small_buckets(false));
  CHECK(first.reducer().num_buckets() == 1);
}

// ---- task 2 ---------------------------------------------------------------------------------------

namespace {

// Four parameters of 3 floats; the gradient of p_v on rank r is (r + 1) * (v + 1).
struct FourParams {
  std::vector<std::unique_ptr<nn::Parameter>> owned;
  std::vector<nn::Parameter*> params;
  explicit FourParams(int rank) {
    for (int v = 0; v < 4; ++v) {
      owned.push_back(std::make_unique<nn::Parameter>("p" + std::to_string(v), Tensor::zeros({3})));
      mgpu::fill_(owned.back()->grad, (rank + 1.0) * (v + 1.0));
      params.push_back(owned.back().get());
    }
  }
};

}  // namespace

TEST_CASE("task2: buckets launch strictly in index order, each gradient divided by the world "
          "size on its way into the bucket",
          "[05_ddp][task2][points:4]") {
  const int w = group().size(), rank = group().rank();
  FourParams p(rank);
  CountingGroup counting(group());
  par::Reducer reducer(p.params, {{3}, {2, 1}, {0}}, counting);
  reducer.prepare_for_backward();
  counting.reset();
  p.params[2]->notify_grad_ready();
  p.params[1]->notify_grad_ready();  // bucket 1 is complete, but bucket 0 is not launched yet
  const int after_bucket1 = counting.collectives;
  p.params[3]->notify_grad_ready();  // bucket 0 complete: launches 0, then the waiting 1
  const int after_bucket0 = counting.collectives;
  p.params[0]->notify_grad_ready();

  CHECK(after_bucket1 == 0);
  CHECK(after_bucket0 == 2);
  CHECK(reducer.launch_order() == std::vector<std::size_t>{0, 1, 2});
  // What went on the wire: each gradient divided by the world size, in bucket order.
  REQUIRE(counting.all_reduce_inputs.size() == 3);
  const double r1 = (rank + 1.0) / w;
  CHECK(near(counting.all_reduce_inputs[0], {4 * r1, 4 * r1, 4 * r1}));
  CHECK(near(counting.all_reduce_inputs[1], {3 * r1, 3 * r1, 3 * r1, 2 * r1, 2 * r1, 2 * r1}));
  CHECK(near(counting.all_reduce_inputs[2], {r1, r1, r1}));
}

TEST_CASE("task2: with a registered comm hook the bucket holds the raw local gradients "
          "(the hook divides, not the Reducer)",
          "[05_ddp][task2][points:2]") {
  const int rank = group().rank();
  FourParams p(rank);
  par::Reducer reducer(p.params, {{3, 2}, {1, 0}}, group());
  std::vector<std::vector<double>> seen;
  reducer.register_comm_hook([&](dist::ProcessGroup& g, par::GradBucket& b) {
    seen.push_back(b.buffer.to_vector<double>());
    return par::allreduce_hook(g, b);
  });
  reducer.prepare_for_backward();
  for (int v : {3, 2, 1, 0}) p.params[static_cast<std::size_t>(v)]->notify_grad_ready();
  REQUIRE(seen.size() == 2);
  const double r1 = rank + 1.0;
  CHECK(near(seen[0], {4 * r1, 4 * r1, 4 * r1, 3 * r1, 3 * r1, 3 * r1}));
  CHECK(near(seen[1], {2 * r1, 2 * r1, 2 * r1, r1, r1, r1}));
}

TEST_CASE("task2: a bucket's all-reduce starts during backward, before the earlier layers' grads",
          "[05_ddp][task2][points:2]") {
  auto net = make_net(false, 3);
  std::vector<nn::Parameter*> params;
  for (nn::Parameter* p : net->parameters())
    if (p->requires_grad()) params.push_back(p);  // fc1.weight, fc1.bias, head.weight, head.bias
  par::Reducer reducer(params, {{2, 3}, {0, 1}}, group());
  // Record, at each launch, whether fc1's weight gradient had been computed yet.
  std::vector<int> fc1_ready_at_launch;
  reducer.register_comm_hook([&](dist::ProcessGroup& g, par::GradBucket& b) {
    double mass = 0;
    for (float x : params[0]->grad.to_vector<float>()) mass += std::fabs(x);
    fc1_ready_at_launch.push_back(mass > 0 ? 1 : 0);
    return par::allreduce_hook(g, b);
  });
  ToyData data(8);
  net->zero_grad();
  reducer.prepare_for_backward();
  forward_backward(*net, data, {0, 1, 2, 3});  // the module's own backward fires the hooks
  // Bucket 0 (head) went out before fc1's gradient existed: communication overlapped backward.
  CHECK(fc1_ready_at_launch == std::vector<int>{0, 1});
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
  par::DistributedDataParallel ddp(net, group(), small_buckets(true));
  mgpu::optim::SGD opt(ddp.parameters(), {0.1, 0.9, 0.0});
  for (std::int64_t step = 0; step < 5; ++step) {
    const std::int64_t rows_now = step < 4 ? b : 3;
    std::vector<std::int64_t> global, mine;
    for (int r = 0; r < w; ++r)
      for (std::int64_t i = 0; i < rows_now; ++i) {
        const std::int64_t row = step * w * b + r * rows_now + i;
        global.push_back(row);
        if (r == rank) mine.push_back(row);
      }
    ref_opt.zero_grad();
    forward_backward(*ref, data, global);
    ref_opt.step();
    opt.zero_grad();
    forward_backward(ddp, data, mine);
    opt.step();
  }
  // Every parameter (frozen and unused ones too) matches the single-process run...
  const double worst = worst_param_diff(*ref, *net);
  for (auto& [name, p] : net->named_parameters()) record(name, p->value, 2e-5);
  INFO("rank " << rank << ": largest difference " << worst);
  CHECK(all_ranks(worst < 1e-5));
  // ...and the replicas are bit-identical to rank 0's.
  bool same = true;
  for (auto& [name, p] : net->named_parameters()) {
    Tensor r0 = p->value.clone();
    group().broadcast(r0, 0).wait();
    same = same && max_abs_diff(r0, p->value) == 0;
  }
  CHECK(all_ranks(same));
}

TEST_CASE("task3: no_sync() issues no collective; the next backward reduces the accumulated grads",
          "[05_ddp][task3][points:3]") {
  const int w = group().size(), rank = group().rank();
  ToyData data(static_cast<std::int64_t>(w) * 6);
  auto net = make_net(false, 5);
  auto ref = make_net(false, 5);
  CountingGroup counting(group());
  par::DistributedDataParallel ddp(net, counting, par::DDPOptions{});
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
  CHECK(reduced == 1);  // the first iteration's single bucket, once
  INFO("rank " << rank << ": largest gradient difference " << worst);
  CHECK(all_ranks(worst < 1e-5));
}

TEST_CASE("task3: an unused parameter without find_unused_parameters fails the next forward, "
          "naming it and the fix",
          "[05_ddp][task3][points:2]") {
  auto net = make_net(true, 9);
  par::DistributedDataParallel ddp(net, group(), par::DDPOptions{});
  ToyData data(8);
  forward_backward(ddp, data, {0, 1});  // the reduction stays unfinished: the bucket never fills
  std::string message;
  try {
    Tensor x, y;
    data.batch({2, 3}, x, y);
    ddp.forward(x);
  } catch (const mgpu::Error& e) {
    message = e.what();
  }
  INFO("message: " << message);
  record("names unused.weight, unused.bias, fc1.weight, the fix",
         std::vector<double>{message.find("module.unused.weight") != std::string::npos ? 1.0 : 0.0,
                             message.find("module.unused.bias") != std::string::npos ? 1.0 : 0.0,
                             message.find("module.fc1.weight") != std::string::npos ? 1.0 : 0.0,
                             message.find("find_unused_parameters") != std::string::npos ? 1.0 : 0.0},
         0.0);
  CHECK(message.find("module.unused.weight") != std::string::npos);
  CHECK(message.find("module.unused.bias") != std::string::npos);
  CHECK(message.find("module.fc1.weight") == std::string::npos);  // fc1 did get its gradient
  CHECK(message.find("find_unused_parameters") != std::string::npos);
  net->clear_saved();
}

TEST_CASE("task3: with find_unused_parameters an unused gradient stays untouched, the rest averaged",
          "[05_ddp][task3][points:2]") {
  const int w = group().size(), rank = group().rank();
  auto net = make_net(true, 13);
  auto ref = make_net(true, 13);
  CountingGroup counting(group());
  par::DistributedDataParallel ddp(net, counting, small_buckets(true));
  ToyData data(static_cast<std::int64_t>(w) * 2);
  ddp.zero_grad();
  nn::Parameter& unused = net->parameter("unused.weight");
  const double marker = 0.5 + rank;  // differs per rank: averaging would change it
  mgpu::fill_(unused.grad, marker);
  counting.reset();
  forward_backward(ddp, data, {2 * rank, 2 * rank + 1});
  forward_backward(*ref, data, global_rows(2, 0, w));
  CHECK(all_ranks(max_abs_diff(unused.grad, Tensor::full(unused.value.shape(), marker)) == 0));
  double worst = std::max(max_abs_diff(ref->parameter("head.weight").grad, net->parameter("head.weight").grad),
                          max_abs_diff(ref->parameter("fc1.weight").grad, net->parameter("fc1.weight").grad));
  INFO("rank " << rank << ": largest gradient difference " << worst);
  CHECK(all_ranks(worst < 1e-5));
  // All four buckets were reduced, plus the small all-reduce of the "used" flags.
  CHECK(counting.all_reduce_numels.size() == 5);
  // And the next forward works: nothing was left unfinished.
  Tensor x, y;
  data.batch({0}, x, y);
  CHECK_NOTHROW(ddp.forward(x));
  net->clear_saved();
}

TEST_CASE("task3: comm hooks: allreduce_hook gives DDP's average, fp16_compress_hook the same "
          "up to f16 rounding",
          "[05_ddp][task3][points:3]") {
  const int w = group().size(), rank = group().rank();
  ToyData data(static_cast<std::int64_t>(w) * 4);
  auto run = [&](par::CommHook hook) {
    auto net = make_net(false, 17);
    par::DistributedDataParallel ddp(net, group(), small_buckets(true));
    if (hook) ddp.register_comm_hook(hook);
    ddp.zero_grad();
    forward_backward(ddp, data, rows(rank, 4, 0, w));
    return net;
  };
  auto plain = run(nullptr);
  auto with_allreduce = run(par::allreduce_hook);
  auto with_fp16 = run(par::fp16_compress_hook);
  double exact = 0, fp16 = 0, scale = 0;
  auto a = plain->named_parameters(), b = with_allreduce->named_parameters(),
       c = with_fp16->named_parameters();
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (!a[i].second->requires_grad()) continue;
    exact = std::max(exact, max_abs_diff(a[i].second->grad, b[i].second->grad));
    fp16 = std::max(fp16, max_abs_diff(a[i].second->grad, c[i].second->grad));
    for (double g : a[i].second->grad.to_vector<double>()) scale = std::max(scale, std::fabs(g));
  }
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (!a[i].second->requires_grad()) continue;
    record("plain " + a[i].first, a[i].second->grad, 2e-5);
    record("allreduce_hook " + b[i].first, b[i].second->grad, 2e-5);
    record("fp16_compress_hook " + c[i].first, c[i].second->grad, 2 * (2e-3 * scale + 1e-4));
  }
  INFO("rank " << rank << ": allreduce_hook differs by " << exact << ", fp16 by " << fp16
               << " (largest gradient " << scale << ")");
  CHECK(all_ranks(exact < 1e-6));
  CHECK(all_ranks(fp16 <= 2e-3 * scale + 1e-4));
}

TEST_CASE("task3: gradient_as_bucket_view: the grads are the buckets' memory, the results the "
          "same, one gradient-sized copy saved",
          "[05_ddp][task3][points:3]") {
  const int w = group().size(), rank = group().rank();
  ToyData data(static_cast<std::int64_t>(w) * 12);
  const Device cpu = Device::cpu();
  auto run = [&](bool as_view, std::size_t& extra_bytes) {
    auto net = make_net(false, 19);
    mgpu::reset_peak_memory(cpu);
    const std::size_t before = mgpu::memory_stats(cpu).allocated;
    par::DDPOptions o = small_buckets(true);
    o.gradient_as_bucket_view = as_view;
    auto ddp = std::make_shared<par::DistributedDataParallel>(net, group(), o);
    extra_bytes = mgpu::memory_stats(cpu).allocated - before;  // what wrapping added
    mgpu::optim::SGD opt(ddp->parameters(), {0.1, 0.9, 0.0});
    for (std::int64_t step = 0; step < 3; ++step) {
      opt.zero_grad();
      forward_backward(*ddp, data, rows(rank, 4, step, w));
      opt.step();
    }
    bool views = true;
    const par::Reducer& r = ddp->reducer();
    for (std::size_t b = 0; b < r.num_buckets(); ++b)
      for (std::size_t v : r.bucket_variables(b))
        views = views && r.variables()[v]->grad.shares_storage(r.bucket_buffer(b));
    return std::make_pair(net, views);
  };
  std::size_t copy_bytes = 0, view_bytes = 0;
  auto [copied, copied_views] = run(false, copy_bytes);
  auto [viewed, viewed_views] = run(true, view_bytes);
  for (auto& [name, p] : viewed->named_parameters()) record(name, p->value, 1e-4);
  record("views, bytes saved", std::vector<double>{copied_views ? 1.0 : 0.0, viewed_views ? 1.0 : 0.0,
                                                   static_cast<double>(copy_bytes - view_bytes)}, 0.0);
  CHECK_FALSE(copied_views);
  CHECK(viewed_views);
  // The same training either way.
  CHECK(all_ranks(worst_param_diff(*copied, *viewed) < 1e-6));
  // Wrapping allocates the buckets (one gradient's worth); with views the old grads go.
  std::size_t grad_bytes = 0;
  for (nn::Parameter* p : copied->parameters())
    if (p->requires_grad()) grad_bytes += p->value.nbytes();
  INFO("wrapping added " << copy_bytes << " bytes with copies, " << view_bytes
                         << " with views; the gradients are " << grad_bytes << " bytes");
  CHECK(copy_bytes - view_bytes == grad_bytes);
}

// ---- task 4 ---------------------------------------------------------------------------------------

TEST_CASE("task4: the second forward rebuilds the buckets once, in the order the gradients "
          "became ready, with the given cap for the first bucket too",
          "[05_ddp][task4][points:3]") {
  const int w = group().size(), rank = group().rank();
  ToyData data(static_cast<std::int64_t>(w) * 16);
  auto net = make_net(false, 23);
  par::DistributedDataParallel ddp(net, group(), small_buckets(false));
  // Synchronized: 0 fc1.weight (192 B), 1 fc1.bias (32), 2 head.weight (96), 3 head.bias (12).
  REQUIRE(ddp.reducer().num_buckets() == 1);  // the first iteration: one bucket
  CHECK(ddp.reducer().bucket_variables(0) == std::vector<std::size_t>{0, 1, 2, 3});
  std::vector<int> rebuilt;
  for (std::int64_t step = 0; step < 3; ++step) {
    ddp.zero_grad();
    forward_backward(ddp, data, rows(rank, 4, step, w));
    rebuilt.push_back(ddp.last_step().rebuilt_buckets ? 1 : 0);
  }
  CHECK(rebuilt == std::vector<int>{0, 1, 0});  // before the second forward, and only then
  const par::Reducer& r = ddp.reducer();
  CHECK(r.has_rebuilt_buckets());
  // Backward fired head.bias, head.weight, fc1.bias, fc1.weight (each layer's bias before
  // its weight, as PyTorch's autograd delivers them). Caps 100 B: 12 + 96 >= 100 closes
  // [3, 2]; 32 + 192 closes [1, 0]: PyTorch's buckets for this model.
  CHECK(r.rebuilt_from_order() == std::vector<std::size_t>{3, 2, 1, 0});
  REQUIRE(r.num_buckets() == 2);
  CHECK(r.bucket_variables(0) == std::vector<std::size_t>{3, 2});
  CHECK(r.bucket_variables(1) == std::vector<std::size_t>{1, 0});
}

TEST_CASE("task4: without bucket_cap_mb the rebuilt first bucket has PyTorch's 1 MiB cap",
          "[05_ddp][task4][points:1]") {
  const int w = group().size(), rank = group().rank();
  // The last layer's bias (0.11 MiB) becomes ready first, then its weight (8 x 30000:
  // 0.92 MiB): the first bucket reaches 1 MiB and closes.
  nn::manual_seed(29);
  auto model = std::make_shared<nn::Sequential>();
  model->add(std::make_shared<nn::Linear>(6, 8));
  model->add(std::make_shared<nn::Linear>(8, 30000));
  par::DistributedDataParallel ddp(model, group(), par::DDPOptions{});
  ToyData data(static_cast<std::int64_t>(w) * 8);
  for (std::int64_t step = 0; step < 2; ++step) {
    ddp.zero_grad();
    Tensor x, y;
    data.batch(rows(rank, 2, step, w), x, y);
    nn::CrossEntropyLoss loss;
    loss.forward(ddp.forward(x), y);
    ddp.backward(loss.backward());
  }
  const par::Reducer& r = ddp.reducer();
  REQUIRE(r.num_buckets() == 2);
  CHECK(r.bucket_variables(0) == std::vector<std::size_t>{3, 2});  // 1.03 MiB >= 1 MiB
  CHECK(r.bucket_variables(1) == std::vector<std::size_t>{1, 0});  // the rest, cap 25 MiB
}

TEST_CASE("task4: ranks that saw different ready orders all adopt rank 0's buckets, and "
          "still average correctly",
          "[05_ddp][task4][points:2]") {
  const int w = group().size(), rank = group().rank();
  ToyData data(static_cast<std::int64_t>(w) * 12);
  nn::manual_seed(31);
  auto net = std::make_shared<TwoBranch>(/*a_first=*/rank % 2 == 0);
  nn::manual_seed(31);
  auto ref = std::make_shared<TwoBranch>(true);
  // Variables: 0 a.weight (72 B), 1 a.bias (12), 2 b.weight (72), 3 b.bias (12), each bias
  // ready before its weight. Cap 80 B: rank 0 (a first) builds [1, 0], [3, 2]; rank 1 (b
  // first) would build [3, 2], [1, 0].
  par::DDPOptions o;
  o.bucket_cap_mb = bytes_to_mib(80);
  par::DistributedDataParallel ddp(net, group(), o);
  mgpu::optim::SGD opt(ddp.parameters(), {0.1, 0.0, 0.0});
  mgpu::optim::SGD ref_opt(ref->parameters(), {0.1, 0.0, 0.0});
  for (std::int64_t step = 0; step < 3; ++step) {
    opt.zero_grad();
    forward_backward(ddp, data, rows(rank, 4, step, w));
    opt.step();
    ref_opt.zero_grad();
    forward_backward(*ref, data, global_rows(4, step, w));
    ref_opt.step();
  }
  const std::vector<std::int64_t> mine = layout(ddp.reducer());
  CHECK(mine == std::vector<std::int64_t>{-1, 1, 0, -1, 3, 2});
  CHECK(same_as_rank0(mine));
  const double worst = worst_param_diff(*ref, *net);
  for (auto& [name, p] : net->named_parameters()) record(name, p->value, 2e-5);
  INFO("rank " << rank << ": largest difference " << worst);
  CHECK(all_ranks(worst < 1e-5));
}

TEST_CASE("task4: never a rebuild with find_unused_parameters, nor before a synchronized backward",
          "[05_ddp][task4][points:2]") {
  const int w = group().size(), rank = group().rank();
  ToyData data(static_cast<std::int64_t>(w) * 16);
  // find_unused_parameters: the construction-time buckets stay.
  auto net = make_net(true, 37);
  par::DistributedDataParallel ddp(net, group(), small_buckets(true));
  const std::vector<std::int64_t> before = layout(ddp.reducer());
  for (std::int64_t step = 0; step < 3; ++step) {
    ddp.zero_grad();
    forward_backward(ddp, data, rows(rank, 4, step, w));
  }
  CHECK_FALSE(ddp.reducer().has_rebuilt_buckets());
  CHECK(layout(ddp.reducer()) == before);
  // no_sync: nothing recorded, so nothing to rebuild until a synchronized backward.
  auto plain = make_net(false, 37);
  par::DistributedDataParallel acc(plain, group(), small_buckets(false));
  {
    auto guard = acc.no_sync();
    forward_backward(acc, data, rows(rank, 4, 0, w));
    forward_backward(acc, data, rows(rank, 4, 1, w));
  }
  CHECK(acc.reducer().num_buckets() == 1);
  forward_backward(acc, data, rows(rank, 4, 2, w));  // synchronized: records the order
  CHECK(acc.reducer().num_buckets() == 1);
  forward_backward(acc, data, rows(rank, 4, 3, w));  // this forward rebuilds
  CHECK(acc.reducer().num_buckets() == 2);
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

// fc1 -> ReLU -> head, with a Linear 8->8 "extra" between them while `use_extra` is set:
// a parameter that takes part in some steps and not in others.
class SometimesUsed : public nn::Module {
 public:
  bool use_extra = true;
  SometimesUsed() {
    register_module("fc1", std::make_shared<nn::Linear>(6, 8));
    register_module("act", std::make_shared<nn::ReLU>());
    register_module("extra", std::make_shared<nn::Linear>(8, 8));
    register_module("head", std::make_shared<nn::Linear>(8, 3));
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = child_at(1)->forward(child_at(0)->forward(x));
    if (use_extra) h = child_at(2)->forward(h);
    return child_at(3)->forward(h);
  }
  Tensor backward(const Tensor& g) override {
    Tensor h = child_at(3)->backward(g);
    if (use_extra) h = child_at(2)->backward(h);
    return child_at(0)->backward(child_at(1)->backward(h));
  }
  std::shared_ptr<nn::Module> clone() const override {
    return std::shared_ptr<nn::Module>(new SometimesUsed(*this));
  }
  std::string describe() const override { return "SometimesUsed"; }

 protected:
  SometimesUsed(const SometimesUsed&) = default;
};

TEST_CASE("library: after the rebuild, every training forward still checks the prior reduction, "
          "also under no_sync",
          "[05_ddp][library]") {
  nn::manual_seed(43);
  auto net = std::make_shared<SometimesUsed>();
  par::DistributedDataParallel ddp(net, group(), small_buckets(false));
  ToyData data(8);
  forward_backward(ddp, data, {0, 1});  // records the order
  forward_backward(ddp, data, {2, 3});  // this forward rebuilds
  REQUIRE(ddp.reducer().has_rebuilt_buckets());
  net->use_extra = false;
  forward_backward(ddp, data, {4, 5});  // "extra" gets no gradient: left unfinished
  std::string message;
  try {
    auto guard = ddp.no_sync();
    Tensor x, y;
    data.batch({6, 7}, x, y);
    ddp.forward(x);
  } catch (const mgpu::Error& e) {
    message = e.what();
  }
  INFO("message: " << message);
  CHECK(message.find("module.extra.weight") != std::string::npos);
  // PyTorch's words too, so that a search for the message finds PyTorch's answers.
  CHECK(message.find("Expected to have finished reduction in the prior iteration before "
                     "starting a new one") != std::string::npos);
  CHECK(message.find("Parameter indices which did not receive grad for rank " +
                     std::to_string(group().rank()) + ": ") != std::string::npos);
  net->clear_saved();
}

TEST_CASE("library: bucket_state_dict carries the rebuilt buckets, or the order before the "
          "rebuild, into a fresh DDP",
          "[05_ddp][library]") {
  const int w = group().size(), rank = group().rank();
  ToyData data(static_cast<std::int64_t>(w) * 2 * 4);
  auto fresh = [] {
    nn::manual_seed(44);
    return std::make_shared<par::DistributedDataParallel>(std::make_shared<TrapNet>(false),
                                                          group(), small_buckets(false));
  };
  // Before any backward there is nothing to carry.
  auto first = fresh();
  CHECK(first->bucket_state_dict().empty());
  // After the first backward: the recorded order. A fresh DDP that takes it rebuilds in the
  // next forward into the buckets the first one builds.
  forward_backward(*first, data, rows(rank, 2, 0, w));
  const mgpu::io::StateDict before_rebuild = first->bucket_state_dict();
  REQUIRE(before_rebuild.count("ready_order") == 1);
  forward_backward(*first, data, rows(rank, 2, 1, w));  // rebuilds
  REQUIRE(first->reducer().has_rebuilt_buckets());
  REQUIRE(first->reducer().num_buckets() > 1);
  auto second = fresh();
  second->load_bucket_state_dict(before_rebuild, "test");
  forward_backward(*second, data, rows(rank, 2, 1, w));
  CHECK(second->reducer().has_rebuilt_buckets());
  CHECK(second->reducer().bucket_indices() == first->reducer().bucket_indices());
  // After the rebuild: the buckets themselves, taken without another rebuild.
  const mgpu::io::StateDict after_rebuild = first->bucket_state_dict();
  REQUIRE(after_rebuild.count("bucket_sizes") == 1);
  auto third = fresh();
  third->load_bucket_state_dict(after_rebuild, "test");
  CHECK(third->reducer().has_rebuilt_buckets());
  CHECK(third->reducer().bucket_indices() == first->reducer().bucket_indices());
  forward_backward(*third, data, rows(rank, 2, 2, w));
  CHECK(third->reducer().bucket_indices() == first->reducer().bucket_indices());
  // A state for another model is refused, naming where it came from.
  nn::manual_seed(44);
  par::DistributedDataParallel other(std::make_shared<TrapNet>(true), group(), small_buckets(false));
  std::string message;
  try {
    other.load_bucket_state_dict(after_rebuild, "ckpt.safetensors");
  } catch (const mgpu::Error& e) {
    message = e.what();
  }
  INFO("message: " << message);
  CHECK(message.find("ckpt.safetensors") != std::string::npos);
  for (auto* d : {first.get(), second.get(), third.get()}) d->module().clear_saved();
}

TEST_CASE("library: register_comm_hook may be called once", "[05_ddp][library]") {
  auto net = make_net(false, 41);
  par::DistributedDataParallel ddp(net, group());
  ddp.register_comm_hook(par::allreduce_hook);
  std::string message;
  try {
    ddp.register_comm_hook(par::fp16_compress_hook);
  } catch (const mgpu::Error& e) {
    message = e.what();
  }
  CHECK(message.find("only once") != std::string::npos);
}

TEST_CASE("library: buffers come from rank 0 before each forward; fp16 hook; exact timings",
          "[05_ddp][library]") {
  const int w = group().size(), rank = group().rank();
  nn::manual_seed(2);
  auto model = std::make_shared<nn::Sequential>();
  model->add(std::make_shared<nn::Linear>(6, 5));
  model->add(std::make_shared<nn::BatchNorm1d>(5));
  model->add(std::make_shared<nn::Linear>(5, 3));
  par::DistributedDataParallel ddp(model, group(), par::DDPOptions{});
  par::CommLog timer;
  ddp.reducer().set_comm_log(&timer);
  // Each rank's statistics drift apart with its own batch...
  ToyData data(static_cast<std::int64_t>(w) * 4);
  ddp.zero_grad();
  forward_backward(ddp, data, {4 * rank, 4 * rank + 1, 4 * rank + 2, 4 * rank + 3});
  Tensor mine = ddp.module().buffer("1.running_mean").clone();
  // Exact completion times: inside the step, after the launch.
  const par::StepTimeline t = ddp.last_step();
  const std::vector<par::CommRecord> timings = timer.take();
  CHECK(timings.size() == 1);
  for (const par::CommRecord& b : timings) {
    CHECK(b.launch_s >= t.backward_begin);
    CHECK(b.done_s >= b.launch_s);
    CHECK(b.done_s <= t.reduce_end);
  }
  CHECK(timer.take().empty());
  // ...and the next forward starts from rank 0's again.
  Tensor x, y;
  data.batch({0}, x, y);
  ddp.module().eval();
  ddp.forward(x);
  ddp.module().train();
  Tensor r0 = mine.clone();
  group().broadcast(r0, 0).wait();
  CHECK(all_ranks(max_abs_diff(ddp.module().buffer("1.running_mean"), r0) == 0));
  // The fp16 hook's result is the average up to f16 rounding (3 decimal digits).
  std::vector<float> values;
  double want = 0;
  for (int i = 0; i < 100; ++i) values.push_back(0.01f * static_cast<float>((i * 37 + rank * 11) % 97));
  for (int r = 0; r < w; ++r) want += 0.01 * ((5 * 37 + r * 11) % 97) / w;
  par::GradBucket bucket;
  bucket.buffer = Tensor::from_vector(values, {100});
  par::fp16_compress_hook(group(), bucket).wait();
  CHECK(std::fabs(bucket.buffer.to_vector<float>()[5] - want) <= 2e-3 * std::fabs(want) + 1e-3);
  CHECK(bucket.buffer.dtype() == DType::f32);
}

TEST_CASE("gpu: DDP on CUDA (mpi backend, ranks may share a GPU) matches DDP on the CPU",
          "[05_ddp][gpu]") {
  const int w = group().size(), rank = group().rank();
  const Device gpu = dist::rank_device(Device::Kind::cuda);
  dist::ProcessGroup& gpu_group = mgpu::testing::rank_gpu_group();
  ToyData data(static_cast<std::int64_t>(w) * 8);
  auto run = [&](const Device& device, dist::ProcessGroup& g, bool as_view) {
    auto net = make_net(false, 21);
    net->to(device);
    par::DDPOptions o = small_buckets(false);
    o.gradient_as_bucket_view = as_view;
    par::DistributedDataParallel ddp(net, g, o);
    mgpu::optim::SGD opt(ddp.parameters(), {0.1, 0.9, 0.0});
    for (int step = 0; step < 3; ++step) {  // the second forward rebuilds the buckets
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
  auto on_cpu = run(Device::cpu(), group(), false);
  for (bool as_view : {false, true}) {
    auto on_gpu = run(gpu, gpu_group, as_view);
    double worst = 0;
    auto a = on_cpu->named_parameters(), b = on_gpu->named_parameters();
    for (std::size_t i = 0; i < a.size(); ++i)
      worst = std::max(worst, max_abs_diff(a[i].second->value, b[i].second->value.to(Device::cpu())));
    INFO("rank " << rank << ", gradient_as_bucket_view " << as_view << ": largest difference " << worst);
    CHECK(all_ranks(worst < 1e-5));
  }
}
