// The host block cache: reuse, emptying, freeing at exit, and requests it cannot serve.
#include <catch2/catch.hpp>

#include <cstdint>

#include "mgpu/allocator.h"
#include "mgpu/tensor.h"

using namespace mgpu;

namespace {

// Holds a tensor until static destruction, which comes after the allocator's exit handler
// has emptied and closed the host cache: that handler is registered at the first
// allocation, once this object exists. Under .ci/sanitize, AddressSanitizer fails a cache
// touched after it is gone, and LeakSanitizer a block left in it.
struct KeptUntilExit {
  Tensor tensor;
} kept_until_exit;

}  // namespace

TEST_CASE("empty_cache gives the cached host blocks back to the system", "[core][memory]") {
  const Device d = Device::cpu(9);
  const Shape shape{12347};  // a size no other test uses, so no other block is reused
  { Tensor warm = Tensor::empty(shape, DType::f32, d); }
  const std::size_t mallocs = memory_stats(d).device_mallocs;
  { Tensor again = Tensor::empty(shape, DType::f32, d); }
  CHECK(memory_stats(d).device_mallocs == mallocs);  // served from the cache
  empty_cache();
  { Tensor fresh = Tensor::empty(shape, DType::f32, d); }
  CHECK(memory_stats(d).device_mallocs == mallocs + 1);  // the cache was empty
}

TEST_CASE("a tensor kept in a static until exit is freed after the cache is closed",
          "[core][memory]") {
  kept_until_exit.tensor = Tensor::full({4096}, 1.0, DType::f32, Device::cpu(0));
  { Tensor cached = Tensor::empty({4096}, DType::f32, Device::cpu(0)); }  // freed at exit
  CHECK(kept_until_exit.tensor.to_vector<float>()[4095] == 1.0f);
}

TEST_CASE("a host allocation the system refuses is one clear error", "[core][memory]") {
  const Device d = Device::cpu(5);
  const MemoryStats before = memory_stats(d);
  // 4 PiB: more than any machine has. (Under AddressSanitizer this needs
  // allocator_may_return_null=1, which .ci/sanitize sets.)
  CHECK_THROWS_WITH(Tensor::empty({std::int64_t{1} << 50}, DType::f32, d),
                    Catch::Contains("out of memory on cpu:5 (host memory): asked for "
                                    "4503599627370496 bytes") &&
                        Catch::Contains("a smaller --batch-size or --size"));
  CHECK(memory_stats(d).allocated == before.allocated);
  CHECK(memory_stats(d).allocations == before.allocations);
  // Byte counts that would wrap around to a small block are refused before any allocation.
  CHECK_THROWS_WITH(Tensor::empty({std::int64_t{1} << 62}, DType::f32, d),
                    Catch::Contains("needs more bytes than memory can address"));
  CHECK_THROWS_WITH(Tensor::empty({std::int64_t{1} << 40, std::int64_t{1} << 40}, DType::f32, d),
                    Catch::Contains("more elements than a 64-bit count holds"));
  // The cache still serves ordinary requests afterwards.
  CHECK(Tensor::full({3}, 2.0, DType::f32, d).to_vector<float>()[2] == 2.0f);
}
