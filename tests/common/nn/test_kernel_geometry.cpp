// Launch shapes of the nn kernels (kernel_geometry.h), checked on the host: how batch-norm
// sums are cut among blocks, and transpose_inner's grid with its 64-bit size check.
#include <catch2/catch.hpp>

#include <cstdint>

#include "nn/kernel_geometry.h"

using mgpu::nn::detail::split_channels;
using mgpu::nn::detail::transpose_grid;

TEST_CASE("batch-norm sums: the blocks of a channel cover its values, none left empty",
          "[nn][geometry]") {
  for (std::int64_t channels : {1, 3, 17, 64, 1000, 5000})
    for (std::int64_t count : {1, 5, 255, 4096, 4097, 693, 97088, 100003, 1 << 22}) {
      INFO("C = " << channels << ", N*S = " << count);
      const auto s = split_channels(channels, count);
      REQUIRE(s.splits >= 1);
      CHECK(s.splits <= 65535);             // a grid's y dimension
      CHECK(s.chunk * s.splits >= count);    // every value has a block
      CHECK(s.chunk * (s.splits - 1) < count);  // the last block holds at least one
      CHECK(s.chunk >= 1);
    }
  // Few channels with many values get many blocks each; many channels keep one.
  CHECK(split_channels(3, 97088).splits > 1);
  CHECK(split_channels(2048, 97088).splits == 1);
  CHECK(split_channels(17, 300).splits == 1);  // small: one block, as before
}

TEST_CASE("transpose_inner's grid: tiles of 32, checked before narrowing, naming the dimension",
          "[nn][geometry]") {
  const auto g = transpose_grid(5, 100, 33, "x");
  CHECK(g.x == 2);  // k: the last dimension
  CHECK(g.y == 4);  // m: the middle dimension
  CHECK(g.z == 5);
  CHECK(transpose_grid(70000, 1, 1, "x").z == 65535);  // the kernel loops over the rest
  CHECK(transpose_grid(1, 65535 * 32, 1, "x").y == 65535);
  // One tile too many in y is the middle dimension's fault, whatever the last one is.
  CHECK_THROWS_WITH(transpose_grid(1, 65535 * 32 + 1, 1, "f16[1, 2097121, 1]"),
                    Catch::Contains("middle dimension (2097121)") &&
                        Catch::Contains("f16[1, 2097121, 1]"));
  // A last dimension whose tile count passes 2^32 would wrap to a small unsigned number.
  const std::int64_t huge = (std::int64_t{1} << 32) * 32;
  CHECK_THROWS_WITH(transpose_grid(1, 1, huge, "x"), Catch::Contains("last dimension"));
}
