// Every layer and the loss against central finite differences, in f64 on the CPU.
#include "mgpu/nn/all.h"
#include "nn_test_util.h"

using namespace mgpu;
using namespace mgpu::nn;
using nntest::gradcheck;
using nntest::uniform_tensor;

TEST_CASE("Linear gradients match finite differences", "[nn][gradcheck][linear]") {
  manual_seed(1);
  for (bool bias : {true, false}) {
    Linear lin(5, 3, bias);
    lin.to(DType::f64);
    gradcheck(lin, uniform_tensor({4, 5}, 11), 12);
  }
}

TEST_CASE("ReLU and Flatten gradients match finite differences", "[nn][gradcheck][activation]") {
  ReLU relu;
  gradcheck(relu, uniform_tensor({3, 7}, 21), 22);
  Flatten flat;
  gradcheck(flat, uniform_tensor({2, 3, 2, 2}, 23), 24);
}

TEST_CASE("Conv2d gradients match finite differences", "[nn][gradcheck][conv2d]") {
  manual_seed(2);
  struct Case {
    std::int64_t cin, cout, k, stride, pad, h, w;
  };
  for (Case c : {Case{1, 2, 3, 1, 1, 5, 5}, Case{2, 3, 3, 2, 0, 7, 6}, Case{3, 2, 2, 1, 0, 4, 5},
                 Case{2, 2, 3, 2, 2, 4, 4}}) {
    INFO("Conv2d " << c.cin << "->" << c.cout << " k" << c.k << " s" << c.stride << " p" << c.pad);
    Conv2d conv(c.cin, c.cout, c.k, c.stride, c.pad);
    conv.to(DType::f64);
    gradcheck(conv, uniform_tensor({2, c.cin, c.h, c.w}, 31), 32);
  }
}

TEST_CASE("MaxPool2d gradients match finite differences", "[nn][gradcheck][maxpool]") {
  MaxPool2d pool2(2);
  gradcheck(pool2, uniform_tensor({2, 3, 6, 4}, 41), 42);
  MaxPool2d overlapping(3, 2);  // windows share rows and columns
  gradcheck(overlapping, uniform_tensor({2, 2, 7, 5}, 43), 44);
}

TEST_CASE("BatchNorm gradients match finite differences", "[nn][gradcheck][batchnorm]") {
  BatchNorm1d bn1(3);
  bn1.to(DType::f64);
  // Non-trivial gamma and beta so their gradients matter.
  uniform_(bn1.weight().value, 5, 0.5, 1.5);
  uniform_(bn1.bias().value, 6, -0.5, 0.5);
  gradcheck(bn1, uniform_tensor({6, 3}, 51, DType::f64, -2, 3), 52);
  BatchNorm1d bn1l(2);
  bn1l.to(DType::f64);
  gradcheck(bn1l, uniform_tensor({3, 2, 4}, 53), 54);
  BatchNorm2d bn2(2);
  bn2.to(DType::f64);
  uniform_(bn2.weight().value, 7, 0.5, 1.5);
  gradcheck(bn2, uniform_tensor({3, 2, 3, 2}, 55), 56);
  BatchNorm2d plain(2, 1e-5, 0.1, /*affine=*/false);
  plain.to(DType::f64);
  gradcheck(plain, uniform_tensor({2, 2, 2, 3}, 57), 58);
}

TEST_CASE("Dropout gradients match finite differences", "[nn][gradcheck][dropout]") {
  Dropout drop(0.4, 1234);
  drop.to(DType::f64);
  // Every evaluation must use the same mask: rewind the call counter.
  gradcheck(drop, uniform_tensor({4, 6}, 61), 62, [&] { drop.set_calls(0); });
}

TEST_CASE("a small CNN as one Sequential matches finite differences", "[nn][gradcheck][sequential]") {
  manual_seed(3);
  Sequential net({std::make_shared<Conv2d>(1, 2, 3, 1, 1), std::make_shared<BatchNorm2d>(2),
                  std::make_shared<ReLU>(), std::make_shared<MaxPool2d>(2),
                  std::make_shared<Flatten>(), std::make_shared<Linear>(8, 3)});
  net.to(DType::f64);
  gradcheck(net, uniform_tensor({3, 1, 4, 4}, 71), 72);
}

TEST_CASE("CrossEntropyLoss gradient matches finite differences", "[nn][gradcheck][loss]") {
  Tensor logits = uniform_tensor({5, 4}, 81, DType::f64, -3, 3);
  Tensor labels = Tensor::from_vector<std::int64_t>({0, 3, 1, 1, 2}, {5});
  CrossEntropyLoss ce;
  ce.forward(logits, labels);
  Tensor grad = ce.backward();
  const double h = 1e-6;
  Tensor numeric = Tensor::empty(logits.shape(), DType::f64);
  for (std::int64_t i = 0; i < logits.numel(); ++i) {
    double* p = logits.data<double>();
    const double keep = p[i];
    p[i] = keep + h;
    const double up = ce.forward(logits, labels).item();
    p[i] = keep - h;
    const double down = ce.forward(logits, labels).item();
    p[i] = keep;
    numeric.data<double>()[i] = (up - down) / (2 * h);
  }
  nntest::check_close(grad, numeric, 1e-6, 1e-9, "CrossEntropyLoss d/dlogits");
  // The loss itself: mean of -log softmax at the label.
  const auto v = nntest::values(logits);
  double expect = 0;
  const std::int64_t y[] = {0, 3, 1, 1, 2};
  for (int r = 0; r < 5; ++r) {
    double z = 0;
    for (int c = 0; c < 4; ++c) z += std::exp(v[r * 4 + c]);
    expect += std::log(z) - v[r * 4 + y[r]];
  }
  CHECK(ce.forward(logits, labels).item() == Approx(expect / 5).epsilon(1e-12));
}
