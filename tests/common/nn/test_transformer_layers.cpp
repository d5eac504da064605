// The transformer's layers and ops: LayerNorm and GELU (tanh form) against values PyTorch
// prints for the same inputs, Embedding, the batched matrix product and the (causal)
// softmax against plain loops, gradients against central finite differences in f64, and
// ([gpu]) CUDA against the CPU in every floating dtype.
#include "gpu.h"
#include "mgpu/nn/all.h"
#include "nn_test_util.h"

using namespace mgpu;
using namespace mgpu::nn;
using mgpu::testing::gpu_rtol;
using nntest::check_close;
using nntest::gradcheck;
using nntest::uniform_tensor;
using nntest::values;

namespace {

Tensor f64(std::vector<double> v, Shape shape) { return Tensor::from_vector(v, shape); }

}  // namespace

TEST_CASE("GELU (tanh) gives PyTorch's values and slopes", "[nn][transformer][gelu]") {
  // torch.nn.functional.gelu(x, approximate='tanh') in float64, and its derivative.
  const Tensor x = f64({-2.0, -0.5, 0.0, 0.25, 1.0, 3.0}, {6});
  const Tensor want_y = f64({-0.045402305912224938, -0.15428599017485606, 0, 0.149675350701685,
                             0.84119199060827676, 2.9963626079182268}, {6});
  const Tensor want_dy = f64({-0.086099256623618295, 0.13263009646535764, 0.5,
                              0.69535409515106039, 1.0829640838457826, 1.0115841666309695}, {6});
  check_close(gelu(x), want_y, 1e-14, 1e-16, "gelu");
  check_close(gelu_backward(Tensor::full({6}, 1.0, DType::f64), x), want_dy, 1e-14, 1e-16,
              "gelu slope");
}

TEST_CASE("LayerNorm gives PyTorch's values: each row normalized on its own",
          "[nn][transformer][layernorm]") {
  LayerNorm ln(4);
  ln.to(DType::f64);
  CHECK(ln.eps() == 1e-5);
  CHECK(values(ln.weight().value) == std::vector<double>{1, 1, 1, 1});  // PyTorch's init
  CHECK(values(ln.bias().value) == std::vector<double>{0, 0, 0, 0});
  cast_(ln.weight().value, f64({1.0, 2.0, -0.5, 0.25}, {4}));
  cast_(ln.bias().value, f64({0.0, 0.1, -0.2, 0.3}, {4}));
  const Tensor x = f64({1, 2, 3, 5, -1, 0.5, 0.5, 2}, {2, 4});
  // torch.nn.LayerNorm(4) in float64 with the same weight and bias.
  const Tensor want = f64({-1.1832132521355803, -0.9141827875447831, -0.28451523229539866,
                           0.6803185453292937, -1.4142072770213869, 0.1, -0.2,
                           0.65355181925534667}, {2, 4});
  check_close(ln.forward(x), want, 1e-13, 1e-15, "LayerNorm forward");
  ln.clear_saved();
  // A row does not see the other rows: the first row alone gives the same first row.
  check_close(ln.forward(x.slice(0, 1)), want.slice(0, 1), 1e-15, 1e-15, "one row alone");
  ln.clear_saved();
  // Training and evaluation mode compute the same thing (no running statistics).
  ln.eval();
  check_close(ln.forward(x), want, 1e-13, 1e-15, "LayerNorm forward in eval mode");
}

TEST_CASE("LayerNorm and GELU gradients match finite differences", "[nn][gradcheck][transformer]") {
  manual_seed(7);
  for (bool bias : {true, false}) {
    LayerNorm ln(6, 1e-5, bias);
    ln.to(DType::f64);
    uniform_(ln.weight().value, 71, 0.5, 1.5);  // not all ones: the weight's path is checked
    if (bias) uniform_(ln.bias().value, 72, -0.5, 0.5);
    gradcheck(ln, uniform_tensor({2, 3, 6}, 73), 74);  // [B, T, C]
  }
  GELU g;
  gradcheck(g, uniform_tensor({4, 5}, 75, DType::f64, -3.0, 3.0), 76);
}

TEST_CASE("LayerNorm: a bad input is a clear error, a frozen weight is left alone",
          "[nn][transformer][layernorm]") {
  LayerNorm ln(4);
  ln.to(DType::f64);
  try {
    ln.forward(Tensor::zeros({2, 5}, DType::f64));
    FAIL("no error for a last dimension of 5");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("expected [..., 4]") != std::string::npos);
  }
  ln.weight().set_requires_grad(false);
  ln.zero_grad();
  ln.forward(uniform_tensor({3, 4}, 81));
  ln.backward(uniform_tensor({3, 4}, 82));
  CHECK_FALSE(ln.weight().grad.defined());
  CHECK(values(ln.bias().grad) != std::vector<double>(4, 0.0));
  CHECK_THROWS_AS(LayerNorm(0), Error);
}

