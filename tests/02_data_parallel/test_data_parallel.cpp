// Lesson 02, all tasks together: DataParallel must compute what one device computes.
// The models are f64 so "equal" can mean 1e-12: only the order of additions differs.
#include "data_parallel_test_util.h"

#include "gpu.h"
#include "mgpu/allocator.h"
#include "mgpu/ops.h"
#include "mgpu/optim/sgd.h"

using namespace lesson02_test;
namespace l02 = mgpu::lesson02;

namespace {

struct Case {
  int devices;
  std::int64_t batch;
};
// Even and uneven splits, fewer chunks than devices (5 on 4 -> 2,2,1), a single row.
const std::vector<Case> kCases = {{2, 8}, {2, 7}, {3, 10}, {4, 10}, {4, 5}, {4, 1}, {1, 6}};

// One full-batch step on a single device: the reference every DataParallel run must match.
struct Reference {
  Tensor output, loss;
  std::vector<Tensor> grads;  // undefined for frozen parameters
};

Reference single_device_step(nn::Module& model, const Tensor& x, const Tensor& labels) {
  Reference r;
  model.zero_grad();
  r.output = model.forward(x);
  nn::CrossEntropyLoss loss;
  r.loss = loss.forward(r.output, labels);
  model.backward(loss.backward());
  for (nn::Parameter* p : model.parameters()) r.grads.push_back(p->grad.defined() ? p->grad.clone() : Tensor());
  return r;
}

void check_grads_match(nn::Module& model, const Reference& ref, double tol) {
  const auto params = model.parameters();
  REQUIRE(params.size() == ref.grads.size());
  for (std::size_t j = 0; j < params.size(); ++j) {
    INFO("parameter " << params[j]->name());
    if (!ref.grads[j].defined()) {
      CHECK_FALSE(params[j]->grad.defined());
      continue;
    }
    REQUIRE(params[j]->grad.defined());
    CHECK(params[j]->grad.device() == model.device());
    CHECK(max_rel_diff(params[j]->grad, ref.grads[j].to(params[j]->grad.device())) < tol);
  }
}

}  // namespace

TEST_CASE("task4: DataParallel outputs equal the single-device outputs", "[02_data_parallel][task4][points:4]") {
  for (const Case& c : kCases) {
    INFO(c.devices << " devices, batch " << c.batch);
    auto model = small_mlp(100);
    auto reference = model->clone();
    l02::DataParallel dp(model, cpus(c.devices));
    const Tensor x = random_tensor({c.batch, 6}, 1);
    const Tensor out = dp.forward(x);
    CHECK(out.device() == Device::cpu(0));
    CHECK(out.shape() == Shape{c.batch, 3});
    CHECK(max_rel_diff(out, reference->forward(x)) < 1e-12);
    const std::int64_t rows = (c.batch + c.devices - 1) / c.devices;  // per chunk
    CHECK(static_cast<std::int64_t>(dp.last_chunk_sizes().size()) == (c.batch + rows - 1) / rows);
    dp.module().clear_saved();
    reference->clear_saved();
    for (const auto& r : dp.replicas()) r->clear_saved();
  }
}

TEST_CASE("task3: gradients on device 0 equal the full-batch gradients (frozen bias, uneven chunks)",
          "[02_data_parallel][task3][points:5]") {
  for (const Case& c : kCases) {
    INFO(c.devices << " devices, batch " << c.batch);
    auto model = small_mlp(200, /*frozen_bias=*/true);
    auto reference = model->clone();
    const Tensor x = random_tensor({c.batch, 6}, 2), labels = random_labels(c.batch, 3, 3);
    const Reference ref = single_device_step(*reference, x, labels);

    l02::DataParallel dp(model, cpus(c.devices));
    dp.zero_grad();
    const Tensor out = dp.forward(x);
    nn::CrossEntropyLoss loss;  // the loss of the gathered batch, on device 0 (as in PyTorch)
    const Tensor value = loss.forward(out, labels);
    CHECK(std::fabs(value.item() - ref.loss.item()) < 1e-12);
    const Tensor grad_x = dp.backward(loss.backward(), /*input_grad=*/true);
    check_grads_match(*model, ref, 1e-12);
    CHECK(grad_x.shape() == x.shape());
  }
}

