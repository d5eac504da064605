// The CPU path's two promises: the thread count never changes a result (every op's loops
// split their work so that each output adds its terms in one fixed order), and a warm
// training step takes no new memory from the system (the allocator's caches serve it).
#include <memory>

#include "mgpu/allocator.h"
#include "mgpu/nn/all.h"
#include "mgpu/optim/sgd.h"
#include "mgpu/threads.h"
#include "nn_test_util.h"

using namespace mgpu;
using namespace mgpu::nn;
using mgpu::testing::same_bits;

namespace {

/// Restores the thread count a test changed.
struct ThreadsGuard {
  int saved = num_threads();
  ~ThreadsGuard() { set_num_threads(saved); }
};

/// One training step of `model` on (x, y); returns the loss.
double train_step(Sequential& model, optim::SGD& opt, const Tensor& x, const Tensor& y) {
  CrossEntropyLoss loss_fn;
  opt.zero_grad();
  const Tensor loss = loss_fn.forward(model.forward(x), y);
  model.backward(loss_fn.backward());
  opt.step();
  return loss.item();
}

/// Everything a CNN's two training steps produce (losses, weights, running statistics),
/// computed with `threads` threads from the same seed.
std::vector<Tensor> cnn_two_steps(int threads, DType dtype) {
  set_num_threads(threads);
  manual_seed(7);
  auto model = make_model("cnn");
  model->to(dtype);
  optim::SGD opt(model->parameters(), {0.05, 0.9, 0.0});
  // 64 images: the big layers split into several tasks, the small ones stay on one thread.
  const Tensor x = nntest::uniform_tensor({64, 1, 28, 28}, 3, dtype);
  std::vector<std::int64_t> labels(64);
  for (std::size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<std::int64_t>(i % 10);
  const Tensor y = Tensor::from_vector(labels, {64});
  std::vector<Tensor> out;
  for (int step = 0; step < 2; ++step)
    out.push_back(Tensor::full({}, train_step(*model, opt, x, y), DType::f64));
  for (const auto& [name, p] : model->named_parameters()) out.push_back(p->value.clone());
  for (const auto& [name, t] : model->named_buffers()) out.push_back(t->clone());
  return out;
}

}  // namespace

// 3 threads: the batch and the matrix products' blocks do not divide evenly among them.
TEST_CASE("A CNN's training steps give the same bits on 1, 2 and 3 threads", "[threads]") {
  ThreadsGuard guard;
  for (DType dtype : {DType::f32, DType::f64}) {
    INFO("dtype " << dtype_name(dtype));
    const std::vector<Tensor> one = cnn_two_steps(1, dtype);
    for (int threads : {2, 3}) {
      INFO(threads << " threads");
      const std::vector<Tensor> many = cnn_two_steps(threads, dtype);
      REQUIRE(many.size() == one.size());
      for (std::size_t i = 0; i < one.size(); ++i) {
        INFO("result " << i << ": " << one[i].str());
        CHECK(same_bits(one[i], many[i]));
      }
    }
  }
}

TEST_CASE("Elementwise ops and sums give the same bits on 1 and 3 threads", "[threads]") {
  ThreadsGuard guard;
  // Big enough to be split (more than 2 x 32768 elements), odd so chunks are uneven.
  const Tensor a = nntest::uniform_tensor({1001, 97}, 1, DType::f32);
  const Tensor b = nntest::uniform_tensor({1001, 97}, 2, DType::f32);
  const Tensor bias = nntest::uniform_tensor({97}, 4, DType::f32);
  auto run = [&](int threads) {
    set_num_threads(threads);
    Tensor y = add(a, b);
    axpy_(y, 0.25, b);
    add_rowwise_(y, bias);
    return std::vector<Tensor>{y, relu(y), relu_backward(b, y), sum(y, 0), sum(y, 1),
                               mean(y, 0), cast(y, DType::bf16)};
  };
  const std::vector<Tensor> one = run(1), three = run(3);
  for (std::size_t i = 0; i < one.size(); ++i) {
    INFO("result " << i << ": " << one[i].str());
    CHECK(same_bits(one[i], three[i]));
  }
}

TEST_CASE("set_num_threads refuses fewer than one thread", "[threads]") {
  ThreadsGuard guard;
  CHECK_THROWS_WITH(set_num_threads(0), Catch::Contains("give 1 or more threads"));
  set_num_threads(2);
  CHECK(num_threads() == 2);
}

TEST_CASE("A warm training step takes no new memory from the system", "[threads][memory]") {
  manual_seed(1);
  for (const char* name : {"mlp", "cnn"}) {
    INFO("model " << name);
    auto model = make_model(name);
    optim::SGD opt(model->parameters(), {0.01, 0.9, 0.0});
    const Tensor x = nntest::uniform_tensor({32, 1, 28, 28}, 5, DType::f32);
    std::vector<std::int64_t> labels(32, 3);
    const Tensor y = Tensor::from_vector(labels, {32});
    for (int step = 0; step < 2; ++step) train_step(*model, opt, x, y);  // warm the caches
    const MemoryStats before = memory_stats(Device::cpu(0));
    for (int step = 0; step < 3; ++step) train_step(*model, opt, x, y);
    const MemoryStats after = memory_stats(Device::cpu(0));
    INFO("blocks handed out: " << after.allocations - before.allocations);
    CHECK(after.allocations > before.allocations);  // the counter counts
    // Conv2d's parallel backward gives each running chunk a scratch block of column
    // gradients: how many run at once depends on the scheduling (and the load), so a measured
    // step may meet more concurrent chunks than the warm-up did, though never more than the
    // threads that run them. Anything past that is memory the cache failed to reuse.
    CHECK(after.device_mallocs - before.device_mallocs <= num_threads());
    CHECK(after.allocated == before.allocated);  // nothing kept from one step to the next
  }
}
