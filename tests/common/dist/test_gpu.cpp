// [gpu]: CUDA tensors through the mpi backend (staged in pinned memory), the nccl backend,
// and the backend choice on a machine with GPUs. Results are compared with the CPU values
// computed here.
#include <catch2/catch.hpp>

#include "dist_test_util.h"
#include "mgpu/ops.h"
#include "mgpu/stream.h"

using namespace mgpu;
using mgpu::testing::make_tensor;
using mgpu::testing::rank_values;
using mgpu::testing::values_of;

namespace {

std::vector<double> summed(int p, std::int64_t n) {
  std::vector<double> out(static_cast<std::size_t>(n), 0.0);
  for (int r = 0; r < p; ++r) {
    auto v = rank_values(r, n);
    for (std::int64_t i = 0; i < n; ++i) out[i] += v[i];
  }
  return out;
}

// The same checks for any group whose device is a GPU.
void check_collectives_on_gpu(dist::ProcessGroup& pg) {
  const Device dev = pg.device();
  const int p = pg.size(), r = pg.rank();
  for (DType dt : {DType::f32, DType::f16, DType::i64}) {
    for (std::int64_t n : {1, 13, 100003}) {
      CAPTURE(pg.backend_name(), dtype_name(dt), n);
      Tensor t = make_tensor(rank_values(r, n), dt, dev);
      pg.all_reduce(t).wait();
      CHECK(values_of(t) == summed(p, n));

      Tensor b = make_tensor(rank_values(r, n), dt, dev);
      pg.broadcast(b, p - 1).wait();
      CHECK(values_of(b) == rank_values(p - 1, n));

      Tensor out = make_tensor(std::vector<double>(static_cast<std::size_t>(n * p), 0.0), dt, dev);
      pg.all_gather(out, make_tensor(rank_values(r, n), dt, dev)).wait();
      std::vector<double> want;
      for (int q = 0; q < p; ++q) {
        auto v = rank_values(q, n);
        want.insert(want.end(), v.begin(), v.end());
      }
      CHECK(values_of(out) == want);

      Tensor rs = make_tensor(std::vector<double>(static_cast<std::size_t>(n), 0.0), dt, dev);
      pg.reduce_scatter(rs, make_tensor(rank_values(r, n * p), dt, dev)).wait();
      auto all = summed(p, n * p);
      CHECK(values_of(rs) == std::vector<double>(all.begin() + r * n, all.begin() + (r + 1) * n));

      const int right = (r + 1) % p, left = (r + p - 1) % p;
      Tensor got = make_tensor(std::vector<double>(static_cast<std::size_t>(n), 0.0), dt, dev);
      pg.batch_isend_irecv({dist::P2POp::isend(make_tensor(rank_values(r, n), dt, dev), right),
                            dist::P2POp::irecv(got, left)})
          .wait();
      CHECK(values_of(got) == rank_values(left, n));

      // all_to_all: piece q of rank r's input (n values) lands at place r of rank q.
      Tensor a2a = make_tensor(std::vector<double>(static_cast<std::size_t>(n * p), 0.0), dt, dev);
      pg.all_to_all(a2a, make_tensor(rank_values(r, n * p), dt, dev)).wait();
      std::vector<double> pieces;
      for (int q = 0; q < p; ++q) {
        auto v = rank_values(q, n * p);
        pieces.insert(pieces.end(), v.begin() + r * n, v.begin() + (r + 1) * n);
      }
      CHECK(values_of(a2a) == pieces);
    }
  }
  pg.barrier().wait();
}

dist::GroupOptions quiet() { return testing::quiet_options(); }

}  // namespace

TEST_CASE("mpi backend stages CUDA tensors through pinned memory", "[dist][gpu]") {
  auto pg = dist::new_group("mpi", dist::rank_device(Device::Kind::cuda), quiet());
  check_collectives_on_gpu(*pg);
}

TEST_CASE("auto and nccl on GPUs: nccl only when every rank has a GPU of its own", "[dist][gpu]") {
  const Device dev = dist::rank_device(Device::Kind::cuda);
  const bool shared = dist::local_world_size() > cuda_device_count();
  auto choice = dist::choose_backend("auto", dev);
  if (shared) {
    CHECK(choice.backend == "mpi");
    CHECK_THAT(choice.reason, Catch::Contains("share"));
    // Refused up front with the fix, never NCCL's own "Duplicate GPU detected".
    CHECK_THROWS_WITH(dist::new_group("nccl", dev, quiet()),
                      Catch::Contains("refused") && Catch::Contains("--backend mpi"));
  } else {
    CHECK(choice.backend == (dist::built_with_nccl() ? "nccl" : "mpi"));
  }
}

TEST_CASE("nccl backend: collectives and send/recv on the rank's own GPU", "[dist][gpu][nccl]") {
  const Device dev = dist::rank_device(Device::Kind::cuda);
  // Registered to run where every rank has a GPU of its own (e.g. one rank on one GPU).
  auto pg = dist::new_group("nccl", dev, quiet());
  REQUIRE(pg->backend_name() == "nccl");
  check_collectives_on_gpu(*pg);
  Tensor t = make_tensor({2.0, 4.0}, DType::f32, dev);
  pg->all_reduce(t, dist::ReduceOp::avg).wait();
  CHECK(values_of(t) == std::vector<double>{2.0, 4.0});
  CHECK_THROWS_WITH(pg->all_reduce(make_tensor({1.0}, DType::f32)), Catch::Contains("not on this rank's GPU"));
}

TEST_CASE("nccl backend: each group has a stream of its own, so one group never waits behind another",
          "[dist][gpu][nccl]") {
  // Two groups on one GPU, as lesson 11's tp and dp groups. Group A's all-reduce must wait
  // for a long run of products on the compute stream (its input is their result); group B's
  // is issued after it from an idle stream. On a shared stream B's kernel would queue behind
  // A's, and across ranks that order can differ: a deadlock. Here B must finish while A waits.
  const Device dev = dist::rank_device(Device::Kind::cuda);
  auto a = dist::new_group("nccl", dev, quiet());
  auto b = dist::new_group("nccl", dev, quiet());
  Tensor x = Tensor::full({4096, 4096}, 1.0 / 4096, DType::f32, dev);
  Tensor y = Tensor::full({4096, 4096}, 1.0, DType::f32, dev);
  // B's input is copied in before the queue fills: its all-reduce does not wait for the
  // compute stream, so it must not read a copy still queued there.
  Tensor small = make_tensor({1.0, 2.0}, DType::f32, dev);
  synchronize(dev);
  // About 27 TFLOP of queued products (half a second or more on an H100); every value stays 1.
  for (int i = 0; i < 200; ++i) y = matmul(x, y);
  dist::Work wa = a->all_reduce(y);
  dist::Work wb;
  {
    StreamGuard idle(Stream::comm(dev));  // B's input is ready on this stream at once
    wb = b->all_reduce(small);
  }
  wb.wait();
  const bool a_still_running = !wa.is_completed();
  wa.wait();
  CHECK(a_still_running);
  CHECK(values_of(small) == std::vector<double>{1.0 * a->size(), 2.0 * a->size()});
  CHECK(values_of(y.slice(0, 1).reshape({4096})).front() == static_cast<double>(a->size()));
}
