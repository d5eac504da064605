// send, recv and batch_isend_irecv on CPU tensors.
#include <catch2/catch.hpp>

#include "dist_test_util.h"

using namespace mgpu;
using mgpu::testing::cpu_group;
using mgpu::testing::make_tensor;
using mgpu::testing::rank_values;
using mgpu::testing::values_of;

TEST_CASE("send/recv around a ring: post both, then wait", "[dist][p2p]") {
  auto& pg = cpu_group();
  const int p = pg.size(), r = pg.rank();
  const int right = (r + 1) % p, left = (r + p - 1) % p;
  for (DType dt : mgpu::testing::all_dtypes()) {
    // Sizes up to 1M elements: large messages use MPI's rendezvous protocol, where a send
    // cannot finish before the receive is posted; both are in flight here, so none blocks.
    for (std::int64_t n : {0, 1, 7, 1 << 20}) {
      CAPTURE(dtype_name(dt), n);
      Tensor out = make_tensor(rank_values(r, n), dt);
      Tensor in = make_tensor(std::vector<double>(static_cast<std::size_t>(n), -1.0), dt);
      dist::Work s = pg.send(out, right);
      dist::Work v = pg.recv(in, left);
      s.wait();
      v.wait();
      CHECK(values_of(in) == rank_values(left, n));
    }
  }
}

TEST_CASE("tags keep two messages between the same ranks apart", "[dist][p2p]") {
  auto& pg = cpu_group();
  const int p = pg.size(), r = pg.rank();
  const int right = (r + 1) % p, left = (r + p - 1) % p;
  Tensor a = make_tensor({1.0 + r}, DType::f32), b = make_tensor({100.0 + r}, DType::f32);
  Tensor got_a = make_tensor({0.0}, DType::f32), got_b = make_tensor({0.0}, DType::f32);
  // Received in the opposite order from the sends: the tags decide which goes where.
  std::vector<dist::Work> w{pg.send(a, right, 1), pg.send(b, right, 2), pg.recv(got_b, left, 2),
                            pg.recv(got_a, left, 1)};
  dist::wait_all(w);
  CHECK(values_of(got_a)[0] == 1.0 + left);
  CHECK(values_of(got_b)[0] == 100.0 + left);
}

TEST_CASE("batch_isend_irecv exchanges with both neighbours at once", "[dist][p2p]") {
  auto& pg = cpu_group();
  const int p = pg.size(), r = pg.rank();
  const int right = (r + 1) % p, left = (r + p - 1) % p;
  const std::int64_t n = 300001;
  Tensor to_right = make_tensor(rank_values(r, n, 1), DType::f32);
  Tensor to_left = make_tensor(rank_values(r, n, 2), DType::f32);
  Tensor from_left = make_tensor(std::vector<double>(n, 0.0), DType::f32);
  Tensor from_right = make_tensor(std::vector<double>(n, 0.0), DType::f32);
  pg.batch_isend_irecv({dist::P2POp::isend(to_right, right, 0), dist::P2POp::isend(to_left, left, 1),
                        dist::P2POp::irecv(from_left, left, 0), dist::P2POp::irecv(from_right, right, 1)})
      .wait();
  CHECK(values_of(from_left) == rank_values(left, n, 1));
  CHECK(values_of(from_right) == rank_values(right, n, 2));
  CHECK(pg.batch_isend_irecv({}).is_completed());
}

TEST_CASE("recv reports a message of the wrong size", "[dist][p2p]") {
  auto& pg = cpu_group();
  if (pg.size() < 2) return;  // needs a peer; the world-of-1 run has none
  // Rank 0 sends 3 elements to rank 1, which expects 5, and 6 more, where it expects 4.
  if (pg.rank() == 0) {
    pg.send(make_tensor({1, 2, 3}, DType::i32), 1).wait();
    pg.send(make_tensor({1, 2, 3, 4, 5, 6}, DType::i32), 1, 1).wait();
  } else if (pg.rank() == 1) {
    CHECK_THROWS_WITH(pg.recv(make_tensor({0, 0, 0, 0, 0}, DType::i32), 0).wait(),
                      Catch::Contains("sent 3 elements") && Catch::Contains("holds 5"));
    CHECK_THROWS_WITH(pg.recv(make_tensor({0, 0, 0, 0}, DType::i32), 0, 1).wait(),
                      Catch::Contains("recv from rank 0"));
  }
  pg.barrier().wait();
}

TEST_CASE("send/recv check their peer and tag before anything is sent", "[dist][p2p]") {
  auto& pg = cpu_group();
  Tensor t = make_tensor({1.0}, DType::f32);
  CHECK_THROWS_WITH(pg.send(t, pg.size()), Catch::Contains("destination"));
  CHECK_THROWS_WITH(pg.recv(t, -1), Catch::Contains("source"));
  CHECK_THROWS_WITH(pg.send(t, 0, -3), Catch::Contains("tag"));
  CHECK_THROWS_WITH(pg.send(Tensor(), 0), Catch::Contains("undefined"));
}
