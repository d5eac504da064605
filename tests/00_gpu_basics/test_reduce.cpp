// Lesson 00, task 2: the block-level sum on the CPU (against f64 sums, and in the kernel's
// tree order) and on CUDA (against the CPU twin).
#include "gpu_basics_test_util.h"

#include "gpu.h"
#include "mgpu/device.h"

using namespace lesson00_test;
using mgpu::Device;
using mgpu::Tensor;
namespace l00 = mgpu::lesson00;

namespace {

std::int64_t tiles_of(std::int64_t n) { return (n + l00::kTile - 1) / l00::kTile; }

// Checks partial sums against f64 sums of each tile, relative to the tile's sum of |x|.
void check_tile_sums(const std::vector<float>& x, const std::vector<float>& got) {
  const std::int64_t n = static_cast<std::int64_t>(x.size());
  REQUIRE(static_cast<std::int64_t>(got.size()) == tiles_of(n));
  for (std::int64_t b = 0; b < tiles_of(n); ++b) {
    double ref = 0, abs_sum = 0;
    for (std::int64_t i = b * l00::kTile; i < std::min(n, (b + 1) * l00::kTile); ++i) {
      ref += x[i];
      abs_sum += std::fabs(x[i]);
    }
    INFO("tile " << b);
    CHECK(std::fabs(got[b] - ref) <= 2e-6 * abs_sum + 1e-30);
  }
}

}  // namespace

TEST_CASE("task2: block_sums on the CPU gives one sum per tile (sizes 0, 1, odd, ragged)",
          "[00_gpu_basics][task2][points:3]") {
  for (std::int64_t n : kSmallSizes) {
    INFO("n = " << n);
    const std::vector<float> x = random_floats(n, 11);
    const Tensor partial = l00::block_sums(tensor_of(x));
    record("n=" + std::to_string(n), partial.to_vector<float>(), 4e-6 * l00::kTile);
    CHECK(partial.shape() == mgpu::Shape{tiles_of(n)});
    check_tile_sums(x, partial.to_vector<float>());
  }
}

TEST_CASE("task2: block_sums on the CPU adds as a pairwise tree, like the kernel",
          "[00_gpu_basics][task2][points:2]") {
  // 2^24 followed by 511 ones. In f32, 2^24 + 1 rounds back to 2^24, so the order shows:
  // a left-to-right loop loses every 1 (16777216); the tree first loses the one 1 paired with
  // 2^24, then adds the other 510 in pairs that stay exact (16777726). f64 says 16777727.
  std::vector<float> x(l00::kTile, 1.0f);
  x[0] = 16777216.0f;
  const std::vector<float> got = l00::block_sums(tensor_of(x)).to_vector<float>();
  record("tree", got, 0);
  REQUIRE(got.size() == 1);
  CHECK(got[0] == 16777726.0f);
}

TEST_CASE("task2: sum on the CPU matches an f64 sum (up to several passes)",
          "[00_gpu_basics][task2][points:3]") {
  std::vector<std::int64_t> sizes = kSmallSizes;
  sizes.push_back(l00::kTile * l00::kTile + 1);  // three passes
  sizes.push_back(1000003);
  for (std::int64_t n : sizes) {
    INFO("n = " << n);
    const std::vector<float> x = random_floats(n, 12);
    double ref = 0, abs_sum = 0;
    for (float v : x) ref += v, abs_sum += std::fabs(v);
    const float got = l00::sum(tensor_of(x));
    record("n=" + std::to_string(n), got, 2e-5 * abs_sum);
    CHECK(std::fabs(got - ref) <= 1e-5 * abs_sum + 1e-30);
  }
}

TEST_CASE("task2: block_sums on CUDA matches the CPU twin (1 block to many blocks)",
          "[00_gpu_basics][task2][points:4][gpu]") {
  const Device gpu = Device::cuda(0);
  const double tol = mgpu::testing::gpu_rtol(mgpu::DType::f32);
  for (std::int64_t n : {std::int64_t{0}, std::int64_t{1}, std::int64_t{300}, l00::kTile,
                         l00::kTile + 1, std::int64_t{100003}, (std::int64_t{1} << 22) + 17}) {
    INFO("n = " << n);
    const std::vector<float> x = random_floats(n, 13);
    const std::vector<float> want = l00::block_sums_cpu(tensor_of(x)).to_vector<float>();
    const Tensor partial = l00::block_sums(tensor_of(x, gpu));
    CHECK(partial.device() == gpu);
    const std::vector<float> got = partial.to_vector<float>();
    record("n=" + std::to_string(n), got, 2 * tol * l00::kTile);
    REQUIRE(got.size() == want.size());
    for (std::size_t b = 0; b < got.size(); ++b) {
      double abs_sum = 0;  // the tile's sum of |x| sets the scale of rounding errors
      for (std::int64_t i = b * l00::kTile; i < std::min<std::int64_t>(n, (b + 1) * l00::kTile); ++i)
        abs_sum += std::fabs(x[i]);
      INFO("tile " << b);
      CHECK(std::fabs(static_cast<double>(got[b]) - want[b]) <= tol * abs_sum + 1e-30);
    }
  }
}

TEST_CASE("task2: sum on CUDA matches the CPU twin (several passes)",
          "[00_gpu_basics][task2][points:3][gpu]") {
  const Device gpu = Device::cuda(0);
  const double tol = mgpu::testing::gpu_rtol(mgpu::DType::f32);
  for (std::int64_t n : {std::int64_t{0}, std::int64_t{1}, std::int64_t{513},
                         l00::kTile * l00::kTile + 1, (std::int64_t{1} << 24) + 5}) {
    INFO("n = " << n);
    const std::vector<float> x = random_floats(n, 14);
    double abs_sum = 0;
    for (float v : x) abs_sum += std::fabs(v);
    const float want = l00::sum(tensor_of(x));
    const float got = l00::sum(tensor_of(x, gpu));
    record("n=" + std::to_string(n), got, 2 * tol * abs_sum);
    CHECK(std::fabs(static_cast<double>(got) - want) <= tol * abs_sum + 1e-30);
  }
}
