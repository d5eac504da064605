// The runtime: ranks and nodes, device binding, backend choice, logging, the default group.
#include <catch2/catch.hpp>

#include "dist_test_util.h"

using namespace mgpu;
using mgpu::testing::cpu_group;
using mgpu::testing::make_tensor;
using mgpu::testing::values_of;

TEST_CASE("ranks are 0..p-1, each exactly once; local ranks number each node", "[dist][runtime]") {
  REQUIRE(dist::is_initialized());
  const int p = dist::world_size();
  CHECK(dist::rank() >= 0);
  CHECK(dist::rank() < p);
  CHECK(dist::local_rank() < dist::local_world_size());
  CHECK(dist::local_world_size() <= p);
  CHECK(dist::num_nodes() >= 1);
  Tensor mine = make_tensor({static_cast<double>(dist::rank()), static_cast<double>(dist::local_rank())},
                            DType::i32);
  Tensor all = make_tensor(std::vector<double>(2 * p, -1.0), DType::i32);
  cpu_group().all_gather(all, mine).wait();
  std::vector<double> v = values_of(all);
  for (int r = 0; r < p; ++r) CHECK(v[2 * r] == r);
  if (dist::num_nodes() == 1)  // one machine: local ranks are the world ranks
    for (int r = 0; r < p; ++r) CHECK(v[2 * r + 1] == r);
  CHECK(cpu_group().rank() == dist::rank());
  CHECK(cpu_group().size() == p);
  CHECK(cpu_group().backend_name() == "mpi");
}

TEST_CASE("each rank binds to cuda:local_rank, or cpu:0", "[dist][runtime]") {
  CHECK(dist::rank_device(Device::Kind::cuda) == Device::cuda(dist::local_rank()));
  CHECK(dist::rank_device("cuda") == Device::cuda(dist::local_rank()));
  CHECK(dist::rank_device("cpu") == Device::cpu(0));
  CHECK(dist::rank_device("cuda:3") == Device::cuda(3));
  CHECK_THROWS(dist::rank_device("tpu"));
}

TEST_CASE("backend choice for CPU tensors, and what cannot work", "[dist][runtime]") {
  auto c = dist::choose_backend("auto", Device::cpu());
  CHECK(c.backend == "mpi");
  CHECK_THAT(c.reason, Catch::Contains("CPU"));
  CHECK(dist::choose_backend("mpi", Device::cpu()).backend == "mpi");
  CHECK_THROWS_WITH(dist::choose_backend("nccl", Device::cpu()),
                    Catch::Contains("GPU memory only") && Catch::Contains("--backend mpi"));
  CHECK_THROWS_WITH(dist::choose_backend("gloo", Device::cpu()), Catch::Contains("auto, mpi, nccl"));
}

TEST_CASE("rank prefix of the logging helpers", "[dist][runtime]") {
  CHECK(dist::rank_prefix() == "[rank " + std::to_string(dist::rank()) + "] ");
  dist::log0("log0 from rank 0 only (this line appears once)");
}

TEST_CASE("timeout and debug defaults come from the environment", "[dist][runtime]") {
  // The meson tests set MGPU_DIST_TIMEOUT_S; without it the default is 300 s.
  CHECK(dist::default_timeout_s() > 0);
}

TEST_CASE("init_process_group makes the default group once", "[dist][runtime]") {
  dist::GroupOptions o;
  o.announce = false;
  dist::ProcessGroup& g = dist::init_process_group("auto", Device::cpu(), o);
  CHECK(&dist::default_group() == &g);
  CHECK(g.backend_name() == "mpi");
  CHECK_THROWS_WITH(dist::init_process_group("auto", Device::cpu(), o), Catch::Contains("exists already"));
  Tensor t = make_tensor({2.0}, DType::f32);
  g.all_reduce(t).wait();
  CHECK(values_of(t)[0] == 2.0 * g.size());
}