TEST_CASE("task2: after an optimizer step on device 0, the next forward uses the new weights",
          "[02_data_parallel][task2][points:3]") {
  auto model = small_mlp(300);
  auto reference = model->clone();
  l02::DataParallel dp(model, cpus(3));
  mgpu::optim::SGD opt(model->parameters(), {0.1, 0.9, 0.0});
  mgpu::optim::SGD ref_opt(reference->parameters(), {0.1, 0.9, 0.0});
  for (int step = 0; step < 3; ++step) {
    INFO("step " << step);
    const Tensor x = random_tensor({9, 6}, 10 + step), labels = random_labels(9, 3, 20 + step);
    single_device_step(*reference, x, labels);
    ref_opt.step();
    opt.zero_grad();
    nn::CrossEntropyLoss loss;
    loss.forward(dp.forward(x), labels);
    dp.backward(loss.backward());
    opt.step();
    const auto mine = model->parameters(), theirs = reference->parameters();
    for (std::size_t j = 0; j < mine.size(); ++j)
      CHECK(max_rel_diff(mine[j]->value, theirs[j]->value) < 1e-12);
  }
  // The replicas are refreshed at the next forward: they must see the last step's weights.
  const Tensor x = random_tensor({9, 6}, 99);
  dp.eval();
  reference->eval();
  CHECK(max_rel_diff(dp.forward(x), reference->forward(x)) < 1e-12);
}

TEST_CASE("task2: wrapping a model that is not on devices[0] is a clear error",
          "[02_data_parallel][task2][points:2]") {
  auto model = small_mlp(400);
  const Tensor x = random_tensor({4, 6}, 4);
  const Tensor want = model->clone()->forward(x);
  model->to(Device::cpu(1));
  const std::string msg = error_of([&] { l02::DataParallel dp(model, cpus(2)); });
  CHECK(contains(msg, "cpu:0"));
  CHECK(contains(msg, "to("));  // says how to fix it
  CHECK(contains(error_of([&] { l02::DataParallel dp(model, {Device::cpu(1), Device::cpu(1)}); }),
                 "twice"));
  // The fix works.
  model->to(Device::cpu(0));
  l02::DataParallel dp(model, cpus(2));
  dp.eval();
  CHECK(max_rel_diff(dp.forward(x), want) < 1e-12);
}

TEST_CASE("task1: the batch is the total batch: an empty one is an error, one row uses one device",
          "[02_data_parallel][task1][points:2]") {
  auto model = small_mlp(500);
  auto reference = model->clone();
  l02::DataParallel dp(model, cpus(4));
  dp.eval();
  reference->eval();
  const std::string msg = error_of([&] { dp.forward(Tensor::zeros({0, 6}, DType::f64)); });
  CHECK(contains(msg, "total batch"));
  const Tensor x = random_tensor({1, 6}, 5);
  CHECK(max_rel_diff(dp.forward(x), reference->forward(x)) < 1e-12);
  CHECK(dp.last_chunk_sizes() == std::vector<std::int64_t>{1});
}

TEST_CASE("task2: BatchNorm's running statistics come from device 0's chunk only",
          "[02_data_parallel][task2][points:2]") {
  auto model = small_bn_mlp(600);
  auto only_chunk0 = model->clone();
  auto full_batch = model->clone();
  const Tensor x = random_tensor({8, 6}, 6), labels = random_labels(8, 3, 7);
  l02::DataParallel dp(model, cpus(2));  // chunks of 4 rows: device 0 sees rows 0..3
  nn::CrossEntropyLoss loss;
  loss.forward(dp.forward(x), labels);
  dp.backward(loss.backward());
  only_chunk0->forward(x.slice(0, 4));
  full_batch->forward(x);
  const Tensor& mine = model->buffer("1.running_mean");
  CHECK(max_rel_diff(mine, only_chunk0->buffer("1.running_mean")) < 1e-12);
  CHECK(max_rel_diff(mine, full_batch->buffer("1.running_mean")) > 1e-6);
  // Replica 1's statistics were computed and thrown away at the next broadcast.
  CHECK(max_rel_diff(dp.replicas()[1]->buffer("1.running_mean"), mine) > 1e-6);
  dp.eval();
  dp.forward(x);
  CHECK(max_rel_diff(dp.replicas()[1]->buffer("1.running_mean"), mine) < 1e-15);
}

