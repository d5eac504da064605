// Forward values against naive references, BatchNorm's running statistics, Dropout's mask,
// and the Module mechanics: names, modes, moves, clones, saved contexts, accumulation.
#include "mgpu/nn/all.h"
#include "nn_test_util.h"

using namespace mgpu;
using namespace mgpu::nn;
using nntest::uniform_tensor;
using nntest::values;

TEST_CASE("Conv2d forward equals a direct convolution", "[nn][conv2d]") {
  manual_seed(4);
  const std::int64_t N = 2, C = 3, H = 6, W = 5, O = 4, K = 3, S = 2, P = 1;
  Conv2d conv(C, O, K, S, P);
  conv.to(DType::f64);
  Tensor x = uniform_tensor({N, C, H, W}, 5);
  Tensor y = conv.forward(x);
  const std::int64_t Ho = (H + 2 * P - K) / S + 1, Wo = (W + 2 * P - K) / S + 1;
  REQUIRE(y.shape() == Shape({N, O, Ho, Wo}));
  const auto xv = values(x), wv = values(conv.weight().value), bv = values(conv.bias().value);
  std::vector<double> expect;
  for (std::int64_t n = 0; n < N; ++n)
    for (std::int64_t o = 0; o < O; ++o)
      for (std::int64_t oh = 0; oh < Ho; ++oh)
        for (std::int64_t ow = 0; ow < Wo; ++ow) {
          double acc = bv[o];
          for (std::int64_t c = 0; c < C; ++c)
            for (std::int64_t kh = 0; kh < K; ++kh)
              for (std::int64_t kw = 0; kw < K; ++kw) {
                const std::int64_t ih = oh * S - P + kh, iw = ow * S - P + kw;
                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                acc += xv[((n * C + c) * H + ih) * W + iw] * wv[((o * C + c) * K + kh) * K + kw];
              }
          expect.push_back(acc);
        }
  nntest::check_close(y, Tensor::from_vector(expect, y.shape()), 1e-12, 1e-12, "conv forward");
}

TEST_CASE("MaxPool2d forward picks each window's maximum, the first on ties", "[nn][maxpool]") {
  Tensor x = Tensor::from_vector<float>({1, 5, 2, 0,   //
                                         3, 4, 7, 7,   //
                                         9, 9, 0, -1,  //
                                         9, 1, -2, -3},
                                        {1, 1, 4, 4});
  MaxPool2d pool(2);
  Tensor y = pool.forward(x);
  CHECK(values(y) == std::vector<double>{5, 7, 9, 0});
  // Ties go to the first element in row-major window order: the gradient lands there.
  Tensor g = pool.backward(Tensor::from_vector<float>({1, 2, 3, 4}, {1, 1, 2, 2}));
  CHECK(values(g) == std::vector<double>{0, 1, 0, 0, 0, 0, 2, 0, 3, 0, 4, 0, 0, 0, 0, 0});
}

TEST_CASE("BatchNorm normalises with batch stats and tracks running stats as PyTorch",
          "[nn][batchnorm]") {
  BatchNorm1d bn(2, 1e-5, 0.1);
  bn.to(DType::f64);
  Tensor x = Tensor::from_vector<double>({1, 10, 2, 20, 3, 30, 6, 40}, {4, 2});
  Tensor y = bn.forward(x);
  bn.clear_saved();
  // Channel 0: values 1, 2, 3, 6: mean 3, biased var 3.5, unbiased 14/3.
  const double m0 = 3, v0 = 3.5, m1 = 25, v1 = 125;
  const auto yv = values(y);
  CHECK(yv[0] == Approx((1 - m0) / std::sqrt(v0 + 1e-5)).epsilon(1e-12));
  CHECK(yv[7] == Approx((40 - m1) / std::sqrt(v1 + 1e-5)).epsilon(1e-12));
  const auto rm = values(bn.running_mean()), rv = values(bn.running_var());
  CHECK(rm[0] == Approx(0.1 * m0).epsilon(1e-12));
  CHECK(rm[1] == Approx(0.1 * m1).epsilon(1e-12));
  CHECK(rv[0] == Approx(0.9 + 0.1 * v0 * 4 / 3).epsilon(1e-12));
  CHECK(rv[1] == Approx(0.9 + 0.1 * v1 * 4 / 3).epsilon(1e-12));
  CHECK(bn.num_batches_tracked().item() == 1);
  // Eval mode: the running statistics, nothing updated, nothing saved.
  bn.eval();
  Tensor ye = bn.forward(x);
  CHECK(values(ye)[0] == Approx((1 - rm[0]) / std::sqrt(rv[0] + 1e-5)).epsilon(1e-12));
  CHECK(values(bn.running_mean()) == rm);
  CHECK(bn.num_batches_tracked().item() == 1);
  CHECK_THROWS_WITH(bn.backward(ye), Catch::Contains("without a matching forward"));
  // One value per channel cannot be normalised in training mode.
  bn.train();
  CHECK_THROWS_WITH(bn.forward(Tensor::zeros({1, 2}, DType::f64)), Catch::Contains("more than 1"));
  // Wrong channel count names the layer and the shapes.
  CHECK_THROWS_WITH(bn.forward(Tensor::zeros({4, 3}, DType::f64)), Catch::Contains("BatchNorm1d"));
}

