// Lesson 12, tasks 1 and 2 on the GPU ([gpu]: run with --require-gpu): the attention core on
// CUDA (cuBLAS strided-batched products, the CUDA softmax) against the f64 loops, in f64 to
// 1e-10 and in f32 to the CUDA-vs-CPU tolerance.
#include "gpu.h"
#include "transformer_test_util.h"

using namespace mgpu;
using namespace transformer_test;
using mgpu::testing::random_tensor;

TEST_CASE("task1: causal_attention on CUDA gives the loops' outputs and probabilities",
          "[12_transformer][task1][points:1][gpu]") {
  const std::int64_t BH = 4, T = 9, D = 8;
  const Device gpu = Device::cuda(0);
  const Tensor q = random_tensor({BH, T, D}, 61), k = random_tensor({BH, T, D}, 62),
               v = random_tensor({BH, T, D}, 63);
  const LoopForward want = loop_attention(qkv_of(q, k, v));
  for (DType dtype : {DType::f64, DType::f32}) {
    INFO(dtype_name(dtype));
    const double tol = dtype == DType::f64 ? 1e-10 : mgpu::testing::gpu_rtol(DType::f32);
    Tensor probs;
    const Tensor y = nn::causal_attention(q.to(dtype).to(gpu), k.to(dtype).to(gpu),
                                          v.to(dtype).to(gpu), &probs);
    REQUIRE(y.device() == gpu);
    REQUIRE(probs.defined());
    CHECK_BELOW("y on CUDA against the loops (largest relative difference)",
                rel_diff(y.to(Device::cpu()).to_vector<double>(), want.y), tol);
    CHECK_BELOW("p on CUDA against the loops (largest relative difference)",
                rel_diff(probs.to(Device::cpu()).to_vector<double>(), want.p), tol);
  }
}

TEST_CASE("task2: causal_attention_backward on CUDA gives the loops' gradients",
          "[12_transformer][task2][points:1][gpu]") {
  const std::int64_t BH = 4, T = 9, D = 8;
  const Device gpu = Device::cuda(0);
  const Tensor q = random_tensor({BH, T, D}, 71), k = random_tensor({BH, T, D}, 72),
               v = random_tensor({BH, T, D}, 73), dy = random_tensor({BH, T, D}, 74);
  const Qkv a = qkv_of(q, k, v);
  const LoopForward f = loop_attention(a);
  const LoopGrads want = loop_attention_grads(a, dy.to_vector<double>());
  const Tensor probs = Tensor::from_vector(f.p, {BH, T, T});
  for (DType dtype : {DType::f64, DType::f32}) {
    INFO(dtype_name(dtype));
    const double tol = dtype == DType::f64 ? 1e-10 : mgpu::testing::gpu_rtol(DType::f32);
    auto on_gpu = [&](const Tensor& t) { return t.to(dtype).to(gpu); };
    const nn::AttentionGrads g =
        nn::causal_attention_backward(on_gpu(dy), on_gpu(q), on_gpu(k), on_gpu(v), on_gpu(probs));
    REQUIRE(g.dq.defined());
    REQUIRE(g.dk.defined());
    REQUIRE(g.dv.defined());
    CHECK_BELOW("dq on CUDA against the loops (largest relative difference)",
                rel_diff(g.dq.to(Device::cpu()).to_vector<double>(), want.dq), tol);
    CHECK_BELOW("dk on CUDA against the loops (largest relative difference)",
                rel_diff(g.dk.to(Device::cpu()).to_vector<double>(), want.dk), tol);
    CHECK_BELOW("dv on CUDA against the loops (largest relative difference)",
                rel_diff(g.dv.to(Device::cpu()).to_vector<double>(), want.dv), tol);
  }
}
