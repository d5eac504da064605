// Lesson 12, task 1: the attention core's forward against the same attention written out in
// f64 loops: outputs and probabilities, the causal mask, and large scores.
#include <sstream>

#include "transformer_test_util.h"

using namespace mgpu;
using namespace transformer_test;
using mgpu::testing::random_tensor;

TEST_CASE("task1: causal_attention gives the loops' outputs and probabilities in f64",
          "[12_transformer][task1][points:3]") {
  const std::int64_t BH = 6, T = 7, D = 5;
  const Tensor q = random_tensor({BH, T, D}, 1), k = random_tensor({BH, T, D}, 2),
               v = random_tensor({BH, T, D}, 3);
  Tensor probs;
  const Tensor y = nn::causal_attention(q, k, v, &probs);
  const LoopForward want = loop_attention(qkv_of(q, k, v));
  REQUIRE(y.shape() == Shape({BH, T, D}));
  REQUIRE(y.dtype() == DType::f64);
  REQUIRE(probs.defined());
  REQUIRE(probs.shape() == Shape({BH, T, T}));
  CHECK_BELOW("y against the loops (largest relative difference)",
              rel_diff(y.to_vector<double>(), want.y), 1e-10);
  CHECK_BELOW("p against the loops (largest relative difference)",
              rel_diff(probs.to_vector<double>(), want.p), 1e-10);
  // Each row sums to one; what lies after the diagonal is exactly 0.
  const std::vector<double> p = probs.to_vector<double>();
  for (std::int64_t h = 0; h < BH; ++h)
    for (std::int64_t t = 0; t < T; ++t) {
      double row = 0;
      for (std::int64_t s = 0; s < T; ++s) {
        const double x = p[static_cast<std::size_t>((h * T + t) * T + s)];
        if (s > t) {
          INFO("causal mask leaked: head " << h << ", query t=" << t << " sees key s=" << s
                                           << " with p = " << sci(x) << " (must be exactly 0)");
          CHECK(x == 0.0);
        }
        row += x;
      }
      CHECK_BELOW("head " << h << ", query t=" << t << ": |sum of the row's p - 1|",
                  std::fabs(row - 1.0), 1e-12);
    }
  // Without probs: the same y.
  CHECK(same_bits(nn::causal_attention(q, k, v), y));
}

TEST_CASE("task1: a position never sees a later one (the mask is not off by one)",
          "[12_transformer][task1][points:2]") {
  const std::int64_t BH = 2, T = 6, D = 4;
  const Tensor q = random_tensor({BH, T, D}, 11), k = random_tensor({BH, T, D}, 12),
               v = random_tensor({BH, T, D}, 13);
  const std::vector<double> y = nn::causal_attention(q, k, v).to_vector<double>();
  for (std::int64_t s = 0; s < T; ++s) {
    INFO("keys and values changed at position " << s);
    // Change key and value of position s in every head.
    std::vector<double> kv = k.to_vector<double>(), vv = v.to_vector<double>();
    for (std::int64_t h = 0; h < BH; ++h)
      for (std::int64_t d = 0; d < D; ++d) {
        kv[static_cast<std::size_t>((h * T + s) * D + d)] += 0.75;
        vv[static_cast<std::size_t>((h * T + s) * D + d)] -= 1.5;
      }
    const std::vector<double> y2 =
        nn::causal_attention(q, Tensor::from_vector(kv, {BH, T, D}), Tensor::from_vector(vv, {BH, T, D}))
            .to_vector<double>();
    for (std::int64_t h = 0; h < BH; ++h)
      for (std::int64_t t = 0; t < T; ++t) {
        bool changed = false;
        for (std::int64_t d = 0; d < D; ++d)
          changed |= y2[static_cast<std::size_t>((h * T + t) * D + d)] !=
                     y[static_cast<std::size_t>((h * T + t) * D + d)];
        // Rows before s never see s; s and later do. What a failure means:
        std::ostringstream failure;
        if (t < s)
          failure << "causal mask leaked: head " << h << ", query t=" << t << " sees key s="
                  << s << " (its output changed with key and value s)";
        else
          failure << "mask too narrow: head " << h << ", query t=" << t
                  << " does not see key s=" << s << " (row t must see keys 0..t, itself included)";
        INFO(failure.str());
        CHECK(changed == (t >= s));
      }
  }
  // T = 1: the one position attends to itself alone, y = v.
  const Tensor q1 = random_tensor({3, 1, D}, 14), v1 = random_tensor({3, 1, D}, 15);
  CHECK_BELOW("T = 1: y against v (largest relative difference)",
              rel_diff(nn::causal_attention(q1, random_tensor({3, 1, D}, 16), v1).to_vector<double>(),
                       v1.to_vector<double>()),
              1e-15);
}

TEST_CASE("task1: large scores stay finite (a stable softmax), in f64 and f32",
          "[12_transformer][task1][points:1]") {
  const std::int64_t BH = 3, T = 5, D = 8;
  // |q·k| / √D up to about 1e4: exp overflows unless the row's largest score goes first.
  const Tensor q = random_tensor({BH, T, D}, 21), k = random_tensor({BH, T, D}, 22),
               v = random_tensor({BH, T, D}, 23);
  Tensor big_q = q.clone();
  scale_(big_q, 3000.0);
  const LoopForward want = loop_attention(qkv_of(big_q, k, v));
  Tensor probs;
  const Tensor y = nn::causal_attention(big_q, k, v, &probs);
  for (double x : y.to_vector<double>()) REQUIRE(std::isfinite(x));
  CHECK_BELOW("scores to 1e4, f64: y against the loops (largest relative difference)",
              rel_diff(y.to_vector<double>(), want.y), 1e-10);
  CHECK_BELOW("scores to 1e4, f64: p against the loops (largest relative difference)",
              rel_diff(probs.to_vector<double>(), want.p), 1e-10);
  const Tensor y32 = nn::causal_attention(big_q.to(DType::f32), k.to(DType::f32), v.to(DType::f32));
  REQUIRE(y32.dtype() == DType::f32);
  for (double x : y32.to_vector<double>()) REQUIRE(std::isfinite(x));
  // f32 scores of 1e4 carry about 1e-3 of absolute error: compare the moderate case in f32.
  const Tensor small32 = nn::causal_attention(q.to(DType::f32), k.to(DType::f32), v.to(DType::f32));
  CHECK_BELOW("moderate scores, f32: y against the f64 loops (largest relative difference)",
              rel_diff(small32.to_vector<double>(), loop_attention(qkv_of(q, k, v)).y), 1e-5);
}