TEST_CASE("task4: the interpreter-like lock changes only the timing: the same bits, one lock per "
          "module call",
          "[02_data_parallel][task4][points:1]") {
  auto plain_model = small_bn_mlp(650);
  auto locked_model = small_bn_mlp(650);
  const Tensor x = random_tensor({10, 6}, 651), labels = random_labels(10, 3, 652);
  l02::DataParallel plain(plain_model, cpus(3));  // chunks of 4, 4 and 2 rows
  l02::DataParallel locked(locked_model, cpus(3));
  locked.serialize_python_like(50);
  REQUIRE(locked.interpreter_lock() != nullptr);
  auto step = [&](l02::DataParallel& dp) {
    nn::CrossEntropyLoss loss;
    const Tensor out = dp.forward(x);
    loss.forward(out, labels);
    dp.backward(loss.backward());
    return out;
  };
  const std::vector<double> want = step(plain).to_vector<double>();
  const std::vector<double> got = step(locked).to_vector<double>();
  CHECK(got == want);
  const auto pg = plain_model->parameters(), lg = locked_model->parameters();
  for (std::size_t j = 0; j < pg.size(); ++j) {
    INFO("parameter " << pg[j]->name());
    CHECK(lg[j]->grad.to_vector<double>() == pg[j]->grad.to_vector<double>());
  }
  CHECK(locked_model->buffer("1.running_mean").to_vector<double>() ==
        plain_model->buffer("1.running_mean").to_vector<double>());
  // Each of the 3 replicas: one call of the Sequential and one per layer, each under the lock.
  CHECK(locked.interpreter_lock()->acquisitions() ==
        3 * (1 + static_cast<std::int64_t>(plain_model->size())));
  CHECK_THROWS_AS(locked.serialize_python_like(-1), mgpu::Error);
  locked.serialize_python_like(0);
  CHECK(locked.interpreter_lock() == nullptr);
}

TEST_CASE("task3: traffic goes through device 0, and device 0 holds the most memory",
          "[02_data_parallel][task3][points:3]") {
  // Fresh logical devices, so no other test's tensors are counted.
  const std::vector<Device> devices = {Device::cpu(6), Device::cpu(7)};
  nn::manual_seed(700);
  auto model = std::make_shared<nn::Sequential>();
  model->add(std::make_shared<nn::Linear>(64, 256));
  model->add(std::make_shared<nn::ReLU>());
  model->add(std::make_shared<nn::Linear>(256, 512));  // a wide output, as a vocabulary is
  model->to(devices[0]);
  std::size_t param_bytes = 0;
  for (nn::Parameter* p : model->parameters()) param_bytes += p->value.nbytes();
  l02::DataParallel dp(model, devices);
  mgpu::optim::SGD opt(model->parameters(), {0.01, 0.9, 0.0});
  const Tensor x = random_tensor({64, 64}, 8, DType::f32);  // on cpu:0, the host
  const Tensor labels = random_labels(64, 512, 9, devices[0]);
  for (const Device& d : devices) mgpu::reset_peak_memory(d);
  const std::size_t base0 = mgpu::memory_stats(devices[0]).allocated;
  const std::size_t base1 = mgpu::memory_stats(devices[1]).allocated;

  opt.zero_grad();
  nn::CrossEntropyLoss loss;
  loss.forward(dp.forward(x), labels);
  dp.backward(loss.backward());
  opt.step();

  const std::size_t peak0 = mgpu::memory_stats(devices[0]).peak_allocated - base0;
  const std::size_t peak1 = mgpu::memory_stats(devices[1]).peak_allocated - base1;
  const std::size_t kept0 = mgpu::memory_stats(devices[0]).allocated - base0;
  const std::size_t kept1 = mgpu::memory_stats(devices[1]).allocated - base1;
  INFO("above baseline: peak cpu:6 " << peak0 << " B, cpu:7 " << peak1 << " B; kept cpu:6 "
       << kept0 << " B, cpu:7 " << kept1 << " B");
  // Device 0 alone holds the gathered [64, 512] output, the loss's probabilities and its
  // gradient (each the full batch), and keeps the optimizer's momentum.
  const std::size_t full_out = 64 * 512 * sizeof(float);
  CHECK(peak0 > peak1 + full_out);
  CHECK(kept0 >= kept1 + param_bytes);
  const l02::Traffic& t = dp.traffic();
  const std::size_t out_bytes = full_out / 2;  // replica 1's half of the output
  CHECK(t.bytes(l02::Phase::scatter) == 64 * 64 * sizeof(float));  // both halves leave the host
  CHECK(t.bytes(l02::Phase::broadcast) == param_bytes);
  CHECK(t.bytes(l02::Phase::gather) == out_bytes);
  CHECK(t.bytes(l02::Phase::grad_scatter) == out_bytes);
  CHECK(t.bytes(l02::Phase::reduce) == param_bytes);
  // Everything but the input scatter starts or ends on device 0.
  CHECK(t.bytes_through(devices[0]) == t.total() - 32 * 64 * sizeof(float));
}