TEST_CASE("matmul_batched: each entry is its own product, in every transpose",
          "[nn][transformer][matmul]") {
  const Tensor a = uniform_tensor({3, 4, 5}, 101), b = uniform_tensor({3, 5, 2}, 102);
  const Tensor at = uniform_tensor({3, 5, 4}, 103), bt = uniform_tensor({3, 2, 5}, 104);
  auto entry = [](const Tensor& t, std::int64_t i) {
    return t.slice(i, i + 1).reshape({t.size(1), t.size(2)});
  };
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      INFO("trans_a " << ta << " trans_b " << tb);
      const Tensor& A = ta ? at : a;
      const Tensor& B = tb ? bt : b;
      const Tensor c = matmul_batched(A, B, ta, tb);
      REQUIRE(c.shape() == Shape{3, 4, 2});
      for (std::int64_t i = 0; i < 3; ++i)
        CHECK(values(entry(c, i)) == values(matmul(entry(A, i), entry(B, i), ta, tb)));
    }
  Tensor acc = uniform_tensor({3, 4, 2}, 105);
  const Tensor before = acc.clone();
  matmul_batched_out(acc, a, b, false, false, 2.0, 1.0);  // acc = 2 a b + acc
  const Tensor ab = matmul_batched(a, b);
  const auto got = values(acc), x = values(ab), y = values(before);
  for (std::size_t i = 0; i < got.size(); ++i) CHECK(std::fabs(got[i] - (2 * x[i] + y[i])) < 1e-14);
  CHECK_THROWS_AS(matmul_batched(a, uniform_tensor({2, 5, 2}, 106)), Error);
}

TEST_CASE("permute: element (i, j, k) of x lands at its permuted place, any dtype",
          "[nn][transformer][permute]") {
  const Tensor x = uniform_tensor({2, 3, 4}, 141);
  const Tensor y = permute(x, {2, 0, 1});
  REQUIRE(y.shape() == Shape{4, 2, 3});
  const auto xv = values(x), yv = values(y);
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k) CHECK(yv[(k * 2 + i) * 3 + j] == xv[(i * 3 + j) * 4 + k]);
  CHECK(values(permute(y, {1, 2, 0})) == xv);  // the inverse permutation
  // The last dimension kept last (copied in runs): element (i, j, k) at (j, i, k).
  const auto zv = values(permute(x, {1, 0, 2}));
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k) CHECK(zv[(j * 2 + i) * 4 + k] == xv[(i * 3 + j) * 4 + k]);
  const Tensor ids = Tensor::from_vector(std::vector<std::int64_t>{1, 2, 3, 4, 5, 6}, {2, 3});
  CHECK(permute(ids, {1, 0}).to_vector<std::int64_t>() == std::vector<std::int64_t>{1, 4, 2, 5, 3, 6});
  CHECK_THROWS_AS(permute(x, {0, 0, 1}), Error);
  CHECK_THROWS_AS(permute(x, {0, 1}), Error);
}

TEST_CASE("softmax: rows sum to one, the causal mask hides the future, gradients check",
          "[nn][transformer][softmax]") {
  const Tensor x = uniform_tensor({2, 4, 4}, 111, DType::f64, -3.0, 3.0);
  for (bool causal : {false, true}) {
    INFO("causal " << causal);
    const Tensor y = softmax(x, causal);
    const auto v = values(y), xv = values(x);
    for (std::int64_t r = 0; r < 8; ++r) {
      const std::int64_t t = r % 4, seen = causal ? t + 1 : 4;
      double sum = 0, denom = 0;
      for (std::int64_t j = 0; j < seen; ++j) denom += std::exp(xv[r * 4 + j]);
      for (std::int64_t j = 0; j < 4; ++j) {
        const double want = j < seen ? std::exp(xv[r * 4 + j]) / denom : 0.0;
        CHECK(std::fabs(v[r * 4 + j] - want) < 1e-15);
        sum += v[r * 4 + j];
      }
      CHECK(std::fabs(sum - 1.0) < 1e-15);
    }
    // Finite differences of L = Σ w · softmax(x).
    const Tensor w = uniform_tensor({2, 4, 4}, 112);
    Tensor xp = x.clone();
    check_close(softmax_backward(w, y),
                nntest::numeric_gradient(xp, [&] { return nntest::dot(softmax(xp, causal), w); }),
                0, 1e-8, "softmax_backward");
  }
  // Large scores do not overflow: the row maximum is subtracted first.
  const Tensor big = Tensor::from_vector(std::vector<double>{1000, 1001}, {1, 2});
  CHECK(std::fabs(values(softmax(big))[1] - 1 / (1 + std::exp(-1.0))) < 1e-15);
  CHECK_THROWS_AS(softmax(uniform_tensor({2, 3}, 113), true), Error);  // causal needs square
}