TEST_CASE("batch_norm_backward_reduce writes its sums into the outputs it is given",
          "[nn][batchnorm]") {
  // dy = x = [4, 2]; channel 0 holds 1, 2, 3, 6 (mean 3), channel 1 10, 20, 30, 40 (mean
  // 25): sum_dy = 12 and 100, sum_dy_xmu = sum(x (x - mean)) = 14 and 500.
  Tensor x = Tensor::from_vector<double>({1, 10, 2, 20, 3, 30, 6, 40}, {4, 2});
  Tensor mean = Tensor::from_vector<double>({3, 25}, {2});
  Tensor invstd = Tensor::from_vector<double>({1, 1}, {2});
  Tensor buffer = Tensor::zeros({5}, DType::f64);  // [pad | sum_dy | sum_dy_xmu]
  Tensor sum_dy = buffer.view(1, {2}), sum_dy_xmu = buffer.view(3, {2});
  batch_norm_backward_reduce(x, x, mean, invstd, sum_dy, sum_dy_xmu);
  CHECK(values(buffer) == std::vector<double>{0, 12, 100, 14, 500});
  // Undefined outputs are allocated; a defined one of the wrong shape is refused.
  Tensor a, b;
  batch_norm_backward_reduce(x, x, mean, invstd, a, b);
  CHECK(values(a) == values(sum_dy));
  CHECK(values(b) == values(sum_dy_xmu));
  Tensor wrong = Tensor::zeros({3}, DType::f64);
  CHECK_THROWS_WITH(batch_norm_backward_reduce(x, x, mean, invstd, wrong, b),
                    Catch::Contains("sum_dy is f64[3]"));
}

TEST_CASE("Dropout: eval is the identity; the mask is seeded, scaled and about p",
          "[nn][dropout]") {
  Dropout drop(0.25, 99);
  Tensor x = Tensor::full({100000}, 1.0);
  Tensor y = drop.forward(x);
  drop.clear_saved();
  std::int64_t zeros = 0;
  for (double v : values(y)) {
    if (v == 0) {
      ++zeros;
    } else {
      REQUIRE(v == Approx(1 / 0.75));
    }
  }
  CHECK(zeros == Approx(25000).margin(600));  // 4.4 standard deviations
  Tensor y2 = drop.forward(x);  // the next call draws a new mask
  drop.clear_saved();
  CHECK(values(y2) != values(y));
  drop.set_calls(0);
  CHECK(values(drop.forward(x)) == values(y));  // same counter, same mask
  drop.clear_saved();
  drop.eval();
  CHECK(values(drop.forward(x)) == values(x));
}

TEST_CASE("named parameters and buffers have stable dotted names", "[nn][module]") {
  auto features = std::make_shared<Sequential>(std::vector<std::shared_ptr<Module>>{
      std::make_shared<Conv2d>(1, 4, 3), std::make_shared<BatchNorm2d>(4), std::make_shared<ReLU>()});
  Sequential model({features, std::make_shared<Flatten>(), std::make_shared<Linear>(16, 2)});
  std::vector<std::string> names;
  for (auto& [name, p] : model.named_parameters()) {
    names.push_back(name);
    CHECK(p->name() == name);  // the parameter knows its own full name
  }
  CHECK(names == std::vector<std::string>{"0.0.weight", "0.0.bias", "0.1.weight", "0.1.bias",
                                          "2.weight", "2.bias"});
  std::vector<std::string> buffers;
  for (auto& [name, b] : model.named_buffers()) buffers.push_back(name);
  CHECK(buffers == std::vector<std::string>{"0.1.running_mean", "0.1.running_var",
                                            "0.1.num_batches_tracked"});
  CHECK(model.num_parameters() == 4 * 9 + 4 + 4 + 4 + 16 * 2 + 2);
  CHECK(&model.parameter("2.bias") == model.parameters().back());
  CHECK_THROWS_WITH(model.parameter("2.gamma"), Catch::Contains("2.weight"));
  CHECK(model.summary().find("(1): BatchNorm2d(4") != std::string::npos);
}

