// The count of host reads (host_reads.h): what counts as one, what does not, on the CPU and
// ([gpu]) on CUDA.
#include <catch2/catch.hpp>

#include "mgpu/copy.h"
#include "mgpu/host_reads.h"
#include "mgpu/tensor.h"

using namespace mgpu;

TEST_CASE("host reads: to_vector and item count one each; copies and views do not",
          "[core][host_reads]") {
  const Tensor t = Tensor::from_vector(std::vector<float>{1, 2, 3}, {3});
  std::int64_t before = host_reads();
  CHECK(t.to_vector<float>().size() == 3);
  CHECK(host_reads() - before == 1);
  before = host_reads();
  CHECK(t.slice(1, 2).item() == 2.0);
  CHECK(host_reads() - before == 1);
  before = host_reads();
  Tensor u = t.clone();
  copy_(u, t);
  const Tensor v = t.to(Device::cpu()).reshape({1, 3});
  CHECK(v.numel() == 3);
  CHECK(host_reads() - before == 0);
}

TEST_CASE("host reads on CUDA: a copy to the host counts once, a copy on the GPU never",
          "[core][host_reads][gpu]") {
  const Device gpu = Device::cuda(0);
  const Tensor t = Tensor::from_vector(std::vector<float>{1, 2, 3}, {3}, gpu);
  std::int64_t before = host_reads();
  Tensor g = t.clone();  // on the GPU: queued, no wait
  Tensor u = Tensor::empty({3}, DType::f32, gpu);
  copy_(u, g);
  CHECK(host_reads() - before == 0);
  CHECK(u.to_vector<float>() == std::vector<float>{1, 2, 3});  // one read, not two
  CHECK(host_reads() - before == 1);
  before = host_reads();
  const Tensor host = t.to(Device::cpu());
  CHECK(host_reads() - before == 1);
  CHECK(host.to_vector<float>().size() == 3);
  CHECK(host_reads() - before == 2);
}