TEST_CASE("Embedding: rows looked up, gradients added where the ids point",
          "[nn][transformer][embedding]") {
  manual_seed(9);
  Embedding emb(5, 3);
  emb.to(DType::f64);
  const Tensor ids = Tensor::from_vector(std::vector<std::int64_t>{4, 0, 4, 2}, {2, 2});
  const Tensor out = emb.forward(ids);
  REQUIRE(out.shape() == Shape{2, 2, 3});
  const auto w = values(emb.weight().value), o = values(out);
  const std::int64_t rows[] = {4, 0, 4, 2};
  for (int n = 0; n < 4; ++n)
    for (int c = 0; c < 3; ++c) CHECK(o[n * 3 + c] == w[rows[n] * 3 + c]);
  emb.zero_grad();
  const Tensor g = uniform_tensor({2, 2, 3}, 121);
  CHECK_FALSE(emb.backward(g).defined());
  const auto gw = values(emb.weight().grad), gv = values(g);
  for (int c = 0; c < 3; ++c) {
    CHECK(gw[4 * 3 + c] == gv[0 * 3 + c] + gv[2 * 3 + c]);  // row 4 was picked twice
    CHECK(gw[0 * 3 + c] == gv[1 * 3 + c]);
    CHECK(gw[1 * 3 + c] == 0.0);  // never picked
  }
  try {
    emb.forward(Tensor::from_vector(std::vector<std::int64_t>{1, 5}, {2}));
    FAIL("no error for id 5 of 5 rows");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("id 5 at position 1") != std::string::npos);
  }
}

TEST_CASE("LayerNorm and GELU on CUDA match the CPU", "[nn][transformer][gpu]") {
  const Device gpu = Device::cuda(0);
  for (DType dtype : {DType::f64, DType::f32, DType::bf16, DType::f16}) {
    INFO("dtype " << dtype_name(dtype));
    const double rtol = gpu_rtol(dtype), atol = dtype == DType::f64 ? 1e-12 : 4 * rtol;
    // C = 1000: more values than a block has threads, rows that stride over it.
    for (std::int64_t C : {7, 1000}) {
      LayerNorm ln(C);
      ln.to(dtype);
      uniform_(ln.weight().value, 91, 0.5, 1.5);
      uniform_(ln.bias().value, 92, -0.5, 0.5);
      auto ln_gpu = ln.clone();
      ln_gpu->to(gpu);
      const Tensor x = uniform_tensor({3, 5, C}, 93, dtype, -2.0, 2.0);
      const Tensor g = uniform_tensor({3, 5, C}, 94, dtype);
      check_close(ln_gpu->forward(x.to(gpu)).to(Device::cpu()), ln.forward(x), rtol, atol,
                  "LayerNorm forward");
      check_close(ln_gpu->backward(g.to(gpu)).to(Device::cpu()), ln.backward(g), rtol, atol,
                  "LayerNorm dL/dx");
      auto cpu_params = ln.named_parameters(), gpu_params = ln_gpu->named_parameters();
      for (std::size_t i = 0; i < cpu_params.size(); ++i)
        check_close(gpu_params[i].second->grad.to(Device::cpu()), cpu_params[i].second->grad,
                    rtol, 15 * atol, "LayerNorm grad of " + cpu_params[i].first);
    }
    const Tensor x = uniform_tensor({1000}, 95, dtype, -4.0, 4.0);
    const Tensor g = uniform_tensor({1000}, 96, dtype);
    check_close(gelu(x.to(gpu)).to(Device::cpu()), gelu(x), rtol, atol, "gelu");
    check_close(gelu_backward(g.to(gpu), x.to(gpu)).to(Device::cpu()), gelu_backward(g, x), rtol,
                atol, "gelu_backward");
  }
}

