// CUDA against the CPU for every layer's forward and backward, the kernels behind them,
// and AdamW's fused update. The CPU result is computed here, on the same inputs.
#include "gpu.h"
#include "mgpu/copy.h"
#include "mgpu/nn/all.h"
#include "mgpu/optim/all.h"
#include "nn_test_util.h"

using namespace mgpu;
using namespace mgpu::nn;
using mgpu::testing::gpu_rtol;
using nntest::check_close;
using nntest::kGpu;
using nntest::uniform_tensor;
using nntest::values;

namespace {


/// Runs forward and backward of `layer` on the CPU and of its clone on the GPU with the
/// same input and output gradient; compares output, input gradient, parameter gradients.
/// atol covers sums whose terms cancel (their rounding error is relative to the terms).
void check_layer(Module& layer, const Shape& in_shape, DType dtype, std::uint64_t seed,
                 double atol) {
  layer.to(dtype);
  auto gpu_layer = layer.clone();
  gpu_layer->to(kGpu);
  Tensor x = uniform_tensor(in_shape, seed, dtype);
  Tensor y = layer.forward(x);
  Tensor yg = gpu_layer->forward(x.to(kGpu));
  const double rtol = gpu_rtol(dtype);
  check_close(yg.to(Device::cpu()), y, rtol, atol, layer.describe() + " forward");
  Tensor g = uniform_tensor(y.shape(), seed + 1, dtype);
  Tensor dx = layer.backward(g);
  Tensor dxg = gpu_layer->backward(g.to(kGpu));
  check_close(dxg.to(Device::cpu()), dx, rtol, atol, layer.describe() + " backward");
  auto cpu_params = layer.named_parameters();
  auto gpu_params = gpu_layer->named_parameters();
  for (std::size_t i = 0; i < cpu_params.size(); ++i)
    check_close(gpu_params[i].second->grad.to(Device::cpu()), cpu_params[i].second->grad, rtol,
                atol, layer.describe() + " grad of " + cpu_params[i].first);
  auto cpu_buffers = layer.named_buffers();
  auto gpu_buffers = gpu_layer->named_buffers();
  for (std::size_t i = 0; i < cpu_buffers.size(); ++i)
    check_close(gpu_buffers[i].second->to(Device::cpu()), *cpu_buffers[i].second, rtol, atol,
                layer.describe() + " buffer " + cpu_buffers[i].first);
}

}  // namespace

TEST_CASE("CUDA layers match the CPU forward and backward", "[gpu][nn]") {
  for (DType dt : {DType::f32, DType::f64}) {
    INFO("dtype " << dtype_name(dt));
    const double atol = dt == DType::f64 ? 1e-12 : 1e-5;
    manual_seed(1);
    Linear lin(70, 33);
    check_layer(lin, {37, 70}, dt, 10, atol);
    ReLU relu;
    check_layer(relu, {5, 300}, dt, 20, atol);
    Flatten flat;
    check_layer(flat, {3, 2, 5, 7}, dt, 30, atol);
    Conv2d conv(3, 8, 3, 1, 1);
    check_layer(conv, {5, 3, 14, 13}, dt, 40, atol);
    Conv2d strided(4, 6, 5, 2, 2);
    check_layer(strided, {3, 4, 17, 11}, dt, 45, atol);
    MaxPool2d pool(2);
    check_layer(pool, {4, 3, 10, 9}, dt, 50, atol);
    MaxPool2d overlapping(3, 2);
    check_layer(overlapping, {2, 5, 11, 9}, dt, 55, atol);
    BatchNorm1d bn1(17);
    check_layer(bn1, {300, 17}, dt, 60, atol);
    BatchNorm2d bn2(6);
    check_layer(bn2, {7, 6, 9, 11}, dt, 70, atol);
    Dropout drop(0.3, 77);
    check_layer(drop, {33, 65}, dt, 80, 0);
  }
}

TEST_CASE("CUDA nn kernels agree with the CPU in 16-bit types", "[gpu][nn]") {
  for (DType dt : {DType::f16, DType::bf16}) {
    INFO("dtype " << dtype_name(dt));
    ConvGeometry g;
    g.batch = 3, g.channels = 2, g.height = 9, g.width = 7, g.kernel = 3, g.stride = 2, g.padding = 1;
    Tensor x = uniform_tensor({3, 2, 9, 7}, 5, dt);
    // Copies only: bit for bit.
    CHECK(values(im2col(x.to(kGpu), g)) == values(im2col(x, g)));
    Tensor cols = uniform_tensor({g.rows(), g.cols()}, 6, dt);
    check_close(col2im(cols.to(kGpu), g).to(Device::cpu()), col2im(cols, g), gpu_rtol(dt), 1e-2,
                "col2im");
    Tensor t = uniform_tensor({3, 50, 37}, 7, dt);
    CHECK(values(transpose_inner(t.to(kGpu))) == values(transpose_inner(t)));
    CHECK(values(dropout_mask({999}, dt, kGpu, 0.5, 3)) ==
          values(dropout_mask({999}, dt, Device::cpu(), 0.5, 3)));
    BatchNormStats s = batch_norm_stats(x), sg = batch_norm_stats(x.to(kGpu));
    check_close(sg.mean.to(Device::cpu()), s.mean, 1e-5, 1e-6, "bn mean");
    check_close(sg.var.to(Device::cpu()), s.var, 1e-5, 1e-6, "bn var");
  }
}

TEST_CASE("CUDA AdamW and SGD steps match the CPU", "[gpu][optim]") {
  manual_seed(3);
  Linear cpu_lin(40, 30);
  auto gpu_lin = cpu_lin.clone();
  gpu_lin->to(kGpu);
  optim::AdamW cpu_opt(cpu_lin.parameters(), {});
  optim::AdamW gpu_opt(gpu_lin->parameters(), {});
  optim::SGD cpu_sgd(cpu_lin.parameters(), {0.1, 0.9, 1e-4});
  optim::SGD gpu_sgd(gpu_lin->parameters(), {0.1, 0.9, 1e-4});
  for (int step = 0; step < 3; ++step) {
    Tensor g = uniform_tensor({30, 40}, 100 + step, DType::f32);
    copy_(cpu_lin.weight().grad, g);
    copy_(gpu_lin->parameter("weight").grad, g.to(kGpu));
    cpu_opt.step();
    gpu_opt.step();
    cpu_sgd.step();
    gpu_sgd.step();
  }
  check_close(gpu_lin->parameter("weight").value.to(Device::cpu()), cpu_lin.weight().value, 1e-5,
              1e-6, "weights after AdamW + SGD steps");
}