TEST_CASE("task4: DataParallel on cuda:0,cuda:1 matches one CPU device", "[02_data_parallel][task4][points:3][gpu]") {
  const std::vector<Device> gpus = {Device::cuda(0), Device::cuda(1)};
  auto model = small_mlp(800, /*frozen_bias=*/true);
  auto reference = model->clone();
  model->to(gpus[0]);
  const Tensor x = random_tensor({11, 6}, 11), labels = random_labels(11, 3, 12);
  const Reference ref = single_device_step(*reference, x, labels);
  l02::DataParallel dp(model, gpus);
  const Tensor out = dp.forward(x.to(gpus[0]));
  CHECK(out.device() == gpus[0]);
  CHECK(max_rel_diff(out, ref.output) < 1e-10);
  nn::CrossEntropyLoss loss;
  loss.forward(out, labels.to(gpus[0]));
  dp.backward(loss.backward());
  check_grads_match(*model, ref, 1e-10);
}

namespace {

// A model that returns a scalar per call: the mean of a Linear layer's outputs (a replica
// computing its own loss, the common reason for 0-d outputs under DataParallel).
class MeanOfLinear : public nn::Module {
 public:
  MeanOfLinear() { register_module("fc", std::make_shared<nn::Linear>(6, 3)); }
  Tensor forward(const Tensor& x) override {
    Tensor y = child_at(0)->forward(x);
    if (is_training()) out_shape_ = y.shape();
    return mgpu::mean(y);
  }
  Tensor backward(const Tensor& g) override {
    const double each = g.item() / static_cast<double>(mgpu::shape_numel(out_shape_));
    return child_at(0)->backward(Tensor::full(out_shape_, each, g.dtype(), g.device()));
  }
  std::shared_ptr<nn::Module> clone() const override {
    return std::shared_ptr<nn::Module>(new MeanOfLinear(*this));
  }
  std::string describe() const override { return "MeanOfLinear"; }

 protected:
  MeanOfLinear(const MeanOfLinear&) = default;

 private:
  Shape out_shape_;
};

}  // namespace

TEST_CASE("DataParallel of a model with a 0-d output: one value per replica, and backward "
          "through that vector",
          "[02_data_parallel]") {
  nn::manual_seed(43);
  auto model = std::make_shared<MeanOfLinear>();
  model->to(DType::f64);
  auto ref = std::shared_ptr<nn::Module>(model->clone());
  const Tensor x = random_tensor({6, 6}, 44);
  l02::DataParallel dp(model, cpus(3));
  dp.zero_grad();
  const Tensor per_replica = dp.forward(x);
  REQUIRE(per_replica.shape() == Shape{3});
  // Each value is its replica's mean over its own 2 rows.
  for (int i = 0; i < 3; ++i) {
    nn::Module& m = *ref;
    m.eval();
    const double want = m.forward(x.slice(2 * i, 2 * i + 2)).item();
    CHECK(std::fabs(per_replica.to_vector<double>()[static_cast<std::size_t>(i)] - want) < 1e-12);
  }
  // d(mean of the three)/d(each) = 1/3: the same gradient as the mean over all 6 rows.
  dp.backward(Tensor::full({3}, 1.0 / 3, DType::f64));
  ref->train();
  ref->zero_grad();
  ref->forward(x);
  ref->backward(Tensor::full({}, 1.0, DType::f64));
  const auto got = model->parameters(), want = ref->parameters();
  for (std::size_t j = 0; j < got.size(); ++j)
    CHECK(max_rel_diff(got[j]->grad, want[j]->grad) < 1e-12);
}