TEST_CASE("matmul_batched, softmax and Embedding on CUDA match the CPU", "[nn][transformer][gpu]") {
  const Device gpu = Device::cuda(0);
  for (DType dtype : {DType::f64, DType::f32, DType::bf16, DType::f16}) {
    INFO("dtype " << dtype_name(dtype));
    const double rtol = gpu_rtol(dtype), atol = dtype == DType::f64 ? 1e-12 : 4 * rtol;
    const Tensor a = uniform_tensor({6, 33, 17}, 131, dtype), b = uniform_tensor({6, 33, 9}, 132, dtype);
    check_close(matmul_batched(a.to(gpu), b.to(gpu), true, false).to(Device::cpu()),
                matmul_batched(a, b, true, false), rtol, 8 * atol, "matmul_batched");
    for (bool causal : {false, true}) {
      const Tensor x = uniform_tensor({3, 300, 300}, 133, dtype, -4.0, 4.0);
      const Tensor y = softmax(x, causal);
      check_close(softmax(x.to(gpu), causal).to(Device::cpu()), y, rtol, atol, "softmax");
      const Tensor g = uniform_tensor({3, 300, 300}, 134, dtype);
      check_close(softmax_backward(g.to(gpu), y.to(gpu)).to(Device::cpu()), softmax_backward(g, y),
                  rtol, atol, "softmax_backward");
    }
    const Tensor p = uniform_tensor({2, 5, 3, 4, 6}, 136, dtype);
    check_close(permute(p.to(gpu), {2, 0, 3, 1, 4}).to(Device::cpu()), permute(p, {2, 0, 3, 1, 4}),
                0, 0, "permute");
    Embedding emb(50, 70);
    emb.to(dtype);
    auto emb_gpu = emb.clone();
    emb_gpu->to(gpu);
    std::vector<std::int64_t> id_values(64);
    for (std::size_t i = 0; i < id_values.size(); ++i) id_values[i] = static_cast<std::int64_t>((i * 7) % 50);
    const Tensor ids = Tensor::from_vector(id_values, {8, 8});
    check_close(emb_gpu->forward(ids.to(gpu)).to(Device::cpu()), emb.forward(ids), 0, 0,
                "embedding lookup");
    const Tensor g = uniform_tensor({8, 8, 70}, 135, dtype);
    emb.backward(g);
    emb_gpu->backward(g.to(gpu));
    check_close(emb_gpu->named_parameters()[0].second->grad.to(Device::cpu()),
                emb.named_parameters()[0].second->grad, rtol, atol, "embedding gradient");
  }
}

TEST_CASE("LayerNorm's weight gradient and Embedding's gradient on CUDA: many rows, cut into "
          "chunks and segments, add up as on the CPU", "[nn][transformer][gpu]") {
  const Device gpu = Device::cuda(0);
  for (DType dtype : {DType::f64, DType::f32}) {
    INFO("dtype " << dtype_name(dtype));
    const double rtol = gpu_rtol(dtype), atol = dtype == DType::f64 ? 1e-12 : 4 * rtol;
    // 2,400 rows of 40 columns: two column tiles, the rows in 19 chunks of 128.
    LayerNorm ln(40);
    ln.to(dtype);
    auto ln_gpu = ln.clone();
    ln_gpu->to(gpu);
    const Tensor x = uniform_tensor({8, 300, 40}, 151, dtype, -2.0, 2.0);
    const Tensor g = uniform_tensor({8, 300, 40}, 152, dtype);
    ln.forward(x);
    ln_gpu->forward(x.to(gpu));
    ln.backward(g);
    ln_gpu->backward(g.to(gpu));
    auto cpu_params = ln.named_parameters(), gpu_params = ln_gpu->named_parameters();
    for (std::size_t i = 0; i < cpu_params.size(); ++i)
      check_close(gpu_params[i].second->grad.to(Device::cpu()), cpu_params[i].second->grad,
                  rtol, 40 * atol, "LayerNorm grad of " + cpu_params[i].first);
    // 1,000 ids, most of them 0, 1 or 2: rows of more than one 32-position segment, rows
    // of one position, rows never looked up (their gradient stays 0).
    Embedding emb(40, 33);
    emb.to(dtype);
    auto emb_gpu = emb.clone();
    emb_gpu->to(gpu);
    std::vector<std::int64_t> id_values(1000);
    for (std::size_t i = 0; i < id_values.size(); ++i)
      id_values[i] = i % 50 == 0 ? static_cast<std::int64_t>(3 + i / 50) : static_cast<std::int64_t>(i % 3);
    const Tensor ids = Tensor::from_vector(id_values, {10, 100});
    emb.forward(ids);
    emb_gpu->forward(ids.to(gpu));
    const Tensor ge = uniform_tensor({10, 100, 33}, 153, dtype);
    emb.backward(ge);
    emb_gpu->backward(ge.to(gpu));
    check_close(emb_gpu->named_parameters()[0].second->grad.to(Device::cpu()),
                emb.named_parameters()[0].second->grad, rtol, 20 * atol, "embedding gradient");
  }
}
