// ProcessGroup::traffic(): each op counted once, by kind, with the bytes traffic.h names
// (all-to-all's pieces for the other ranks exactly, a send's tensor, the ring's bytes for
// the reductions and gathers), at every world size.
#include <catch2/catch.hpp>

#include <vector>

#include "dist_test_util.h"

using namespace mgpu;
using mgpu::testing::cpu_group;

TEST_CASE("traffic counts each op and the bytes it carries from this rank", "[dist][traffic]") {
  dist::ProcessGroup& g = cpu_group();
  const int P = g.size(), me = g.rank();
  const dist::Traffic before = g.traffic();

  // all_to_all with unequal pieces: rank r sends (r + q) % 3 + 1 rows of 4 f64 to rank q.
  std::vector<std::int64_t> in_splits, out_splits;
  std::int64_t to_others = 0;
  for (int q = 0; q < P; ++q) {
    in_splits.push_back((me + q) % 3 + 1);
    out_splits.push_back((q + me) % 3 + 1);
    if (q != me) to_others += in_splits.back() * 4 * 8;
  }
  std::int64_t in_rows = 0, out_rows = 0;
  for (int q = 0; q < P; ++q) in_rows += in_splits[static_cast<std::size_t>(q)], out_rows += out_splits[static_cast<std::size_t>(q)];
  Tensor input = Tensor::zeros({in_rows, 4}, DType::f64), output = Tensor::zeros({out_rows, 4}, DType::f64);
  g.all_to_all(output, input, out_splits, in_splits).wait();

  // A ring step of 10 f32 each way, an all-gather of 6 f32, a reduce-scatter of 2P f64, an
  // all-reduce of 4P f32, a barrier.
  Tensor a = Tensor::zeros({10}, DType::f32), b = Tensor::zeros({10}, DType::f32);
  dist::Work s = g.send(a, (me + 1) % P), r = g.recv(b, (me + P - 1) % P);
  s.wait();
  r.wait();
  Tensor gathered = Tensor::zeros({6 * P}, DType::f32);
  g.all_gather(gathered, Tensor::zeros({6}, DType::f32)).wait();
  Tensor scattered = Tensor::zeros({2}, DType::f64);
  g.reduce_scatter(scattered, Tensor::zeros({2 * P}, DType::f64)).wait();
  g.all_reduce(Tensor::zeros({4 * P}, DType::f32)).wait();
  g.barrier().wait();

  const dist::Traffic t = g.traffic() - before;
  CHECK(t.all_to_all.ops == 1);
  CHECK(t.all_to_all.bytes == to_others);
  CHECK((t.send.ops == 1 && t.send.bytes == 40));
  CHECK((t.recv.ops == 1 && t.recv.bytes == 40));
  CHECK((t.all_gather.ops == 1 && t.all_gather.bytes == (P - 1) * 6 * 4));
  CHECK((t.reduce_scatter.ops == 1 && t.reduce_scatter.bytes == (P - 1) * 2 * 8));
  CHECK((t.all_reduce.ops == 1 && t.all_reduce.bytes == 2 * (P - 1) * 4 * 4));
  CHECK((t.barrier.ops == 1 && t.barrier.bytes == 0));
  CHECK((t.broadcast.ops == 0 && t.reduce.ops == 0));
  CHECK(t.sent_bytes() == to_others + 40 + (P - 1) * (24 + 16 + 32));
}

TEST_CASE("Traffic adds, subtracts and prints its kinds", "[dist][traffic]") {
  dist::Traffic t;
  CHECK(t.str() == "none");
  t.all_to_all = {32, 6 * 1024 * 1024};
  t.send = {24, 3 * 1024 * 1024};
  t.recv = {24, 3 * 1024 * 1024};
  CHECK(t.str() == "all-to-all 32: 6144.0 KiB, send 24: 3072.0 KiB (sent 9216.0 KiB; recv 24: 3072.0 KiB)");
  dist::Traffic twice = t;
  twice += t;
  CHECK(twice.sent_bytes() == 18 * 1024 * 1024);
  const dist::Traffic back = twice - t;
  CHECK((back.all_to_all.ops == 32 && back.recv.bytes == 3 * 1024 * 1024 && back.sent_bytes() == t.sent_bytes()));
}