TEST_CASE("replace_child swaps a layer and keeps the dotted names", "[nn][module]") {
  auto features = std::make_shared<Sequential>(std::vector<std::shared_ptr<Module>>{
      std::make_shared<Conv2d>(1, 4, 3), std::make_shared<BatchNorm2d>(4)});
  Sequential model({features, std::make_shared<Flatten>()});
  auto replacement = std::make_shared<BatchNorm2d>(4, 1e-3);
  features->replace_child("1", replacement);
  CHECK(&model.parameter("0.1.weight") == &replacement->weight());
  CHECK(replacement->weight().name() == "0.1.weight");
  CHECK(model.summary().find("eps=0.001") != std::string::npos);
  CHECK_THROWS_WITH(features->replace_child("7", replacement), Catch::Contains("no child named '7'"));
  // A parameter-free child nested two levels down gives its place's name too.
  features->add(std::make_shared<ReLU>());
  features->add(std::make_shared<Linear>(2, 3));  // added after the tree was built
  CHECK(model.parameter("0.3.weight").name() == "0.3.weight");
  features->replace_child("2", std::make_shared<Linear>(2, 2));
  CHECK(model.parameter("0.2.bias").name() == "0.2.bias");
}

TEST_CASE("the same manual_seed builds the same weights", "[nn][init]") {
  manual_seed(42);
  Linear a(10, 5);
  manual_seed(42);
  Linear b(10, 5);
  Linear c(10, 5);
  CHECK(values(a.weight().value) == values(b.weight().value));
  CHECK(values(a.weight().value) != values(c.weight().value));
  for (double v : values(a.weight().value)) CHECK(std::fabs(v) <= 1 / std::sqrt(10.0));
}

TEST_CASE("clone is deep, to(dtype) converts, train/eval reach children", "[nn][module]") {
  manual_seed(5);
  Sequential net({std::make_shared<Linear>(3, 3), std::make_shared<Dropout>(0.5)});
  auto copy = net.clone();
  fill_(net.parameter("0.weight").value, 0.0);
  CHECK(values(copy->parameter("0.weight").value) != values(net.parameter("0.weight").value));
  copy->to(DType::f64);
  CHECK(copy->parameter("0.bias").value.dtype() == DType::f64);
  CHECK(copy->parameter("0.bias").grad.dtype() == DType::f64);
  net.eval();
  CHECK_FALSE(net[1].is_training());
  net.train();
  CHECK(net[1].is_training());
}

TEST_CASE("gradients accumulate over backwards until zero_grad", "[nn][module]") {
  manual_seed(6);
  Linear lin(4, 2);
  lin.to(DType::f64);
  Tensor x = uniform_tensor({3, 4}, 7), g = uniform_tensor({3, 2}, 8);
  lin.forward(x);
  lin.backward(g);
  const auto once = values(lin.weight().grad);
  lin.forward(x);
  lin.backward(g);
  const auto twice = values(lin.weight().grad);
  for (std::size_t i = 0; i < once.size(); ++i) CHECK(twice[i] == Approx(2 * once[i]));
  lin.zero_grad();
  for (double v : values(lin.weight().grad)) CHECK(v == 0);
}

TEST_CASE("saved contexts are last in, first out (micro-batches)", "[nn][module]") {
  manual_seed(7);
  Sequential net({std::make_shared<Linear>(4, 3), std::make_shared<ReLU>(),
                  std::make_shared<Linear>(3, 2)});
  net.to(DType::f64);
  Tensor a = uniform_tensor({2, 4}, 1), b = uniform_tensor({2, 4}, 2);
  Tensor ga = uniform_tensor({2, 2}, 3), gb = uniform_tensor({2, 2}, 4);
  // Reference: each micro-batch forward and backward on its own.
  net.forward(a);
  Tensor dxa = net.backward(ga);
  net.forward(b);
  Tensor dxb = net.backward(gb);
  const auto ref = values(net.parameter("0.weight").grad);
  net.zero_grad();
  // Pipeline style: both forwards, then the backwards in reverse order.
  net.forward(a);
  net.forward(b);
  nntest::check_close(net.backward(gb), dxb, 1e-15, 0, "dx of b");
  nntest::check_close(net.backward(ga), dxa, 1e-15, 0, "dx of a");
  const auto got = values(net.parameter("0.weight").grad);
  for (std::size_t i = 0; i < ref.size(); ++i) CHECK(got[i] == Approx(ref[i]).epsilon(1e-14));
  CHECK_THROWS_WITH(net.backward(ga), Catch::Contains("without a matching forward"));
}

TEST_CASE("layer errors name the layer, the operand and the fix", "[nn][errors]") {
  manual_seed(8);
  Linear lin(4, 2);
  CHECK_THROWS_WITH(lin.forward(Tensor::zeros({3, 5})), Catch::Contains("Linear(in=4"));
  CHECK_THROWS_WITH(lin.forward(Tensor::zeros({3, 4}, DType::f64)), Catch::Contains(".to(dtype)"));
  CHECK_THROWS_WITH(lin.forward(Tensor::zeros({3, 4}, DType::f32, Device::cpu(1))),
                    Catch::Contains("model.to(device)"));
  Conv2d conv(2, 2, 3);
  CHECK_THROWS_WITH(conv.forward(Tensor::zeros({1, 3, 5, 5})), Catch::Contains("[N, 2, H, W]"));
  CHECK_THROWS_WITH(conv.forward(Tensor::zeros({1, 2, 2, 2})), Catch::Contains("does not fit"));
  Linear frozen(4, 2);
  frozen.weight().set_requires_grad(false);
  CHECK_FALSE(frozen.weight().grad.defined());
}

TEST_CASE("modules run on another CPU device after to()", "[nn][module]") {
  manual_seed(9);
  Sequential net({std::make_shared<Conv2d>(1, 2, 3, 1, 1), std::make_shared<MaxPool2d>(2),
                  std::make_shared<Flatten>(), std::make_shared<Linear>(8, 2)});
  Tensor x = uniform_tensor({2, 1, 4, 4}, 3, DType::f32);
  Tensor y0 = net.forward(x);
  net.backward(Tensor::full({2, 2}, 1.0));
  net.to(Device::cpu(1));
  CHECK(net.parameter("3.weight").value.device() == Device::cpu(1));
  Tensor y1 = net.forward(x.to(Device::cpu(1)));
  CHECK(values(y1) == values(y0));
  CHECK(net.backward(Tensor::full({2, 2}, 1.0, DType::f32, Device::cpu(1))).device() == Device::cpu(1));
}

TEST_CASE("A model whose input needs no gradient skips it and keeps its parameter gradients",
          "[nn][module]") {
  for (const char* name : {"mlp", "cnn"}) {
    INFO("model " << name);
    manual_seed(11);
    auto full = make_model(name);
    auto skip = std::dynamic_pointer_cast<Sequential>(full->clone());
    REQUIRE(skip);
    skip->set_input_requires_grad(false);
    // Up to and including the first layer with parameters: Flatten and Linear, or Conv2d.
    const std::size_t first_with_params = std::string(name) == "mlp" ? 1 : 0;
    for (std::size_t i = 0; i < skip->size(); ++i) {
      INFO("layer " << i << ": " << (*skip)[i].describe());
      CHECK((*skip)[i].input_requires_grad() == (i > first_with_params));
    }
    const Tensor x = uniform_tensor({6, 1, 28, 28}, 12, DType::f32);
    const Tensor grad_out = uniform_tensor({6, 10}, 13, DType::f32);
    full->forward(x);
    skip->forward(x);
    CHECK(full->backward(grad_out).shape() == x.shape());
    CHECK_FALSE(skip->backward(grad_out).defined());
    CHECK(skip->saved_forwards() == 0);  // every layer took its context back
    const auto a = full->named_parameters(), b = skip->named_parameters();
    REQUIRE(a.size() == b.size());
    for (std::size_t i = 0; i < a.size(); ++i) {
      INFO(a[i].first);
      CHECK(values(a[i].second->grad) == values(b[i].second->grad));
    }
  }
}
